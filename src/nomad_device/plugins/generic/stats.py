"""Per-device statistics, from the last scan: nothing is read from the hardware here.

Every instance of a device carries the same figures. The summary is the
device's state in words (``healthy``, or why not); the details:

| stat | meaning |
| --- | --- |
| ``healthy``, ``present`` | the verdict (not while cleaned), and whether it is plugged in |
| ``nodes`` | the host paths it brings, comma-separated |
| ``reservations`` | Reserve calls that named it since the plugin started |
| ``size`` | block devices: bytes |
| ``usb_speed``, ``usb_port`` | USB devices: Mbit/s, and the port path |
| ``pci_link_speed``, ``pci_link_width`` | PCIe functions: the link now (GT/s, lanes) |
| ``aer_fatal``, ``aer_nonfatal`` | PCIe functions with AER: the kernel's error totals |
| ``probe_result`` | with a probe: ``ok``, or its reason |
| ``probe_duration``, ``probe_age`` | how long the last probe ran (ms), and how long ago (s) |
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Mapping

from nomad_device.model import DeviceGroupStats, DeviceStats, StatObject, StatValue
from nomad_device.plugins.generic.inventory import Entry, Snapshot, group_name

__all__ = ["collect"]


def _device_stats(
    entry: Entry, reservations: int, now: float, cleaning: str | None = None
) -> tuple[StatValue, StatObject]:
    found = entry.found
    healthy = entry.healthy and cleaning is None
    reason = cleaning if cleaning is not None else entry.reason
    summary = StatValue(string_value="healthy" if healthy else reason, desc="state")
    values: dict[str, StatValue] = {
        "healthy": StatValue(bool_value=healthy, desc="usable by new allocations"),
        "present": StatValue(bool_value=entry.present, desc="plugged in"),
        "nodes": StatValue(
            string_value=",".join(n.task_path for n in found.all_nodes), desc="device nodes"
        ),
        "reservations": StatValue(
            int_numerator=reservations, desc="Reserve calls naming it since the plugin started"
        ),
    }
    if found.size_bytes is not None:
        values["size"] = StatValue(int_numerator=found.size_bytes, unit="bytes", desc="size")
    if found.usb_speed is not None:
        values["usb_speed"] = StatValue(
            float_numerator=found.usb_speed, unit="Mbit/s", desc="USB link speed"
        )
    if found.usb_port is not None:
        values["usb_port"] = StatValue(string_value=found.usb_port, desc="USB port path")
    pci = found.pci
    if pci is not None:
        if pci.link.speed is not None:
            values["pci_link_speed"] = StatValue(
                float_numerator=pci.link.speed, unit="GT/s", desc="PCIe link speed now"
            )
        if pci.link.width is not None:
            values["pci_link_width"] = StatValue(
                int_numerator=pci.link.width, unit="lanes", desc="PCIe link width now"
            )
        for name, count, what in (
            ("aer_fatal", pci.aer_fatal, "fatal"),
            ("aer_nonfatal", pci.aer_nonfatal, "non-fatal"),
        ):
            if count is not None:
                values[name] = StatValue(
                    int_numerator=count, desc=f"uncorrectable {what} AER errors (kernel total)"
                )
    probe = entry.probe
    if probe is not None:
        values["probe_result"] = StatValue(
            string_value="ok" if probe.ok else probe.reason, desc="last probe"
        )
        values["probe_duration"] = StatValue(
            float_numerator=round(probe.duration * 1000, 3), unit="ms", desc="last probe's run time"
        )
        values["probe_age"] = StatValue(
            float_numerator=round(max(0.0, now - probe.finished), 3),
            unit="s",
            desc="seconds since the last probe",
        )
    return summary, StatObject(values)


def collect(
    snapshot: Snapshot,
    reservations: Mapping[tuple[str, str], int],
    cleaning: Mapping[str, str] | None = None,
) -> list[DeviceGroupStats]:
    """Each device's stats; an instance in ``cleaning`` (ID -> why) is unhealthy for it."""
    stamp = _dt.datetime.now(_dt.UTC)
    now = time.monotonic()
    cleaning = cleaning or {}
    groups: dict[tuple[str, str, str], dict[str, DeviceStats]] = {}
    for entry in snapshot.entries:
        kind = entry.kind
        count = reservations.get(entry.key, 0)
        summary, details = _device_stats(entry, count, now)
        stats = DeviceStats(summary, details, stamp)
        key = (kind.vendor, kind.type, group_name(kind, entry))
        instances = groups.setdefault(key, {})
        for instance in entry.instance_ids():
            why = cleaning.get(instance)
            if why is None:
                instances[instance] = stats
            else:
                instances[instance] = DeviceStats(*_device_stats(entry, count, now, why), stamp)
    return [DeviceGroupStats(v, t, n, instances) for (v, t, n), instances in groups.items()]
