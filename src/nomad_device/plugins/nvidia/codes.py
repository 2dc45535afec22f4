"""NVML return codes: their names, and what each one means for a GPU's health.

An NVML query answers with one of three kinds of failure, and the plugin treats
them differently (``docs/plugins/nvidia.md#health`` has the table):

- **absent**: the GPU, its driver or this process does not have the feature
  (``NOT_SUPPORTED`` on a GeForce card's ECC counters, ``NO_PERMISSION`` for an
  unprivileged process on a MIG parent, ``FUNCTION_NOT_FOUND`` on an older
  driver, ``DEPRECATED`` on a newer one). The value is left out, for good.
- **fault**: NVML says the GPU itself is in trouble (``GPU_IS_LOST``: fallen
  off the bus; ``RESET_REQUIRED``). The GPU is unhealthy at once.
- **transient**: anything else (``UNKNOWN``, ``NOT_READY``, ``TIMEOUT`` ...).
  The value is left out this time; only an identity query that keeps failing
  makes the GPU unhealthy.

The names and meanings are nvml.h's ``nvmlReturn_t``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ABSENT",
    "DEPRECATED",
    "DRIVER_NOT_LOADED",
    "FAULTS",
    "FUNCTION_NOT_FOUND",
    "GPU_IS_LOST",
    "GPU_NOT_FOUND",
    "INSUFFICIENT_SIZE",
    "INVALID_ARGUMENT",
    "LIBRARY_NOT_FOUND",
    "LIB_RM_VERSION_MISMATCH",
    "NOT_FOUND",
    "NOT_SUPPORTED",
    "NO_PERMISSION",
    "RESET_REQUIRED",
    "SUCCESS",
    "TIMEOUT",
    "UNKNOWN",
    "Failure",
    "code_name",
]

SUCCESS: Final = 0
INVALID_ARGUMENT: Final = 2
NOT_SUPPORTED: Final = 3
NO_PERMISSION: Final = 4
NOT_FOUND: Final = 6
INSUFFICIENT_SIZE: Final = 7
DRIVER_NOT_LOADED: Final = 9
TIMEOUT: Final = 10
LIBRARY_NOT_FOUND: Final = 12
FUNCTION_NOT_FOUND: Final = 13
GPU_IS_LOST: Final = 15
RESET_REQUIRED: Final = 16
LIB_RM_VERSION_MISMATCH: Final = 18
DEPRECATED: Final = 26
GPU_NOT_FOUND: Final = 28
UNKNOWN: Final = 999

_NAMES: Final[Mapping[int, str]] = {
    0: "SUCCESS",
    1: "ERROR_UNINITIALIZED",
    2: "ERROR_INVALID_ARGUMENT",
    3: "ERROR_NOT_SUPPORTED",
    4: "ERROR_NO_PERMISSION",
    5: "ERROR_ALREADY_INITIALIZED",
    6: "ERROR_NOT_FOUND",
    7: "ERROR_INSUFFICIENT_SIZE",
    8: "ERROR_INSUFFICIENT_POWER",
    9: "ERROR_DRIVER_NOT_LOADED",
    10: "ERROR_TIMEOUT",
    11: "ERROR_IRQ_ISSUE",
    12: "ERROR_LIBRARY_NOT_FOUND",
    13: "ERROR_FUNCTION_NOT_FOUND",
    14: "ERROR_CORRUPTED_INFOROM",
    15: "ERROR_GPU_IS_LOST",
    16: "ERROR_RESET_REQUIRED",
    17: "ERROR_OPERATING_SYSTEM",
    18: "ERROR_LIB_RM_VERSION_MISMATCH",
    19: "ERROR_IN_USE",
    20: "ERROR_MEMORY",
    21: "ERROR_NO_DATA",
    22: "ERROR_VGPU_ECC_NOT_SUPPORTED",
    23: "ERROR_INSUFFICIENT_RESOURCES",
    24: "ERROR_FREQ_NOT_SUPPORTED",
    25: "ERROR_ARGUMENT_VERSION_MISMATCH",
    26: "ERROR_DEPRECATED",
    27: "ERROR_NOT_READY",
    28: "ERROR_GPU_NOT_FOUND",
    29: "ERROR_INVALID_STATE",
    30: "ERROR_RESET_TYPE_NOT_SUPPORTED",
    999: "ERROR_UNKNOWN",
}

#: The feature is not there: left out, and never a reason to distrust the GPU.
ABSENT: Final = frozenset({NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND, DEPRECATED})

#: NVML's own word that the GPU is unusable, with what an operator does about it.
FAULTS: Final[Mapping[int, tuple[str, str]]] = {
    GPU_IS_LOST: (
        "GPU is lost",
        "check the kernel log for XID 79, then reset the GPU or reboot the node",
    ),
    RESET_REQUIRED: (
        "GPU needs a reset",
        "reset it (nvidia-smi -r) once no task uses it",
    ),
}


def code_name(code: int | None) -> str:
    """``NVML_ERROR_GPU_IS_LOST (15)``; codes newer than this table keep their number."""
    if code is None:
        return "an error of the binding"
    return f"NVML_{_NAMES.get(code, 'ERROR')} ({code})"


@dataclass(frozen=True)
class Failure:
    """One NVML call that did not succeed: which call, its code, the binding's text."""

    call: str
    code: int | None
    text: str = ""

    @property
    def absent(self) -> bool:
        return self.code in ABSENT

    @property
    def fault(self) -> bool:
        return self.code in FAULTS

    def __str__(self) -> str:
        return f"{self.call} answered {code_name(self.code)}"

    def reason(self) -> str:
        """What Nomad shows for a fault: what is wrong, the call and code, what to do."""
        what, action = FAULTS.get(self.code or 0, ("NVML query failed", "check the kernel log"))
        return f"{what}: {self}; {action}"
