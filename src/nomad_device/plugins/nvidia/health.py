"""GPU health: what makes a GPU unhealthy, and when it recovers.

Two kinds of trouble, with two ways back:

- **Conditions**, seen by querying the GPU on every scan: a query that fails
  (``GPU is lost`` after it fell off the bus), retired pages or remapped rows
  waiting for a GPU reset, a temperature at or above ``temperature_limit``.
  They last exactly as long as the query says so: the first fresh query that
  succeeds and finds the GPU fine makes it healthy again.
- **Marks**, left by NVML events: a critical XID (other than the ignored
  application XIDs) or a double-bit ECC error. An event is a moment, not a
  state, so a mark lasts until no further event arrived for
  ``recovery_quiet_period`` *and* a fresh query of the GPU succeeds.

NVIDIA's Kubernetes plugin marks a GPU unhealthy for good (until the plugin
restarts); here the reason stays visible in ``nomad node status`` while it
lasts, and the GPU returns to service on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["XID_MEANINGS", "HealthMarks", "Mark", "describe_xid", "verdict"]

#: What the XIDs the plugin is most likely to meet mean, from NVIDIA's XID
#: catalogue, in our own words. Others are reported by number only.
XID_MEANINGS: Final[Mapping[int, str]] = {
    13: "graphics engine exception (usually an application fault)",
    31: "GPU memory page fault (usually an application fault)",
    32: "invalid or corrupted push buffer stream",
    38: "driver firmware error",
    43: "GPU stopped processing (usually an application fault)",
    45: "preemptive cleanup after earlier errors",
    48: "double-bit ECC error",
    56: "display engine error",
    57: "error programming video memory interface",
    58: "unstable video memory interface detected",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    68: "video processor exception (usually an application fault)",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout (usually an application fault)",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def describe_xid(xid: int) -> str:
    """``XID 79: GPU has fallen off the bus``, the reason Nomad shows."""
    meaning = XID_MEANINGS.get(xid)
    return f"XID {xid}: {meaning}" if meaning else f"XID {xid} (see NVIDIA's XID catalogue)"


@dataclass(frozen=True)
class Mark:
    """An event that made a device unhealthy; ``at`` is ``time.monotonic()``.

    ``shown`` turns true once a scan has reported it: a mark clears only after
    Nomad has seen it, even with a quiet period of zero.
    """

    reason: str
    at: float
    shown: bool = False


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
            if not mark.shown:
                mark = self._marks[device_id] = Mark(mark.reason, mark.at, shown=True)
            elif query_ok and now - mark.at >= quiet_period:
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
        """When the earliest mark may clear (monotonic), or None without marks."""
        with self._lock:
            if not self._marks:
                return None
            return min(mark.at for mark in self._marks.values()) + quiet_period


def verdict(conditions: Iterable[str], mark: Mark | None) -> tuple[bool, str]:
    """``(healthy, description)`` from a scan's conditions and the event mark."""
    reasons = list(dict.fromkeys(conditions))
    if mark is not None:
        reasons.insert(0, mark.reason)
    return (not reasons, "; ".join(reasons))
