"""GPU health: what makes a GPU unhealthy, and when it recovers.

Only NVML's own fault signals count; a query that merely fails leaves a value
out (:mod:`.codes`). Two kinds of trouble, with two ways back:

- **Conditions**, seen by querying the GPU on every scan: a query answering
  a fault code (``GPU_IS_LOST``, ``RESET_REQUIRED``), identity queries that keep
  failing for :data:`PATIENCE` scans, retired pages or remapped rows waiting
  for a GPU reset, a row remapping that failed, a recovery action NVML asks
  for, a temperature at or above ``temperature_limit``. They last exactly as
  long as the queries say so.
- **Marks**, left by NVML events: a critical XID (other than the ignored
  application XIDs), a double-bit ECC error, a GPU-unavailable event, and a
  rise of the uncorrected ECC count between scans (what polling sees of an
  ECC error on a GPU whose ECC events cannot be watched). An event is a
  moment, not a state, so a mark lasts until no further event arrived for
  ``recovery_quiet_period`` *and* a fresh query of the GPU succeeds.

Every reason names its source (the NVML call and code, or the event) and
what to do. NVIDIA's Kubernetes plugin marks a GPU unhealthy for good (until
the plugin restarts); here the reason stays visible in ``nomad node status``
while it lasts, and the GPU returns to service on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from nomad_device.plugins.nvidia.codes import Failure
from nomad_device.plugins.nvidia.nvml import GpuReading

__all__ = [
    "MIN_SHOWN",
    "XID_MEANINGS",
    "HealthMarks",
    "Mark",
    "describe_xid",
    "verdict",
    "xid_reason",
]

#: What the XIDs the plugin is most likely to meet mean, and what an operator
#: does about them, from NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors:
#: its description and "Resolution Bucket"), in our own words. Others are
#: reported by number only.
XID_MEANINGS: Final[Mapping[int, tuple[str, str]]] = {
    13: ("graphics engine exception (usually an application fault)", "restart the application"),
    31: ("GPU memory page fault (usually an application fault)", "restart the application"),
    32: ("invalid or corrupted push buffer stream", "restart the application"),
    38: ("driver firmware error", "reset the GPU once drained"),
    43: ("GPU stopped processing (usually an application fault)", "restart the application"),
    45: ("preemptive cleanup after earlier errors", "look for the XID before it"),
    48: ("double-bit ECC error", "reset the GPU once drained"),
    56: ("display engine error", "reset the GPU once drained"),
    57: ("error programming video memory interface", "reset the GPU once drained"),
    58: ("unstable video memory interface detected", "reset the GPU once drained"),
    61: ("internal micro-controller breakpoint or warning", "reset the GPU once drained"),
    62: ("internal micro-controller halt", "reset the GPU once drained"),
    63: ("ECC page retirement or row remapping recorded", "reset the GPU once drained to apply it"),
    64: (
        "ECC page retirement or row remapping failed",
        "reset the GPU; have it serviced if it recurs",
    ),
    68: ("video processor exception (usually an application fault)", "restart the application"),
    69: ("graphics engine class error", "reset the GPU once drained"),
    74: ("NVLink error", "reset the GPU once drained; check the NVLink cabling if it recurs"),
    79: ("GPU has fallen off the bus", "reset the GPU or reboot the node"),
    92: ("high single-bit ECC error rate", "reset the GPU once drained"),
    94: ("contained ECC error", "the affected application was stopped; reset the GPU once drained"),
    95: ("uncontained ECC error", "reset the GPU"),
    109: ("context switch timeout (usually an application fault)", "restart the application"),
    119: ("GSP RPC timeout", "reset the GPU or reboot the node"),
    120: ("GSP error", "reset the GPU or reboot the node"),
}


def describe_xid(xid: int) -> str:
    """``XID 79: GPU has fallen off the bus``: the XID and its meaning."""
    known = XID_MEANINGS.get(xid)
    return f"XID {xid}: {known[0]}" if known else f"XID {xid} (see NVIDIA's XID catalogue)"


def xid_reason(xid: int) -> str:
    """What Nomad shows for an XID: its meaning, where it came from, what to do."""
    known = XID_MEANINGS.get(xid)
    action = known[1] if known else "look it up in NVIDIA's XID catalogue"
    return f"{describe_xid(xid)} (NVML XID event); {action}"


#: Scans in a row an identity query (or NVML itself) may fail before the GPU
#: is reported unhealthy: one failure is a hiccup, three (about ten seconds
#: with the 5 s re-check) a GPU that needs a look.
PATIENCE: Final = 3

#: nvmlDeviceGpuRecoveryAction_t (nvml.h): what the driver asks for.
RECOVERY_ACTIONS: Final[Mapping[int, str]] = {
    1: "reset the GPU",
    2: "reboot the node",
    3: "drain peer-to-peer traffic",
    4: "drain peer-to-peer traffic and reset the GPU",
    5: "recover the IMEX domain",
}


def conditions(gpu: GpuReading, temperature_limit: int) -> list[str]:
    """What this scan's queries say is wrong with a GPU, each with what to do."""
    found = [failure.reason() for failure in dict.fromkeys(gpu.faults)]
    if gpu.retired_pages_pending:
        found.append(
            "retired memory pages pending (nvmlDeviceGetRetiredPagesPendingStatus);"
            " reset the GPU once drained"
        )
    if gpu.remapped_rows_pending:
        found.append(
            "memory row remapping pending (nvmlDeviceGetRemappedRows); reset the GPU once drained"
        )
    if gpu.remapped_rows_failure:
        found.append(
            "memory row remapping failed (nvmlDeviceGetRemappedRows); the GPU needs service"
        )
    if gpu.recovery_action:
        action = RECOVERY_ACTIONS.get(gpu.recovery_action, "take a recovery action")
        found.append(
            f"NVML asks to {action} (nvmlDeviceGetFieldValues:"
            f" GPU_RECOVERY_ACTION = {gpu.recovery_action})"
        )
    if temperature_limit and gpu.temperature is not None and gpu.temperature >= temperature_limit:
        found.append(
            f"temperature {gpu.temperature} C at or above the limit of {temperature_limit} C"
            " (nvmlDeviceGetTemperature, temperature_limit); check the cooling"
        )
    return found


def persisting(failure: Failure, scans: int) -> str:
    """The reason for a query that kept failing."""
    return (
        f"{failure} in {scans} scans in a row; check the kernel log (dmesg) for XIDs,"
        " then reset the GPU"
    )


#: The least time an event mark stays, so that Nomad sees it even with a quiet
#: period of zero: the engine sends only the latest state to a slow stream, and
#: a Nomad client batches node updates for a second or more.
MIN_SHOWN: Final = 1.0


@dataclass(frozen=True)
class Mark:
    """An event that made a device unhealthy; ``at`` is ``time.monotonic()``.

    ``shown_at`` is when a scan first reported it: a mark clears only after
    Nomad has seen it for :data:`MIN_SHOWN`, even with a quiet period of zero.
    """

    reason: str
    at: float
    shown_at: float | None = None

    def clears_at(self, quiet_period: float) -> float:
        """The earliest time a scan may clear it (monotonic)."""
        shown = self.at if self.shown_at is None else self.shown_at
        return max(self.at + quiet_period, shown + MIN_SHOWN)


class HealthMarks:
    """Event marks per device ID, shared by the event watcher and detection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[str, Mark] = {}

    def mark(self, device_ids: Iterable[str], reason: str, now: float) -> None:
        """Record an event; a later event restarts the quiet period."""
        with self._lock:
            for device_id in device_ids:
                self._marks[device_id] = Mark(reason, now)

    def current(self, device_id: str) -> Mark | None:
        with self._lock:
            return self._marks.get(device_id)

    def settle(
        self, device_id: str, query_ok: bool, quiet_period: float, now: float
    ) -> Mark | None:
        """The mark still in force after this scan (cleared once quiet and queried fine)."""
        with self._lock:
            mark = self._marks.get(device_id)
            if mark is None:
                return None
            if mark.shown_at is None:
                mark = self._marks[device_id] = Mark(mark.reason, mark.at, shown_at=now)
            elif query_ok and now >= mark.clears_at(quiet_period):
                del self._marks[device_id]
                return None
            return mark

    def forget(self, keep: Iterable[str]) -> None:
        """Drop marks of devices that are gone."""
        wanted = set(keep)
        with self._lock:
            for device_id in [d for d in self._marks if d not in wanted]:
                del self._marks[device_id]

    def next_expiry(self, quiet_period: float) -> float | None:
        """When the earliest mark may clear (monotonic), or None without marks.

        It may lie in the past (a quiet period shorter than the time to the
        next scan): then the next scan is due at once, not after the period.
        """
        with self._lock:
            if not self._marks:
                return None
            return min(mark.clears_at(quiet_period) for mark in self._marks.values())


def verdict(conditions: Iterable[str], mark: Mark | None) -> tuple[bool, str]:
    """``(healthy, description)`` from a scan's conditions and the event mark."""
    reasons = list(dict.fromkeys(conditions))
    if mark is not None:
        reasons.insert(0, mark.reason)
    return (not reasons, "; ".join(reasons))
