"""Model values to protobuf messages and back.

The only module that knows both sides; the engine and the host client speak
model values, the servicers speak protobuf.
"""

from __future__ import annotations

import datetime as _dt

from nomad_device.model import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DeviceSpec,
    DeviceStats,
    Mount,
    Reservation,
    StatObject,
    StatValue,
)
from nomad_device.proto import attribute_pb2, device_pb2, stats_pb2

__all__ = [
    "attribute_from_proto",
    "attribute_to_proto",
    "group_from_proto",
    "group_stats_from_proto",
    "group_stats_to_proto",
    "group_to_proto",
    "reservation_from_proto",
    "reservation_to_proto",
    "stat_value_from_proto",
    "stat_value_to_proto",
]


def attribute_to_proto(attr: Attribute) -> attribute_pb2.Attribute:
    pb = attribute_pb2.Attribute(unit=attr.unit)
    value = attr.value
    if isinstance(value, bool):
        pb.bool_val = value
    elif isinstance(value, int):
        pb.int_val = value
    elif isinstance(value, float):
        pb.float_val = value
    else:
        pb.string_val = value
    return pb


def attribute_from_proto(pb: attribute_pb2.Attribute) -> Attribute:
    kind = pb.WhichOneof("value")
    if kind == "bool_val":
        return Attribute(pb.bool_val, pb.unit)
    if kind == "int_val":
        return Attribute(pb.int_val, pb.unit)
    if kind == "float_val":
        return Attribute(pb.float_val, pb.unit)
    return Attribute(pb.string_val, pb.unit)


def group_to_proto(
    group: DeviceGroup, into: device_pb2.DeviceGroup | None = None
) -> device_pb2.DeviceGroup:
    """Convert; with ``into`` (e.g. ``response.device_group.add()``) fill it in place."""
    pb = device_pb2.DeviceGroup() if into is None else into
    pb.vendor, pb.device_type, pb.device_name = group.vendor, group.type, group.name
    add = pb.devices.add
    for d in group.devices:
        device = add(ID=d.id, healthy=d.healthy, health_description=d.health_description)
        if d.pci_bus_id is not None:
            device.hw_locality.pci_bus_id = d.pci_bus_id
    for key, attr in group.attributes.items():
        pb.attributes[key].CopyFrom(attribute_to_proto(attr))
    return pb


def group_from_proto(pb: device_pb2.DeviceGroup) -> DeviceGroup:
    return DeviceGroup(
        vendor=pb.vendor,
        type=pb.device_type,
        name=pb.device_name,
        devices=tuple(
            Device(
                id=d.ID,
                healthy=d.healthy,
                health_description=d.health_description,
                pci_bus_id=d.hw_locality.pci_bus_id if d.HasField("hw_locality") else None,
            )
            for d in pb.devices
        ),
        attributes={k: attribute_from_proto(v) for k, v in pb.attributes.items()},
    )


def reservation_to_proto(res: Reservation) -> device_pb2.ContainerReservation:
    return device_pb2.ContainerReservation(
        envs=dict(res.envs),
        mounts=[
            device_pb2.Mount(task_path=m.task_path, host_path=m.host_path, read_only=m.read_only)
            for m in res.mounts
        ],
        devices=[
            device_pb2.DeviceSpec(
                task_path=d.task_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in res.devices
        ],
    )


def reservation_from_proto(pb: device_pb2.ContainerReservation) -> Reservation:
    return Reservation(
        envs=dict(pb.envs),
        mounts=tuple(Mount(m.task_path, m.host_path, m.read_only) for m in pb.mounts),
        devices=tuple(DeviceSpec(d.task_path, d.host_path, d.permissions) for d in pb.devices),
    )


def stat_value_to_proto(v: StatValue) -> stats_pb2.StatValue:
    pb = stats_pb2.StatValue()
    _fill_stat_value(pb, v)
    return pb


def _fill_stat_value(pb: stats_pb2.StatValue, v: StatValue) -> None:
    # Filled in place: a node with many devices makes many of these, and
    # building temporaries to copy from costs more than the encoding itself.
    pb.unit = v.unit
    pb.desc = v.desc
    if v.float_numerator is not None:
        pb.float_numerator_val.value = v.float_numerator
    if v.float_denominator is not None:
        pb.float_denominator_val.value = v.float_denominator
    if v.int_numerator is not None:
        pb.int_numerator_val.value = v.int_numerator
    if v.int_denominator is not None:
        pb.int_denominator_val.value = v.int_denominator
    if v.string_value is not None:
        pb.string_val.value = v.string_value
    if v.bool_value is not None:
        pb.bool_val.value = v.bool_value
    # (Assigning a wrapper's value marks it present even when it is zero.)


def stat_value_from_proto(pb: stats_pb2.StatValue) -> StatValue:
    return StatValue(
        float_numerator=(
            pb.float_numerator_val.value if pb.HasField("float_numerator_val") else None
        ),
        float_denominator=(
            pb.float_denominator_val.value if pb.HasField("float_denominator_val") else None
        ),
        int_numerator=pb.int_numerator_val.value if pb.HasField("int_numerator_val") else None,
        int_denominator=(
            pb.int_denominator_val.value if pb.HasField("int_denominator_val") else None
        ),
        string_value=pb.string_val.value if pb.HasField("string_val") else None,
        bool_value=pb.bool_val.value if pb.HasField("bool_val") else None,
        unit=pb.unit,
        desc=pb.desc,
    )


def _fill_stat_object(pb: stats_pb2.StatObject, obj: StatObject) -> None:
    for key, value in obj.attributes.items():
        _fill_stat_value(pb.attributes[key], value)
    for key, nested in obj.nested.items():
        _fill_stat_object(pb.nested[key], nested)


def _stat_object_from_proto(pb: stats_pb2.StatObject) -> StatObject:
    return StatObject(
        attributes={k: stat_value_from_proto(v) for k, v in pb.attributes.items()},
        nested={k: _stat_object_from_proto(v) for k, v in pb.nested.items()},
    )


def _fill_device_stats(
    pb: device_pb2.DeviceStats, s: DeviceStats, stamps: dict[_dt.datetime, tuple[int, int]]
) -> None:
    if s.summary is not None:
        _fill_stat_value(pb.summary, s.summary)
    if s.stats is not None:
        _fill_stat_object(pb.stats, s.stats)
    # Devices collected together share a timestamp: convert it once.
    stamp = stamps.get(s.timestamp)
    if stamp is None:
        pb.timestamp.FromDatetime(s.timestamp.astimezone(_dt.UTC))
        stamps[s.timestamp] = (pb.timestamp.seconds, pb.timestamp.nanos)
    else:
        pb.timestamp.seconds, pb.timestamp.nanos = stamp


def _device_stats_from_proto(pb: device_pb2.DeviceStats) -> DeviceStats:
    return DeviceStats(
        summary=stat_value_from_proto(pb.summary) if pb.HasField("summary") else None,
        stats=_stat_object_from_proto(pb.stats) if pb.HasField("stats") else None,
        timestamp=pb.timestamp.ToDatetime(tzinfo=_dt.UTC),
    )


def group_stats_to_proto(
    g: DeviceGroupStats, into: device_pb2.DeviceGroupStats | None = None
) -> device_pb2.DeviceGroupStats:
    """Convert; with ``into`` (e.g. ``response.groups.add()``) fill it in place."""
    pb = device_pb2.DeviceGroupStats() if into is None else into
    pb.vendor, pb.type, pb.name = g.vendor, g.type, g.name
    stamps: dict[_dt.datetime, tuple[int, int]] = {}
    for key, stats in g.instance_stats.items():
        _fill_device_stats(pb.instance_stats[key], stats, stamps)
    return pb


def group_stats_from_proto(pb: device_pb2.DeviceGroupStats) -> DeviceGroupStats:
    return DeviceGroupStats(
        vendor=pb.vendor,
        type=pb.type,
        name=pb.name,
        instance_stats={k: _device_stats_from_proto(v) for k, v in pb.instance_stats.items()},
    )
