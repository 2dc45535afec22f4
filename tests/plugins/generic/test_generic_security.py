"""nomad-device-generic against a local user who wants a device, a mount or root's watches.

Each test is one attack of docs/security.md, run for real: a fresh unprivileged
user made by the test (``local_user.py``) plants what it can with its own
permissions, and the plugin runs as a subprocess driven over the wire as Nomad
drives it, so what is asserted is what Nomad would see (Fingerprint, Reserve).
Device trees are fakes under ``NOMAD_DEVICE_GENERIC_DEV_ROOT`` (this machine has
no USB bus and no udevd; see fake_tree.py), except where the attack is on the
real ``/dev`` (its mount points) or on a real directory under ``/run``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from support.fake_tree import FakeTree, mkdirs, require_root
from support.generic import devices, first_groups, logged, start, wait_for
from support.local_user import LocalUser, local_user
from support.processes import Launched, Launcher

from nomad_device.host import CallError
from nomad_device.model import DeviceSpec, Mount
from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig
from nomad_device.sources import DISABLE_ENV

pytestmark = pytest.mark.timeout(180)

HOUR = timedelta(hours=1)


@pytest.fixture(scope="module")
def attacker() -> Iterator[LocalUser]:
    with local_user("atk") as user:
        yield user


@pytest.fixture
def tree() -> Iterator[FakeTree]:
    """A fake tree the attacker can reach (pytest's tmp_path is root's 0700)."""
    require_root()
    base = Path(tempfile.mkdtemp(prefix="nd18_tree_"))
    base.chmod(0o755)
    try:
        yield FakeTree(base / "root")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A fresh directory under the real /run, root's (0755), removed afterwards."""
    require_root()
    path = Path("/run") / f"nd18_{os.getpid()}_{os.urandom(3).hex()}"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def config(period: timedelta = timedelta(milliseconds=200), **blocks: DeviceBlock) -> GenericConfig:
    return GenericConfig(device=blocks, fingerprint_period=period)


def world_writable(path: Path) -> Path:
    """A directory like /dev/shm or /tmp: anyone may create entries (sticky)."""
    mkdirs(path)
    path.chmod(0o1777)
    return path


def refusal(launched: Launched, path: str) -> str:
    (line,) = logged(launched, f"{path} is not offered: ")
    return line


# ------------------------------------------------------------ symlinks to nodes and /


@pytest.mark.parametrize("where", ["world-writable /dev/shm", "a user's own /run directory"])
def test_a_users_symlink_to_a_disk_is_not_offered(
    launch: Launcher, tree: FakeTree, attacker: LocalUser, run_dir: Path, where: str
) -> None:
    """``ln -s /dev/vda /run/user/1001/pipewire-0`` once became ``/dev/vda`` with ``rw``."""
    disk = tree.block("vda", 253, 0, 2 * 1024 * 1024)
    if where.startswith("world"):
        shared = world_writable(tree.dev / "shm")
        pattern, shown = "/dev/shm/*", "/dev/shm/pipewire-0"
        why = "/dev/shm is writable by every user (mode 1777)"
    else:
        shared = attacker.owned_dir(run_dir / "user")
        pattern, shown = f"{shared}/*", f"{shared}/pipewire-0"
        why = f"{shared} is owned by uid {attacker.uid}"
    attacker.run("ln", "-s", disk, shared / "pipewire-0")
    launched, groups = first_groups(launch, config(audio=DeviceBlock(paths=[pattern])), tree.env)
    assert groups == []
    assert why in refusal(launched, shown)
    with pytest.raises(CallError) as refused:
        launched.client.reserve(["pipewire-0"])
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_users_symlink_to_root_never_becomes_a_mount(
    launch: Launcher, tree: FakeTree, attacker: LocalUser
) -> None:
    """``ln -s / ...`` once became ``Mounts: [{HostPath: /, ReadOnly: false}]``."""
    shared = world_writable(tree.dev / "shm")
    attacker.run("ln", "-s", "/", shared / "pipewire-0")
    launched = start(launch, config(audio=DeviceBlock(paths=["/dev/shm/*"])), tree.env)
    with launched.client.fingerprint() as stream:
        assert stream.next(15) == []
    assert "writable by every user" in refusal(launched, "/dev/shm/pipewire-0")


def test_a_symlink_to_a_directory_is_never_a_mount_even_roots(
    launch: Launcher, tree: FakeTree
) -> None:
    """Root's own link in root's own directory: a directory goes by its own name only."""
    mkdirs(tree.dev / "data" / "models")
    tree.link("links/models", "../data/models")
    launched, groups = first_groups(
        launch,
        config(
            linked=DeviceBlock(paths=["/dev/links/*"]),
            plain=DeviceBlock(paths=["/dev/data/*"]),
        ),
        tree.env,
    )
    assert list(devices(groups, "generic/plain/plain")) == ["models"]
    assert not devices(groups, "generic/linked/linked")
    assert "it is a symlink to the directory /dev/data/models" in refusal(
        launched, "/dev/links/models"
    )
    # The directory itself is mounted read-only: no "w" was asked for.
    reservation = launched.client.reserve(["models"])
    assert reservation.mounts == (
        Mount("/dev/data/models", str(tree.dev / "data" / "models"), True),
    )


def test_a_device_through_a_symlink_must_be_the_kernels_node(
    launch: Launcher, tree: FakeTree
) -> None:
    tree.block("vda", 253, 0, 2048)  # sysfs: DEVNAME=vda
    tree.node("stash/copy-of-vda", "block", 253, 0)  # the same numbers, elsewhere
    tree.link("disk/by-label/data", "../../vda")
    tree.link("disk/by-label/sneaky", "../../stash/copy-of-vda")
    tree.node("mine/raw", "block", 253, 0)
    tree.link("disk/by-label/mine", "../../mine/raw")
    launched, groups = first_groups(
        launch,
        config(disk=DeviceBlock(paths=["/dev/disk/by-label/*", "/dev/mine/*"])),
        tree.env,
    )
    # "mine" lies under the block's own patterns: offered, named by the link.
    assert sorted(devices(groups, "generic/disk/disk")) == ["data", "mine"]
    assert (
        "it leads to /dev/stash/copy-of-vda, which is not the kernel's node for block 253:0"
        " (the kernel's is /dev/vda) and matches none of the block's patterns"
    ) in refusal(launched, "/dev/disk/by-label/sneaky")


# ------------------------------------------------------------------- swaps and mounts


def test_a_file_in_a_users_directory_cannot_be_swapped_for_a_symlink(
    launch: Launcher, tree: FakeTree, attacker: LocalUser
) -> None:
    """A regular file, offered as a mount, swapped for a symlink after the scan: the task
    driver would have followed it at mount time. Now it is never offered."""
    shared = attacker.owned_dir(tree.dev / "shared")
    cookie = shared / "cookie"
    cookie.write_text("root's file\n")  # root's own file, in the user's directory
    launched = start(launch, config(HOUR, cookie=DeviceBlock(paths=["/dev/shared/*"])), tree.env)
    with launched.client.fingerprint() as stream:
        assert stream.next(15) == []
    attacker.run("mv", cookie, shared / "old")
    attacker.run("ln", "-s", "/etc", cookie)
    with pytest.raises(CallError) as refused:
        launched.client.reserve(["cookie"])
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"/dev/shared is owned by uid {attacker.uid}" in refusal(launched, "/dev/shared/cookie")


def test_reserve_refuses_what_changed_since_the_scan(launch: Launcher, tree: FakeTree) -> None:
    """No event source and an hour's period: the snapshot is the one scan. What changed
    since then is refused, not granted as it was."""
    (tree.dev / "notes0").write_text("a file\n")
    tree.char("good0", 240, 0)
    tree.char("other0", 240, 1)
    launched = start(
        launch,
        config(HOUR, thing=DeviceBlock(paths=["/dev/notes*", "/dev/good*"])),
        {**tree.env, DISABLE_ENV: "all"},
    )
    with launched.client.fingerprint() as stream:
        assert sorted(devices(stream.next(15), "generic/thing/thing")) == ["good0", "notes0"]
    (tree.dev / "notes0").unlink()
    tree.link("notes0", "/etc")
    os.rename(tree.dev / "other0", tree.dev / "good0")
    for device_id, reason in (
        ("notes0", "/dev/notes0: it is a symlink to the directory /etc"),
        ("good0", "/dev/good0 changed since the last scan (it was: char 240:0)"),
    ):
        with pytest.raises(CallError) as refused:
            launched.client.reserve([device_id])
        assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert reason in refused.value.details, refused.value.details


@pytest.mark.parametrize(
    ("permissions", "read_only"), [(None, True), ("r", True), ("rw", False), ("rwm", False)]
)
def test_mounts_are_read_only_unless_w_is_asked_for(
    launch: Launcher, tree: FakeTree, permissions: str | None, read_only: bool
) -> None:
    (tree.dev / "notes0").write_text("a file\n")
    tree.char("good0", 240, 0)
    block = DeviceBlock(paths=["/dev/notes0", "/dev/good0"], permissions=permissions)
    launched = start(launch, config(thing=block), tree.env)
    with launched.client.fingerprint() as stream:
        stream.next(15)
    reservation = launched.client.reserve(["notes0", "good0"])
    assert reservation.mounts == (Mount("/dev/notes0", str(tree.dev / "notes0"), read_only),)
    # Device nodes keep "rw" when nothing is set.
    assert reservation.devices == (
        DeviceSpec("/dev/good0", str(tree.dev / "good0"), permissions or "rw"),
    )


def test_files_and_directories_others_can_write_are_not_mounted(
    launch: Launcher, tree: FakeTree, attacker: LocalUser
) -> None:
    (tree.dev / "open0").write_text("anyone may write this\n")
    (tree.dev / "open0").chmod(0o666)
    theirs = tree.dev / "theirs0"
    theirs.write_text("")
    os.chown(theirs, attacker.uid, attacker.gid)
    tree.char("null0", 1, 3)
    (tree.dev / "null0").chmod(0o666)  # a device's mode says who may use it: fine
    launched, groups = first_groups(launch, config(thing=DeviceBlock(paths=["/dev/*0"])), tree.env)
    assert list(devices(groups, "generic/thing/thing")) == ["null0"]
    assert "the file /dev/open0 is writable by every user (mode 0666)" in refusal(
        launched, "/dev/open0"
    )
    assert f"the file /dev/theirs0 is owned by uid {attacker.uid}" in refusal(
        launched, "/dev/theirs0"
    )


# --------------------------------------------------------------------- inotify watches


def _watches(pid: int) -> set[tuple[int, int]]:
    """(kernel device number, inode) of every inotify watch the process holds."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("inotify wd:"):
                        fields = dict(p.split(":", 1) for p in line.split()[1:])
                        found.add((int(fields["sdev"], 16), int(fields["ino"], 16)))
        except OSError:
            continue
    return found


def _kernel_dev(st_dev: int) -> int:
    """st_dev as fdinfo prints it (the kernel's own MKDEV: major << 20 | minor)."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


#: Only inotify may wake a scan: a kernel uevent from elsewhere on the machine could
#: make one before the watches are in place, and the marker would prove nothing.
NO_UEVENTS = {DISABLE_ENV: "uevent"}


def _watches_when_ready(launched: Launched, run_dir: Path) -> set[tuple[int, int]]:
    """The plugin's watches once every inotify source is in place, stream still open
    (watches live while a Fingerprint stream does).

    The period is an hour and no uevents are read, so after the wake-up left by
    SetConfig (which may find the first marker) only inotify, or the rescan made
    once all sources exist, can find the second one.
    """
    with launched.client.fingerprint() as stream:
        stream.next(15)
        for name in ("marker1", "marker2"):
            (run_dir / name).write_text("")
            wait_for(stream, lambda g, n=name: n in devices(g, "generic/marker/marker"))
        return _watches(launched.client.process.pid)


def test_a_user_cannot_spend_roots_watches_in_a_world_writable_tree(
    launch: Launcher, tree: FakeTree, attacker: LocalUser, run_dir: Path
) -> None:
    """20,201 directories made by a user once became 20,204 watches held by root."""
    shm = world_writable(tree.dev / "shm")
    made = [shm / f"d{i:03}" for i in range(300)] + [shm / "by-id" / f"x{i}" for i in range(100)]
    attacker.run("mkdir", "-p", *made)
    tree.char("ttyUSB0", 188, 0, subsystem="tty")
    tree.link("serial/by-id/usb-FTDI-if00", "../../ttyUSB0")
    blocks = {
        "byid": DeviceBlock(paths=["/dev/*/by-id/*"]),
        "marker": DeviceBlock(paths=[f"{run_dir}/*"]),
    }
    launched = start(launch, config(HOUR, **blocks), {**tree.env, **NO_UEVENTS})
    held = _watches_when_ready(launched, run_dir)
    assert len(held) < 10, len(held)  # /dev, /dev/serial, /dev/serial/by-id, the marker's
    user_made = {(_kernel_dev(os.lstat(p).st_dev), os.lstat(p).st_ino) for p in made}
    assert not held & user_made


def _mounts_under_dev() -> list[Path]:
    dev = os.stat("/dev").st_dev
    found = []
    for entry in os.scandir("/dev"):
        if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_dev != dev:
            found.append(Path(entry.path))
    if not found:
        reason = "no filesystem is mounted under this machine's /dev (/dev/shm, /dev/pts ...)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def test_a_pattern_over_all_of_dev_stays_off_other_mounts(
    launch: Launcher, attacker: LocalUser, run_dir: Path
) -> None:
    """``/dev/*/by-id/*`` once watched all of the real /dev, /dev/shm and /dev/pts
    included, and every directory a user made in /dev/shm."""
    mounts = _mounts_under_dev()
    shm = Path("/dev/shm")
    made = []
    if shm in mounts and os.stat(shm).st_mode & 0o002:
        top = shm / f"nd18_{os.getpid()}"
        made = [top / f"d{i:03}" for i in range(300)]
        attacker.run("mkdir", "-p", *made)
    try:
        blocks = {
            "byid": DeviceBlock(paths=["/dev/*/by-id/*"]),
            "marker": DeviceBlock(paths=[f"{run_dir}/*"]),
        }
        launched = start(launch, config(HOUR, **blocks), NO_UEVENTS)
        held = _watches_when_ready(launched, run_dir)
        elsewhere = {_kernel_dev(os.stat(m).st_dev) for m in mounts}
        assert not {sdev for sdev, _ in held} & elsewhere
        assert len(held) < 50, len(held)
    finally:
        if made:
            shutil.rmtree(shm / f"nd18_{os.getpid()}", ignore_errors=True)


def test_the_watch_cap_is_logged_and_the_period_takes_over(
    launch: Launcher, tree: FakeTree
) -> None:
    for bus in range(1, 31):
        mkdirs(tree.dev / "bus" / "usb" / f"{bus:03}")
    launched = start(
        launch,
        config(
            timedelta(milliseconds=300),
            raw=DeviceBlock(paths=["/dev/bus/usb/*/*"], max_watches=5),
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        assert stream.next(15) == []
        (line,) = logged(launched, "inotify watch cap reached (max_watches = 5)")
        assert "changes there are seen at the poll period only" in line
        assert len(_watches(launched.client.process.pid)) <= 5
        for bus in (1, 30):  # watched or not, the period finds them
            tree.node(f"bus/usb/{bus:03}/002", "char", 189, bus)
        wait_for(stream, lambda g: sorted(devices(g, "generic/raw/raw")) == ["001/002", "030/002"])
