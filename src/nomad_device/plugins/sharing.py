"""Offering one physical device as several schedulable instances.

Nomad allocates whole instances, so a device that several tasks may use at
once (a KVM node, a GPU time-sliced between jobs) is reported ``share`` times.
Every ready-made plugin spells the instance IDs the same way, so an operator
who learns the form once reads it everywhere:

- ``share = 1``: the instance ID is the device's own ID (``GPU-1c3b...``), so
  a plugin that does not share stays a drop-in for one that never could;
- ``share = N > 1``: ``<id>::0`` ... ``<id>::N-1``. ``::`` is NVIDIA's
  Kubernetes time-slicing form; it cannot appear in a ``/dev`` path or a GPU
  UUID, so an instance ID never collides with another device's.

The IDs depend only on the device's ID and ``share``, so they are stable across
plugin restarts. Every instance carries its device's health.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

__all__ = ["MAX_SHARE", "SEPARATOR", "instance_ids", "physical_ids", "split_instance"]

SEPARATOR: Final = "::"
#: The most instances one device may be offered as: each is a device Nomad
#: stores and schedules, and a share of a billion would run the plugin (and
#: the Nomad servers) out of memory.
MAX_SHARE: Final = 10_000


def instance_ids(device_id: str, share: int) -> tuple[str, ...]:
    """The instance IDs Nomad sees for one physical device."""
    if share < 1:
        raise ValueError(f"share must be at least 1, got {share}")
    if share == 1:
        return (device_id,)
    return tuple(f"{device_id}{SEPARATOR}{slot}" for slot in range(share))


def split_instance(instance_id: str) -> tuple[str, int | None]:
    """``("GPU-1", 3)`` for ``"GPU-1::3"``; ``(instance_id, None)`` when not shared."""
    base, sep, slot = instance_id.rpartition(SEPARATOR)
    if sep and base and slot.isdigit() and slot == str(int(slot)):
        return base, int(slot)
    return instance_id, None


def physical_ids(instance_ids: Iterable[str]) -> list[str]:
    """The devices behind some instances, each once, in first-seen order.

    Reserving two slots of one GPU must name that GPU once (in an environment
    variable, in the device cgroup rules).
    """
    seen: dict[str, None] = {}
    for instance_id in instance_ids:
        seen.setdefault(split_instance(instance_id)[0], None)
    return list(seen)
