"""A test plugin for the SDK's own facilities: timed rescans, worker pools, timers, clean-up.

Run as ``python api_plugin.py MODE``. Devices are one per ``detect()`` call
(``scan-<n>``), so every scan is a new Fingerprint message. Reserve is the
remote control; each command answers with counters in the envs:

- ``!rescan <seconds>...``: one ``rescan(delay)`` per number;
- ``!pool <n>``: ``n`` concurrent ``run_blocking`` calls on the ``probe`` pool
  (sized 2 in ``worker_pools``), each 0.2 s; answers the most that ran at once
  and the threads' names;
- ``!later <seconds> <marker>``: ``call_later`` that writes ``marker``;
- ``!child``: starts ``sleep 600`` in its own process group and registers its
  killing with ``on_close``; answers its pid;
- ``!flip``: the group's ``flag`` attribute turns from ``Attribute(1)`` into
  ``Attribute(True)``: equal in Python, different on the wire;
- ``!counts``: just the counters.

``API_PLUGIN_LOG`` names a file every ``close()``/``on_close`` step is appended to.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from nomad_device import Attribute, Device, DeviceGroup, DevicePlugin, Reservation, serve


def _note(text: str) -> None:
    path = os.environ.get("API_PLUGIN_LOG")
    if path:
        with open(path, "a") as out:
            out.write(text + "\n")


class ApiPlugin(DevicePlugin[None]):
    name = "api-test"
    fingerprint_period = 3600.0
    rescan_settle = 0.0
    worker_pools: ClassVar[Mapping[str, int]] = {"probe": 2}

    def __init__(self) -> None:
        super().__init__()
        self.scans = 0
        self.flag: Attribute = Attribute(1)
        self._gauge = threading.Lock()
        self._inside = 0
        self._most = 0
        self._threads: set[str] = set()

    def detect(self) -> list[DeviceGroup]:
        self.scans += 1
        device = Device(f"scan-{self.scans}")
        return [DeviceGroup("test", "api", "scan", (device,), {"flag": self.flag})]

    def _blocking(self) -> None:
        with self._gauge:
            self._inside += 1
            self._most = max(self._most, self._inside)
            self._threads.add(threading.current_thread().name)
        time.sleep(0.2)
        with self._gauge:
            self._inside -= 1

    async def reserve(self, device_ids: Sequence[str]) -> Reservation:  # type: ignore[override]
        command, *args = (device_ids[0] if device_ids else "").split()
        envs = {}
        if command == "!rescan":
            for delay in args:
                self.rescan(float(delay))
        elif command == "!pool":
            await asyncio.gather(
                *(self.run_blocking(self._blocking, pool="probe") for _ in range(int(args[0])))
            )
            envs["most"] = str(self._most)
            envs["threads"] = ",".join(sorted(self._threads))
        elif command == "!later":
            marker = Path(args[1])

            def fire() -> None:
                # Written aside and renamed: the test sees the marker whole or not at all.
                aside = marker.with_name(marker.name + ".new")
                aside.write_text("fired")
                aside.replace(marker)

            self.call_later(float(args[0]), fire)
        elif command == "!child":
            child = subprocess.Popen(["sleep", "600"], start_new_session=True)
            self.on_close(lambda: os.killpg(child.pid, signal.SIGKILL))
            envs["pid"] = str(child.pid)
        elif command == "!flip":
            self.flag = Attribute(True)
            self.rescan()
        envs["scans"] = str(self.scans)
        return Reservation(envs=envs)

    def close(self) -> None:
        _note("close")


class Ordered(ApiPlugin):
    """Clean-up order: on_close callbacks after close(), newest first, async ones too."""

    def __init__(self) -> None:
        super().__init__()
        self.on_close(lambda: _note("first registered"))

        async def second() -> None:
            await asyncio.sleep(0)
            _note("second registered")

        self.on_close(second)


class HungClose(ApiPlugin):
    """close() never returns; the on_close clean-up must still run."""

    def close(self) -> None:
        _note("close started")
        threading.Event().wait()


class Steady(ApiPlugin):
    """The same device every scan: only the attribute's wire type can change."""

    def detect(self) -> list[DeviceGroup]:
        self.scans += 1
        return [DeviceGroup("test", "api", "steady", (Device("d0"),), {"flag": self.flag})]


class LateWatch(ApiPlugin):
    """A blocking watch() that fails once $API_PLUGIN_TRIGGER exists."""

    def watch(self) -> None:  # type: ignore[override]
        trigger = Path(os.environ["API_PLUGIN_TRIGGER"])
        while not trigger.exists():
            time.sleep(0.02)
        raise RuntimeError("the bus went away")


class Asks(ApiPlugin):
    """detect() asks for the next scan itself, as a plugin with a quiet period ending does."""

    def detect(self) -> list[DeviceGroup]:
        groups = super().detect()
        if self.scans < 3:
            self.rescan(0.05)
        return groups


MODES: dict[str, type[ApiPlugin]] = {
    "plain": ApiPlugin,
    "ordered": Ordered,
    "hungclose": HungClose,
    "asks": Asks,
    "steady": Steady,
    "latewatch": LateWatch,
}

if __name__ == "__main__":
    serve(MODES[sys.argv[1]])
