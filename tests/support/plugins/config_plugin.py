"""An SDK test plugin with a config that uses every field kind.

Reserve echoes the decoded config back as JSON in the env, so tests can see
exactly what the plugin decoded from the bytes they sent.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from nomad_device import Device, DeviceGroup, DevicePlugin, Reservation, serve


@dataclass
class Rule:
    name: str
    weight: float = 1.0


@dataclass
class Limits:
    max_devices: int
    ratio: float = 0.5


@dataclass
class Config:
    label: str = "default"
    count: int = 3
    ratio: float = 1.5
    enabled: bool = True
    period: timedelta = timedelta(seconds=5)
    tags: list[str] = field(default_factory=list)
    extra: dict[str, int] = field(default_factory=dict)
    limits: Limits | None = None
    rules: list[Rule] = field(default_factory=list)


def _plain(value: object) -> object:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class ConfigPlugin(DevicePlugin[Config]):
    name = "sdk-config"
    Config = Config

    def detect(self) -> list[DeviceGroup]:
        devices = tuple(Device(f"d{i}") for i in range(self.config.count))
        return [DeviceGroup("sdk", "config", self.config.label, devices)]

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        return Reservation(envs={"CONFIG": json.dumps(_plain(self.config), sort_keys=True)})


if __name__ == "__main__":
    serve(ConfigPlugin)
