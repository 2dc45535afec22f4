"""nomad-device-example on events, over the real wire.

With ``list_period = "1h"`` nothing but inotify can make a change reach the
host within the tests' timeouts, so every change seen here came through
``watch()``. Waits are generous and nothing asserts a duration.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import PLUGINS
from support.processes import Launched, Launcher

from nomad_device import Device
from nomad_device.config import encode_config
from nomad_device.host import Stream
from nomad_device.model import DeviceGroup
from nomad_device.plugins.example.plugin import ExampleConfig
from nomad_device.sources import DISABLE_ENV

from .test_example_improvements import BAD_PERMS, COMMAND, group, touch, wait_for

COUNTING = [sys.executable, str(PLUGINS / "counting_example.py")]
SOURCE_LOGGER = "nomad_device.sources.inotify"


def start(
    launch: Launcher,
    directory: Path,
    list_period: str = "1h",
    command: list[str] = COMMAND,
    **env: str,
) -> Launched:
    launched = launch(command, env={**os.environ, **env})
    launched.client.set_config(encode_config(ExampleConfig(str(directory), list_period)))
    return launched


def devices(*names: str) -> list[DeviceGroup]:
    return group(*(Device(name) for name in names)) if names else []


def source_warnings(launched: Launched) -> list[str]:
    return [e.message for e in launched.logs if e.module == SOURCE_LOGGER and e.level == "warn"]


def test_chmod_new_and_deleted_files_reach_the_host(launch: Launcher, tmp_path: Path) -> None:
    touch(tmp_path / "a")
    launched = start(launch, tmp_path)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == devices("a")
        os.chmod(tmp_path / "a", 0o777)
        wait_for(stream, group(Device("a", False, BAD_PERMS)))
        touch(tmp_path / "b")
        wait_for(stream, group(Device("a", False, BAD_PERMS), Device("b")))
        (tmp_path / "a").unlink()
        wait_for(stream, devices("b"))
    assert source_warnings(launched) == []


def test_directory_removed_and_recreated_recovers_through_events(
    launch: Launcher, tmp_path: Path
) -> None:
    root = tmp_path / "devices"
    root.mkdir()
    touch(root / "a")
    launched = start(launch, root)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == devices("a")
        shutil.rmtree(root)
        wait_for(stream, [])
        root.mkdir()
        touch(root / "c")
        wait_for(stream, devices("c"))
        # Watched again, not only rescanned once: later changes arrive too.
        touch(root / "d")
        wait_for(stream, devices("c", "d"))
        # Missing from further up, then back.
        shutil.rmtree(tmp_path)
        wait_for(stream, [])
        root.mkdir(parents=True)
        touch(root / "e")
        wait_for(stream, devices("e"))


def test_new_directory_from_set_config_is_watched(launch: Launcher, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    launched = start(launch, first)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == []
        launched.client.set_config(encode_config(ExampleConfig(str(second), "1h")))
        touch(second / "x")
        wait_for(stream, devices("x"))
        touch(first / "ignored")
        touch(second / "y")
        seen = wait_for(stream, devices("x", "y"))
    assert all(Device("ignored") not in g.devices for message in seen for g in message)


BURST = """
import os, sys
root = sys.argv[1]
for i in range(10_000):
    os.close(os.open(os.path.join(root, f"f{i:05}"), os.O_CREAT | os.O_WRONLY, 0o644))
for i in range(10_000):
    if i % 1000:
        os.unlink(os.path.join(root, f"f{i:05}"))
os.chmod(os.path.join(root, "f05000"), 0o777)
"""


def test_burst_of_10000_ends_exact_with_few_detects(launch: Launcher, tmp_path: Path) -> None:
    # 10,000 creations and 9,990 deletions: about 20,000 inotify events. The
    # example takes them in batches at most one per second while they keep
    # coming, and each batch is one rescan() (the engine folds wake-ups that
    # come during a detect()). So detect() runs at most 4 + one per second of
    # burst: the first listing, SetConfig's and watch()'s own rescans, the
    # batch of the first event, then one a second. The burst takes 3 to 4 s on
    # this (slow-syscall) VM; 50 calls would need a 45-second burst.
    root = tmp_path / "devices"
    root.mkdir()
    counter = tmp_path / "detects"
    launched = start(launch, root, command=COUNTING, COUNT_DETECTS_TO=str(counter))
    final = [f"f{i:05}" for i in range(0, 10_000, 1000)]
    want = group(*(Device(n, n != "f05000", "" if n != "f05000" else BAD_PERMS) for n in final))
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == []
        subprocess.run([sys.executable, "-c", BURST, str(root)], check=True, timeout=300)
        wait_for(stream, want, timeout=60)
    launched.client.kill()
    detects = len(counter.read_bytes())
    assert 2 <= detects <= 50, detects


def _stopped(stream: Stream[list[DeviceGroup]], launched: Launched, work: str, root: Path) -> None:
    """Run ``work`` while the plugin is stopped, so its inotify queue fills up."""
    pid = launched.client.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        subprocess.run([sys.executable, "-c", work, str(root)], check=True, timeout=300)
    finally:
        os.kill(pid, signal.SIGCONT)


OVERFLOW = """
import os, sys
root = sys.argv[1]
limit = int(open("/proc/sys/fs/inotify/max_queued_events").read())
for i in range(limit // 2 + 100):
    path = os.path.join(root, f"tmp{i}")
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
    os.unlink(path)
open(os.path.join(root, "after-overflow"), "w").close()
"""


def test_overflow_falls_back_to_a_full_rescan(launch: Launcher, tmp_path: Path) -> None:
    # A real IN_Q_OVERFLOW: the plugin is SIGSTOPped while more events than
    # fs.inotify.max_queued_events happen, so the kernel drops the rest, the
    # creation of "after-overflow" included. Only the overflow's rescan can
    # report it (the period is an hour).
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        reason = f"max_queued_events is {limit}: too many files to overflow it"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must provoke a real IN_Q_OVERFLOW")
        pytest.skip(reason)
    launched = start(launch, tmp_path)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == []
        touch(tmp_path / "before")
        wait_for(stream, devices("before"))  # the watch is in place
        _stopped(stream, launched, OVERFLOW, tmp_path)
        wait_for(stream, devices("after-overflow", "before"), timeout=60)
    [warning] = launched.wait_for_log(
        lambda e: e.module == SOURCE_LOGGER and "overflowed" in e.message
    )
    assert warning.level == "warn"
    assert "some changes were lost; reporting a full rescan" in warning.message
    assert source_warnings(launched) == [warning.message]


def test_unavailable_inotify_falls_back_to_polling(launch: Launcher, tmp_path: Path) -> None:
    touch(tmp_path / "a")
    launched = start(launch, tmp_path, "200ms", **{DISABLE_ENV: "inotify"})
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == devices("a")
        os.chmod(tmp_path / "a", 0o777)
        wait_for(stream, group(Device("a", False, BAD_PERMS)))  # by the poll
        touch(tmp_path / "b")
        wait_for(stream, group(Device("a", False, BAD_PERMS), Device("b")))
    [warning] = launched.wait_for_log(lambda e: e.module == SOURCE_LOGGER)
    assert warning.level == "warn"
    assert warning.message == (
        f"inotify disabled by {DISABLE_ENV}; change detection under {tmp_path}"
        " falls back to the poll period"
    )
    assert source_warnings(launched) == [warning.message]
