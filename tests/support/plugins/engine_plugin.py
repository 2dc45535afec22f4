"""A test plugin for the engine's guarantees, one behaviour per mode.

Run as ``python engine_plugin.py MODE``. Reserve doubles as a remote control:
``["!counts"]`` answers with counters in the envs, other ``!`` commands switch
behaviour (see each mode). Devices are the files in config ``dir``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nomad_device import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DevicePlugin,
    DeviceStats,
    Reservation,
    StatValue,
    serve,
)


@dataclass
class Config:
    dir: str = "."


class _Gauge:
    """How many callers are inside at once, and the most there ever were."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.calls = 0

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


class EnginePlugin(DevicePlugin[Config]):
    name = "engine-test"
    Config = Config
    fingerprint_period = 0.05

    def __init__(self) -> None:
        super().__init__()
        self.detects = _Gauge()
        self.stat_calls = _Gauge()
        self.watchers = _Gauge()
        self.broken = False

    def _files(self) -> list[str]:
        return sorted(os.listdir(self.config.dir))

    def _groups(self) -> list[DeviceGroup]:
        if self.broken:
            raise OSError("the bus is gone")
        return [DeviceGroup("test", "engine", "file", tuple(Device(n) for n in self._files()))]

    def _stats(self) -> list[DeviceGroupStats]:
        one = DeviceStats(summary=StatValue(int_numerator=1))
        return [DeviceGroupStats("test", "engine", "file", {n: one for n in self._files()})]

    def detect(self) -> list[DeviceGroup]:
        with self.detects:
            return self._groups()

    def stats(self) -> list[DeviceGroupStats]:
        with self.stat_calls:
            return self._stats()

    def control(self, command: str) -> Reservation | None:
        """Shared remote control; None when ``command`` is not one."""
        if command == "!counts":
            gauges = {"detect": self.detects, "stats": self.stat_calls, "watch": self.watchers}
            envs = {f"{k}_most": str(g.most) for k, g in gauges.items()}
            envs.update({f"{k}_calls": str(g.calls) for k, g in gauges.items()})
            envs.update({f"{k}_now": str(g.now) for k, g in gauges.items()})
            return Reservation(envs=envs)
        if command == "!break":
            self.broken = True
            return Reservation()
        if command == "!fix":
            self.broken = False
            return Reservation()
        return None

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        return self.control(device_ids[0] if device_ids else "") or Reservation(
            envs={"DEVICES": ",".join(device_ids)}
        )


class Blocking(EnginePlugin):
    """detect() and stats() take a while: streams close and reopen while they run."""

    fingerprint_period = 0.01

    def detect(self) -> list[DeviceGroup]:
        with self.detects:
            time.sleep(0.2)
            return self._groups()

    def stats(self) -> list[DeviceGroupStats]:
        with self.stat_calls:
            time.sleep(0.2)
            return self._stats()


class Grace(EnginePlugin):
    """``!break`` makes detect() raise until ``!fix``; devices turn unhealthy after 1 s."""

    detect_grace_period = 1.0


class Hung(EnginePlugin):
    """``!hang`` never returns: a reserve() stuck forever in its thread."""

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        if device_ids and device_ids[0] == "!hang":
            threading.Event().wait()
        return super().reserve(device_ids)


class Slow(EnginePlugin):
    """``!slow`` takes a second: well past ``slow_call_seconds``; so does the
    next ``detect()`` after ``!slowdetect``."""

    slow_call_seconds = 0.3
    slow_detect = False

    def detect(self) -> list[DeviceGroup]:
        if self.slow_detect:
            self.slow_detect = False
            time.sleep(1.0)
        return super().detect()

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        if device_ids and device_ids[0] == "!slow":
            time.sleep(1.0)
        if device_ids and device_ids[0] == "!slowdetect":
            self.slow_detect = True
        return super().reserve(device_ids)


class Closing(EnginePlugin):
    """close() writes what it still knows to $ENGINE_CLOSE_MARKER."""

    def close(self) -> None:
        Path(os.environ["ENGINE_CLOSE_MARKER"]).write_text(f"closed with {self._files()}")


class AsyncClosing(EnginePlugin):
    async def close(self) -> None:  # type: ignore[override]
        await asyncio.sleep(0.01)
        Path(os.environ["ENGINE_CLOSE_MARKER"]).write_text("closed async")


class HungClose(EnginePlugin):
    """close() never returns; the plugin must still exit within the host's grace."""

    def close(self) -> None:
        Path(os.environ["ENGINE_CLOSE_MARKER"]).write_text("close started")
        threading.Event().wait()


class SyncWatch(EnginePlugin):
    """A blocking, plain-def watch(): polls the directory's mtime in its own thread."""

    fingerprint_period = 3600.0

    def watch(self) -> None:  # type: ignore[override]
        with self.watchers:
            seen = os.stat(self.config.dir).st_mtime_ns
            while True:
                time.sleep(0.02)
                now = os.stat(self.config.dir).st_mtime_ns
                if now != seen:
                    seen = now
                    self.rescan()


class WatchReturns(EnginePlugin):
    """A plain-def watch() that finds nothing to watch and returns."""

    def watch(self) -> None:  # type: ignore[override]
        with self.watchers:
            return


class WatchRaises(EnginePlugin):
    def watch(self) -> None:  # type: ignore[override]
        with self.watchers:
            time.sleep(0.05)
            raise RuntimeError(f"watch failed in thread {threading.current_thread().name}")


class BadValues(EnginePlugin):
    """Beside one good group and stats group, values the wire cannot carry."""

    def detect(self) -> list[DeviceGroup]:
        with self.detects:
            good = self._groups()
            one = (Device("x"),)
            return [
                *good,
                DeviceGroup("test", "bad", "huge", one, {"memory": Attribute(2**64, "MiB")}),
                DeviceGroup("test", "bad", "nan", one, {"ratio": Attribute(float("nan"))}),
                DeviceGroup("test", "bad", "surrogate", (Device("\udcff"),)),
                DeviceGroup("test", "bad", "key", one, {7: Attribute(1)}),  # type: ignore[dict-item]
            ]

    def stats(self) -> list[DeviceGroupStats]:
        with self.stat_calls:
            bad = {
                "huge": DeviceStats(summary=StatValue(int_numerator=2**63)),
                "inf": DeviceStats(summary=StatValue(float_numerator=float("inf"))),
                "when": DeviceStats(timestamp="yesterday"),  # type: ignore[arg-type]
                "kind": DeviceStats(summary=StatValue(string_value=b"bytes")),  # type: ignore[arg-type]
            }
            return [
                *self._stats(),
                *(DeviceGroupStats("test", "bad", name, {"x": s}) for name, s in bad.items()),
            ]


MODES: dict[str, type[EnginePlugin]] = {
    "badvalues": BadValues,
    "plain": EnginePlugin,
    "blocking": Blocking,
    "grace": Grace,
    "hung": Hung,
    "slow": Slow,
    "close": Closing,
    "asyncclose": AsyncClosing,
    "hungclose": HungClose,
    "syncwatch": SyncWatch,
    "watchreturns": WatchReturns,
    "watchraises": WatchRaises,
}

if __name__ == "__main__":
    serve(MODES[sys.argv[1]])
