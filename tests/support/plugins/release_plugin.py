"""A plugin that follows releases, for the SDK's release tests.

Its devices are ``acme/gpu/x1`` with the configured IDs. ``released()``
appends one JSON line to ``journal`` per call (the IDs and what
``cleaning()`` said), then: waits while the file ``hold`` exists, fails with
the content of ``fail`` while that file exists. Reserve answers the IDs it
got, and what ``held_by()`` says, in the environment.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

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
from nomad_device.plugin.nomadapi import NomadConfig


@dataclass
class Config:
    ids: list[str] = field(default_factory=list)
    journal: str = ""
    hold: str = ""
    fail: str = ""
    nomad: NomadConfig | None = None


class Releasing(DevicePlugin[Config]):
    name = "release-test"
    Config = Config
    fingerprint_period = 3600.0

    def detect(self) -> list[DeviceGroup]:
        devices = tuple(Device(i) for i in self.config.ids)
        return [DeviceGroup("acme", "gpu", "x1", devices)]

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        held = self.held_by()
        return Reservation(
            envs={"IDS": ",".join(device_ids), "HELD": json.dumps(dict(sorted(held.items())))}
        )

    def stats(self) -> list[DeviceGroupStats]:
        return [
            DeviceGroupStats(
                "acme",
                "gpu",
                "x1",
                {
                    i: DeviceStats(summary=StatValue(int_numerator=40, unit="C"))
                    for i in self.config.ids[:1]
                },
            )
        ]

    def released(self, device_ids: Sequence[str]) -> None:
        config = self.config
        line = {"ids": list(device_ids), "cleaning": dict(self.cleaning()), "pid": os.getpid()}
        with open(config.journal, "a") as f:
            f.write(json.dumps(line) + "\n")
        while config.hold and os.path.exists(config.hold):
            time.sleep(0.02)
        if config.fail and os.path.exists(config.fail):
            with open(config.fail) as f:
                raise RuntimeError(f.read().strip())


if __name__ == "__main__":
    serve(Releasing)
