"""Fuzz the model-to-wire path: whatever ``validate()`` accepts converts and parses.

Hypothesis builds model values from well-typed edge cases (int64 bounds, NaN,
infinities, lone surrogates, timestamps at the ends of time) mixed with values
of the wrong type. For each: ``validate()`` must not raise, and when it finds
nothing wrong, conversion to protobuf, serialisation and parsing must succeed
and round-trip. The servicer's response builders must never raise either way.

Bound for CI: ``EXAMPLES`` examples per test (default 300; about 10 s for the
whole file on the 2-CPU dev machine), no per-example deadline so a loaded
machine cannot fail it. Set ``NOMAD_DEVICE_FUZZ_EXAMPLES`` for a longer run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nomad_device.model import (
    INT64_MAX,
    INT64_MIN,
    MAX_STATS_DEPTH,
    UNITS,
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DeviceSpec,
    DeviceStats,
    Mount,
    PluginInfo,
    Reservation,
    StatObject,
    StatValue,
)
from nomad_device.plugin.engine import ProblemLog
from nomad_device.plugin.servicer import (
    _info_to_proto,
    _reservation_to_proto,
    fingerprint_response,
    stats_response,
)
from nomad_device.proto import device_pb2
from nomad_device.wire import convert

EXAMPLES = int(os.environ.get("NOMAD_DEVICE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- strategies ------------------------------------------------------------------

any_text = st.text(st.characters(exclude_categories=()), max_size=8)  # lone surrogates too
plain_text = st.text(max_size=8)
texts = st.one_of(plain_text, plain_text, any_text, st.sampled_from(["", "a/b", "\x00", "é"]))
edge_ints = st.one_of(
    st.integers(INT64_MIN, INT64_MAX),
    st.sampled_from([INT64_MIN, INT64_MAX, INT64_MIN - 1, INT64_MAX + 1, 2**64, -(2**64), 0]),
    st.integers(),
)
edge_floats = st.one_of(
    st.floats(),  # NaN and infinities included
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 1.7976931348623157e308]),
)
garbage = st.one_of(
    st.none(), st.binary(max_size=4), st.lists(st.integers(), max_size=2), st.just(object())
)
timezones = st.one_of(
    st.none(),
    st.just(dt.UTC),
    st.builds(
        dt.timezone,
        st.timedeltas(dt.timedelta(hours=-23, minutes=-59), dt.timedelta(hours=23, minutes=59)),
    ),
)
stamps = st.datetimes(timezones=timezones)


def maybe_wrong(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``strategy``, sometimes a value of the wrong type."""
    return st.one_of(strategy, strategy, strategy, garbage, edge_ints, edge_floats)


attribute_values = st.one_of(st.booleans(), edge_ints, edge_floats, texts, garbage)
units = st.one_of(st.just(""), st.sampled_from(sorted(UNITS)), texts, garbage)
attributes = st.builds(Attribute, attribute_values, units)
devices = st.builds(
    Device,
    id=maybe_wrong(texts),
    healthy=st.one_of(st.booleans(), st.booleans(), st.integers(0, 2), st.none()),
    health_description=maybe_wrong(texts),
    pci_bus_id=st.one_of(st.none(), maybe_wrong(texts)),
)
keys = st.one_of(texts, texts, st.integers(), st.none())
groups = st.builds(
    DeviceGroup,
    vendor=maybe_wrong(texts),
    type=maybe_wrong(texts),
    name=maybe_wrong(texts),
    devices=st.lists(st.one_of(devices, devices, garbage), max_size=4),
    attributes=st.dictionaries(keys, st.one_of(attributes, attributes, garbage), max_size=4),
)

stat_values = st.builds(
    StatValue,
    float_numerator=st.one_of(st.none(), maybe_wrong(edge_floats)),
    float_denominator=st.one_of(st.none(), maybe_wrong(edge_floats)),
    int_numerator=st.one_of(st.none(), maybe_wrong(edge_ints)),
    int_denominator=st.one_of(st.none(), maybe_wrong(edge_ints)),
    string_value=st.one_of(st.none(), maybe_wrong(texts)),
    bool_value=st.one_of(st.none(), st.booleans(), garbage),
    unit=maybe_wrong(texts),
    desc=maybe_wrong(texts),
)
stat_objects = st.recursive(
    st.builds(StatObject, st.dictionaries(keys, stat_values, max_size=3)),
    lambda children: st.builds(
        StatObject,
        st.dictionaries(keys, st.one_of(stat_values, garbage), max_size=3),
        st.dictionaries(keys, st.one_of(children, children, garbage), max_size=3),
    ),
    max_leaves=8,
)
device_stats = st.builds(
    DeviceStats,
    summary=st.one_of(st.none(), stat_values, stat_values, garbage),
    stats=st.one_of(st.none(), stat_objects, stat_objects, garbage),
    timestamp=st.one_of(stamps, stamps, stamps, garbage),
)
group_stats = st.builds(
    DeviceGroupStats,
    vendor=maybe_wrong(texts),
    type=maybe_wrong(texts),
    name=maybe_wrong(texts),
    instance_stats=st.dictionaries(
        keys, st.one_of(device_stats, device_stats, garbage), max_size=3
    ),
)

mounts = st.builds(Mount, maybe_wrong(texts), maybe_wrong(texts), st.one_of(st.booleans(), garbage))
specs = st.builds(DeviceSpec, maybe_wrong(texts), maybe_wrong(texts), maybe_wrong(texts))
reservations = st.builds(
    Reservation,
    envs=st.dictionaries(keys, maybe_wrong(texts), max_size=3),
    mounts=st.lists(st.one_of(mounts, mounts, garbage), max_size=3),
    devices=st.lists(st.one_of(specs, specs, garbage), max_size=3),
)
infos = st.builds(
    PluginInfo,
    name=maybe_wrong(texts),
    version=maybe_wrong(texts),
    api_versions=st.one_of(st.tuples(maybe_wrong(texts)), st.just(("v0.1.0",)), garbage),
)


# -- properties --------------------------------------------------------------------


@FUZZ
@given(groups)
def test_valid_groups_convert_and_round_trip(group: DeviceGroup) -> None:
    problems = group.validate()
    response = fingerprint_response([group], ProblemLog())  # never raises
    if problems:
        assert len(response.device_group) == 0
        return
    assert len(response.device_group) == 1
    wire = device_pb2.DeviceGroup.FromString(convert.group_to_proto(group).SerializeToString())
    assert convert.group_from_proto(wire) == group


@FUZZ
@given(group_stats)
def test_valid_stats_convert_and_parse(group: DeviceGroupStats) -> None:
    problems = group.validate()
    response = stats_response([group], ProblemLog())  # never raises
    if problems:
        assert len(response.groups) == 0
        return
    assert len(response.groups) == 1
    wire = device_pb2.StatsResponse.FromString(response.SerializeToString())
    back = convert.group_stats_from_proto(wire.groups[0])
    assert sorted(back.instance_stats) == sorted(group.instance_stats)
    for key, stats in group.instance_stats.items():
        got = back.instance_stats[key]
        assert got.summary == _as_sent(stats.summary)
        assert (got.stats or StatObject()) == _as_sent(stats.stats or StatObject())
        assert got.timestamp == stats.timestamp.astimezone(dt.UTC)


def _as_sent(value: Any) -> Any:
    """What the wire makes of a value: its float fields are doubles."""
    if isinstance(value, StatValue):
        floats = {
            name: float(getattr(value, name))
            for name in ("float_numerator", "float_denominator")
            if getattr(value, name) is not None
        }
        return dataclasses.replace(value, **floats)
    if isinstance(value, StatObject):
        return StatObject(
            {k: _as_sent(v) for k, v in value.attributes.items()},
            {k: _as_sent(v) for k, v in value.nested.items()},
        )
    return value


@FUZZ
@given(reservations)
def test_valid_reservations_convert_and_round_trip(reservation: Reservation) -> None:
    problems = reservation.validate()
    if problems:
        with pytest.raises(Exception, match="invalid Reservation"):
            _reservation_to_proto(reservation)
        return
    pb = _reservation_to_proto(reservation)
    wire = device_pb2.ReserveResponse.FromString(pb.SerializeToString())
    assert convert.reservation_from_proto(wire.container_res) == reservation


@FUZZ
@given(infos)
def test_valid_plugin_info_converts(info: PluginInfo) -> None:
    if info.validate():
        with pytest.raises(Exception, match="invalid PluginInfo"):
            _info_to_proto(info)
        return
    _info_to_proto(info).SerializeToString()


def test_deep_stats_are_refused_before_the_parser_would() -> None:
    leaf = StatObject({"v": StatValue(int_numerator=1)})
    obj = leaf
    for _ in range(MAX_STATS_DEPTH):
        obj = StatObject(nested={"n": obj})
    group = DeviceGroupStats("v", "t", "n", {"d": DeviceStats(stats=obj)})
    assert any(f"deeper than {MAX_STATS_DEPTH}" in p for p in group.validate())
    shallow = DeviceGroupStats(
        "v", "t", "n", {"d": DeviceStats(stats=StatObject(nested={"n": leaf}))}
    )
    assert shallow.validate() == []


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (Attribute(2**63), "integer value 9223372036854775808 does not fit in int64"),
        (Attribute(-(2**63) - 1), "does not fit in int64"),
        (Attribute(float("nan")), "float value must be finite, not nan"),
        (Attribute(float("-inf"), "MiB"), "float value must be finite, not -inf"),
        (Attribute("\ud800"), "string value '\\ud800' is not valid UTF-8"),
        (Attribute(b"x"), "unsupported attribute value type bytes"),  # type: ignore[arg-type]
        (Attribute(1, 5), "unit must be a string, not int"),  # type: ignore[arg-type]
        (Device("d", healthy="yes"), "healthy must be a bool, not str"),  # type: ignore[arg-type]
        (Device(7), "device ID must be a string, not int"),  # type: ignore[arg-type]
        (Device("d", pci_bus_id="\udcff"), "PCI bus ID '\\udcff' is not valid UTF-8"),
        (StatValue(int_numerator=1.5), "int_numerator must be an int, not float"),  # type: ignore[arg-type]
        (StatValue(float_numerator=10**400), "float_numerator 1"),
        (StatValue(bool_value=1), "bool_value must be a bool, not int"),  # type: ignore[arg-type]
        (
            DeviceStats(timestamp=dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))),
            "is out of range in UTC",
        ),
        (DeviceStats(summary=1), "summary must be a StatValue, not int"),  # type: ignore[arg-type]
        (Reservation(envs={1: "x"}), "env key 1 must be a string, not int"),  # type: ignore[dict-item]
        (Reservation(mounts=("m",)), "mount 0 is a str, not a Mount"),  # type: ignore[arg-type]
    ],
)
def test_validate_names_what_the_wire_cannot_carry(value: Any, problem: str) -> None:
    found = value.validate()
    assert any(problem in p for p in found), found


def test_a_group_with_mixed_key_types_validates_without_raising() -> None:
    group = DeviceGroup("v", "t", "n", (Device("d"),), {"a": Attribute(1), 2: Attribute(2)})  # type: ignore[dict-item]
    assert group.validate() == ["device attribute key 2 must be a string, not int"]
