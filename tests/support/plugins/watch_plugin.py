"""SDK test plugin driven by an event source, plus a raw-stream variant.

``watch``: files in ``dir`` are devices; the period is an hour, so only
``watch()`` calling ``rescan()`` can make changes show up quickly.
``raw``: overrides ``fingerprint_stream`` with an iterator that yields two
states and then ends; the SDK must keep the stream open regardless.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from nomad_device import Device, DeviceGroup, DevicePlugin, serve


@dataclass
class Config:
    dir: str = "."


class WatchPlugin(DevicePlugin[Config]):
    name = "sdk-watch"
    Config = Config
    fingerprint_period = 3600.0

    def detect(self) -> list[DeviceGroup]:
        names = sorted(os.listdir(self.config.dir))
        return [DeviceGroup("sdk", "watch", "files", tuple(Device(n) for n in names))]

    async def watch(self) -> None:
        seen = os.stat(self.config.dir).st_mtime_ns
        while True:
            await asyncio.sleep(0.05)
            now = os.stat(self.config.dir).st_mtime_ns
            if now != seen:
                seen = now
                self.rescan()


class RawPlugin(DevicePlugin[Config]):
    name = "sdk-raw"
    Config = Config

    async def fingerprint_stream(self) -> AsyncIterator[Sequence[DeviceGroup]]:  # type: ignore[override]
        for count in (1, 2):
            yield [DeviceGroup("sdk", "raw", "r", tuple(Device(f"r{i}") for i in range(count)))]
            await asyncio.sleep(0.05)


if __name__ == "__main__":
    serve(RawPlugin if sys.argv[1:] == ["raw"] else WatchPlugin)
