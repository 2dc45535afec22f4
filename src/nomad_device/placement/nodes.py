"""Nodes and allocations from Nomad's JSON, and a node made of a plugin's fingerprint.

Shapes as Nomad's HTTP API writes them (``api.Node``: ``NodeResources.Devices``
of ``NodeDeviceResource`` with ``Instances`` and ``Attributes``; ``api.Allocation``
with ``AllocatedResources.Tasks[*].Devices[*].DeviceIDs``). ``nomad node status
-json <id>`` prints the same node object; a list of them is read too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nomad_device.model import DeviceGroup
from nomad_device.placement import jsonpos
from nomad_device.placement.attribute import Attribute
from nomad_device.placement.model import (
    Allocation,
    Instance,
    Node,
    NodeDevices,
    Topology,
)

__all__ = ["NodeError", "allocation_from_json", "load_nodes", "node_from_groups", "node_from_json"]


class NodeError(ValueError):
    """Node or allocation JSON that cannot be read; names file:line: field."""


class _Fields:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, node: jsonpos.Located, path: str, message: str) -> NodeError:
        line = f":{node.line}" if node.line else ""
        return NodeError(f"{self.origin}{line}: {path}: {message}")

    def whole(self, node: jsonpos.Located, path: str) -> int:
        value = node.value
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(node, path, f"want a whole number, found {node.kind}")
        return value

    def field(self, parent: jsonpos.Located, name: str, path: str, kind: type, want: str) -> Any:
        """Field ``name`` of ``parent`` (None when absent or null), if it is a ``kind``."""
        node = parent.get(name)
        if node is None or node.value is None:
            return None
        if not isinstance(node.value, kind):
            raise self.fail(node, f"{path}.{name}", f"want {want}, found {node.kind}")
        return node.value

    def string(self, parent: jsonpos.Located, name: str, path: str) -> str:
        return self.field(parent, name, path, str, "a string") or ""

    def boolean(self, parent: jsonpos.Located, name: str, path: str) -> bool:
        return bool(self.field(parent, name, path, bool, "a bool"))

    def items(self, parent: jsonpos.Located, name: str, path: str) -> list[jsonpos.Located]:
        return self.field(parent, name, path, list, "a list") or []

    def mapping(self, parent: jsonpos.Located, name: str, path: str) -> dict[str, Any]:
        return self.field(parent, name, path, dict, "an object") or {}

    def obj(self, node: jsonpos.Located, path: str) -> jsonpos.Located:
        if not isinstance(node.value, dict):
            raise self.fail(node, path, f"want an object, found {node.kind}")
        return node

    def attribute(self, node: jsonpos.Located, path: str) -> Attribute:
        self.obj(node, path)
        values: dict[str, Any] = {}
        for key, kinds in (
            ("Float", (int, float)),
            ("Int", (int,)),
            ("String", (str,)),
            ("Bool", (bool,)),
        ):
            got = node.get(key)
            if got is None or got.value is None:
                continue
            value = got.value
            if isinstance(value, bool) != (key == "Bool") or not isinstance(value, kinds):
                if key == "Int" and isinstance(value, float) and value.is_integer():
                    value = int(value)
                else:
                    raise self.fail(got, f"{path}.{key}", f"want {key.lower()}, found {got.kind}")
            values[key] = value
        unit = self.string(node, "Unit", path)
        return Attribute(
            float_value=float(values["Float"]) if "Float" in values else None,
            int_value=values.get("Int"),
            string_value=values.get("String"),
            bool_value=values.get("Bool"),
            unit=unit,
        )


def _topology(f: _Fields, res: jsonpos.Located, rpath: str) -> Topology | None:
    """``NodeResources.Processors.Topology`` as the API writes it (``numaTopoExt``: the
    ``Nodes``; ``Cores`` and ``Distances`` are not needed), and ``BusAssociativity``
    where a source has it."""
    proc = res.get("Processors")
    if proc is None or proc.value is None:
        return None
    ppath = f"{rpath}.Processors"
    f.obj(proc, ppath)
    top = proc.get("Topology")
    if top is None or top.value is None:
        return None
    tpath = f"{ppath}.Topology"
    f.obj(top, tpath)
    nodes = tuple(
        f.whole(n, f"{tpath}.Nodes[{i}]") for i, n in enumerate(f.items(top, "Nodes", tpath))
    )
    bus: dict[str, int] | None = None
    raw = top.get("BusAssociativity")
    if raw is not None and raw.value is not None:
        bus = {
            key: f.whole(value, f"{tpath}.BusAssociativity[{key!r}]")
            for key, value in f.mapping(top, "BusAssociativity", tpath).items()
        }
        problem = bus_problem(bus)
        if problem:
            raise f.fail(raw, f"{tpath}.BusAssociativity", problem)
    return Topology(nodes, bus)


def bus_problem(bus: dict[str, int]) -> str:
    """Two keys that ``equalBusID`` takes for one bus, on two NUMA nodes: Nomad would pick
    one at random (sysfs never has them; a hand-written file might)."""
    seen: dict[str, tuple[str, int]] = {}
    for key, node in bus.items():
        trimmed = key.lstrip("0")
        other = seen.get(trimmed)
        if other is not None and other[1] != node:
            return (
                f"{other[0]!r} and {key!r} are one bus to Nomad (equalBusID) on two NUMA "
                f"nodes ({other[1]} and {node})"
            )
        seen[trimmed] = (key, node)
    return ""


def _devices(f: _Fields, node: jsonpos.Located, path: str) -> list[NodeDevices]:
    res = node.get("NodeResources")
    if res is None or res.value is None:
        return []
    rpath = f"{path}.NodeResources"
    f.obj(res, rpath)
    out = []
    for di, dev in enumerate(f.items(res, "Devices", rpath)):
        dpath = f"{rpath}.Devices[{di}]"
        f.obj(dev, dpath)
        instances = []
        for ii, inst in enumerate(f.items(dev, "Instances", dpath)):
            ipath = f"{dpath}.Instances[{ii}]"
            f.obj(inst, ipath)
            locality = inst.get("Locality")
            bus = None
            if locality is not None and isinstance(locality.value, dict):
                bus = f.string(locality, "PciBusID", f"{ipath}.Locality")
            instances.append(
                Instance(
                    f.string(inst, "ID", ipath),
                    f.boolean(inst, "Healthy", ipath),
                    f.string(inst, "HealthDescription", ipath),
                    bus,
                )
            )
        attrs = {
            name: f.attribute(value, f"{dpath}.Attributes[{name!r}]")
            for name, value in f.mapping(dev, "Attributes", dpath).items()
        }
        out.append(
            NodeDevices(
                f.string(dev, "Vendor", dpath),
                f.string(dev, "Type", dpath),
                f.string(dev, "Name", dpath),
                tuple(instances),
                attrs,
            )
        )
    return out


def node_from_json(
    node: jsonpos.Located, origin: str, path: str = "(node)", *, stub_ok: bool = False
) -> Node:
    """An ``api.Node``; with ``stub_ok`` also an ``api.NodeListStub`` (no devices)."""
    f = _Fields(origin)
    f.obj(node, path)
    node_id = f.string(node, "ID", path)
    if not node_id and node.get("NodeResources") is None and node.get("Instances") is not None:
        raise f.fail(
            node,
            path,
            "this is a device group of a plugin's fingerprint (`fingerprint --json`), not a "
            "node: give check the plugin itself (check JOB [-c agent.hcl] PLUGIN), or a node "
            "as Nomad shows it (`nomad node status -json <id>`, /v1/node/<id>)",
        )
    if not node_id and node.get("NodeResources") is None:
        raise f.fail(node, path, "not a Nomad node (no ID and no NodeResources)")
    if not stub_ok and node.get("NodeResources") is None:
        raise f.fail(
            node,
            path,
            "no NodeResources: this is a node list entry (`nomad node status -json` without an "
            "ID); use `nomad node status -json <id>` or /v1/node/<id>",
        )
    drain_strategy = node.get("DrainStrategy")
    res = node.get("NodeResources")
    topology = None
    if res is not None and isinstance(res.value, dict):
        topology = _topology(f, res, f"{path}.NodeResources")
    return Node(
        id=node_id,
        name=f.string(node, "Name", path),
        devices=_devices(f, node, path),
        datacenter=f.string(node, "Datacenter", path),
        node_pool=f.string(node, "NodePool", path) or "default",
        status=f.string(node, "Status", path) or "ready",
        eligibility=f.string(node, "SchedulingEligibility", path) or "eligible",
        draining=f.boolean(node, "Drain", path)
        or (drain_strategy is not None and drain_strategy.value is not None),
        computed_class=f.string(node, "ComputedClass", path),
        node_class=f.string(node, "NodeClass", path),
        origin=origin,
        topology=topology,
    )


def load_nodes(path: str) -> list[Node]:
    """``--node FILE``: one node object or a list of them (``-`` for stdin)."""
    text, origin = jsonpos.read_input(path, NodeError)
    try:
        root = jsonpos.parse(text)
    except jsonpos.JSONError as exc:
        raise NodeError(f"{origin}:{exc}") from None
    if isinstance(root.value, list):
        nodes = [node_from_json(n, origin, f"[{i}]") for i, n in enumerate(root.value)]
    else:
        nodes = [node_from_json(root, origin)]
    if not nodes:
        raise NodeError(f"{origin}: the list holds no nodes")
    return nodes


def allocation_from_json(alloc: jsonpos.Located, origin: str, path: str) -> Allocation:
    f = _Fields(origin)
    f.obj(alloc, path)
    held: dict[tuple[str, str, str], list[str]] = {}
    res = alloc.get("AllocatedResources")
    if res is not None and isinstance(res.value, dict):
        rpath = f"{path}.AllocatedResources"
        for task_name, task in f.mapping(res, "Tasks", rpath).items():
            tpath = f"{rpath}.Tasks[{task_name!r}]"
            if task.value is None:
                continue
            f.obj(task, tpath)
            for di, dev in enumerate(f.items(task, "Devices", tpath)):
                dpath = f"{tpath}.Devices[{di}]"
                f.obj(dev, dpath)
                key = (
                    f.string(dev, "Vendor", dpath),
                    f.string(dev, "Type", dpath),
                    f.string(dev, "Name", dpath),
                )
                for ii, inst in enumerate(f.items(dev, "DeviceIDs", dpath)):
                    if not isinstance(inst.value, str):
                        raise f.fail(inst, f"{dpath}.DeviceIDs[{ii}]", "want a string")
                    held.setdefault(key, []).append(inst.value)
    return Allocation(
        id=f.string(alloc, "ID", path),
        name=f.string(alloc, "Name", path),
        job_id=f.string(alloc, "JobID", path),
        client_status=f.string(alloc, "ClientStatus", path),
        devices={k: tuple(v) for k, v in held.items()},
    )


def node_from_groups(
    groups: Sequence[DeviceGroup], name: str, topology: Topology | None = None
) -> Node:
    """The node a Nomad client would register with this plugin's first fingerprint
    (``topology``: the host's, for NUMA; see ``hosttopology.py``)."""
    devices = [
        NodeDevices(
            g.vendor,
            g.type,
            g.name,
            tuple(Instance(d.id, d.healthy, d.health_description, d.pci_bus_id) for d in g.devices),
            {k: Attribute.of(a.value, a.unit) for k, a in g.attributes.items()},
        )
        for g in groups
    ]
    return Node(
        id=name, name=name, devices=devices, datacenter="", origin="plugin", topology=topology
    )
