"""Helpers shared by the nvidia plugin's tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from nomad_device.model import Device, DeviceGroup
from nomad_device.plugins.nvidia.config import CONFIG_SPEC
from nomad_device.testing import config_from_json

from .fakenvml import Scenario

PLUGIN = [sys.executable, "-m", "nomad_device.plugins.nvidia"]

#: Settings that keep the tests quick: detection every 200 ms instead of 1 m.
FAST: Mapping[str, Any] = {"fingerprint_period": "200ms"}

Scenarios = Callable[..., Scenario]


def encode(settings: Mapping[str, Any]) -> bytes:
    """What Nomad sends to SetConfig for a ``config { ... }`` body."""
    return config_from_json(CONFIG_SPEC, dict(settings))


def devices(groups: list[DeviceGroup]) -> dict[str, Device]:
    return {device.id: device for group in groups for device in group.devices}


def until(
    stream: Any, predicate: Callable[[list[DeviceGroup]], bool], timeout: float = 20
) -> list[DeviceGroup]:
    """Read fingerprint messages until one satisfies ``predicate``; that message."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "no fingerprint message matched in time"
        groups = list(stream.next(timeout=left))
        if predicate(groups):
            return groups
