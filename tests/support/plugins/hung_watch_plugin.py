"""A plugin that watches a directory the documented way, for a filesystem that hangs.

``watch()`` is the tutorial's: ``async with inotify(dir)``, a rescan once
the watch is in place, one per batch. Everything else stays off the watched
filesystem: ``dev-0`` is always there, with fixed stats, and ``watching``
appears once the watch is in place. So when ``dir`` hangs, only the watcher
can be stuck, and Reserve and Stats must still answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nomad_device import (
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DevicePlugin,
    DeviceStats,
    Reservation,
    StatValue,
    serve,
)
from nomad_device.sources import inotify


@dataclass
class Config:
    dir: str = "."


class HungWatchPlugin(DevicePlugin[Config]):
    name = "sdk-hung-watch"
    Config = Config
    fingerprint_period = 3600.0
    watching = False

    def detect(self) -> list[DeviceGroup]:
        ids = ["dev-0", "watching"] if self.watching else ["dev-0"]
        return [DeviceGroup("sdk", "hung", "watch", tuple(Device(i) for i in ids))]

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        return Reservation(envs={"RESERVED": ",".join(device_ids)})

    def stats(self) -> list[DeviceGroupStats]:
        value = StatValue(int_numerator=1, unit="ops")
        return [DeviceGroupStats("sdk", "hung", "watch", {"dev-0": DeviceStats(summary=value)})]

    async def watch(self) -> None:
        async with inotify(self.config.dir) as source:
            self.watching = source.available
            self.rescan()
            async for _batch in source:
                self.rescan()


if __name__ == "__main__":
    serve(HungWatchPlugin)
