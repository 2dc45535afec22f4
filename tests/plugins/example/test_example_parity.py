"""nomad-device-example over the wire: the same observable behaviour as Nomad's Go example.

Every expectation here is written from reading Nomad's
``plugins/device/cmd/example/device.go`` and the Go standard library it relies
on (``ioutil.ReadDir``, ``FileMode.String``, ``time.ParseDuration``,
``Time.String``, ``filepath.Abs``/``Join``, ``%q``), not from our own helpers.
"""

from __future__ import annotations

import datetime as dt
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from support.processes import Launcher

from nomad_device import Attribute, Device, DeviceGroup, Mount, Reservation
from nomad_device.config import encode_config
from nomad_device.host import CallError, DevicePluginClient, Stream
from nomad_device.plugins.example.plugin import ExampleConfig
from nomad_device.proto import hclspec_pb2

COMMAND = [sys.executable, "-m", "nomad_device.plugins.example"]
BAD_PERMS = 'Device has bad permissions "-rwxrwxrwx"'
GROUP_ATTRS = {"cool-attribute": Attribute("attribute-wearing-sunglasses")}


# ---------------------------------------------------------------- helpers


@pytest.fixture
def plugin(launch: Launcher) -> Callable[..., DevicePluginClient]:
    """Start the example plugin; ``env`` entries are added to the test's environment."""

    def start(env: dict[str, str] | None = None, cwd: Path | None = None) -> DevicePluginClient:
        environ = {**os.environ, **(env or {})}
        return launch(COMMAND, env=environ, cwd=str(cwd) if cwd else None).client

    return start


@pytest.fixture(scope="module")
def shared_client() -> Iterator[DevicePluginClient]:
    """One process for the many SetConfig cases (a refused config changes nothing)."""
    client = DevicePluginClient.launch(COMMAND, start_timeout=30)
    yield client
    client.kill()


def configure(client: DevicePluginClient, directory: Path | str, **options: str) -> None:
    options.setdefault("list_period", "100ms")
    client.set_config(encode_config(ExampleConfig(dir=str(directory), **options)))


def group(*devices: Device) -> list[DeviceGroup]:
    return [DeviceGroup("nomad", "file", "mock", devices, GROUP_ATTRS)]


def wait_for(
    stream: Stream[list[DeviceGroup]],
    want: list[DeviceGroup],
    timeout: float = 10.0,
) -> list[list[DeviceGroup]]:
    """Read messages until one equals ``want``; return everything read."""
    seen: list[list[DeviceGroup]] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"never saw {want!r}; saw {seen!r}")
        message = stream.next(left)
        seen.append(message)
        if message == want:
            return seen


def assert_quiet(stream: Stream[list[DeviceGroup]], seconds: float) -> None:
    """No message for ``seconds`` (the stream is cancelled afterwards)."""
    with pytest.raises(TimeoutError):
        stream.next(seconds)


# ---------------------------------------------------------------- PluginInfo, schema


def test_plugin_info(shared_client: DevicePluginClient) -> None:
    info = shared_client.info()
    assert info.name == "example-fs-device"
    assert info.version == "v0.1.0"
    assert info.api_versions == ("v0.1.0",)
    assert info.type == 3  # DEVICE


def _go_string_with_default(name: str, literal: str) -> hclspec_pb2.Spec:
    # hclspec.NewDefault(hclspec.NewAttr(name, "string", false), hclspec.NewLiteral(literal))
    attr = hclspec_pb2.Spec(Attr=hclspec_pb2.Attr(name=name, type="string", required=False))
    value = hclspec_pb2.Spec(literal=hclspec_pb2.Literal(value=literal))
    return hclspec_pb2.Spec(default=hclspec_pb2.Default(primary=attr, default=value))


def test_config_schema_is_gos_bit_for_bit(shared_client: DevicePluginClient) -> None:
    go_schema = hclspec_pb2.Spec(
        object=hclspec_pb2.Object(
            attributes={
                "dir": _go_string_with_default("dir", '"."'),
                "list_period": _go_string_with_default("list_period", '"5s"'),
                "unhealthy_perm": _go_string_with_default("unhealthy_perm", '"-rwxrwxrwx"'),
            }
        )
    )
    got = shared_client.schema_proto()
    assert got == go_schema
    assert got.SerializeToString(deterministic=True) == go_schema.SerializeToString(
        deterministic=True
    )


# ---------------------------------------------------------------- SetConfig

# Everything Go's time.ParseDuration accepts: all units (both micro signs),
# fractions, signs, sums, and the exact int64 limits.
ACCEPTED_PERIODS = [
    "1ns",
    "1us",
    "1\u00b5s",  # MICRO SIGN
    "1\u03bcs",  # GREEK SMALL LETTER MU
    "1ms",
    "1s",
    "1m",
    "1h",
    "1h2m3.5s",
    ".5s",
    "5.s",
    "+5s",
    "1.0000000001s",
    "0.000000001s",
    "1h1h",
    "2562047h47m16.854775807s",
    "9223372036s",
    "100ms",
]


@pytest.mark.parametrize("period", ACCEPTED_PERIODS)
def test_set_config_accepts_every_go_duration(
    shared_client: DevicePluginClient, tmp_path: Path, period: str
) -> None:
    configure(shared_client, tmp_path, list_period=period)


# (list_period, Go's error text after "SetConfig failed: "). The outer quote is
# strconv.Quote (%q); the inner one is the time package's own, which writes every
# non-ASCII or control byte as \xNN.
REJECTED_PERIODS = [
    ("", 'failed to parse list period "": time: invalid duration ""'),
    (" ", 'failed to parse list period " ": time: invalid duration " "'),
    ("5", 'failed to parse list period "5": time: missing unit in duration "5"'),
    ("-", 'failed to parse list period "-": time: invalid duration "-"'),
    ("+", 'failed to parse list period "+": time: invalid duration "+"'),
    ("+-1s", 'failed to parse list period "+-1s": time: invalid duration "+-1s"'),
    (".s", 'failed to parse list period ".s": time: invalid duration ".s"'),
    (".", 'failed to parse list period ".": time: invalid duration "."'),
    ("-.s", 'failed to parse list period "-.s": time: invalid duration "-.s"'),
    ("1x", 'failed to parse list period "1x": time: unknown unit "x" in duration "1x"'),
    ("5S", 'failed to parse list period "5S": time: unknown unit "S" in duration "5S"'),
    ("1H", 'failed to parse list period "1H": time: unknown unit "H" in duration "1H"'),
    ("5sec", 'failed to parse list period "5sec": time: unknown unit "sec" in duration "5sec"'),
    (
        "3days",
        'failed to parse list period "3days": time: unknown unit "days" in duration "3days"',
    ),
    (
        "5 minutes",
        'failed to parse list period "5 minutes": '
        'time: unknown unit " minutes" in duration "5 minutes"',
    ),
    ("1e3s", 'failed to parse list period "1e3s": time: unknown unit "e" in duration "1e3s"'),
    ("0x10s", 'failed to parse list period "0x10s": time: unknown unit "x" in duration "0x10s"'),
    (
        "1_000ms",
        'failed to parse list period "1_000ms": time: unknown unit "_" in duration "1_000ms"',
    ),
    (
        "1h-5m",
        'failed to parse list period "1h-5m": time: unknown unit "h-" in duration "1h-5m"',
    ),
    ("1.2.3s", 'failed to parse list period "1.2.3s": time: missing unit in duration "1.2.3s"'),
    (
        "5\u00b5",
        'failed to parse list period "5\u00b5": '
        'time: unknown unit "\\xc2\\xb5" in duration "5\\xc2\\xb5"',
    ),
    (
        "1\u00b5m",
        'failed to parse list period "1\u00b5m": '
        'time: unknown unit "\\xc2\\xb5m" in duration "1\\xc2\\xb5m"',
    ),
    (
        "\uff11s",  # FULLWIDTH DIGIT ONE
        'failed to parse list period "\uff11s": time: invalid duration "\\xef\\xbc\\x91s"',
    ),
    ("\t5s", 'failed to parse list period "\\t5s": time: invalid duration "\\x095s"'),
    ('1"s', 'failed to parse list period "1\\"s": time: unknown unit "\\"s" in duration "1\\"s"'),
    (
        "1\\s",
        'failed to parse list period "1\\\\s": time: unknown unit "\\\\s" in duration "1\\\\s"',
    ),
    (
        "9223372036854775808ns",
        'failed to parse list period "9223372036854775808ns": '
        'time: invalid duration "9223372036854775808ns"',
    ),
    (
        "18446744073709551616ns",
        'failed to parse list period "18446744073709551616ns": '
        'time: invalid duration "18446744073709551616ns"',
    ),
    ("2562048h", 'failed to parse list period "2562048h": time: invalid duration "2562048h"'),
]


@pytest.mark.parametrize(("period", "message"), REJECTED_PERIODS)
def test_set_config_rejects_bad_durations_in_gos_words(
    shared_client: DevicePluginClient, tmp_path: Path, period: str, message: str
) -> None:
    with pytest.raises(CallError) as caught:
        configure(shared_client, tmp_path, list_period=period)
    assert caught.value.details == f"SetConfig failed: {message}"
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_set_config_accepts_any_dir_and_perm_like_go(
    shared_client: DevicePluginClient, tmp_path: Path
) -> None:
    # Go checks neither: a missing dir or a perm that can never match is allowed.
    configure(shared_client, tmp_path / "not-yet", unhealthy_perm="whatever")
    configure(shared_client, tmp_path, unhealthy_perm="")


# ---------------------------------------------------------------- which entries are devices


@dataclass(frozen=True)
class Entry:
    """One directory entry: how to make it and what Go's ReadDir + Perm().String() report."""

    name: str
    make: Callable[[Path], None]
    perm: str | None  # Mode().Perm().String() of the lstat; None: a directory, skipped


def regular(mode: int, content: bytes = b"") -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_bytes(content)
        os.chmod(path, mode)

    return make


def directory(mode: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.mkdir()
        os.chmod(path, mode)

    return make


def symlink(target: str) -> Callable[[Path], None]:
    return lambda path: path.symlink_to(target)


def node(kind: int, mode: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        os.mknod(path, kind | mode)
        os.chmod(path, mode)

    return make


ENTRIES = [
    Entry("plain", regular(0o644), "-rw-r--r--"),
    Entry("all-perms", regular(0o777), "-rwxrwxrwx"),
    # Perm() keeps only the nine rwx bits: setuid/setgid/sticky do not save a 0777 file.
    Entry("setuid-777", regular(0o4777), "-rwxrwxrwx"),
    Entry("setgid-777", regular(0o2777), "-rwxrwxrwx"),
    Entry("sticky-777", regular(0o1777), "-rwxrwxrwx"),
    Entry("no-perms", regular(0o000), "----------"),
    Entry("owner-only", regular(0o700), "-rwx------"),
    Entry("group-write", regular(0o664), "-rw-rw-r--"),
    Entry(".hidden", regular(0o777), "-rwxrwxrwx"),
    Entry("UPPER", regular(0o640), "-rw-r-----"),
    Entry("with space", regular(0o644), "-rw-r--r--"),
    Entry("new\nline", regular(0o644), "-rw-r--r--"),
    Entry("\u00fcn\u00efc\u00f6d\u00e9", regular(0o777), "-rwxrwxrwx"),
    Entry("\u65e5\u672c", regular(0o644), "-rw-r--r--"),
    Entry("a", regular(0o644), "-rw-r--r--"),
    Entry("a-b", regular(0o644), "-rw-r--r--"),
    Entry("a.b", regular(0o644), "-rw-r--r--"),
    Entry("a_b", regular(0o644), "-rw-r--r--"),
    # Directories are skipped whatever their mode.
    Entry("subdir", directory(0o755), None),
    Entry("subdir-777", directory(0o777), None),
    # ReadDir lstats: a symlink is never a directory, and its own mode is 0777.
    Entry("link-to-file", symlink("plain"), "-rwxrwxrwx"),
    Entry("link-to-dir", symlink("subdir"), "-rwxrwxrwx"),
    Entry("link-dangling", symlink("nowhere"), "-rwxrwxrwx"),
    # Named pipes and sockets are devices too; only their rwx bits count.
    Entry("fifo", node(stat.S_IFIFO, 0o644), "-rw-r--r--"),
    Entry("fifo-777", node(stat.S_IFIFO, 0o777), "-rwxrwxrwx"),
    Entry("socket", node(stat.S_IFSOCK, 0o755), "-rwxr-xr-x"),
]


def build(root: Path, entries: list[Entry]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        entry.make(root / entry.name)
    return root


def expected_devices(entries: list[Entry], unhealthy_perm: str) -> list[DeviceGroup]:
    """The Go rule: non-directories, by name; unhealthy iff perm string == unhealthy_perm."""
    description = f"Device has bad permissions {go_quote(unhealthy_perm)}"
    devices = [
        Device(e.name, e.perm != unhealthy_perm, description if e.perm == unhealthy_perm else "")
        for e in sorted(entries, key=lambda e: e.name.encode())
        if e.perm is not None
    ]
    return group(*devices)


def go_quote(text: str) -> str:
    """%q for the printable ASCII perm strings used below."""
    assert text.isascii() and text.isprintable()
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.mark.parametrize(
    "unhealthy_perm",
    ["-rwxrwxrwx", "-rw-r--r--", "----------", "-rwx------", "rwxrwxrwx", "drwxr-xr-x"],
)
def test_which_entries_are_devices_and_their_health(
    plugin: Callable[..., DevicePluginClient], tmp_path: Path, unhealthy_perm: str
) -> None:
    root = build(tmp_path / "devices", ENTRIES)
    client = plugin()
    configure(client, root, unhealthy_perm=unhealthy_perm)
    with client.fingerprint() as stream:
        assert stream.next(10) == expected_devices(ENTRIES, unhealthy_perm)


def test_default_config_lists_the_working_directory(
    plugin: Callable[..., DevicePluginClient], tmp_path: Path
) -> None:
    build(tmp_path, [Entry("dev-a", regular(0o644), ""), Entry("dev-b", regular(0o777), "")])
    client = plugin(cwd=tmp_path)
    # No config block: Nomad sends the schema's defaults, so dir is ".".
    client.set_config(encode_config(ExampleConfig()))
    with client.fingerprint() as stream:
        assert stream.next(10) == group(Device("dev-a"), Device("dev-b", False, BAD_PERMS))


def test_messages_only_on_change_each_with_the_full_state(
    plugin: Callable[..., DevicePluginClient], tmp_path: Path
) -> None:
    root = tmp_path / "devices"
    root.mkdir()
    (root / "one").write_bytes(b"")
    os.chmod(root / "one", 0o644)
    client = plugin()
    configure(client, root)
    with client.fingerprint() as stream:
        assert stream.next(10) == group(Device("one"))
        # Ten periods without a change: nothing is sent.
        assert_quiet(stream, 1.0)
    with client.fingerprint() as stream:
        assert stream.next(10) == group(Device("one"))
        # New file: the whole set, not a delta.
        (root / "two").write_bytes(b"")
        os.chmod(root / "two", 0o644)
        wait_for(stream, group(Device("one"), Device("two")))
        # Health flips with the permission string.
        os.chmod(root / "one", 0o777)
        wait_for(stream, group(Device("one", False, BAD_PERMS), Device("two")))
        os.chmod(root / "one", 0o644)
        wait_for(stream, group(Device("one"), Device("two")))
        # A removed file leaves the set.
        (root / "two").unlink()
        wait_for(stream, group(Device("one")))
    with client.fingerprint() as stream:
        assert stream.next(10) == group(Device("one"))
        # Content and times are not part of the fingerprint: no message.
        (root / "one").write_bytes(b"new content")
        os.utime(root / "one", ns=(1, 1))
        os.chmod(root / "one", 0o644)
        assert_quiet(stream, 1.0)


# ---------------------------------------------------------------- Reserve


@pytest.fixture
def reserving(
    plugin: Callable[..., DevicePluginClient], tmp_path: Path
) -> tuple[DevicePluginClient, Path]:
    root = build(tmp_path / "devices", ENTRIES)
    client = plugin()
    configure(client, root)
    with client.fingerprint() as stream:
        stream.next(10)
    return client, root


def test_reserve_without_ids(reserving: tuple[DevicePluginClient, Path]) -> None:
    client, _ = reserving
    with pytest.raises(CallError) as caught:
        client.reserve([])
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details == "no device ids given"


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (["nope"], 'unknown device "nope"'),
        ([""], 'unknown device ""'),
        (["subdir"], 'unknown device "subdir"'),  # a directory is not a device
        ([".."], 'unknown device ".."'),
        (['a"b'], 'unknown device "a\\"b"'),
        (["tab\there"], 'unknown device "tab\\there"'),
        (["bell\x07"], 'unknown device "bell\\a"'),
        (["del\x7f"], 'unknown device "del\\x7f"'),
        (["\u00fcn\u00efc\u00f6de"], 'unknown device "\u00fcn\u00efc\u00f6de"'),
        (["zero\u200bwidth"], 'unknown device "zero\\u200bwidth"'),
        (["plain", "nope", "other"], 'unknown device "nope"'),  # the first unknown one
    ],
)
def test_reserve_unknown_device(
    reserving: tuple[DevicePluginClient, Path], ids: list[str], message: str
) -> None:
    client, _ = reserving
    with pytest.raises(CallError) as caught:
        client.reserve(ids)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details == message


def test_reserve_mounts_each_device(reserving: tuple[DevicePluginClient, Path]) -> None:
    client, root = reserving
    # Unhealthy devices, symlinks and repeats are all mounted, in request order.
    ids = ["plain", "all-perms", "link-to-dir", "new\nline", "plain"]
    assert client.reserve(ids) == Reservation(
        mounts=tuple(Mount(f"/tmp/task-mounts/{i}", f"{root}/{i}", False) for i in ids)
    )


def test_reserve_host_path_is_go_abs_and_join(
    plugin: Callable[..., DevicePluginClient], tmp_path: Path
) -> None:
    # filepath.Abs joins a relative dir to os.Getwd, which trusts $PWD when it
    # names the working directory -- even through a symlink -- and cleans lexically.
    real = tmp_path / "real"
    build(real / "devs", [Entry("dev", regular(0o644), "")])
    link = tmp_path / "link"
    link.symlink_to(real)
    client = plugin(env={"PWD": str(link)}, cwd=link)
    configure(client, "./devs/../devs//")
    with client.fingerprint() as stream:
        assert stream.next(10) == group(Device("dev"))
    assert client.reserve(["dev"]).mounts == (
        Mount("/tmp/task-mounts/dev", f"{link}/devs/dev", False),
    )


def test_reserve_host_path_without_a_matching_pwd(
    plugin: Callable[..., DevicePluginClient], tmp_path: Path
) -> None:
    real = tmp_path / "real"
    build(real / "devs", [Entry("dev", regular(0o644), "")])
    client = plugin(env={"PWD": "/"}, cwd=real)  # $PWD is not "." here: getcwd wins
    configure(client, "devs")
    with client.fingerprint() as stream:
        stream.next(10)
    assert client.reserve(["dev"]).mounts[0].host_path == f"{real.resolve()}/devs/dev"


# ---------------------------------------------------------------- Stats

MTIME = 1_700_000_000_123_456_000  # 2023-11-14 22:13:20.123456 UTC


def _stats_dir(root: Path) -> Path:
    build(
        root,
        [
            Entry("plain", regular(0o644, b"hello"), ""),
            Entry("exec", regular(0o755, b"#!/bin/sh\n"), ""),
            Entry("setuid", regular(0o4755, b"x"), ""),
            Entry("sticky", regular(0o1777, b""), ""),
            Entry("subdir", directory(0o755), None),
            Entry("to-plain", symlink("plain"), ""),
            Entry("to-subdir", symlink("subdir"), ""),
            Entry("fifo", node(stat.S_IFIFO, 0o620), ""),
            Entry("socket", node(stat.S_IFSOCK, 0o755), ""),
        ],
    )
    for name in ("plain", "exec", "setuid", "sticky", "subdir", "fifo", "socket"):
        os.utime(root / name, ns=(MTIME, MTIME))
    os.utime(root / "exec", ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    os.utime(root / "setuid", ns=(1_700_000_000_000_000_001, 1_700_000_000_000_000_001))
    return root


# (device, size, Mode().String() of os.Stat -- which follows symlinks)
STAT_CASES = [
    ("plain", 5, "-rw-r--r--"),
    ("exec", 10, "-rwxr-xr-x"),
    ("setuid", 1, "urwxr-xr-x"),
    ("sticky", 0, "trwxrwxrwx"),
    ("to-plain", 5, "-rw-r--r--"),
    ("to-subdir", None, "drwxr-xr-x"),
    ("fifo", 0, "prw--w----"),
    ("socket", 0, "Srwxr-xr-x"),
]

# Time.String() of each file's ModTime in the plugin's local zone.
MTIME_TEXT = {
    "UTC": {
        "plain": "2023-11-14 22:13:20.123456 +0000 UTC",
        "exec": "2001-09-09 01:46:40 +0000 UTC",
        "setuid": "2023-11-14 22:13:20.000000001 +0000 UTC",
    },
    "Asia/Kolkata": {
        "plain": "2023-11-15 03:43:20.123456 +0530 IST",
        "exec": "2001-09-09 07:16:40 +0530 IST",
        "setuid": "2023-11-15 03:43:20.000000001 +0530 IST",
    },
    "America/St_Johns": {
        "plain": "2023-11-14 18:43:20.123456 -0330 NST",
        "exec": "2001-09-08 23:16:40 -0230 NDT",
        "setuid": "2023-11-14 18:43:20.000000001 -0330 NST",
    },
}


@pytest.mark.parametrize("zone", sorted(MTIME_TEXT))
def test_stats_in_gos_units_and_formats(
    plugin: Callable[..., DevicePluginClient], tmp_path: Path, zone: str
) -> None:
    root = _stats_dir(tmp_path / "devices")
    client = plugin(env={"TZ": zone})
    configure(client, root)
    with client.fingerprint() as stream:
        stream.next(10)
    before = dt.datetime.now(dt.UTC)
    with client.stats(0.2) as stats:
        [stats_group] = stats.next(10)
    assert (stats_group.vendor, stats_group.type, stats_group.name) == ("nomad", "file", "mock")
    assert set(stats_group.instance_stats) == {name for name, _, _ in STAT_CASES}
    stamps = set()
    for name, size, mode in STAT_CASES:
        instance = stats_group.instance_stats[name]
        target = root / name
        expected_size = target.stat().st_size if size is None else size
        summary = instance.summary
        assert summary is not None and instance.stats is not None
        assert (summary.int_numerator, summary.unit, summary.desc) == (
            expected_size,
            "bytes",
            "Filesize in bytes",
        )
        assert summary.float_numerator is None and summary.string_value is None
        attributes = instance.stats.attributes
        assert set(attributes) == {"size", "modify_time", "mode"}
        assert attributes["size"] == summary
        assert attributes["mode"].string_value == mode
        assert (attributes["mode"].unit, attributes["mode"].desc) == ("", "File mode")
        modify = attributes["modify_time"]
        assert (modify.unit, modify.desc) == ("", "Last modified")
        base = name.removeprefix("to-")
        if base in MTIME_TEXT[zone]:
            assert modify.string_value == MTIME_TEXT[zone][base]
        elif base in ("sticky", "fifo", "socket", "subdir"):
            assert modify.string_value == MTIME_TEXT[zone]["plain"]
        assert not instance.stats.nested
        stamps.add(instance.timestamp)
    # One time.Now() per collection, shared by every device.
    [stamp] = stamps
    assert before - dt.timedelta(seconds=1) <= stamp <= dt.datetime.now(dt.UTC)


def test_no_stats_message_without_devices(
    plugin: Callable[..., DevicePluginClient], tmp_path: Path
) -> None:
    build(tmp_path / "devices", [Entry("subdir", directory(0o755), None)])
    client = plugin()
    configure(client, tmp_path / "devices")
    with client.fingerprint() as stream:
        assert stream.next(10) == []
    with client.stats(0.1) as stats, pytest.raises(TimeoutError):
        stats.next(1.0)


def test_stats_follow_the_fingerprinted_set(
    plugin: Callable[..., DevicePluginClient], tmp_path: Path
) -> None:
    root = build(tmp_path / "devices", [Entry("one", regular(0o644, b"1"), "")])
    client = plugin()
    configure(client, root)
    with client.fingerprint() as stream:
        assert stream.next(10) == group(Device("one"))
        with client.stats(0.1) as stats:
            assert set(stats.next(10)[0].instance_stats) == {"one"}
            (root / "two").write_bytes(b"22")
            os.chmod(root / "two", 0o644)
            wait_for(stream, group(Device("one"), Device("two")))
            deadline = time.monotonic() + 10
            while set(stats.next(10)[0].instance_stats) != {"one", "two"}:
                assert time.monotonic() < deadline
