"""SDK test plugin whose ``watch()`` listens to kernel uevents.

Each uevent for the configured device makes ``watch()`` record the event's
``SYNTH_UUID`` and call ``rescan()``; ``detect()`` reports one device per
recorded event, plus ``listening`` once the netlink socket is open, so that a
test knows when writing to ``/sys`` can be heard. The period is an hour: only
``watch()`` can make an event show up.
"""

from __future__ import annotations

from dataclasses import dataclass

from nomad_device import Device, DeviceGroup, DevicePlugin, serve
from nomad_device.sources import uevents


@dataclass
class Config:
    subsystem: str = "mem"
    devpath: str = "/devices/virtual/mem/null"


class UeventPlugin(DevicePlugin[Config]):
    name = "sdk-uevent"
    Config = Config
    fingerprint_period = 3600.0

    def __init__(self) -> None:
        super().__init__()
        self._listening = False
        self._seen: dict[str, None] = {}

    def detect(self) -> list[DeviceGroup]:
        ids = (["listening"] if self._listening else []) + list(self._seen)
        if not ids:
            return []
        return [DeviceGroup("sdk", "uevent", "seen", tuple(Device(i) for i in ids))]

    async def watch(self) -> None:
        async with uevents(subsystems=[self.config.subsystem]) as source:
            self._listening = source.available
            self.rescan()
            async for event in source:
                if event.devpath == self.config.devpath:
                    self._seen[event.properties.get("SYNTH_UUID", event.action)] = None
                    self.rescan()


if __name__ == "__main__":
    serve(UeventPlugin)
