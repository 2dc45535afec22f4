"""A device plugin whose devices supply terminal escape sequences, as a USB device can.

A USB product string is whatever the device's firmware says: ``ESC ] 2;...``
retitles the operator's terminal, ``ESC [2J`` clears it, ``ESC [31m`` and the
8-bit CSI (U+009B) colour it, U+202E turns the rest of the line around. The
same text is the product attribute, a health description, a statistic, a
reservation's environment, and a log line with a field; a serial number of the
kind is in a device ID; with
``HOSTILE_VERSION=1`` in its environment, the plugin's version too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from nomad_device import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DevicePlugin,
    DeviceStats,
    Reservation,
    StatObject,
    StatValue,
    serve,
)

HOSTILE = "Stick\x1b]2;pwned\x07\x1b[2J\x1b[31m\x9b1m\u202eevil\tend"
#: A serial number of the same kind, in a device ID.
HOSTILE_ID = "stick1\x1b[2J\u202e"

log = logging.getLogger("hostile")


class HostileStrings(DevicePlugin[None]):
    name = "hostile-strings"
    version = "0.1.0"
    fingerprint_period = 3600.0

    def detect(self) -> list[DeviceGroup]:
        log.info(f"found {HOSTILE}", extra={"product": HOSTILE})
        return [
            DeviceGroup(
                "acme",
                "usb",
                "stick",
                (
                    Device("stick0", healthy=False, health_description=HOSTILE),
                    Device(HOSTILE_ID),
                ),
                {"product": Attribute(HOSTILE)},
            )
        ]

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        return Reservation(envs={"ACME_PRODUCT": HOSTILE})

    def stats(self) -> list[DeviceGroupStats]:
        value = StatValue(string_value=HOSTILE)
        return [
            DeviceGroupStats(
                "acme",
                "usb",
                "stick",
                {"stick0": DeviceStats(summary=value, stats=StatObject({"product": value}))},
            )
        ]


if __name__ == "__main__":
    if os.environ.get("HOSTILE_VERSION") == "1":
        HostileStrings.version = HOSTILE
    serve(HostileStrings)
