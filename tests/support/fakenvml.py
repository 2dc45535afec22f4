"""Scenarios for the fake NVML library (``fake_nvml.c``).

A scenario is a plain dict, the shape a JSON file would have::

    {
      "init": 0,                      # nvmlInit's return code (9: driver not loaded)
      "driver": "550.54.15",          # the library on disk (a process keeps the one it loaded)
      "kernel": "550.54.15",          # the loaded kernel module (default: the driver's)
      "root": 1,                      # 0: the plugin runs unprivileged
      "gpus": [gpu(0), gpu(1, mig_mode=1, mig=[mig(1, 1, 0, "1g.5gb", 4864)])],
      "errors": [{"call": "nvmlDeviceGetTemperature", "target": "gpu0", "code": 999}],
      "events": [{"seq": 1, "gpu": 0, "type": XID, "data": 48}],
    }

:class:`Scenario` writes it in the fake's line format, atomically (a new inode
every time, so the library notices each change). Property names are the
library's keys, listed in :func:`gpu`; a property left out makes its NVML call
answer ``NVML_ERROR_NOT_SUPPORTED``. The class facts (``arch``, ``ecc_capable``,
``ecc_mode``, ``mig_capable``, ``mig_mode``, ``integrated``) drive the rules
``fake_nvml.c`` applies on top, as real GPUs of that class answer;
``profiles.py`` has one scenario per class.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MiB = 1 << 20

# NVML event types (nvml.h).
SINGLE_BIT_ECC = 0x1
DOUBLE_BIT_ECC = 0x2
PSTATE = 0x4
XID = 0x8
MIG_CONFIG_CHANGE = 0x100
GPU_UNAVAILABLE = 0x4000
GPU_RECOVERY_ACTION = 0x8000
NO_INSTANCE = 0xFFFFFFFF

# NVML return codes (nvml.h).
SUCCESS = 0
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_DRIVER_NOT_LOADED = 9
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_DEPRECATED = 26
ERROR_NOT_READY = 27
ERROR_GPU_NOT_FOUND = 28
ERROR_UNKNOWN = 999

A100 = "NVIDIA A100-SXM4-40GB"


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-fa6e-4c1d-8e2b-5f0a9c3d7e{index:02x}"


def gpu(index: int, **overrides: Any) -> dict[str, Any]:
    """A GPU as NVML would describe an A100 at rest; ``overrides`` change any key."""
    props: dict[str, Any] = {
        # Class facts: an Ampere data-centre GPU with ECC on and MIG available.
        "arch": 80,
        "ecc_capable": 1,
        "ecc_mode": 1,
        "mig_capable": 1,
        # Readings.
        "uuid": gpu_uuid(index),
        "name": A100,
        "minor": index,
        "pci_bus_id": f"00000000:{0x07 + 0x10 * index:02x}:00.0",
        "pci_device_id": "0x20B010DE",
        "memory_total": 40960 * MiB,
        "memory_used": 1024 * MiB,
        "bar1_total": 65536 * MiB,
        "bar1_used": 4 * MiB,
        "pcie_gen": 4,
        "pcie_width": 16,
        "max_clock_graphics": 1410,
        "max_clock_sm": 1410,
        "max_clock_mem": 1215,
        "clock_graphics": 210,
        "clock_sm": 210,
        "clock_mem": 1215,
        "power_limit": 400000,  # mW
        "power_usage": 56789,  # mW
        "display_mode": 0,
        "persistence_mode": 1,
        "temperature": 31,
        "util_gpu": 17,
        "util_memory": 4,
        "util_encoder": 0,
        "util_decoder": 2,
        "ecc_corrected_l1": 0,
        "ecc_corrected_l2": 1,
        "ecc_corrected_dram": 3,
        "ecc_uncorrected_total": 0,
        "ecc_corrected_total": 4,
        "retired_pages_pending": 0,
        "remapped_rows_corrected": 0,
        "remapped_rows_uncorrected": 0,
        "remapped_rows_pending": 0,
        "remapped_rows_failure": 0,
    }
    props.update(overrides)
    return props


def mig_uuid(gpu_index: int, gi: int, ci: int) -> str:
    return f"MIG-{gpu_index:02x}{gi:02x}{ci:02x}00-7b1e-5c3a-9d4f-0e6a2b8c1d{gi:02x}"


def mig(
    gpu_index: int, gi: int, ci: int, profile: str, memory_mib: int, parent: str = A100
) -> dict[str, Any]:
    """A MIG device named as NVML names them: ``<GPU name> MIG <profile>``."""
    return {
        "uuid": mig_uuid(gpu_index, gi, ci),
        "name": f"{parent} MIG {profile}",
        "memory_total": memory_mib * MiB,
        "memory_used": 13 * MiB,
        "gi": gi,
        "ci": ci,
    }


def to_lines(scenario: Mapping[str, Any]) -> str:
    """The fake library's line format (see the comment atop ``fake_nvml.c``)."""
    lines = [f"init\t{scenario.get('init', SUCCESS)}"]
    lines.append(f"driver\t{scenario.get('driver', '550.54.15')}")
    if "kernel" in scenario:
        lines.append(f"kernel\t{scenario['kernel']}")
    lines.append(f"root\t{scenario.get('root', 1)}")
    if scenario.get("interrupts"):
        lines.append(f"interrupts\t{scenario['interrupts']}")
    gpus = scenario.get("gpus", [])
    lines.append(f"gpus\t{scenario.get('count', len(gpus))}")
    for g, props in enumerate(gpus):
        for key, value in props.items():
            if key == "mig":
                continue
            lines.append(f"dev\tgpu{g}\t{key}\t{_text(value)}")
        for slot, mig_props in enumerate(props.get("mig", [])):
            if mig_props is None:
                continue  # an empty slot
            for key, value in mig_props.items():
                lines.append(f"dev\tgpu{g}/mig{slot}\t{key}\t{_text(value)}")
    for error in scenario.get("errors", []):
        target = error.get("target", "*")
        lines.append(f"error\t{error['call']}\t{target}\t{error['code']}\t{error.get('times', 0)}")
    for event in scenario.get("events", []):
        gi, ci = event.get("gi", NO_INSTANCE), event.get("ci", NO_INSTANCE)
        fields = (event["seq"], event["gpu"], event["type"], event.get("data", 0), gi, ci)
        lines.append("event\t" + "\t".join(str(f) for f in fields))
    return "\n".join(lines) + "\n"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


class Scenario:
    """A scenario file the fake reads; change it while a plugin runs."""

    def __init__(self, directory: Path, lib_dir: Path, data: Mapping[str, Any]) -> None:
        self.path = directory / "scenario.nvml"
        self.json_path = directory / "scenario.json"
        self.lib_dir = lib_dir
        self.data: dict[str, Any] = copy.deepcopy(dict(data))
        self._seq = max((e["seq"] for e in self.data.get("events", [])), default=0)
        self.write()

    def env(self, **extra: str) -> dict[str, str]:
        """The environment a plugin subprocess needs to load the fake."""
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = str(self.lib_dir)
        env["FAKE_NVML_SCENARIO"] = str(self.path)
        env.update(extra)
        return env

    def write(self) -> None:
        # The JSON copy is for people reading a failed test's tmp dir.
        self.json_path.write_text(json.dumps(self.data, indent=2))
        staging = self.path.with_suffix(".tmp")
        staging.write_text(to_lines(self.data))
        os.replace(staging, self.path)

    def set(self, gpu_index: int, **props: Any) -> None:
        """Change properties of one GPU (None removes a property)."""
        target = self.data["gpus"][gpu_index]
        for key, value in props.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
        self.write()

    def set_migs(self, gpu_index: int, migs: Sequence[Mapping[str, Any] | None]) -> None:
        """Reconfigure one GPU's MIG devices (slot by slot; None leaves a slot empty)."""
        self.data["gpus"][gpu_index]["mig"] = [None if m is None else dict(m) for m in migs]
        self.write()

    def update(self, **top: Any) -> None:
        self.data.update(top)
        self.write()

    def fire(self, gpu_index: int, event_type: int, data: int = 0, **where: int) -> int:
        """Append an event (``gi``/``ci`` optional); its seq."""
        self._seq += 1
        event = {"seq": self._seq, "gpu": gpu_index, "type": event_type, "data": data, **where}
        self.data.setdefault("events", []).append(event)
        self.write()
        return self._seq
