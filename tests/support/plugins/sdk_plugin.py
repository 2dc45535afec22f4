"""An SDK test plugin whose misbehaviour is chosen by config.

Run as ``python sdk_plugin.py [sync|async]``; the Reserve call doubles as a
remote control for log/crash scenarios (device IDs starting with ``!``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from nomad_device import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DevicePlugin,
    DeviceStats,
    InvalidArgument,
    Mount,
    Reservation,
    StatValue,
    serve,
)


@dataclass
class Config:
    devices: int = 2
    period_ms: int = 100
    flaky: bool = False
    invalid_group: bool = False
    stats_fail: bool = False


def _control(device_ids: Sequence[str]) -> bool:
    """Remote-controlled behaviour for log tests; True when handled."""
    cmd = device_ids[0] if device_ids else ""
    if cmd == "!raise":
        raise RuntimeError("deliberate failure in reserve")
    if cmd == "!thread":
        threading.Thread(target=lambda: 1 / 0, name="doomed").start()
        return True
    if cmd == "!print":
        print("printed to stdout")
        print("printed to stderr", file=sys.stderr)
        os.write(2, b"raw bytes on fd 2\n")
        warnings.warn("a deliberate warning", UserWarning, stacklevel=1)
        logging.getLogger("author").info("author log", extra={"answer": 42})
        return True
    return False


class SyncPlugin(DevicePlugin[Config]):
    name = "sdk-test"
    version = "1.2.3"
    Config = Config

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def configure(self, config: Config) -> None:
        if config.devices < 0:
            raise InvalidArgument("devices: must not be negative")
        self.fingerprint_period = config.period_ms / 1000

    def _groups(self) -> list[DeviceGroup]:
        self.calls += 1
        if self.config.flaky and self.calls % 2 == 0:
            raise OSError(f"flaky detect, call {self.calls}")
        groups = [
            DeviceGroup(
                "sdk",
                "test",
                "widget",
                tuple(Device(f"dev{i}") for i in range(self.config.devices)),
                {"memory": Attribute(2, "GiB"), "model": Attribute("w1")},
            )
        ]
        if self.config.invalid_group:
            # No vendor, and a unit Nomad does not know.
            groups.append(
                DeviceGroup("", "test", "broken", (Device("x"),), {"current": Attribute(5, "A")})
            )
        return groups

    def _reserve(self, device_ids: Sequence[str]) -> Reservation:
        if _control(device_ids):
            return Reservation()
        if not device_ids:
            raise InvalidArgument("no device ids given")
        known = {f"dev{i}" for i in range(self.config.devices)}
        unknown = [i for i in device_ids if i not in known]
        if unknown:
            raise InvalidArgument(f"unknown devices {unknown}")
        return Reservation(
            envs={"SDK_DEVICES": ",".join(device_ids)},
            mounts=tuple(Mount(f"/dev/sdk/{i}", f"/tmp/sdk/{i}") for i in device_ids),
        )

    def _stats(self) -> list[DeviceGroupStats]:
        if self.config.stats_fail:
            raise OSError("stats source unavailable")
        return [
            DeviceGroupStats(
                "sdk",
                "test",
                "widget",
                {
                    f"dev{i}": DeviceStats(summary=StatValue(int_numerator=i, unit="ops"))
                    for i in range(self.config.devices)
                },
            )
        ]

    def detect(self) -> list[DeviceGroup]:
        return self._groups()

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        return self._reserve(device_ids)

    def stats(self) -> list[DeviceGroupStats]:
        return self._stats()


class AsyncPlugin(SyncPlugin):
    name = "sdk-test-async"

    async def detect(self) -> list[DeviceGroup]:  # type: ignore[override]
        await asyncio.sleep(0)
        return self._groups()

    async def reserve(self, device_ids: Sequence[str]) -> Reservation:  # type: ignore[override]
        await asyncio.sleep(0.01)
        return self._reserve(device_ids)

    async def stats(self) -> list[DeviceGroupStats]:  # type: ignore[override]
        return self._stats()


if __name__ == "__main__":
    serve(AsyncPlugin if sys.argv[1:] == ["async"] else SyncPlugin)
