"""Statistics per GPU or MIG instance, named as the Go plugin names them.

The eleven statistics of ``nomad-device-nvidia`` keep their names (dashboards
and alerts built on them keep working); ``ECC uncorrected errors``, ``SM
clock`` and ``Memory clock`` are new. Units are nvidia-smi's: ``%``, ``C``,
``MiB``, ``W`` and ``MHz``, and ``#`` for counts. Power is in watts: the Go
plugin sends milliwatts labelled ``W``. A value NVML cannot give for this
device (most of them on a MIG instance, ECC counts on a GeForce card) is left
out: Nomad shows the statistics a device has. (The Go plugin sends ``N/A`` only
for fields its driver layer left unset; a query that NVML refuses makes it
report 0, or fails the whole Stats response.) The summary is the memory in use
out of the total, as in Go.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from nomad_device.model import DeviceGroupStats, DeviceStats, StatObject, StatValue
from nomad_device.plugins.nvidia.nvml import StatsReading

__all__ = ["STAT_NAMES", "device_stats", "group_stats"]

# (name, unit, description), in the order Nomad's UI lists them.
_SPECS: Final = (
    ("GPU utilization", "%", "Share of the last sample period with a kernel running"),
    (
        "Memory utilization",
        "%",
        "Share of the last sample period with memory being read or written",
    ),
    ("Encoder utilization", "%", "Share of the last sample period with the video encoder busy"),
    ("Decoder utilization", "%", "Share of the last sample period with the video decoder busy"),
    ("Memory state", "MiB", "Memory used / total"),
    ("BAR1 buffer state", "MiB", "BAR1 memory used / total"),
    ("Temperature", "C", "GPU core temperature"),
    ("Power usage", "W", "Power drawn by the board / its power limit"),
    ("ECC L1 errors", "#", "Corrected ECC errors in L1 cache since the driver loaded"),
    ("ECC L2 errors", "#", "Corrected ECC errors in L2 cache since the driver loaded"),
    ("ECC memory errors", "#", "Corrected ECC errors in device memory since the driver loaded"),
    ("ECC uncorrected errors", "#", "Uncorrected ECC errors since the driver loaded"),
    ("SM clock", "MHz", "Current streaming multiprocessor clock"),
    ("Memory clock", "MHz", "Current memory clock"),
)

STAT_NAMES: Final = tuple(name for name, _, _ in _SPECS)


def _value(
    unit: str, desc: str, numerator: int | float, denominator: int | float | None = None
) -> StatValue:
    if isinstance(numerator, float) or isinstance(denominator, float):
        return StatValue(
            float_numerator=float(numerator),
            float_denominator=None if denominator is None else float(denominator),
            unit=unit,
            desc=desc,
        )
    return StatValue(int_numerator=numerator, int_denominator=denominator, unit=unit, desc=desc)


def _fraction(
    used: int | float | None, total: int | float | None
) -> tuple[int | float | None, int | float | None]:
    """A used/total pair, or nothing when either half is missing."""
    return (used, total) if used is not None and total is not None else (None, None)


def device_stats(reading: StatsReading, now: _dt.datetime) -> DeviceStats:
    """One instance's statistics: those NVML gave."""
    r = reading
    power = r.power_w if r.power_w is None else round(r.power_w, 3)
    numbers: tuple[tuple[int | float | None, int | float | None], ...] = (
        (r.gpu_utilization, None),
        (r.memory_utilization, None),
        (r.encoder_utilization, None),
        (r.decoder_utilization, None),
        _fraction(r.memory_used_mib, r.memory_total_mib),
        _fraction(r.bar1_used_mib, r.bar1_total_mib),
        (r.temperature, None),
        # Draw over limit; the draw alone where the GPU has no power limit.
        (power, r.power_limit_w),
        (r.ecc_l1, None),
        (r.ecc_l2, None),
        (r.ecc_memory, None),
        (r.ecc_uncorrected, None),
        (r.sm_clock, None),
        (r.memory_clock, None),
    )
    values = {
        name: _value(unit, desc, numerator, denominator)
        for (name, unit, desc), (numerator, denominator) in zip(_SPECS, numbers, strict=True)
        if numerator is not None
    }
    return DeviceStats(summary=values.get("Memory state"), stats=StatObject(values), timestamp=now)


def group_stats(
    entries: Iterable[tuple[str, Sequence[str], str]],
    readings: Mapping[str, StatsReading],
    vendor: str,
    device_type: str,
) -> list[DeviceGroupStats]:
    """Group statistics from ``(group name, instance IDs, physical ID)`` entries.

    Every instance of a shared GPU carries that GPU's statistics.
    """
    now = _dt.datetime.now(_dt.UTC)
    groups: dict[str, dict[str, DeviceStats]] = {}
    for group, instance_ids, physical_id in entries:
        reading = readings.get(physical_id)
        if reading is None:
            continue
        stats = device_stats(reading, now)
        if stats.stats is None or not stats.stats.attributes:
            continue  # NVML gave nothing (a lost GPU): no statistics rather than empty ones
        instances = groups.setdefault(group, {})
        for instance_id in instance_ids:
            instances[instance_id] = stats
    return [
        DeviceGroupStats(vendor, device_type, name, instances)
        for name, instances in sorted(groups.items())
    ]
