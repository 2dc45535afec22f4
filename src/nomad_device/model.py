"""Plain typed values a device plugin reports to Nomad.

These are the author-facing types: immutable, comparable (the engine diffs
fingerprints by equality) and free of protobuf. ``validate()`` methods apply the
same rules as the Nomad client, so a problem is caught in the plugin, where it
can be logged, instead of in the agent, where it kills the plugin. They also
reject whatever the wire cannot carry, so that a value ``validate()`` accepts
always converts: integers outside int64, text that is not UTF-8 (lone
surrogates), keys and fields of the wrong type, timestamps outside protobuf's
range, and NaN or infinite floats. Nomad's Go side would take those floats, but
NaN never equals itself (every fingerprint would look like a change to the
client) and its HTTP API writes neither as a number.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from dataclasses import field
from types import MappingProxyType
from typing import Final, TypeVar, cast

from nomad_device.frozen import frozen, set_field

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

_BYTES: Final = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "kB", "KB", "MB", "GB", "TB", "PB", "EB")
_HERTZ: Final = ("MHz", "GHz")
_WATTS: Final = ("mW", "W", "kW", "MW", "GW")

#: Units the Nomad scheduler understands and converts between (bytes, byte
#: rates, frequency, power). Any other unit on an attribute is rejected.
UNITS: Final[frozenset[str]] = frozenset(
    [*_BYTES, *(unit + "/s" for unit in _BYTES), *_HERTZ, *_WATTS]
)
#: The units as an error message lists them.
_UNITS_TEXT: Final = (
    f"{' '.join(_BYTES[:6])}, {' '.join(_BYTES[6:])}, any of those per second "
    f"(MiB/s), {' '.join(_HERTZ)}, {' '.join(_WATTS)}"
)

AttributeValue = int | float | str | bool

#: The range of protobuf's int64, which carries every integer Nomad sees.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
#: How deep a StatObject tree may nest: protobuf parsers refuse deep messages
#: (Python's stops at 100 levels, and each level of stats is two).
MAX_STATS_DEPTH: Final = 32


K = TypeVar("K")
V = TypeVar("V")


def _kind(value: object) -> str:
    return type(value).__name__


def _text_problem(value: object, what: str) -> str | None:
    """Why ``value`` cannot be a protobuf string (None when it can)."""
    if not isinstance(value, str):
        return f"{what} must be a string, not {_kind(value)}"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{what} {value!a} is not valid UTF-8 (it holds a lone surrogate)"
    return None


def _name_problems(group: DeviceGroup | DeviceGroupStats, what: str) -> list[str]:
    """The problems of a group's vendor, type and name; ``what`` names the group."""
    problems: list[str] = []
    for field_name, value in (("vendor", group.vendor), ("type", group.type), ("name", group.name)):
        if isinstance(value, str) and not value:
            problems.append(f"{what} {field_name} must be specified")
        elif problem := _text_problem(value, f"{what} {field_name}"):
            problems.append(problem)
    return problems


def _int_problem(value: object, what: str) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"{what} must be an int, not {_kind(value)}"
    if not INT64_MIN <= value <= INT64_MAX:
        return f"{what} {value} does not fit in int64"
    return None


def _float_problem(value: object, what: str) -> str | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return f"{what} must be a float, not {_kind(value)}"
    try:
        number = float(value)
    except OverflowError:
        return f"{what} {value} is too large for a float"
    if not math.isfinite(number):
        return f"{what} must be finite, not {number}"
    return None


def _mapping_problems(
    items: object, what: str, value_type: type
) -> tuple[list[tuple[str, object]], list[str]]:
    """The (str key, value) pairs of a mapping, in its order, and the problems of the rest."""
    if type(items) is not MappingProxyType and not isinstance(items, Mapping):
        return [], [f"{what} must be a mapping, not {_kind(items)}"]
    good: list[tuple[str, object]] = []
    problems: list[str] = []
    for key, value in items.items():
        if type(key) is str and type(value) is value_type and key.isascii():
            good.append((key, value))  # the common case, kept cheap
            continue
        problem = _text_problem(key, f"{what} key {key!r}")
        if problem is None and not isinstance(value, value_type):
            problem = f"{what}[{key!r}] must be a {value_type.__name__}, not {_kind(value)}"
        if problem is not None:
            problems.append(problem)
            continue
        good.append((key, value))
    return good, problems


def _frozen_map(items: Mapping[K, V] | None) -> Mapping[K, V]:
    return MappingProxyType(dict(items or {}))


# The value classes below are frozen (nomad_device.frozen): those that only store
# their arguments get their __init__ made from their fields; the others write
# one and set each field with set_field, as a frozen dataclass's __init__ does.
# Those holding mappings hash their fields as frozen dataclasses do, which
# fails on the mapping: they compare, but do not hash.


@frozen
class Attribute:
    """A typed attribute value; jobs constrain on it as ``${device.attr.<name>}``.

    The Python type picks the wire kind: ``bool`` before ``int`` (a bool is an
    int in Python, not on the wire). ``unit`` is one of :data:`UNITS` (on a
    number only), so that jobs can compare across units (``>= 2 GiB``).
    """

    value: AttributeValue
    unit: str = ""

    def __eq__(self, other: object) -> bool:
        # Written out, not generic: the engine compares every group's attributes each scan.
        # The value's type is part of it: 1, 1.0 and True are equal in Python but
        # three different things on the wire (and to a job's constraint).
        if other.__class__ is not self.__class__:
            return NotImplemented
        value = self.value
        return (
            value == other.value
            and value.__class__ is other.value.__class__
            and self.unit == other.unit
        )

    def __hash__(self) -> int:
        return hash((self.value, self.unit))

    def validate(self) -> list[str]:
        problems: list[str] = []
        value = self.value
        problem: str | None = None
        if isinstance(value, bool):
            pass
        elif isinstance(value, int):
            problem = _int_problem(value, "integer value")
        elif isinstance(value, float):
            problem = _float_problem(value, "float value")
        elif isinstance(value, str):
            problem = _text_problem(value, "string value")
        else:
            problem = f"unsupported attribute value type {_kind(value)}"
        if problem is not None:
            problems.append(problem)
        if not isinstance(self.unit, str):
            problems.append(f"unit must be a string, not {_kind(self.unit)}")
        elif self.unit:
            if self.unit not in UNITS:
                problems.append(f"unrecognized unit {self.unit!r}: Nomad knows only {_UNITS_TEXT}")
            if isinstance(value, str | bool):
                problems.append("unit can not be specified on a boolean or string attribute")
        return problems

    def __str__(self) -> str:
        text = str(self.value).lower() if isinstance(self.value, bool) else str(self.value)
        return f"{text} {self.unit}" if self.unit else text


@frozen
class Device:
    """One schedulable instance; ``id`` must be stable across plugin restarts."""

    id: str
    healthy: bool = True
    health_description: str = ""
    pci_bus_id: str | None = None

    def __eq__(self, other: object) -> bool:
        # Written out, not generic: the engine compares every device of every scan.
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.id, self.healthy, self.health_description, self.pci_bus_id) == (
            other.id,
            other.healthy,
            other.health_description,
            other.pci_bus_id,
        )

    def __hash__(self) -> int:
        return hash((self.id, self.healthy, self.health_description, self.pci_bus_id))

    def validate(self) -> list[str]:
        if isinstance(self.id, str) and self.id.isascii() and self.id:
            problems = []  # the common case, kept cheap: a node may have 100,000 devices
        elif not self.id and isinstance(self.id, str):
            problems = ["device ID must be specified"]
        else:
            problems = [p for p in (_text_problem(self.id, "device ID"),) if p]
        if not isinstance(self.healthy, bool):
            problems.append(f"healthy must be a bool, not {_kind(self.healthy)}")
        if self.health_description:
            problem = _text_problem(self.health_description, "health description")
            if problem:
                problems.append(problem)
        elif not isinstance(self.health_description, str):
            problems.append(
                f"health description must be a string, not {_kind(self.health_description)}"
            )
        if self.pci_bus_id is not None:
            problem = _text_problem(self.pci_bus_id, "PCI bus ID")
            if problem:
                problems.append(problem)
        return problems


@frozen
class DeviceGroup:
    """Devices sharing vendor/type/name and attributes; jobs ask for them as
    ``vendor/type/name``."""

    vendor: str
    type: str
    name: str
    devices: tuple[Device, ...] = ()
    attributes: Mapping[str, Attribute] = field(default_factory=dict)

    def __init__(
        self,
        vendor: str,
        type: str,
        name: str,
        devices: tuple[Device, ...] = (),
        attributes: Mapping[str, Attribute] | None = None,
    ) -> None:
        set_field(self, "vendor", vendor)
        set_field(self, "type", type)
        set_field(self, "name", name)
        set_field(self, "devices", tuple(devices))
        set_field(self, "attributes", _frozen_map(attributes))

    @property
    def key(self) -> str:
        return f"{self.vendor}/{self.type}/{self.name}"

    def validate(self) -> list[str]:
        """Problems Nomad would reject this group for (empty when valid)."""
        problems = _name_problems(self, "device")
        for i, dev in enumerate(self.devices):
            if not isinstance(dev, Device):
                problems.append(f"device {i} is a {_kind(dev)}, not a Device")
                continue
            problems.extend(f"device {i}: {p}" for p in dev.validate())
        attributes, bad = _mapping_problems(self.attributes, "device attribute", Attribute)
        problems.extend(bad)
        for name, attr in sorted(attributes, key=lambda kv: kv[0]):
            problems.extend(
                f"device attribute {name!r} invalid: {p}"
                for p in attr.validate()  # type: ignore[attr-defined]
            )
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


@frozen
class Mount:
    """A host path bind-mounted into the task."""

    task_path: str
    host_path: str
    read_only: bool = False

    def validate(self) -> list[str]:
        problems = [
            p
            for p in (
                _text_problem(self.task_path, "task path"),
                _text_problem(self.host_path, "host path"),
            )
            if p
        ]
        if not isinstance(self.read_only, bool):
            problems.append(f"read_only must be a bool, not {_kind(self.read_only)}")
        return problems


@frozen
class DeviceSpec:
    """A device node exposed to the task; ``permissions`` are cgroup perms such
    as ``"rw"`` or ``"rwm"``."""

    task_path: str
    host_path: str
    permissions: str = "rw"

    def validate(self) -> list[str]:
        checks = (
            _text_problem(self.task_path, "task path"),
            _text_problem(self.host_path, "host path"),
            _text_problem(self.permissions, "permissions"),
        )
        return [p for p in checks if p]


@frozen
class Reservation:
    """How a task gets access to the reserved devices."""

    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()

    def __init__(
        self,
        envs: Mapping[str, str] | None = None,
        mounts: tuple[Mount, ...] = (),
        devices: tuple[DeviceSpec, ...] = (),
    ) -> None:
        set_field(self, "envs", _frozen_map(envs))
        set_field(self, "mounts", tuple(mounts))
        set_field(self, "devices", tuple(devices))

    def validate(self) -> list[str]:
        """Problems that keep this reservation off the wire (empty when valid)."""
        envs, problems = _mapping_problems(self.envs, "env", str)
        for key, value in envs:
            problem = _text_problem(value, f"env {key!r} value")
            if problem:
                problems.append(problem)
        for what, items, cls in (
            ("mount", self.mounts, Mount),
            ("device", self.devices, DeviceSpec),
        ):
            for i, item in enumerate(items):
                if not isinstance(item, cls):
                    problems.append(f"{what} {i} is a {_kind(item)}, not a {cls.__name__}")
                else:
                    problems.extend(f"{what} {i}: {p}" for p in item.validate())
        return problems

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reservation):
            return NotImplemented
        return (dict(self.envs), self.mounts, self.devices) == (
            dict(other.envs),
            other.mounts,
            other.devices,
        )


@frozen
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

    def _fine(self) -> bool:
        """The common case, checked cheaply: a node may report 100,000 of these a second."""
        fn, fd, i_n, i_d = (
            self.float_numerator,
            self.float_denominator,
            self.int_numerator,
            self.int_denominator,
        )
        text, unit, desc = self.string_value, self.unit, self.desc
        return bool(
            # (x - x is 0.0 for a finite float, NaN otherwise.)
            (fn is None or (type(fn) is float and fn - fn == 0.0))
            and (fd is None or (type(fd) is float and fd - fd == 0.0))
            and (i_n is None or (type(i_n) is int and INT64_MIN <= i_n <= INT64_MAX))
            and (i_d is None or (type(i_d) is int and INT64_MIN <= i_d <= INT64_MAX))
            and (text is None or (type(text) is str and text.isascii()))
            and (self.bool_value is None or type(self.bool_value) is bool)
            and type(unit) is str
            and unit.isascii()
            and type(desc) is str
            and desc.isascii()
        )

    def validate(self) -> list[str]:
        if self._fine():
            return []
        problems: list[str] = []
        for what, value, check in (
            ("float_numerator", self.float_numerator, _float_problem),
            ("float_denominator", self.float_denominator, _float_problem),
            ("int_numerator", self.int_numerator, _int_problem),
            ("int_denominator", self.int_denominator, _int_problem),
            ("string_value", self.string_value, _text_problem),
        ):
            if value is not None and (problem := check(value, what)):
                problems.append(problem)
        if self.bool_value is not None and not isinstance(self.bool_value, bool):
            problems.append(f"bool_value must be a bool, not {_kind(self.bool_value)}")
        for what, text in (("unit", self.unit), ("desc", self.desc)):
            if text:
                problem = _text_problem(text, what)
                if problem:
                    problems.append(problem)
            elif not isinstance(text, str):
                problems.append(f"{what} must be a string, not {_kind(text)}")
        return problems


@frozen
class StatObject:
    """A tree of named statistics."""

    attributes: Mapping[str, StatValue] = field(default_factory=dict)
    nested: Mapping[str, StatObject] = field(default_factory=dict)

    def __init__(
        self,
        attributes: Mapping[str, StatValue] | None = None,
        nested: Mapping[str, StatObject] | None = None,
    ) -> None:
        set_field(self, "attributes", _frozen_map(attributes))
        set_field(self, "nested", _frozen_map(nested))

    def _fine(self, depth: int) -> bool:
        """The common case, checked without building messages (and remembered)."""
        known = self.__dict__.get("_checked_below")
        if known is not None:
            return bool(depth <= known)
        if depth >= MAX_STATS_DEPTH:
            return False
        attributes, nested = self.attributes, self.nested
        if type(attributes) is not MappingProxyType or type(nested) is not MappingProxyType:
            return False
        for key, value in attributes.items():
            if not (type(key) is str and type(value) is StatValue and key.isascii()):
                return False
            if not value._fine():
                return False
        for key, obj in nested.items():
            if not (type(key) is str and type(obj) is StatObject and key.isascii()):
                return False
            if not obj._fine(depth + 1):
                return False
        # Fine at this depth and any shallower one.
        self.__dict__["_checked_below"] = depth
        return True

    def validate(self, depth: int = 0) -> list[str]:
        if self._fine(depth):
            return []
        if depth >= MAX_STATS_DEPTH:
            return [f"stats nested deeper than {MAX_STATS_DEPTH} levels"]
        attributes, problems = _mapping_problems(self.attributes, "stat", StatValue)
        for key, value in attributes:
            found = value.validate()  # type: ignore[attr-defined]
            if found:
                problems.extend(f"stat {key!r}: {p}" for p in found)
        if self.nested:
            nested, bad = _mapping_problems(self.nested, "nested stats", StatObject)
            problems.extend(bad)
            for key, obj in nested:
                found = obj.validate(depth + 1)  # type: ignore[attr-defined]
                if found:
                    problems.extend(f"{key!r}: {p}" for p in found)
        return problems

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StatObject):
            return NotImplemented
        return (dict(self.attributes), dict(self.nested)) == (
            dict(other.attributes),
            dict(other.nested),
        )


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


class _Now:
    """The default ``DeviceStats.timestamp``: the moment the stats are made."""

    def __repr__(self) -> str:
        return "<now>"


_NOW: Final = cast(_dt.datetime, _Now())


@frozen
class DeviceStats:
    """Statistics of one device instance at one moment.

    A naive ``timestamp`` is read as local time, as ``datetime.astimezone`` does.
    """

    summary: StatValue | None = None
    stats: StatObject | None = None
    timestamp: _dt.datetime = field(default_factory=_utcnow)

    def __init__(
        self,
        summary: StatValue | None = None,
        stats: StatObject | None = None,
        timestamp: _dt.datetime = _NOW,
    ) -> None:
        set_field(self, "summary", summary)
        set_field(self, "stats", stats)
        set_field(self, "timestamp", _utcnow() if timestamp is _NOW else timestamp)

    def validate(self, checked: set[_dt.datetime] | None = None) -> list[str]:
        """Problems that keep these stats off the wire; ``checked`` holds timestamps
        already known to be in range (devices collected together share one)."""
        problems: list[str] = []
        summary, stats = self.summary, self.stats
        if summary is not None:
            if isinstance(summary, StatValue):
                found = summary.validate()
                if found:
                    problems.extend(f"summary: {p}" for p in found)
            else:
                problems.append(f"summary must be a StatValue, not {_kind(summary)}")
        if stats is not None:
            if isinstance(stats, StatObject):
                found = stats.validate()
                if found:
                    problems.extend(f"stats: {p}" for p in found)
            else:
                problems.append(f"stats must be a StatObject, not {_kind(stats)}")
        stamp = self.timestamp
        if not isinstance(stamp, _dt.datetime):
            problems.append(f"timestamp must be a datetime, not {_kind(stamp)}")
        elif stamp.tzinfo is not _dt.UTC and (checked is None or stamp not in checked):
            try:
                stamp.astimezone(_dt.UTC)
            except (OverflowError, ValueError) as exc:
                # Protobuf's Timestamp holds years 1 to 9999 in UTC.
                problems.append(f"timestamp {stamp} is out of range in UTC: {exc}")
            else:
                if checked is not None:
                    checked.add(stamp)
        return problems


@frozen
class DeviceGroupStats:
    """Statistics of the instances of one group, keyed by device ID."""

    vendor: str
    type: str
    name: str
    instance_stats: Mapping[str, DeviceStats] = field(default_factory=dict)

    def __init__(
        self,
        vendor: str,
        type: str,
        name: str,
        instance_stats: Mapping[str, DeviceStats] | None = None,
    ) -> None:
        set_field(self, "vendor", vendor)
        set_field(self, "type", type)
        set_field(self, "name", name)
        set_field(self, "instance_stats", _frozen_map(instance_stats))

    def validate(self) -> list[str]:
        problems = _name_problems(self, "stats group")
        items = self.instance_stats
        if type(items) is not MappingProxyType and not isinstance(items, Mapping):
            problems.append(f"device must be a mapping, not {_kind(items)}")
            return problems
        checked: set[_dt.datetime] = set()
        utc = _dt.UTC
        for key, stats in items.items():
            # The common case first, inline: a node may report 100,000 of these a second.
            if type(key) is str and key and key.isascii() and type(stats) is DeviceStats:
                summary, tree, stamp = stats.summary, stats.stats, stats.timestamp
                if (
                    (summary is None or (type(summary) is StatValue and summary._fine()))
                    and (tree is None or (type(tree) is StatObject and tree._fine(0)))
                    and type(stamp) is _dt.datetime
                    and (stamp.tzinfo is utc or stamp in checked)
                ):
                    continue
            problem = _text_problem(key, f"device key {key!r}")
            if problem is None and not isinstance(stats, DeviceStats):
                problem = f"device[{key!r}] must be a DeviceStats, not {_kind(stats)}"
            if problem is not None:
                problems.append(problem)
                continue
            if not key:
                problems.append("device ID must be specified")
            found = stats.validate(checked)
            if found:
                problems.extend(f"device {key!r}: {p}" for p in found)
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


@frozen
class PluginInfo:
    """What ``PluginInfo`` answers; Nomad keys plugins by ``name``."""

    name: str
    version: str
    api_versions: tuple[str, ...] = ("v0.1.0",)
    type: int = 3  # DEVICE

    def validate(self) -> list[str]:
        problems = [
            p
            for p in (_text_problem(self.name, "name"), _text_problem(self.version, "version"))
            if p
        ]
        if isinstance(self.name, str) and not self.name:
            problems.append("name must not be empty")
        if not isinstance(self.api_versions, tuple | list):
            problems.append(f"api_versions must be a tuple, not {_kind(self.api_versions)}")
        else:
            for i, version in enumerate(self.api_versions):
                problem = _text_problem(version, f"api_versions[{i}]")
                if problem:
                    problems.append(problem)
        return problems
