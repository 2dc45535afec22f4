"""The plugin API's facilities: timed rescans, worker pools, timers, clean-up, back-off.

Behaviour a host can see runs ``tests/support/plugins/api_plugin.py`` as a real
subprocess over the real wire (its Reserve call is the remote control); the
pure parts (:class:`Backoff`, the deadline queue, :class:`Wakeup`) are unit
tests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from support import PLUGINS
from support.processes import Launched, Launcher, OwnTime

from nomad_device import Backoff, Device, DeviceGroup, DevicePlugin, Wakeup
from nomad_device.goplugin.client import KILL_GRACE
from nomad_device.plugin.engine import DEADLINE_TOLERANCE, MAX_DEADLINES, Deadlines
from nomad_device.plugin.runtime import runtime_of

API_PLUGIN = PLUGINS / "api_plugin.py"


def _api(launch: Launcher, mode: str, **options: object) -> Launched:
    plugin = launch([sys.executable, str(API_PLUGIN), mode], **options)
    plugin.client.set_config(b"")
    return plugin


def _command(plugin: Launched, *words: object) -> dict[str, str]:
    return dict(plugin.client.reserve([" ".join(str(w) for w in words)]).envs)


def _ids(groups: list[DeviceGroup]) -> list[str]:
    return [d.id for g in groups for d in g.devices]


def _gone(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return True
    return fields[0] in ("Z", "X")  # a zombie waits for pid 1; it no longer runs


# -- rescan(delay) -----------------------------------------------------------------


def test_a_timed_rescan_comes_at_its_time_not_before(launch: Launcher) -> None:
    plugin = _api(launch, "plain")
    with plugin.client.fingerprint() as stream:
        assert _ids(stream.next(10)) == ["scan-1"]
        asked = time.monotonic()
        _command(plugin, "!rescan", 0.5)
        assert _ids(stream.next(10)) == ["scan-2"]
        assert time.monotonic() - asked >= 0.5 - DEADLINE_TOLERANCE


def test_several_timed_rescans_each_come_then_only_the_period(launch: Launcher) -> None:
    plugin = _api(launch, "plain")
    with plugin.client.fingerprint() as stream:
        stream.next(10)
        _command(plugin, "!rescan", 0.9, 0.3, 0.6)
        assert [_ids(stream.next(10)) for _ in range(3)] == [["scan-2"], ["scan-3"], ["scan-4"]]
        with pytest.raises(TimeoutError):
            stream.next(1.0)  # nothing is left waiting; the period is an hour


def test_a_timed_rescan_survives_the_stream_closing(launch: Launcher) -> None:
    plugin = _api(launch, "plain")
    with plugin.client.fingerprint() as stream:
        stream.next(10)
        _command(plugin, "!rescan", 1.0)
    with plugin.client.fingerprint() as stream:
        assert _ids(stream.next(10)) == ["scan-1"]  # the current state, at once
        assert _ids(stream.next(10)) == ["scan-2"]  # detection restarting with the stream
        assert _ids(stream.next(10)) == ["scan-3"]  # the one asked for before


def test_detect_asks_for_its_next_scan_without_touching_the_period(launch: Launcher) -> None:
    plugin = _api(launch, "asks")
    with plugin.client.fingerprint() as stream:
        assert [_ids(stream.next(10)) for _ in range(3)] == [["scan-1"], ["scan-2"], ["scan-3"]]
        with pytest.raises(TimeoutError):
            stream.next(0.5)


# -- engine: what is published --------------------------------------------------------


def test_an_attribute_whose_wire_type_changes_is_published(launch: Launcher) -> None:
    """``Attribute(1) == Attribute(True)`` in Python once; Nomad keeps the integer."""
    plugin = _api(launch, "steady")
    with plugin.client.fingerprint() as stream:
        (group,) = stream.next(10)
        assert type(group.attributes["flag"].value) is int
        _command(plugin, "!flip")
        (group,) = stream.next(10)
        assert group.attributes["flag"].value is True


def test_a_sync_watch_failing_while_no_stream_is_open_is_logged(
    launch: Launcher, tmp_path: Path
) -> None:
    trigger = tmp_path / "trigger"
    plugin = _api(launch, "latewatch", env={**os.environ, "API_PLUGIN_TRIGGER": str(trigger)})
    with plugin.client.fingerprint() as stream:
        stream.next(10)
    trigger.touch()
    logged = plugin.wait_for_log(lambda e: "no Fingerprint stream was open" in e.message)
    assert logged, plugin.messages()
    assert logged[0].level == "error" and "the bus went away" in logged[0].message


def test_a_watch_that_ran_long_enough_restarts_after_the_first_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The restart back-off resets after a run that lasted (here 0.2 s instead of 60 s)."""
    from nomad_device.plugin import engine
    from nomad_device.testing import InProcessHarness

    monkeypatch.setattr(engine, "WATCH_RESET_AFTER", 0.2)

    class Flaky(DevicePlugin[None]):
        name = "flaky-watch"
        fingerprint_period = 3600.0
        runs = 0

        def detect(self) -> list[DeviceGroup]:
            return [DeviceGroup("t", "t", "t", (Device("d"),))]

        async def watch(self) -> None:
            self.runs += 1
            await asyncio.sleep(0.3)
            raise RuntimeError(f"run {self.runs} failed")

    # A handler of its own: whatever other tests did to propagation, these records arrive.
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append  # type: ignore[method-assign]
    engine_log = logging.getLogger("nomad_device.engine")
    engine_log.addHandler(handler)
    plugin = Flaky()
    try:
        with InProcessHarness(plugin) as h, h.fingerprint() as stream:
            stream.next(10)
            deadline = time.monotonic() + 30
            while plugin.runs < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        engine_log.removeHandler(handler)
    restarts = [r.getMessage() for r in records if "restarting it in" in r.getMessage()]
    delays = [m.split("restarting it in ")[1].split("s:")[0] for m in restarts]
    assert delays[:3] == ["1", "1", "1"], restarts


# -- run_blocking, call_later, on_close --------------------------------------------------


def test_run_blocking_uses_the_plugins_own_bounded_pool(launch: Launcher) -> None:
    plugin = _api(launch, "plain")
    envs = _command(plugin, "!pool", 6)
    assert envs["most"] == "2"  # worker_pools = {"probe": 2}
    assert envs["threads"].split(",") == ["author-pool-probe-1", "author-pool-probe-2"]


def test_call_later_runs_its_function(launch: Launcher, tmp_path: Path) -> None:
    plugin = _api(launch, "plain")
    marker = tmp_path / "fired"
    _command(plugin, "!later", 0.1, marker)
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.read_text() == "fired"


def test_pending_timers_are_cancelled_when_the_plugin_closes(tmp_path: Path) -> None:
    from nomad_device.testing import InProcessHarness

    fired = threading.Event()

    class Timed(DevicePlugin[None]):
        name = "timed"

        def detect(self) -> list[DeviceGroup]:
            return []

    plugin = Timed()
    with InProcessHarness(plugin):
        handle = plugin.call_later(0.3, fired.set)
        assert runtime_of(plugin).lifetime.pending() == 1
    assert handle.cancelled and runtime_of(plugin).lifetime.pending() == 0
    assert not fired.wait(0.6)
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(plugin.run_blocking(time.sleep, 0, pool="late"))


@pytest.mark.parametrize("mode", ["plain", "hungclose"])
def test_on_close_stops_what_the_plugin_started(mode: str, launch: Launcher) -> None:
    """A child process outlives os._exit unless the plugin's clean-up stops it,
    even when close() itself hangs past its time box."""
    plugin = _api(launch, mode)
    pid = int(_command(plugin, "!child")["pid"])
    assert not _gone(pid)
    # Within the host's 2 s grace in the plugin's own time, close()'s 1 s time box included.
    with OwnTime(plugin.client.process.pid) as own:
        result = plugin.client.process.kill(grace=30)
    assert result.outcome == "graceful", result
    assert own.seconds < KILL_GRACE, (result, own.seconds)
    assert _gone(pid)


def test_clean_up_runs_after_close_newest_first(launch: Launcher, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    plugin = _api(launch, "ordered", env={**os.environ, "API_PLUGIN_LOG": str(notes)})
    assert plugin.client.kill().outcome == "graceful"
    assert notes.read_text().splitlines() == ["close", "second registered", "first registered"]


def test_serve_moves_the_plugin_to_the_root_directory(launch: Launcher, tmp_path: Path) -> None:
    plugin = _api(launch, "plain", cwd=str(tmp_path))
    assert os.readlink(f"/proc/{plugin.client.process.pid}/cwd") == "/"


# -- the pure parts ------------------------------------------------------------------------


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    backoff = Backoff(start=1, cap=8)
    assert [backoff.failed() for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    assert backoff.failures == 6
    assert backoff.failed(ran_for=8) == 1  # a run as long as the cap starts over
    backoff.succeeded()
    assert backoff.failed() == 1
    assert Backoff(cap=10, reset_after=2).failed(ran_for=3) == 1
    for bad in ({"start": 0}, {"cap": float("nan")}, {"start": 5, "cap": 1}):
        with pytest.raises(ValueError):
            Backoff(**bad)  # type: ignore[arg-type]
    assert Backoff(start=1, cap=60).failed() == 1
    huge = Backoff(start=1, cap=60)
    huge.failures = 10_000
    assert huge.failed() == 60  # no float overflow


def test_a_keyed_deadline_replaces_the_one_waiting_under_its_key() -> None:
    deadlines = Deadlines()
    assert deadlines.add(10.0, key="period") is True
    assert deadlines.add(12.0, key="period") is True  # replaced: the earliest is 12 now
    assert len(deadlines) == 1 and deadlines.earliest() == 12.0
    assert deadlines.add(11.0) is True and deadlines.add(20.0, key="retry") is False
    assert deadlines.add(float("inf"), key="period") is False  # withdrawn
    assert len(deadlines) == 2 and deadlines.earliest() == 11.0
    deadlines.drop_due(30.0)
    assert len(deadlines) == 0


def test_deadlines_keep_distinct_times_in_order() -> None:
    deadlines = Deadlines()
    assert deadlines.add(10.0) is True
    assert deadlines.add(12.0) is False  # not the earliest
    assert deadlines.add(10.0 + DEADLINE_TOLERANCE / 2) is False  # the same moment
    assert deadlines.add(5.0) is True
    assert len(deadlines) == 3 and deadlines.earliest() == 5.0
    deadlines.drop_due(10.0)
    assert len(deadlines) == 1 and deadlines.earliest() == 12.0
    deadlines.drop_due(100.0)
    assert deadlines.earliest() == float("inf")


def test_deadlines_are_bounded_and_keep_the_earliest() -> None:
    deadlines = Deadlines()
    for i in range(MAX_DEADLINES):
        deadlines.add(100.0 + i)
    deadlines.add(1_000_000.0)  # later than all: dropped
    deadlines.add(50.0)  # earlier: kept, the latest goes
    assert len(deadlines) == MAX_DEADLINES
    assert deadlines.earliest() == 50.0


def test_wakeup_set_from_another_thread_wakes_the_waiter() -> None:
    wakeup = Wakeup()

    async def main() -> float:
        loop_started = time.monotonic()
        threading.Timer(0.05, wakeup.set).start()
        await asyncio.wait_for(wakeup.wait(), 10)
        return time.monotonic() - loop_started

    assert asyncio.run(main()) >= 0.05
    assert wakeup.is_set()
    asyncio.run(asyncio.wait_for(wakeup.wait(), 1))  # stays set
    wakeup.clear()
    assert not wakeup.is_set()

    async def timed_out() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(wakeup.wait(), 0.05)

    asyncio.run(timed_out())
    wakeup.set()  # before anyone waits: kept
    asyncio.run(asyncio.wait_for(wakeup.wait(), 1))


# -- where the base-plugin hooks run ------------------------------------------------------

HOOKS_PLUGIN = PLUGINS / "hooks_plugin.py"


@pytest.mark.parametrize(
    ("waiting", "other"),
    [("plugin_info", "schema"), ("config_schema", "info"), ("decode_config", "info")],
)
def test_base_plugin_hooks_run_off_the_event_loop(
    launch: Launcher, waiting: str, other: str
) -> None:
    plugin = launch([sys.executable, str(HOOKS_PLUGIN), waiting])
    client = plugin.client
    calls = {
        "plugin_info": lambda: client.info(timeout=40),
        "config_schema": lambda: client.schema(timeout=40),
        "decode_config": lambda: client.set_config(b"", timeout=40),
    }
    failures: list[BaseException] = []

    def blocked() -> None:
        try:
            calls[waiting]()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    plugin.wait_for_log(lambda e: e.message == f"{waiting}() waits", timeout=20)
    # Served while the first hook waits, so it opens the gate: both answer.
    getattr(client, other)(timeout=15)
    thread.join(40)
    assert not thread.is_alive() and failures == []


# -- the author's namespace is the author's ---------------------------------------------

SHADOW_PLUGIN = PLUGINS / "shadow_plugin.py"
#: What the plugin's own value reads as in reserve() (the first call it answers there).
_AUTHORS = {
    "_calls": "calls=",
    "_engine": "engine-0",
    "_lifetime": "lease=3600",
    "_closed": "closed=False",
}


@pytest.mark.parametrize("attribute", list(_AUTHORS))
def test_an_author_attribute_named_like_the_sdks_state_works(
    launch: Launcher, tmp_path: Path, attribute: str
) -> None:
    notes = tmp_path / "notes"
    env = {**os.environ, "SHADOW_PLUGIN_LOG": str(notes)}
    plugin = launch([sys.executable, str(SHADOW_PLUGIN), attribute], env=env)
    plugin.client.set_config(b"")
    with plugin.client.fingerprint() as stream:
        assert _ids(stream.next(10)) == ["dev-0"]
    assert plugin.client.reserve(["dev-0"]).envs["MINE"].startswith(_AUTHORS[attribute])
    with plugin.client.stats(interval=0.1) as stats:
        (group,) = stats.next(10)
        assert list(group.instance_stats) == ["dev-0"]
    assert plugin.client.kill().outcome == "graceful"
    lines = notes.read_text().splitlines()
    assert lines[0].startswith("close ") and lines[1:] == ["on_close"]
    assert not [e for e in plugin.logs if e.level == "error"], plugin.messages()
