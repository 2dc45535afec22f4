"""Nomad's list answers decoded fast: ``/v1/nodes?resources=true`` and ``/v1/allocations``.

A cluster of 10,000 clients answers with hundreds of megabytes of JSON, most
of it what placement never reads (drivers, networks, task states, the speed
of every core). msgspec decodes into the few typed fields below and skips
the rest without building Python objects. The field rules are those of
``nodes.py``, which stays the authority: a page that does not fit these types
(a wrong type somewhere) is read again by ``nodes.py``, which either accepts
it or names the field that is wrong. Field names are matched exactly, as
Nomad writes them (``nodes.py`` also takes other cases, as Go's decoder does,
for hand-written files). ``tests/placement/test_nodes.py`` checks that both
read the same answers the same way.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from nomad_device.placement import jsonpos
from nomad_device.placement.attribute import Attribute
from nomad_device.placement.model import (
    Allocation,
    Instance,
    Node,
    NodeDevices,
    Topology,
)
from nomad_device.placement.nodes import (
    NodeError,
    allocation_from_json,
    bus_problem,
    node_from_json,
)

__all__ = ["decode_allocations", "decode_computed_class", "decode_nodes"]


class _Locality(msgspec.Struct):
    PciBusID: str | None = None


class _Instance(msgspec.Struct):
    ID: str | None = None
    Healthy: bool | None = None
    HealthDescription: str | None = None
    Locality: _Locality | None = None


class _Attribute(msgspec.Struct):
    Float: float | None = None
    Int: int | None = None
    String: str | None = None
    Bool: bool | None = None
    Unit: str | None = None


class _Device(msgspec.Struct):
    Vendor: str | None = None
    Type: str | None = None
    Name: str | None = None
    Instances: list[_Instance] | None = None
    Attributes: dict[str, _Attribute] | None = None


class _Topology(msgspec.Struct):
    Nodes: list[int] | None = None
    BusAssociativity: dict[str, int] | None = None


class _Processors(msgspec.Struct):
    Topology: _Topology | None = None


class _Resources(msgspec.Struct):
    Devices: list[_Device] | None = None
    Processors: _Processors | None = None


class _NodeStub(msgspec.Struct):
    ID: str | None = None
    Name: str | None = None
    Datacenter: str | None = None
    NodePool: str | None = None
    NodeClass: str | None = None
    Status: str | None = None
    SchedulingEligibility: str | None = None
    Drain: bool | None = None
    DrainStrategy: msgspec.Raw | None = None
    ComputedClass: str | None = None
    NodeResources: _Resources | None = None


class _AllocDevice(msgspec.Struct):
    Vendor: str | None = None
    Type: str | None = None
    Name: str | None = None
    DeviceIDs: list[str] | None = None


class _TaskResources(msgspec.Struct):
    Devices: list[_AllocDevice] | None = None


class _AllocResources(msgspec.Struct):
    Tasks: dict[str, _TaskResources | None] | None = None


class _AllocStub(msgspec.Struct):
    ID: str | None = None
    Name: str | None = None
    NodeID: str | None = None
    JobID: str | None = None
    ClientStatus: str | None = None
    AllocatedResources: _AllocResources | None = None


class _ClassOnly(msgspec.Struct):
    ComputedClass: str | None = None


_NODES = msgspec.json.Decoder(list[_NodeStub])
_ALLOCS = msgspec.json.Decoder(list[_AllocStub])
_CLASS = msgspec.json.Decoder(_ClassOnly)


def _attribute(a: _Attribute) -> Attribute:
    return Attribute(
        float_value=a.Float,
        int_value=a.Int,
        string_value=a.String,
        bool_value=a.Bool,
        unit=a.Unit or "",
    )


#: Attribute maps already built, by their raw fields: a fleet's GPUs mostly report the
#: same ones, and sharing the map lets the scheduler judge them once.
Interned = dict[tuple[object, ...], dict[str, Attribute]]


def _attributes(raw: dict[str, _Attribute] | None, interned: Interned) -> dict[str, Attribute]:
    if not raw:
        return {}
    key = tuple((k, a.Float, a.Int, a.String, a.Bool, a.Unit) for k, a in raw.items())
    got = interned.get(key)
    if got is None:
        got = interned[key] = {k: _attribute(a) for k, a in raw.items()}
    return got


def _node(stub: _NodeStub, origin: str, interned: Interned) -> Node:
    if not stub.ID and stub.NodeResources is None:
        raise _Slow  # not a node: nodes.py says what it is
    devices = []
    topology = None
    res = stub.NodeResources
    if res is not None:
        for d in res.Devices or ():
            devices.append(
                NodeDevices(
                    d.Vendor or "",
                    d.Type or "",
                    d.Name or "",
                    tuple(
                        Instance(
                            i.ID or "",
                            bool(i.Healthy),
                            i.HealthDescription or "",
                            None if i.Locality is None else (i.Locality.PciBusID or ""),
                        )
                        for i in d.Instances or ()
                    ),
                    _attributes(d.Attributes, interned),
                )
            )
        top = res.Processors.Topology if res.Processors is not None else None
        if top is not None:
            if top.BusAssociativity and bus_problem(top.BusAssociativity):
                raise _Slow
            topology = Topology(tuple(top.Nodes or ()), top.BusAssociativity)
    return Node(
        id=stub.ID or "",
        name=stub.Name or "",
        devices=devices,
        datacenter=stub.Datacenter or "",
        node_pool=stub.NodePool or "default",
        status=stub.Status or "ready",
        eligibility=stub.SchedulingEligibility or "eligible",
        draining=bool(stub.Drain)
        or (stub.DrainStrategy is not None and bytes(stub.DrainStrategy) != b"null"),
        node_class=stub.NodeClass or "",
        computed_class=stub.ComputedClass or "",
        origin=origin,
        topology=topology,
    )


def _allocation(stub: _AllocStub) -> Allocation:
    held: dict[tuple[str, str, str], list[str]] = {}
    tasks = stub.AllocatedResources.Tasks if stub.AllocatedResources is not None else None
    for task in (tasks or {}).values():
        if task is None:
            continue
        for dev in task.Devices or ():
            if dev.DeviceIDs:
                key = (dev.Vendor or "", dev.Type or "", dev.Name or "")
                held.setdefault(key, []).extend(dev.DeviceIDs)
    return Allocation(
        id=stub.ID or "",
        name=stub.Name or "",
        job_id=stub.JobID or "",
        client_status=stub.ClientStatus or "",
        devices={k: tuple(v) for k, v in held.items()},
    )


def _plain(body: bytes, where: str) -> list[Any]:
    try:
        value = json.loads(body)
    except RecursionError:
        raise NodeError(f"{where}: nested too deeply to read") from None
    except ValueError as exc:
        raise NodeError(f"{where}: not JSON: {exc}") from None
    if not isinstance(value, list):
        raise NodeError(f"{where}: expected a list")
    return value


class _Slow(Exception):
    """What the typed reader leaves to ``nodes.py``."""


def decode_nodes(body: bytes, where: str, interned: Interned | None = None) -> list[Node]:
    """A page of ``/v1/nodes?resources=true`` (``interned``: shared across pages)."""
    interned = {} if interned is None else interned
    try:
        return [_node(s, where, interned) for s in _NODES.decode(body)]
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, _Slow):
        pass
    return [
        node_from_json(jsonpos.from_plain(n), where, f"[{i}]", stub_ok=True)
        for i, n in enumerate(_plain(body, where))
    ]


def decode_allocations(body: bytes, where: str) -> list[tuple[str, Allocation]]:
    """A page of ``/v1/allocations?resources=true``: (node ID, allocation) pairs."""
    try:
        return [(s.NodeID or "", _allocation(s)) for s in _ALLOCS.decode(body)]
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        pass
    out = []
    for i, a in enumerate(_plain(body, where)):
        located = jsonpos.from_plain(a)
        node_id = located.get("NodeID")
        out.append(
            (
                node_id.value if node_id is not None and isinstance(node_id.value, str) else "",
                allocation_from_json(located, where, f"[{i}]"),
            )
        )
    return out


def decode_computed_class(body: bytes, where: str) -> str:
    """``ComputedClass`` of ``/v1/node/<id>`` (the list stubs do not carry it)."""
    try:
        return _CLASS.decode(body).ComputedClass or ""
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        pass
    value = json.loads(body) if body else None
    node = jsonpos.from_plain(value)
    got = node.get("ComputedClass")
    if got is None or got.value is None:
        return ""
    if not isinstance(got.value, str):
        raise NodeError(f"{where}: ComputedClass: want a string, found {got.kind}")
    return got.value
