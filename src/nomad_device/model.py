"""Plain typed values a device plugin reports to Nomad.

These are the author-facing types: immutable, comparable (the engine diffs
fingerprints by equality) and free of protobuf. ``validate()`` methods apply the
same rules as the Nomad client, so a problem is caught in the plugin, where it
can be logged, instead of in the agent, where it kills the plugin.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, TypeVar

__all__ = [
    "UNITS",
    "Attribute",
    "Device",
    "DeviceGroup",
    "DeviceGroupStats",
    "DeviceSpec",
    "DeviceStats",
    "Mount",
    "PluginInfo",
    "Reservation",
    "StatObject",
    "StatValue",
]

#: Units the Nomad scheduler understands and converts between (bytes, byte
#: rates, frequency, power). Any other unit on an attribute is rejected.
UNITS: Final[frozenset[str]] = frozenset(
    [
        *("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"),
        *("kB", "KB", "MB", "GB", "TB", "PB", "EB"),
        *("KiB/s", "MiB/s", "GiB/s", "TiB/s", "PiB/s", "EiB/s"),
        *("kB/s", "KB/s", "MB/s", "GB/s", "TB/s", "PB/s", "EB/s"),
        *("MHz", "GHz"),
        *("mW", "W", "kW", "MW", "GW"),
    ]
)

AttributeValue = int | float | str | bool


K = TypeVar("K")
V = TypeVar("V")


def _frozen_map(items: Mapping[K, V] | None) -> Mapping[K, V]:
    return MappingProxyType(dict(items or {}))


@dataclass(frozen=True)
class Attribute:
    """A typed attribute value; jobs constrain on it as ``${device.attr.<name>}``.

    The Python type picks the wire kind: ``bool`` before ``int`` (a bool is an
    int in Python, not on the wire).
    """

    value: AttributeValue
    unit: str = ""

    def validate(self) -> list[str]:
        problems: list[str] = []
        if not isinstance(self.value, int | float | str | bool):
            problems.append(f"unsupported attribute value type {type(self.value).__name__}")
        if self.unit:
            if self.unit not in UNITS:
                problems.append(f"unrecognized unit {self.unit!r}")
            if isinstance(self.value, str | bool):
                problems.append("unit can not be specified on a boolean or string attribute")
        return problems

    def __str__(self) -> str:
        text = str(self.value).lower() if isinstance(self.value, bool) else str(self.value)
        return f"{text} {self.unit}" if self.unit else text


@dataclass(frozen=True)
class Device:
    """One schedulable instance; ``id`` must be stable across plugin restarts."""

    id: str
    healthy: bool = True
    health_description: str = ""
    pci_bus_id: str | None = None

    def validate(self) -> list[str]:
        return [] if self.id else ["device ID must be specified"]


@dataclass(frozen=True)
class DeviceGroup:
    """Devices sharing vendor/type/name and attributes; jobs ask for them as
    ``vendor/type/name``."""

    vendor: str
    type: str
    name: str
    devices: tuple[Device, ...] = ()
    attributes: Mapping[str, Attribute] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "attributes", _frozen_map(self.attributes))

    @property
    def key(self) -> str:
        return f"{self.vendor}/{self.type}/{self.name}"

    def validate(self) -> list[str]:
        """Problems Nomad would reject this group for (empty when valid)."""
        problems: list[str] = []
        for what, value in (("vendor", self.vendor), ("type", self.type), ("name", self.name)):
            if not value:
                problems.append(f"device {what} must be specified")
        for i, dev in enumerate(self.devices):
            problems.extend(f"device {i}: {p}" for p in dev.validate())
        for name, attr in sorted(self.attributes.items()):
            problems.extend(f"device attribute {name!r} invalid: {p}" for p in attr.validate())
        return problems

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeviceGroup):
            return NotImplemented
        return (
            self.vendor,
            self.type,
            self.name,
            self.devices,
            dict(self.attributes),
        ) == (other.vendor, other.type, other.name, other.devices, dict(other.attributes))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Mount:
    """A host path bind-mounted into the task."""

    task_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class DeviceSpec:
    """A device node exposed to the task; ``permissions`` are cgroup perms such
    as ``"rw"`` or ``"rwm"``."""

    task_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class Reservation:
    """How a task gets access to the reserved devices."""

    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "envs", _frozen_map(self.envs))
        object.__setattr__(self, "mounts", tuple(self.mounts))
        object.__setattr__(self, "devices", tuple(self.devices))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reservation):
            return NotImplemented
        return (dict(self.envs), self.mounts, self.devices) == (
            dict(other.envs),
            other.mounts,
            other.devices,
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class StatValue:
    """One statistic: a number (optionally a fraction), a string or a bool.

    Nomad renders ``int_numerator / int_denominator`` as "used / total"; set the
    denominator only when the value is part of a whole.
    """

    float_numerator: float | None = None
    float_denominator: float | None = None
    int_numerator: int | None = None
    int_denominator: int | None = None
    string_value: str | None = None
    bool_value: bool | None = None
    unit: str = ""
    desc: str = ""


@dataclass(frozen=True)
class StatObject:
    """A tree of named statistics."""

    attributes: Mapping[str, StatValue] = field(default_factory=dict)
    nested: Mapping[str, StatObject] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", _frozen_map(self.attributes))
        object.__setattr__(self, "nested", _frozen_map(self.nested))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StatObject):
            return NotImplemented
        return (dict(self.attributes), dict(self.nested)) == (
            dict(other.attributes),
            dict(other.nested),
        )

    __hash__ = None  # type: ignore[assignment]


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


@dataclass(frozen=True)
class DeviceStats:
    """Statistics of one device instance at one moment."""

    summary: StatValue | None = None
    stats: StatObject | None = None
    timestamp: _dt.datetime = field(default_factory=_utcnow)


@dataclass(frozen=True)
class DeviceGroupStats:
    """Statistics of the instances of one group, keyed by device ID."""

    vendor: str
    type: str
    name: str
    instance_stats: Mapping[str, DeviceStats] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "instance_stats", _frozen_map(self.instance_stats))

    def validate(self) -> list[str]:
        problems = [
            f"stats group {what} must be specified"
            for what, value in (("vendor", self.vendor), ("type", self.type), ("name", self.name))
            if not value
        ]
        problems.extend("device ID must be specified" for k in self.instance_stats if not k)
        return problems

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeviceGroupStats):
            return NotImplemented
        return (self.vendor, self.type, self.name, dict(self.instance_stats)) == (
            other.vendor,
            other.type,
            other.name,
            dict(other.instance_stats),
        )

    __hash__ = None  # type: ignore[assignment]


def group_of(
    vendor: str,
    type: str,
    name: str,
    devices: Iterable[Device],
    attributes: Mapping[str, Attribute] | None = None,
) -> DeviceGroup:
    """Build a group from any iterable of devices (convenience for authors)."""
    return DeviceGroup(vendor, type, name, tuple(devices), dict(attributes or {}))


@dataclass(frozen=True)
class PluginInfo:
    """What ``PluginInfo`` answers; Nomad keys plugins by ``name``."""

    name: str
    version: str
    api_versions: tuple[str, ...] = ("v0.1.0",)
    type: int = 3  # DEVICE
