"""nomad-device-example's pure logic, in process: what needs a fault no test can cause for real.

Running as root, a test cannot make a directory or a file unreadable with
permissions, so those faults are injected by wrapping ``os.scandir``.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from types import TracebackType

import pytest

from nomad_device import Device, DeviceGroup, Internal, InvalidArgument, Mount
from nomad_device.config import config_spec
from nomad_device.golang import filepath_join, perm_string
from nomad_device.plugins.example import demo, plugin
from nomad_device.plugins.example.plugin import (
    GROUP_ATTRIBUTES,
    ExampleConfig,
    FsDevicePlugin,
    Listing,
    list_devices,
)
from nomad_device.wire import hclspec

BAD_PERMS = 'Device has bad permissions "-rwxrwxrwx"'
REAL_SCANDIR = os.scandir


def group(*devices: Device) -> list[DeviceGroup]:
    return [DeviceGroup("nomad", "file", "mock", devices, GROUP_ATTRIBUTES)]


def touch(path: Path, mode: int = 0o644) -> None:
    path.write_bytes(b"")
    os.chmod(path, mode)


def configured(directory: Path | str, **options: str) -> FsDevicePlugin:
    instance = FsDevicePlugin()
    instance.configure(ExampleConfig(dir=str(directory), **options))
    return instance


# ---------------------------------------------------------------- fault injection


class _Entry:
    """A real DirEntry whose ``stat`` fails with ``error``."""

    def __init__(self, real: os.DirEntry[str], error: OSError) -> None:
        self._real = real
        self._error = error
        self.name = real.name

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        raise self._error

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._real.is_dir(follow_symlinks=follow_symlinks)


class _Listing:
    def __init__(self, path: str, broken: dict[str, OSError]) -> None:
        self._inner = REAL_SCANDIR(path)
        self._broken = broken

    def __enter__(self) -> _Listing:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._inner.close()

    def __iter__(self) -> Iterator[os.DirEntry[str] | _Entry]:
        for entry in self._inner:
            error = self._broken.get(entry.name)
            yield entry if error is None else _Entry(entry, error)


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> dict[str, OSError]:
    """Map a file name to the error its lstat raises; the key "" fails the listing."""
    broken: dict[str, OSError] = {}

    def scandir(path: str) -> _Listing:
        if "" in broken:
            raise broken[""]
        return _Listing(path, broken)

    monkeypatch.setattr(os, "scandir", scandir)  # only the plugin scans during a test
    return broken


def _denied() -> PermissionError:
    return PermissionError(errno.EACCES, os.strerror(errno.EACCES))


# ---------------------------------------------------------------- config


def test_permission_table_is_gos_perm_string() -> None:
    assert tuple(perm_string(bits) for bits in range(0o1000)) == plugin._PERM_STRINGS


def test_the_config_class_gives_the_go_plugins_schema_node_for_node() -> None:
    def optional_string(name: str, literal: str) -> hclspec.Default:
        return hclspec.Default(hclspec.Attr(name, "string", False), hclspec.Literal(literal))

    assert config_spec(ExampleConfig) == hclspec.Object(
        {
            "dir": optional_string("dir", '"."'),
            "list_period": optional_string("list_period", '"5s"'),
            "unhealthy_perm": optional_string("unhealthy_perm", '"-rwxrwxrwx"'),
        }
    )


@pytest.mark.parametrize(
    ("period", "seconds"),
    [("5s", 5.0), ("100ms", 0.1), ("1h2m3.5s", 3723.5), ("1ns", 1e-9), ("+.5m", 30.0)],
)
def test_list_period_sets_the_detection_period(tmp_path: Path, period: str, seconds: float) -> None:
    instance = configured(tmp_path, list_period=period)
    asked: list[tuple[float, str | None]] = []
    instance.rescan = lambda delay=0.0, *, key=None: asked.append((delay, key))  # type: ignore[method-assign]
    instance.detect()
    assert asked == [(pytest.approx(seconds), "period")]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            ExampleConfig(list_period="5 s"),
            'failed to parse list period "5 s": time: unknown unit " s" in duration "5 s"',
        ),
        (ExampleConfig(list_period="-5s"), 'list period "-5s" must be greater than zero'),
        (ExampleConfig(dir=""), "device directory not set in config"),
        # The period is checked first, as Go checks it in SetConfig.
        (
            ExampleConfig(dir="", list_period="x"),
            'failed to parse list period "x": time: invalid duration "x"',
        ),
    ],
)
def test_configure_refuses(config: ExampleConfig, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        FsDevicePlugin().configure(config)
    assert caught.value.message == message


def test_a_refused_config_changes_nothing(tmp_path: Path) -> None:
    instance = configured(tmp_path, list_period="2s")
    with pytest.raises(InvalidArgument):
        instance.configure(ExampleConfig(dir="/elsewhere", list_period="0s"))
    assert instance._settings.period == 2.0
    touch(tmp_path / "a")
    assert instance.detect() == group(Device("a"))


def test_reconfiguring_to_another_directory_forgets_the_old_devices(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    touch(tmp_path / "one" / "a")
    instance = configured(tmp_path / "one")
    assert instance.detect() == group(Device("a"))
    instance.configure(ExampleConfig(dir=str(tmp_path / "two")))
    with pytest.raises(InvalidArgument):
        instance.reserve(["a"])
    assert instance.detect() == []


def test_a_listing_made_stale_by_reconfiguring_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    touch(tmp_path / "one" / "a")
    touch(tmp_path / "two" / "b")
    instance = configured(tmp_path / "one")
    real_list_devices = plugin.list_devices

    def racing(directory: str, unhealthy_perm: str) -> Listing:
        listing = real_list_devices(directory, unhealthy_perm)
        instance.configure(ExampleConfig(dir=str(tmp_path / "two")))
        return listing

    monkeypatch.setattr(plugin, "list_devices", racing)
    assert instance.detect() == []  # not "a", which belongs to the old directory
    monkeypatch.undo()
    with pytest.raises(InvalidArgument):
        instance.reserve(["a"])
    assert instance.detect() == group(Device("b"))


# ---------------------------------------------------------------- listing


def test_listing_states(tmp_path: Path) -> None:
    touch(tmp_path / "file")
    assert list_devices(str(tmp_path / "gone"), "-rwxrwxrwx") == Listing(
        (), "missing", "no such file or directory"
    )
    assert list_devices(str(tmp_path / "file"), "-rwxrwxrwx") == Listing(
        (), "missing", "not a directory"
    )
    assert list_devices(str(tmp_path), "-rwxrwxrwx") == Listing((("file", True, ""),))


def test_entry_whose_mode_cannot_be_read(tmp_path: Path, faults: dict[str, OSError]) -> None:
    # Go's ReadDir fails as a whole here; we keep the device, unhealthy, saying why.
    touch(tmp_path / "fine")
    touch(tmp_path / "locked")
    (tmp_path / "subdir").mkdir()
    faults["locked"] = _denied()
    faults["subdir"] = _denied()  # still known to be a directory from readdir's d_type
    faults["vanished"] = FileNotFoundError(errno.ENOENT, "gone")
    touch(tmp_path / "vanished")
    listing = list_devices(str(tmp_path), "-rwxrwxrwx")
    assert listing.entries == (
        ("fine", True, ""),
        ("locked", False, "Device mode unreadable: permission denied"),
    )
    assert listing.problems == ('cannot read the mode of "locked": permission denied',)


def test_non_utf8_name_is_left_out(tmp_path: Path) -> None:
    touch(tmp_path / "ok")
    os.close(os.open(os.fsencode(tmp_path) + b"/caf\xe9", os.O_CREAT | os.O_WRONLY, 0o644))
    listing = list_devices(str(tmp_path), "-rwxrwxrwx")
    assert listing.entries == (("ok", True, ""),)
    assert listing.problems == ('skipped "caf\\xe9": its name is not valid UTF-8',)


def test_order_is_by_byte_like_gos_sort(tmp_path: Path) -> None:
    names = ["b", "B", "a", "\u00e9", "\U0001f600", "\uffff", "_", "a.b", "a-b", "10", "9"]
    for name in names:
        touch(tmp_path / name)
    listed = [name for name, _, _ in list_devices(str(tmp_path), "x").entries]
    assert listed == sorted(names, key=lambda n: n.encode())


# ---------------------------------------------------------------- detect


def test_unreadable_directory_keeps_the_last_devices_unhealthy(
    tmp_path: Path, faults: dict[str, OSError], caplog: pytest.LogCaptureFixture
) -> None:
    touch(tmp_path / "a")
    touch(tmp_path / "b", 0o777)
    instance = configured(tmp_path)
    assert instance.detect() == group(Device("a"), Device("b", False, BAD_PERMS))
    faults[""] = _denied()
    why = "Device directory unreadable: permission denied"
    with caplog.at_level(logging.INFO, logger="example-fs-device"):
        for _ in range(3):
            assert instance.detect() == group(Device("a", False, why), Device("b", False, why))
        # Still reservable: they were not reported gone.
        assert instance.reserve(["a"]).mounts == (
            Mount("/tmp/task-mounts/a", f"{tmp_path}/a", False),
        )
        del faults[""]
        assert instance.detect() == group(Device("a"), Device("b", False, BAD_PERMS))
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot list the device directory" in m for m in messages) == 1
    assert sum("readable again" in m for m in messages) == 1


def test_unreadable_from_the_start_reports_nothing(
    tmp_path: Path, faults: dict[str, OSError]
) -> None:
    touch(tmp_path / "a")
    faults[""] = OSError(errno.EIO, os.strerror(errno.EIO))
    instance = configured(tmp_path)
    assert instance.detect() == []


def test_unchanged_directory_returns_the_same_objects(tmp_path: Path) -> None:
    # The SDK compares states on every period; identical objects make that cheap.
    touch(tmp_path / "a")
    instance = configured(tmp_path)
    first = instance.detect()
    assert instance.detect()[0] is first[0]
    touch(tmp_path / "b")
    assert instance.detect()[0] is not first[0]


# ---------------------------------------------------------------- reserve and stats


def test_reserve_knows_only_detected_devices(tmp_path: Path) -> None:
    touch(tmp_path / "a")
    instance = configured(tmp_path)
    with pytest.raises(InvalidArgument, match='unknown device "a"'):
        instance.reserve(["a"])  # not fingerprinted yet
    instance.detect()
    assert len(instance.reserve(["a"]).mounts) == 1


def test_reserve_when_the_working_directory_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    touch(tmp_path / "a")
    instance = configured(tmp_path)
    instance.detect()

    def no_cwd(path: str) -> str:
        raise FileNotFoundError(errno.ENOENT, "getwd")

    monkeypatch.setattr(plugin, "filepath_abs", no_cwd)
    with pytest.raises(Internal) as caught:
        instance.reserve(["a"])
    assert caught.value.message == "failed to load device dir abs path"
    with pytest.raises(InvalidArgument, match="no device ids given"):
        instance.reserve([])  # checked first, as in Go


def test_stats_skip_a_vanished_file_and_ask_for_a_rescan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    touch(tmp_path / "a")
    touch(tmp_path / "b")
    instance = configured(tmp_path)
    instance.detect()
    rescans: list[None] = []
    monkeypatch.setattr(instance, "rescan", lambda: rescans.append(None))
    (tmp_path / "b").unlink()
    with caplog.at_level(logging.WARNING, logger="example-fs-device"):
        for _ in range(3):
            [stats] = instance.stats()
            assert set(stats.instance_stats) == {"a"}
    assert len(rescans) == 1
    [record] = caplog.records
    assert record.getMessage() == (
        f'devices left out of stats: failed to stat "{tmp_path}/b": no such file or directory'
    )
    # Back again: logged again if it vanishes a second time.
    touch(tmp_path / "b")
    assert set(instance.stats()[0].instance_stats) == {"a", "b"}
    (tmp_path / "b").unlink()
    instance.stats()
    assert len(rescans) == 2


def test_many_stat_failures_make_one_short_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(10):
        touch(tmp_path / f"d{i}")
    instance = configured(tmp_path)
    instance.detect()
    for i in range(10):
        (tmp_path / f"d{i}").unlink()
    with caplog.at_level(logging.WARNING, logger="example-fs-device"):
        assert instance.stats() == []
    [record] = caplog.records
    assert record.getMessage().endswith("(and 7 more)")
    assert record.__dict__["devices"] == 10


def test_no_devices_no_stats(tmp_path: Path) -> None:
    instance = configured(tmp_path)
    instance.detect()
    assert instance.stats() == []


# ---------------------------------------------------------------- demo directory


def test_demo_files_are_packaged_without_a_readme() -> None:
    files = resources.files("nomad_device.plugins.example") / "demo"
    assert sorted(p.name for p in files.iterdir()) == ["device01", "device02", "device03"]


def test_prepare_demo_dir_sets_the_walkthrough_modes() -> None:
    target = demo.prepare_demo_dir()
    try:
        assert sorted(p.name for p in target.iterdir()) == ["device01", "device02", "device03"]
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in target.iterdir()}
        assert modes == {"device01": 0o777, "device02": 0o644, "device03": 0o644}
        source = resources.files("nomad_device.plugins.example") / "demo"
        for name in modes:
            assert (target / name).read_bytes() == (source / name).read_bytes()
        assert list_devices(str(target), "-rwxrwxrwx").entries == (
            ("device01", False, BAD_PERMS),
            ("device02", True, ""),
            ("device03", True, ""),
        )
    finally:
        for child in target.iterdir():
            child.unlink()
        target.rmdir()


def test_prepare_demo_dir_into_a_given_directory(tmp_path: Path) -> None:
    target = tmp_path / "nested" / "demo"
    target.mkdir(parents=True)
    touch(target / "device02", 0o444)  # a read-only leftover is replaced
    assert demo.prepare_demo_dir(target) == target
    assert stat.S_IMODE((target / "device02").stat().st_mode) == 0o644
    assert demo.prepare_demo_dir(tmp_path / "fresh" / "dir") == tmp_path / "fresh" / "dir"


@pytest.mark.parametrize(
    "directory", [".", "./", "", "/", "//", "/a/b/", "a/./b", "a/../b", "..", "../x/..", "/.."]
)
@pytest.mark.parametrize("name", ["dev", "...", ".x", "a b", "new\nline"])
def test_stat_paths_are_gos_filepath_join(directory: str, name: str) -> None:
    assert plugin._join_prefix(directory) + name == filepath_join(directory, name)
