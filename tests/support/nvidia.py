"""Helpers shared by the nvidia plugin's tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from nomad_device.config import config_spec
from nomad_device.model import Device, DeviceGroup
from nomad_device.plugins.nvidia.config import NvidiaConfig
from nomad_device.testing import config_from_json
from support.fakenvml import Scenario

PLUGIN = [sys.executable, "-m", "nomad_device.plugins.nvidia"]

#: Settings that keep the tests quick: detection every 200 ms instead of 1 m.
FAST: Mapping[str, Any] = {"fingerprint_period": "200ms"}

Scenarios = Callable[..., Scenario]


def encode(settings: Mapping[str, Any]) -> bytes:
    """What Nomad sends to SetConfig for a ``config { ... }`` body."""
    return config_from_json(config_spec(NvidiaConfig), dict(settings))


def devices(groups: list[DeviceGroup]) -> dict[str, Device]:
    return {device.id: device for group in groups for device in group.devices}


def healthy(device_id: str) -> Callable[[list[DeviceGroup]], bool]:
    return lambda groups: device_id in devices(groups) and devices(groups)[device_id].healthy


def unhealthy(device_id: str) -> Callable[[list[DeviceGroup]], bool]:
    return lambda groups: device_id in devices(groups) and not devices(groups)[device_id].healthy


def watching(plugin: Any) -> None:
    """Wait until the plugin watches NVML events (events before that are not for it)."""
    found = plugin.wait_for_log(lambda e: e.message.startswith("watching NVML events"), 30)
    assert found, plugin.messages()


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


#: The MIG capability minors ``fake_tree`` lists: GPU 1's instances 1 and 2.
MIG_MINORS = {
    "gpu1/gi1/access": 12,
    "gpu1/gi1/ci0/access": 13,
    "gpu1/gi2/access": 21,
    "gpu1/gi2/ci0/access": 22,
}


def fake_tree(
    root: Path,
    uvm_tools: bool = False,
    caps: Iterable[int] = (12, 13, 21, 22),
    minors: Mapping[str, int] = MIG_MINORS,
    caps_major: int | None = None,
) -> tuple[Path, Path]:
    """A stand-in /dev and /proc: plain files named like the driver's nodes.

    No real device nodes for the GPUs (the tests create no NVIDIA hardware);
    the plugin only names these paths, it never opens them. ``caps`` are the
    capability nodes that exist; ``caps_major`` puts ``nvidia-caps`` in
    ``/proc/devices`` (and the capability files under ``/proc/driver/nvidia``),
    so that the plugin can create the missing ones.
    """
    dev, proc = root / "dev", root / "proc"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    for minor in caps:
        (dev / "nvidia-caps" / f"nvidia-cap{minor}").touch()
    if uvm_tools:
        (dev / "nvidia-uvm-tools").touch()
    listing = proc / "driver" / "nvidia-caps"
    listing.mkdir(parents=True)
    (listing / "mig-minors").write_text(
        "config 1\nmonitor 2\n" + "".join(f"{cap} {n}\n" for cap, n in minors.items())
    )
    if caps_major is not None:
        (proc / "devices").write_text(
            "Character devices:\n  1 mem\n195 nvidia\n"
            f"{caps_major} nvidia-caps\n\nBlock devices:\n  8 sd\n"
        )
        for capability, minor in minors.items():
            path = (
                proc
                / "driver"
                / "nvidia"
                / "capabilities"
                / capability.replace("/gi", "/mig/gi", 1)
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    return dev, proc
