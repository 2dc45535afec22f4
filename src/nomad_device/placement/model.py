"""What the checker works on: a job's device requests and nodes' device groups.

Field names follow Nomad's structs (``RequestedDevice``, ``NodeDeviceResource``,
``Allocation``) so the scheduler code reads like the source it mirrors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from nomad_device.placement.attribute import Attribute

__all__ = [
    "Affinity",
    "Allocation",
    "Constraint",
    "DeviceRequest",
    "Instance",
    "Job",
    "Node",
    "NodeDevices",
    "Numa",
    "Task",
    "TaskGroup",
    "Topology",
    "equal_bus_id",
    "request_id",
]


@dataclass(frozen=True)
class Constraint:
    ltarget: str
    rtarget: str
    operand: str

    def __str__(self) -> str:
        return f"{self.ltarget} {self.operand} {self.rtarget}".rstrip()


@dataclass(frozen=True)
class Affinity:
    ltarget: str
    rtarget: str
    operand: str
    weight: int

    def __str__(self) -> str:
        return f"{self.ltarget} {self.operand} {self.rtarget}".rstrip() + f" (weight {self.weight})"


@dataclass(frozen=True)
class DeviceRequest:
    name: str
    count: int = 1
    constraints: tuple[Constraint, ...] = ()
    affinities: tuple[Affinity, ...] = ()
    #: Where the request was written, for messages (``job.hcl:12``).
    where: str = ""


def request_id(name: str) -> tuple[str, str, str]:
    """``RequestedDevice.ID``: (vendor, type, name); an empty part matches anything."""
    parts = name.split("/", 2)
    if len(parts) == 1:
        return "", parts[0], ""
    if len(parts) == 2:
        return parts[0], parts[1], ""
    return parts[0], parts[1], parts[2]


@dataclass(frozen=True)
class Numa:
    """A task's ``resources { numa { affinity devices } }`` (``structs.NUMA``)."""

    affinity: str = "none"
    #: Request names, each one of the task's ``device`` blocks.
    devices: tuple[str, ...] = ()
    #: Where the block was written, for messages (``job.hcl:12``).
    where: str = ""

    @property
    def requested(self) -> bool:
        """``NUMA.Requested``: "prefer" or "require"."""
        return self.affinity not in ("none", "")


@dataclass(frozen=True)
class Task:
    name: str
    devices: tuple[DeviceRequest, ...] = ()
    numa: Numa | None = None


@dataclass(frozen=True)
class TaskGroup:
    name: str
    tasks: tuple[Task, ...] = ()
    count: int = 1


@dataclass(frozen=True)
class Job:
    id: str
    groups: tuple[TaskGroup, ...]
    datacenters: tuple[str, ...] = ("*",)
    node_pool: str = "default"
    namespace: str = "default"
    origin: str = ""
    type: str = "service"


class Instance(NamedTuple):
    """One device of a group (a tuple: a fleet has hundreds of thousands of them)."""

    id: str
    healthy: bool = True
    health_description: str = ""
    #: ``Locality.PciBusID``; None when the instance has no ``Locality``.
    pci_bus_id: str | None = None


def equal_bus_id(a: str, b: str) -> bool:
    """``equalBusID`` (scheduler/feasible/device.go): leading zeros trimmed, then an exact,
    case-sensitive compare, so ``00000000:3b:00.0`` is ``0000:3b:00.0`` but not ``...:3B:...``."""
    return a == b or a.lstrip("0") == b.lstrip("0")


@dataclass(frozen=True)
class Topology:
    """``NodeResources.Processors.Topology``: the NUMA nodes, and which NUMA node each PCI
    bus is attached to (its cores are not read: which cores a task gets is not modelled)."""

    nodes: tuple[int, ...] = ()
    #: ``BusAssociativity`` (sysfs bus address -> NUMA node), or None where the source
    #: does not carry it: Nomad v2.0.5's HTTP API leaves it out of a node's JSON.
    bus: dict[str, int] | None = None

    def numa_node_of(self, bus_id: str) -> int | None:
        """The NUMA node of a device's bus, as ``memoryNodeMatcher`` finds it (None: none)."""
        if self.bus is None:
            return None
        found = self.bus.get(bus_id)
        if found is not None:
            return found
        for key, node in self.bus.items():
            if equal_bus_id(key, bus_id):
                return node
        return None


@dataclass(frozen=True)
class NodeDevices:
    """``NodeDeviceResource``: one device group on a node."""

    vendor: str
    type: str
    name: str
    instances: tuple[Instance, ...] = ()
    attributes: dict[str, Attribute] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.vendor, self.type, self.name)

    @property
    def label(self) -> str:
        return f"{self.vendor}/{self.type}/{self.name}"

    def matches(self, name: str) -> bool:
        """``DeviceIdTuple.Matches`` of this group against a request's name."""
        vendor, type_, model = request_id(name)
        if model and model != self.name:
            return False
        if vendor and vendor != self.vendor:
            return False
        return not (type_ and type_ != self.type)


@dataclass(frozen=True)
class Allocation:
    """A non-terminal allocation on a node, reduced to the devices it holds."""

    id: str
    name: str
    job_id: str = ""
    client_status: str = ""
    #: (vendor, type, name) -> instance IDs.
    devices: dict[tuple[str, str, str], tuple[str, ...]] = field(default_factory=dict)

    @property
    def short(self) -> str:
        return self.id[:8]


@dataclass
class Node:
    id: str
    name: str
    devices: list[NodeDevices]
    datacenter: str = ""
    node_pool: str = "default"
    status: str = "ready"
    eligibility: str = "eligible"
    draining: bool = False
    computed_class: str = ""
    #: ``NodeClass``, the operator's word (part of the computed class).
    node_class: str = ""
    allocations: list[Allocation] = field(default_factory=list)
    topology: Topology | None = None
    #: Where the node came from (a file, the cluster, a plugin), for messages.
    origin: str = ""

    @property
    def short(self) -> str:
        return self.id[:8] if len(self.id) > 8 else self.id
