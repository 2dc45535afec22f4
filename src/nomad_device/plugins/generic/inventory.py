"""What the plugin last told Nomad: devices with their health, as groups.

A :class:`Snapshot` is built by each scan and replaced whole, so Reserve and
Stats (which run in other threads) always read one consistent state, the one
Nomad was told about.

**Groups.** Each block is one group, ``<vendor>/<type>/<name>``. Its attributes
are the block's static ``attributes`` plus every detected attribute (major,
minor, USB IDs and strings, size ...) that all of its devices share: Nomad
keeps attributes per group, not per device. A block that matches one device
therefore has all of that device's attributes; one that matches several keeps
those they agree on. With ``group_per_device = true`` each device is a group
of its own, named ``<name>/<device ID>``, with all its attributes, so that
jobs can pick one by constraint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nomad_device.model import Attribute, Device, DeviceGroup
from nomad_device.plugins.generic.config import Kind, Settings
from nomad_device.plugins.generic.discovery import Found
from nomad_device.plugins.generic.probes import ProbeResult
from nomad_device.plugins.sharing import instance_ids

__all__ = ["Entry", "Snapshot", "build_groups", "common_attributes", "group_name"]


@dataclass(frozen=True)
class Entry:
    """One physical device as reported: what was found, and its verdict."""

    kind: Kind
    found: Found
    healthy: bool
    reason: str
    missing_since: float | None = None  # time.time() when it was last seen
    missing_deadline: float | None = None  # time.monotonic() when it is dropped
    probe: ProbeResult | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind.label, self.found.id)

    @property
    def present(self) -> bool:
        return self.missing_since is None

    def instance_ids(self) -> tuple[str, ...]:
        return instance_ids(self.found.id, self.kind.share)


@dataclass(frozen=True)
class Snapshot:
    settings: Settings | None = None
    entries: tuple[Entry, ...] = ()
    by_instance: Mapping[str, Entry] = field(default_factory=dict)
    groups: tuple[DeviceGroup, ...] = ()

    @classmethod
    def build(cls, settings: Settings, entries: Sequence[Entry]) -> Snapshot:
        by_instance = {iid: e for e in entries for iid in e.instance_ids()}
        return cls(settings, tuple(entries), by_instance, tuple(build_groups(entries)))


def common_attributes(founds: Iterable[Found]) -> dict[str, Attribute]:
    """The detected attributes every device has, with the same value."""
    common: dict[str, Attribute] | None = None
    for found in founds:
        if common is None:
            common = dict(found.attributes)
        else:
            common = {k: v for k, v in common.items() if found.attributes.get(k) == v}
    return common or {}


def group_name(kind: Kind, entry: Entry) -> str:
    return f"{kind.name}/{entry.found.id}" if kind.group_per_device else kind.name


def _devices(entries: Iterable[Entry]) -> tuple[Device, ...]:
    return tuple(
        Device(iid, e.healthy, e.reason, e.found.pci_bus_id)
        for e in entries
        for iid in e.instance_ids()
    )


def build_groups(entries: Sequence[Entry]) -> list[DeviceGroup]:
    """One group per block (or per device), static attributes over detected ones."""
    by_kind: dict[str, list[Entry]] = {}
    kinds: dict[str, Kind] = {}
    for entry in entries:
        by_kind.setdefault(entry.kind.label, []).append(entry)
        kinds[entry.kind.label] = entry.kind
    groups = []
    for label, members in by_kind.items():
        kind = kinds[label]
        parts = [[e] for e in members] if kind.group_per_device else [members]
        for part in parts:
            attributes = {**common_attributes(e.found for e in part), **kind.attributes}
            name = group_name(kind, part[0])
            groups.append(DeviceGroup(kind.vendor, kind.type, name, _devices(part), attributes))
    return groups
