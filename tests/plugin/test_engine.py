"""The engine's guarantees over the real wire, against real plugin subprocesses.

Each test runs ``tests/support/plugins/engine_plugin.py`` (or ``storm_plugin.py``) in
the mode it needs; the plugin's Reserve call doubles as a remote control and
reports its counters (``["!counts"]``).
"""

from __future__ import annotations

import math
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from support import PLUGINS, TESTS
from support.processes import Launched, Launcher, OwnTime

from nomad_device.config import config_spec
from nomad_device.goplugin.client import KILL_GRACE
from nomad_device.host import CallError
from nomad_device.wire import cty, hclspec

ENGINE_PLUGIN = PLUGINS / "engine_plugin.py"
STORM_PLUGIN = PLUGINS / "storm_plugin.py"


def _config(directory: Path) -> bytes:
    sys.path.insert(0, str(ENGINE_PLUGIN.parent))
    try:
        from engine_plugin import Config
    finally:
        sys.path.pop(0)
    return cty.marshal({"dir": str(directory)}, hclspec.implied_type(config_spec(Config)))


def _engine(launch: Launcher, mode: str, directory: Path, **options: object) -> Launched:
    plugin = launch([sys.executable, str(ENGINE_PLUGIN), mode], **options)
    plugin.client.set_config(_config(directory))
    return plugin


def _counts(plugin: Launched) -> dict[str, int]:
    envs = plugin.client.reserve(["!counts"]).envs
    return {k: int(v) for k, v in envs.items()}


def _ids(groups: list[object]) -> list[str]:
    return [d.id for g in groups for d in g.devices]  # type: ignore[attr-defined]


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    directory = tmp_path / "devices"
    directory.mkdir()
    for name in ("a", "b"):
        (directory / name).write_text("")
    return directory


# -- never re-entered ------------------------------------------------------------


def test_detect_never_runs_concurrently_across_stream_restarts(
    launch: Launcher, devices: Path
) -> None:
    """Closing the last stream while a sync detect() runs, then reopening, waits for it."""
    plugin = _engine(launch, "blocking", devices)
    for _ in range(8):
        with plugin.client.fingerprint() as stream:
            assert _ids(stream.next(10)) == ["a", "b"]
    counts = _counts(plugin)
    assert counts["detect_calls"] >= 2
    assert counts["detect_most"] == 1, counts


def test_stats_never_run_concurrently_across_streams(launch: Launcher, devices: Path) -> None:
    plugin = _engine(launch, "blocking", devices)
    streams = [plugin.client.stats(0.05) for _ in range(3)]
    try:
        for _ in range(2):
            for stream in streams:
                assert sorted(stream.next(10)[0].instance_stats) == ["a", "b"]
    finally:
        for stream in streams:
            stream.cancel()
    counts = _counts(plugin)
    assert counts["stats_calls"] >= 6
    assert counts["stats_most"] == 1, counts


def test_hung_reserves_do_not_starve_detect(launch: Launcher, devices: Path) -> None:
    """More hung reserve() calls than asyncio's default executor has threads."""
    plugin = _engine(launch, "hung", devices)
    with plugin.client.fingerprint() as stream:
        assert _ids(stream.next(10)) == ["a", "b"]

        def hang(_: int) -> grpc.StatusCode:
            with pytest.raises(CallError) as info:
                plugin.client.reserve(["!hang"], timeout=1.0)
            return info.value.code

        with ThreadPoolExecutor(40) as pool:
            codes = set(pool.map(hang, range(40)))
        assert codes == {grpc.StatusCode.DEADLINE_EXCEEDED}
        (devices / "c").write_text("")
        assert _ids(stream.next(10)) == ["a", "b", "c"]
    assert plugin.client.health() == "SERVING"


def test_slow_call_is_warned_once_with_elapsed_time(launch: Launcher, devices: Path) -> None:
    plugin = _engine(launch, "slow", devices)
    assert plugin.client.reserve(["!slow"]).envs == {"DEVICES": "!slow"}
    returned = plugin.wait_for_log(lambda e: e.message.startswith("reserve() returned after"))
    assert returned and returned[0].level == "warn"
    assert returned[0].fields["elapsed_s"] >= 0.9
    running = [e for e in plugin.logs if e.message.startswith("reserve() has been running")]
    assert len(running) == 1 and running[0].level == "warn"
    assert running[0].fields["elapsed_s"] >= 0.3
    assert plugin.logs.index(running[0]) < plugin.logs.index(returned[0])  # while it ran
    # A quick call says nothing.
    plugin.client.reserve(["a"])
    plugin.client.reserve(["!slow"])
    plugin.wait_for_log(lambda e: e.message.startswith("reserve() returned after"), count=2)
    assert len([e for e in plugin.logs if "has been running" in e.message]) == 2


def test_slow_detect_is_warned_once_with_elapsed_time(launch: Launcher, devices: Path) -> None:
    plugin = _engine(launch, "slow", devices)
    with plugin.client.fingerprint() as stream:
        stream.next(10)
        plugin.client.reserve(["!slowdetect"])
        returned = plugin.wait_for_log(lambda e: e.message.startswith("detect() returned after"))
    assert returned and returned[0].level == "warn"
    assert returned[0].fields["elapsed_s"] >= 0.9
    running = [e for e in plugin.logs if e.message.startswith("detect() has been running")]
    assert len(running) == 1 and running[0].level == "warn"


# -- a detect() that keeps failing --------------------------------------------------------


def test_failing_detect_turns_devices_unhealthy_after_the_grace_period(
    launch: Launcher, devices: Path
) -> None:
    plugin = _engine(launch, "grace", devices)
    with plugin.client.fingerprint() as stream:
        (group,) = stream.next(10)
        assert [(d.id, d.healthy) for d in group.devices] == [("a", True), ("b", True)]
        plugin.client.reserve(["!break"])
        # Within the grace period (1 s) nothing changes; then every device is unhealthy.
        (group,) = stream.next(15)
        assert [(d.id, d.healthy) for d in group.devices] == [("a", False), ("b", False)]
        assert {d.health_description for d in group.devices} == {
            "detect() failing: the bus is gone"
        }
        warned = plugin.wait_for_log(lambda e: "reporting 2 device(s) unhealthy" in e.message)
        assert warned and warned[0].level == "warn"
        plugin.client.reserve(["!fix"])
        (group,) = stream.next(15)
        assert [(d.id, d.healthy, d.health_description) for d in group.devices] == [
            ("a", True, ""),
            ("b", True, ""),
        ]
    recovered = plugin.wait_for_log(lambda e: e.message.startswith("detect() recovered"))
    assert recovered and recovered[0].level == "info"


# -- watch() may be a plain def ---------------------------------------------------------


def test_sync_watch_runs_in_its_own_thread(launch: Launcher, devices: Path) -> None:
    """A blocking ``def watch`` must not freeze the plugin, and its rescan() works."""
    plugin = _engine(launch, "syncwatch", devices)
    with plugin.client.fingerprint() as stream:
        assert _ids(stream.next(10)) == ["a", "b"]
        assert plugin.client.health() == "SERVING"
        (devices / "c").write_text("")
        assert _ids(stream.next(10)) == ["a", "b", "c"]  # the period is an hour
    result = plugin.client.kill()
    assert result.outcome == "graceful", result


def test_sync_watch_is_never_started_twice(launch: Launcher, devices: Path) -> None:
    plugin = _engine(launch, "syncwatch", devices)
    for _ in range(5):
        with plugin.client.fingerprint() as stream:
            stream.next(10)
    with plugin.client.fingerprint() as stream:
        stream.next(10)
        (devices / "d").write_text("")
        assert _ids(stream.next(10)) == ["a", "b", "d"]
    counts = _counts(plugin)
    assert (counts["watch_calls"], counts["watch_most"]) == (1, 1), counts


def test_watch_that_returns_ends_quietly(launch: Launcher, devices: Path) -> None:
    plugin = _engine(launch, "watchreturns", devices)
    with plugin.client.fingerprint() as stream:
        stream.next(10)
        ended = plugin.wait_for_log(lambda e: e.message.startswith("watch() returned"))
        assert ended and ended[0].level == "debug"
    assert _counts(plugin)["watch_calls"] == 1
    assert [e.message for e in plugin.logs if e.level == "error"] == []


def test_watch_that_raises_is_logged_and_restarted_from_its_thread(
    launch: Launcher, devices: Path
) -> None:
    plugin = _engine(launch, "watchraises", devices)
    with plugin.client.fingerprint() as stream:
        stream.next(10)
        failures = plugin.wait_for_log(
            lambda e: e.message.startswith("watch() failed"), count=2, timeout=15
        )
    assert len(failures) >= 2
    for entry in failures:
        assert entry.level == "error"
        assert "watch failed in thread watch" in str(entry.fields["traceback"])
    assert _counts(plugin)["watch_calls"] >= 2


def test_a_storm_of_rescans_costs_few_detects(launch: Launcher) -> None:
    """10,000 rescan() calls from threads and the loop: one detect() per settle window."""
    plugin = launch([sys.executable, str(STORM_PLUGIN)])
    with plugin.client.fingerprint() as stream:
        first = stream.next(10)
        assert _ids(first) == ["gen0"]
        report = plugin.client.reserve(["!storm"]).envs
        target = f"gen{report['generation']}"
        while True:
            groups = stream.next(30)
            if _ids(groups) == [target]:
                break
    detects = int(groups[0].attributes["detects"].value) - int(report["before"])
    seconds, settle = float(report["seconds"]), float(report["settle"])
    # Each wake-up is followed by a settle delay before detect() runs, so the
    # storm can cause at most one detect() per settle window, plus one in
    # flight and one for the final change.
    bound = seconds / settle + 3
    print(f"storm: 10,000 rescans over {seconds * 1000:.0f} ms -> {detects} detect() calls")
    assert 1 <= detects <= bound, (detects, seconds)
    assert detects < 1000


# -- the close() hook -----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["close", "asyncclose"])
def test_close_hook_runs_on_shutdown(
    mode: str, launch: Launcher, devices: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "closed"
    plugin = _engine(launch, mode, devices, env={**os.environ, "ENGINE_CLOSE_MARKER": str(marker)})
    result = plugin.client.kill()
    assert result.outcome == "graceful", result
    assert marker.read_text() == ("closed with ['a', 'b']" if mode == "close" else "closed async")


def test_close_hook_runs_on_sigterm(launch: Launcher, devices: Path, tmp_path: Path) -> None:
    marker = tmp_path / "closed"
    plugin = _engine(
        launch, "close", devices, env={**os.environ, "ENGINE_CLOSE_MARKER": str(marker)}
    )
    process = plugin.client.process.process
    assert process is not None
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(10) == 0
    assert marker.read_text() == "closed with ['a', 'b']"


def test_hung_close_is_time_boxed_within_the_hosts_grace(
    launch: Launcher, devices: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "closed"
    plugin = _engine(
        launch, "hungclose", devices, env={**os.environ, "ENGINE_CLOSE_MARKER": str(marker)}
    )
    # Within the host's 2 s grace in the plugin's own time (the time box is 1 s); on the
    # wall clock of a busy machine that margin is not the plugin's to keep.
    with OwnTime(plugin.client.process.pid) as own:
        result = plugin.client.process.kill(grace=30)
    assert result.outcome == "graceful", result
    assert own.seconds < KILL_GRACE, (result, own.seconds)  # not SIGKILLed after 2 s
    assert result.returncode == 0
    assert marker.read_text() == "close started"
    warned = plugin.wait_for_log(lambda e: e.message.startswith("close() did not return"))
    assert warned and warned[0].level == "warn"


def test_close_hook_runs_once_in_the_in_process_harness() -> None:
    from nomad_device.testing import InProcessHarness

    sys.path.insert(0, str(ENGINE_PLUGIN.parent))
    try:
        from engine_plugin import EnginePlugin
    finally:
        sys.path.pop(0)

    closed: list[str] = []

    class Recorded(EnginePlugin):
        def close(self) -> None:
            closed.append("closed")

    with InProcessHarness(Recorded()) as h:
        h.set_config({"dir": str(TESTS)})
    h.close()
    assert closed == ["closed"]


# -- author mistakes in the engine's own inputs (in-process) ---------------------------


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no __str__ for you")


def test_unprintable_detect_errors_still_turn_devices_unhealthy() -> None:
    from nomad_device import Device, DeviceGroup, DevicePlugin
    from nomad_device.testing import InProcessHarness

    class Flaky(DevicePlugin[None]):
        name = "flaky"
        fingerprint_period = 0.05
        detect_grace_period = 0.2
        calls = 0

        def detect(self) -> list[DeviceGroup]:
            self.calls += 1
            if self.calls > 1:
                raise _Unprintable()
            return [DeviceGroup("t", "t", "t", (Device("d0"),))]

    with InProcessHarness(Flaky()) as h, h.fingerprint() as stream:
        assert stream.next(10)[0].devices[0].healthy
        (group,) = stream.next(10)
        assert group.devices[0].healthy is False
        assert group.devices[0].health_description == (
            "detect() failing: <_Unprintable that cannot be printed>"
        )


def test_garbage_tunables_are_logged_once_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from nomad_device import Device, DeviceGroup, DevicePlugin
    from nomad_device.testing import InProcessHarness

    class Sloppy(DevicePlugin[None]):
        name = "sloppy"
        fingerprint_period = 0.05
        rescan_settle = "fast"  # type: ignore[assignment]
        slow_call_seconds = None  # type: ignore[assignment]
        calls = 0

        def detect(self) -> list[DeviceGroup]:
            self.calls += 1
            return [DeviceGroup("t", "t", "t", (Device(f"d{self.calls // 3}"),))]

    caplog.set_level(logging.ERROR)
    with InProcessHarness(Sloppy()) as h, h.fingerprint() as stream:
        for _ in range(3):
            stream.next(10)
            h.plugin.rescan()
    complaints = [r.getMessage() for r in caplog.records if "non-negative number" in r.getMessage()]
    assert sorted(complaints) == [
        "rescan_settle = 'fast' is not a non-negative number; using 0.02",
        "slow_call_seconds = None is not a non-negative number; using 10",
    ]


def test_a_period_asked_for_by_detect_itself_applies_to_the_next_wait() -> None:
    """Plugins whose config sets the period ask for each next scan from inside detect()."""
    from nomad_device import Device, DeviceGroup, DevicePlugin
    from nomad_device.testing import InProcessHarness

    class Scheduling(DevicePlugin[None]):
        name = "scheduling"
        fingerprint_period = math.inf
        calls = 0

        def detect(self) -> list[DeviceGroup]:
            self.calls += 1
            self.rescan(0.05, key="period")  # "look again then"
            return [DeviceGroup("t", "t", "t", (Device(f"d{self.calls}"),))]

    with InProcessHarness(Scheduling()) as h, h.fingerprint() as stream:
        ids = [stream.next(10)[0].devices[0].id for _ in range(3)]
    assert ids == ["d1", "d2", "d3"]
