"""The ``--json`` shapes: what Nomad's own tools print for the same data.

- fingerprints as ``nomad node status -json <node>`` shows ``NodeResources.Devices``
  (Nomad's ``api.NodeDeviceResource``: ``Vendor``, ``Type``, ``Name``,
  ``Instances`` and ``Attributes``, where an attribute carries exactly one of
  ``Float``/``Int``/``String``/``Bool`` plus ``Unit``, which is always present);
- statistics as the client stats endpoint shows ``DeviceStats``
  (``api.DeviceGroupStats`` with ``InstanceStats``; ``StatValue`` fields are
  omitted when unset, as their ``omitempty`` tags say);
- a reservation with the field names of Nomad's ``device.ContainerReservation``.

Empty lists and maps are ``null``, as Go writes the nil slices and maps Nomad
holds after decoding a plugin's protobuf messages.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal

from nomad_device.model import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DeviceStats,
    PluginInfo,
    Reservation,
    StatObject,
    StatValue,
)

__all__ = [
    "GoFloat",
    "attribute_json",
    "devices_json",
    "dumps",
    "dumps_prepared",
    "go_number",
    "info_json",
    "reservation_json",
    "stat_value_json",
    "stats_json",
    "timestamp_json",
]

JSON = object


def attribute_json(attr: Attribute) -> dict[str, JSON]:
    """``{"Int": 2, "Unit": "GiB"}``: unset value kinds are left out, Unit never is."""
    value = attr.value
    if isinstance(value, bool):
        return {"Bool": value, "Unit": attr.unit}
    if isinstance(value, int):
        return {"Int": value, "Unit": attr.unit}
    if isinstance(value, float):
        return {"Float": value, "Unit": attr.unit}
    return {"String": value, "Unit": attr.unit}


def _device_json(dev: Device) -> dict[str, JSON]:
    return {
        "ID": dev.id,
        "Healthy": dev.healthy,
        "HealthDescription": dev.health_description,
        "Locality": {"PciBusID": dev.pci_bus_id} if dev.pci_bus_id is not None else None,
    }


def devices_json(groups: Sequence[DeviceGroup]) -> list[JSON]:
    """A fingerprint as the entries of ``NodeResources.Devices``."""
    return [
        {
            "Vendor": g.vendor,
            "Type": g.type,
            "Name": g.name,
            "Instances": [_device_json(d) for d in g.devices] or None,
            "Attributes": ({k: attribute_json(a) for k, a in sorted(g.attributes.items())} or None),
        }
        for g in groups
    ]


def stat_value_json(value: StatValue) -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for key, field_value in (
        ("FloatNumeratorVal", value.float_numerator),
        ("FloatDenominatorVal", value.float_denominator),
        ("IntNumeratorVal", value.int_numerator),
        ("IntDenominatorVal", value.int_denominator),
        ("StringVal", value.string_value),
        ("BoolVal", value.bool_value),
    ):
        if field_value is not None:
            out[key] = field_value
    if value.unit:
        out["Unit"] = value.unit
    if value.desc:
        out["Desc"] = value.desc
    return out


def _stat_object_json(obj: StatObject | None) -> JSON:
    if obj is None:
        return None
    return {
        "Nested": {k: _stat_object_json(v) for k, v in sorted(obj.nested.items())} or None,
        "Attributes": ({k: stat_value_json(v) for k, v in sorted(obj.attributes.items())} or None),
    }


def timestamp_json(when: _dt.datetime) -> str:
    """Go's RFC 3339 with nanoseconds, as ``time.Time`` marshals: trailing zeros cut."""
    utc = when.astimezone(_dt.UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += "." + f"{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def _device_stats_json(stats: DeviceStats) -> dict[str, JSON]:
    return {
        "Summary": stat_value_json(stats.summary) if stats.summary is not None else None,
        "Stats": _stat_object_json(stats.stats),
        "Timestamp": timestamp_json(stats.timestamp),
    }


def stats_json(groups: Sequence[DeviceGroupStats]) -> list[JSON]:
    """Statistics as the ``DeviceStats`` list of Nomad's client stats."""
    return [
        {
            "Vendor": g.vendor,
            "Type": g.type,
            "Name": g.name,
            "InstanceStats": (
                {k: _device_stats_json(v) for k, v in sorted(g.instance_stats.items())} or None
            ),
        }
        for g in groups
    ]


def reservation_json(res: Reservation) -> dict[str, JSON]:
    return {
        "Envs": dict(sorted(res.envs.items())) or None,
        "Mounts": [
            {"TaskPath": m.task_path, "HostPath": m.host_path, "ReadOnly": m.read_only}
            for m in res.mounts
        ]
        or None,
        "Devices": [
            {"TaskPath": d.task_path, "HostPath": d.host_path, "CgroupPerms": d.permissions}
            for d in res.devices
        ]
        or None,
    }


def info_json(info: PluginInfo) -> dict[str, JSON]:
    return {
        "Name": info.name,
        "PluginVersion": info.version,
        "PluginApiVersions": list(info.api_versions),
        "Type": {2: "driver", 3: "device"}.get(info.type, "unknown"),
    }


# ------------------------------------------------------------------ writing


def _go_float(value: float) -> str:
    """A float64 as Go's encoding/json writes it (plain digits unless tiny or huge)."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no JSON form")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    magnitude = abs(value)
    if 1e-6 <= magnitude < 1e21:
        return format(Decimal(repr(value)), "f")
    text = repr(value)
    if "e" not in text:
        text = f"{value:e}"
    mantissa, _, exponent = text.partition("e")
    sign = "-" if exponent.startswith("-") else "+"
    digits = exponent.lstrip("+-").lstrip("0") or "0"
    # Go pads positive exponents to two digits and trims "e-07" to "e-7".
    return f"{mantissa}e{sign}{digits if sign == '-' else digits.zfill(2)}"


def dumps(value: JSON, indent: int | None = 4) -> str:
    """JSON text with Go's number forms; ``indent=None`` gives one compact line."""
    return _dump(value, indent, 0)


class GoFloat:
    """A float that Python's ``json`` would write otherwise than :func:`dumps`
    (see :func:`go_number`)."""

    __slots__ = ("value",)

    def __init__(self, value: float) -> None:
        self.value = value


def go_number(value: float) -> int | float | GoFloat:
    """The float as a value the standard library writes just as :func:`dumps` does: the
    float itself where ``repr`` gives the same digits (plain ones, from 1e-4 to 1e16),
    0 for zero, else a :class:`GoFloat`."""
    if value == 0 and math.copysign(1.0, value) > 0:
        return 0
    if 1e-4 <= abs(value) < 1e16:
        return value
    return GoFloat(value)


class _NotPrepared(Exception):
    pass


def _refuse(value: object) -> object:
    raise _NotPrepared


def dumps_prepared(value: JSON, indent: int | None = 4) -> str:
    """:func:`dumps` for a value whose floats all came through :func:`go_number`: the same
    text, from the standard library's C encoder (and msgspec's C re-indenter), so a
    report of 10,000 nodes takes a fraction of the time; a :class:`GoFloat` in it hands it
    to :func:`dumps`."""
    try:
        compact = json.dumps(
            value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_refuse
        )
    except _NotPrepared:
        return dumps(value, indent)
    if indent is None:
        return compact
    try:
        import msgspec
    except ImportError:  # the cli extra brings it; without it, the pure-Python indenter
        return json.dumps(json.loads(compact), ensure_ascii=False, indent=indent)
    return msgspec.json.format(compact, indent=indent)


def _dump(value: JSON, indent: int | None, depth: int) -> str:
    if isinstance(value, GoFloat):
        return _go_float(value.value)
    if value is None or isinstance(value, bool | str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, Mapping):
        items = [
            f"{json.dumps(str(k), ensure_ascii=False)}:{' ' if indent is not None else ''}"
            f"{_dump(v, indent, depth + 1)}"
            for k, v in value.items()
        ]
        return _wrap("{", "}", items, indent, depth)
    if isinstance(value, list | tuple):
        return _wrap("[", "]", [_dump(v, indent, depth + 1) for v in value], indent, depth)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _wrap(open_: str, close: str, items: list[str], indent: int | None, depth: int) -> str:
    if not items:
        return open_ + close
    if indent is None:
        return open_ + ",".join(items) + close
    inner = " " * (indent * (depth + 1))
    outer = " " * (indent * depth)
    return open_ + "\n" + ",\n".join(inner + i for i in items) + "\n" + outer + close
