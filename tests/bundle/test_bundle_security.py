"""The bundle's attacks from the security audit (issue 18), each as a test.

A Nomad client runs plugins as root. A local user who can write anywhere a
bundle looks (a directory above its cache, its PATH, its working directory,
the directory a bundle is built into) must never get their code run as
root or a root file written. Where the attack needs an unprivileged user, the
test creates one (``nd20_*``), as CI runs as root, and removes it afterwards.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.bundle import node_env, node_python, private_mounts, tiny_bundle, unavailable

from nomad_device.bundle import read_config
from nomad_device.goplugin.hclog import HclogEntry, parse_line

USER = "nd20_attacker"


def _needs_root() -> None:
    if os.geteuid() != 0:
        reason = "needs root: the attacks are on a bundle run as root by another user"
        unavailable(reason)


@pytest.fixture(scope="module")
def attacker() -> Iterator[pwd.struct_passwd]:
    """A real unprivileged user, created for these tests and removed after them."""
    _needs_root()
    if shutil.which("useradd") is None:
        pytest.fail("useradd (passwd) is needed to create the attacking user")
    subprocess.run(["userdel", USER], capture_output=True, check=False)
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", USER],
        check=True,
        capture_output=True,
    )
    try:
        yield pwd.getpwnam(USER)
    finally:
        subprocess.run(["userdel", USER], check=False, capture_output=True)


@pytest.fixture
def base() -> Iterator[Path]:
    """A root-owned directory outside pytest's private tree, which other users can enter."""
    path = Path(tempfile.mkdtemp(prefix="nd20-bundle-sec-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _user_python() -> str:
    """A Python the attacking user can run (not root's pyenv or this virtualenv)."""
    for path in ("/usr/bin/python3", "/bin/python3"):
        if os.access(path, os.X_OK):
            return path
    pytest.fail("no /usr/bin/python3 for the attacking user's scripts")


def _as(user: pwd.struct_passwd) -> object:
    def become() -> None:
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    return become


def _launch(
    bundle: Path, env: dict[str, str], cwd: str = "/", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bundle)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _error(stderr: str) -> HclogEntry:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "no error line"
    entry = parse_line(lines[-1], strict=True)
    assert (entry.level, entry.module) == ("error", "nomad-device-bundle"), entry
    return entry


#: Run as the attacker: swap two directories with renameat2(RENAME_EXCHANGE) as
#: fast as it can until killed, as the audit did.
SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (p.encode() for p in sys.argv[1:3])
print("ready", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, 2)
"""


def test_cache_below_another_users_directory_is_refused_while_they_swap_it(
    attacker: pwd.struct_passwd, base: Path
) -> None:
    """The audit's race to root: 2 of 30 launches ran the user's code on main."""
    node_python()
    bundle = base / "tiny"
    config = tiny_bundle(bundle, "1")
    bundle.chmod(0o755)
    home = base / "home"
    home.mkdir()
    os.chown(home, attacker.pw_uid, attacker.pw_gid)
    cache = home / "cache"
    # The attacker's copy of what root would import, under the right key.
    evil = home / "evil"
    marker = base / "pwned"
    site = evil / str(config["key"]) / "site"
    site.mkdir(parents=True)
    (site / "_bundle_plugin_main.py").write_text(f"open({str(marker)!r}, 'w').write('root')\n")
    (site / ".complete").write_text("")
    for path in [evil, *evil.rglob("*")]:
        os.chown(path, attacker.pw_uid, attacker.pw_gid)
    swapper = subprocess.Popen(
        [_user_python(), "-I", "-c", SWAPPER, str(cache), str(evil)],
        preexec_fn=_as(attacker),  # type: ignore[arg-type]
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == "ready\n"
        for _ in range(10):
            done = _launch(bundle, node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(cache)))
            assert not marker.exists(), "the attacker's code ran as root"
            assert done.returncode == 1, done.stdout + done.stderr
            entry = _error(done.stderr)
            assert f"{home} is owned by uid {attacker.pw_uid} (neither root nor 0)" in entry.message
    finally:
        swapper.send_signal(signal.SIGKILL)
        swapper.wait(10)
    assert not marker.exists()
    assert not any(p.stat().st_uid == 0 for p in home.rglob("*")), "root wrote below their dir"


def test_a_symlink_above_the_cache_is_refused(base: Path) -> None:
    """Only the last component was checked: a link higher up was followed."""
    node_python()
    bundle = base / "tiny"
    tiny_bundle(bundle, "1")
    real = base / "real"
    real.mkdir(mode=0o700)
    (base / "link").symlink_to(real)
    done = _launch(bundle, node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(base / "link" / "cache")))
    assert done.returncode == 1
    assert f"{base / 'link'} is a symlink" in _error(done.stderr).message
    assert list(real.iterdir()) == []


def test_relative_cache_override_is_refused(base: Path) -> None:
    node_python()
    bundle = base / "tiny"
    tiny_bundle(bundle, "1")
    work = base / "cwd"
    work.mkdir(mode=0o700)
    done = _launch(bundle, node_env(NOMAD_DEVICE_BUNDLE_CACHE="cache"), cwd=str(work))
    assert done.returncode == 1
    message = _error(done.stderr).message
    assert message == "plugin bundle refuses NOMAD_DEVICE_BUNDLE_CACHE=cache: not an absolute path"
    assert list(work.iterdir()) == []


def _fake_python(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho ran > {marker}\n")
    path.chmod(0o755)


@pytest.mark.parametrize("entries", [":/nonexistent", "bin:/nonexistent", ".:/nonexistent"])
def test_prelude_never_takes_python_from_the_working_directory(base: Path, entries: str) -> None:
    """``${dir:-.}`` made an empty PATH entry the working directory: a fake python3 ran as root."""
    bundle = base / "tiny"
    tiny_bundle(bundle, "1")
    work = base / "cwd"
    marker = base / "pwned"
    for name in ("python3", "python{}.{}".format(*sys.version_info[:2])):
        _fake_python(work / name, marker)
        _fake_python(work / "bin" / name, marker)
    done = _launch(bundle, node_env(PATH=entries), cwd=str(work))
    assert not marker.exists(), "a python3 from the working directory ran"
    assert done.returncode == 1
    assert "on PATH" in _error(done.stderr).message


def test_relative_python_override_is_refused(base: Path) -> None:
    bundle = base / "tiny"
    tiny_bundle(bundle, "1")
    work = base / "cwd"
    marker = base / "pwned"
    _fake_python(work / "python3", marker)
    done = _launch(bundle, node_env(NOMAD_DEVICE_PYTHON="python3"), cwd=str(work))
    assert not marker.exists()
    assert done.returncode == 1
    assert "NOMAD_DEVICE_PYTHON is not an absolute path (python3)" in _error(done.stderr).message


def test_a_payload_that_is_not_the_keys_is_never_unpacked(base: Path) -> None:
    """A cache directory was trusted by its name: another payload under the same key ran."""
    node_python()
    genuine = base / "genuine"
    key = str(tiny_bundle(genuine, "1")["key"])
    forged = base / "forged"
    other = str(tiny_bundle(forged, "2")["key"])
    # The same file with the genuine key in its config (same length, so nothing moves).
    forged.write_bytes(forged.read_bytes().replace(other.encode(), key.encode()))
    assert read_config(forged)["key"] == key
    cache = base / "cache"
    env = node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(cache))
    done = _launch(forged, env)
    assert done.returncode == 1
    message = _error(done.stderr).message
    assert f"plugin bundle {forged} is damaged: its payload hashes to {other[-16:]}" in message
    assert f"nothing was unpacked into {cache / key}" in message
    assert list(cache.iterdir()) == []
    done = _launch(genuine, env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["version"] == "1"


def _run_tiny(bundle: Path, cache: Path) -> tuple[dict[str, object], list[HclogEntry]]:
    done = _launch(bundle, node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(cache)))
    assert done.returncode == 0, done.stderr
    logs = [parse_line(line, strict=True) for line in done.stderr.splitlines() if line.strip()]
    out: dict[str, object] = json.loads(done.stdout)
    return out, logs


@pytest.mark.parametrize("damage", ["module removed", "directory removed", "no mark"])
def test_a_damaged_cache_is_unpacked_again(base: Path, damage: str) -> None:
    """A .py aged out (tmpfiles) failed every later launch with ModuleNotFoundError on main."""
    node_python()
    bundle = base / "tiny"
    key = str(tiny_bundle(bundle, "1", body="import tinypkg.sub")["key"])
    # A package below the entry, to damage a directory other than the top.
    cache = base / "cache"
    out, _ = _run_tiny(bundle, cache)
    version = cache / key
    if damage == "module removed":
        (version / "site" / "_bundle_plugin_main.py").unlink()
    elif damage == "directory removed":
        shutil.rmtree(version / "site" / "tinypkg" / "sub")
    else:
        (version / "site" / ".complete").unlink()
    out, logs = _run_tiny(bundle, cache)
    assert out["version"] == "1"
    (warning,) = [e for e in logs if e.level == "warn"]
    # The part that lost a file (each part of a version is unpacked and healed on its own).
    assert warning.message.startswith(f"plugin bundle cache directory {version}/site is damaged (")
    assert warning.message.endswith("); unpacking it again")
    assert (version / "site" / "_bundle_plugin_main.py").is_file()
    assert (version / "site" / "tinypkg" / "sub" / "__init__.py").is_file()
    # Healed for good: the next launch neither warns nor unpacks.
    out, logs = _run_tiny(bundle, cache)
    assert [e.message for e in logs if e.level != "debug"] == []


def test_a_failed_unpack_names_the_cache_directory_and_leaves_nothing(base: Path) -> None:
    """A full disk at the first launch: the error says where, and no half tree stays behind."""
    node_python()
    _needs_root()
    bundle = base / "tiny"
    key = str(tiny_bundle(bundle, "1", body="BIG = " + repr(os.urandom(200_000).hex()))["key"])
    cache = base / "cache"
    cache.mkdir(mode=0o700)
    script = (
        'mount -t tmpfs -o size=96k,mode=0700 tmpfs "$0" || exit 98; "$1"; '
        'cd "$0" && find . -mindepth 1'
    )
    done = subprocess.run(
        private_mounts(script, str(cache), str(bundle)),
        env=node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(cache)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 98, done.stderr
    entry = _error(done.stderr)
    assert entry.message.startswith("plugin bundle failed: OSError: [Errno 28]")
    assert entry.message.endswith(f"(cache directory {cache / key})")
    # No half tree: only the version's (empty) directory, where the next launch unpacks.
    assert done.stdout.split() == [f"./{key}"]


def test_first_launch_flushes_only_what_it_wrote(base: Path) -> None:
    """``os.sync()`` flushed every file system of the node, NFS and CSI mounts included."""
    node_python()
    if shutil.which("strace") is None:
        pytest.fail("strace is needed to see which sync calls a first launch makes")
    bundle = base / "tiny"
    tiny_bundle(bundle, "1")
    trace = base / "trace"
    done = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            str(trace),
            "-e",
            "trace=sync,syncfs,fsync,fdatasync",
            str(bundle),
        ],
        env=node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(base / "cache")),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    calls = [line.split("(", 1)[0].split()[-1] for line in trace.read_text().splitlines()]
    assert "sync" not in calls, calls
    assert "syncfs" in calls or "fsync" in calls, calls


def test_output_never_follows_a_planted_partial_link(
    attacker: pwd.struct_passwd, base: Path
) -> None:
    """``-o`` wrote through ``.NAME.partial`` in a shared output dir and made its target 0755."""
    shared = base / "dist"
    shared.mkdir()
    os.chown(shared, 0, attacker.pw_gid)
    shared.chmod(0o770)  # a build group's directory (not sticky, so links are followed)
    secret = base / "secret"
    secret.write_text("root only\n")
    secret.chmod(0o600)
    plant = textwrap.dedent(
        f"""
        import os
        for name in (".tiny.partial", ".tiny.partial.tmp"):
            os.symlink({str(secret)!r}, os.path.join({str(shared)!r}, name))
        """
    )
    subprocess.run(
        [_user_python(), "-I", "-c", plant],
        preexec_fn=_as(attacker),
        check=True,  # type: ignore[arg-type]
    )
    tiny_bundle(shared / "tiny", "1")
    assert secret.read_text() == "root only\n"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    out = shared / "tiny"
    assert not out.is_symlink() and out.read_bytes().startswith(b"#!/bin/sh\n")
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    left = sorted(p.name for p in shared.iterdir())
    assert left == [".tiny.partial", ".tiny.partial.tmp", "tiny"]  # the planted links, unused
