"""A plugin that rains 10,000 ``rescan()`` calls on its engine, on command.

Reserve ``["!storm"]`` starts the storm: 4,000 calls from the plugin's plain
``def watch()`` thread, 4,000 from four more threads and 2,000 from the event
loop, then one final ``rescan()`` after a change. It answers with the number
of ``detect()`` calls before the storm, the storm's length and the generation
the final change produced; every fingerprint carries the running count of
``detect()`` calls as the ``detects`` attribute, and a device named after the
generation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

from nomad_device import Attribute, Device, DeviceGroup, DevicePlugin, Reservation, serve

WATCH_CALLS = 4000
THREADS, THREAD_CALLS = 4, 1000
LOOP_CALLS = 2000


class StormPlugin(DevicePlugin[None]):
    name = "storm-test"
    fingerprint_period = 3600.0  # only rescan() explains a new fingerprint

    def __init__(self) -> None:
        super().__init__()
        self.detects = 0
        self.generation = 0
        self._storm = threading.Event()
        self._watch_done = threading.Event()

    def detect(self) -> list[DeviceGroup]:
        self.detects += 1  # detect() never runs concurrently with itself
        device = Device(f"gen{self.generation}")
        return [
            DeviceGroup("test", "storm", "gen", (device,), {"detects": Attribute(self.detects)})
        ]

    def watch(self) -> None:  # type: ignore[override]
        while True:
            self._storm.wait()
            self._storm.clear()
            for _ in range(WATCH_CALLS):
                self.rescan()
            self._watch_done.set()

    def _hammer(self) -> None:
        for _ in range(THREAD_CALLS):
            self.rescan()

    async def reserve(self, device_ids: Sequence[str]) -> Reservation:  # type: ignore[override]
        if list(device_ids) != ["!storm"]:
            return Reservation()
        before = self.detects
        start = time.monotonic()
        self._watch_done.clear()
        self._storm.set()
        threads = [threading.Thread(target=self._hammer) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for i in range(LOOP_CALLS):
            self.rescan()
            if i % 50 == 0:
                await asyncio.sleep(0)  # let the engine run in between
        while not self._watch_done.is_set() or any(t.is_alive() for t in threads):
            await asyncio.sleep(0.005)
        self.generation += 1
        self.rescan()
        seconds = time.monotonic() - start
        return Reservation(
            envs={
                "before": str(before),
                "seconds": repr(seconds),
                "generation": str(self.generation),
                "settle": repr(self.rescan_settle),
            }
        )


if __name__ == "__main__":
    serve(StormPlugin)
