"""NUMA in ``check``: the ``numa`` block, a node's topology, and Nomad's device matcher.

Facts from Nomad v2.0.5 (written from its sources, not its tests):

- ``nomad/job_endpoint_hook_numa_ce.go``: Nomad CE refuses a job whose task asks
  for NUMA (``affinity`` "prefer" or "require"); ``scheduler/feasible/numa_ce.go``
  offers only "any memory node" (-1), so CE never binds devices;
- ``nomad/structs``: ``NUMA.Validate`` (the three affinities) and
  ``Resources.Validate`` (every ``numa.devices`` entry names one of the task's
  ``device`` blocks, as written);
- ``scheduler/feasible/device.go``: ``memoryNodeMatcher.Matches`` binds only the
  groups whose full ``vendor/type/name`` is listed, and finds an instance's NUMA
  node by comparing its ``Locality.PciBusID`` with the topology's
  ``BusAssociativity`` keys through ``equalBusID`` (leading zeros trimmed, then
  exact and case-sensitive); an instance with no ``Locality`` or an unknown bus
  is never local;
- ``rank.go``: a task's devices are tried on each candidate NUMA node in turn, and
  from the second attempt on, what a failed attempt took stays taken;
- ``nomad/structs/extensions.go``: the HTTP API writes a node's topology without
  ``BusAssociativity``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from support.fake_nomad import device_group, node
from support.launcher import run_cli

from nomad_device.placement.hosttopology import host_topology, parse_idset
from nomad_device.placement.jobspec import JobError, parse_job_text
from nomad_device.placement.model import (
    DeviceRequest,
    Instance,
    Node,
    NodeDevices,
    Numa,
    Task,
    TaskGroup,
    Topology,
    equal_bus_id,
)
from nomad_device.placement.scheduler import NodeVerdict, check_node

BUS = {"0000:3b:00.0": 0, "0000:af:00.0": 1}


def gpus(*ids_and_buses: tuple[str, str | None]) -> NodeDevices:
    return NodeDevices(
        "nvidia", "gpu", "A100", tuple(Instance(i, pci_bus_id=b) for i, b in ids_and_buses)
    )


TWO = gpus(("g0", "00000000:3b:00.0"), ("g1", "00000000:af:00.0"))


def numa_node(*devices: NodeDevices, bus: dict[str, int] | None = BUS) -> Node:
    return Node("n1", "n1", list(devices), topology=Topology((0, 1), bus))


def task(*reqs: DeviceRequest, bound: tuple[str, ...] = (), affinity: str = "require") -> Task:
    return Task("t", reqs, Numa(affinity, bound))


def verdict(t: Task, n: Node, enterprise: bool = True) -> NodeVerdict:
    return check_node(TaskGroup("g", (t,)), n, enterprise=enterprise)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("0000:3b:00.0", "00000000:3b:00.0", True),
        ("0000:3b:00.0", "0000:3b:00.0", True),
        ("0000:3b:00.0", "00000000:3B:00.0", False),  # sysfs is lower-case; NVML is not
        ("0001:3b:00.0", "00000001:3b:00.0", True),
        ("0000:3b:00.0", "3b:00.0", False),  # no domain at all: ":3b:00.0" vs "3b:00.0"
        ("0000:3b:00.0", "0000:3b:00.1", False),
    ],
)
def test_equal_bus_id(a: str, b: str, same: bool) -> None:
    assert equal_bus_id(a, b) is same
    assert equal_bus_id(b, a) is same


def test_bound_devices_come_from_the_chosen_numa_node() -> None:
    full = "nvidia/gpu/A100"
    one = verdict(task(DeviceRequest(full), bound=(full,)), numa_node(TWO))
    assert one.outcome == "places"
    picks = {(p.ids, p.memory_node) for leaf in one.successes for p in leaf.picks}
    assert picks == {(("g0",), 0), (("g1",), 1)}  # whichever NUMA node Nomad tries first
    both = verdict(task(DeviceRequest(full, 2), bound=(full,)), numa_node(TWO))
    assert both.outcome == "fails"
    leaf = both.failures[0]  # one per order of the NUMA nodes
    (reason,) = [e.reason() for e in leaf.evals if e.name_ok]
    assert "not on NUMA node" in reason


def test_a_bus_id_in_another_case_is_never_local() -> None:
    full = "nvidia/gpu/A100"
    upper = gpus(("g0", "00000000:3B:00.0"), ("g1", "00000000:AF:00.0"), ("g2", None))
    v = verdict(task(DeviceRequest(full), bound=(full,)), numa_node(upper))
    assert v.outcome == "fails"


def test_a_short_name_binds_nothing() -> None:
    # numa { devices = ["nvidia/gpu"] } passes validation (it names the device block) but
    # the matcher compares the group's full ID, "nvidia/gpu/A100": the GPUs are not bound.
    v = verdict(task(DeviceRequest("nvidia/gpu", 2), bound=("nvidia/gpu",)), numa_node(TWO))
    assert v.outcome == "places"
    (leaf,) = v.successes
    assert leaf.picks[0].ids == ("g0", "g1") and leaf.picks[0].memory_node == -1


def test_nomad_ce_binds_nothing() -> None:
    full = "nvidia/gpu/A100"
    v = verdict(task(DeviceRequest(full, 2), bound=(full,)), numa_node(TWO), enterprise=False)
    assert v.outcome == "places"


def test_without_bus_associativity_locality_is_not_known() -> None:
    full = "nvidia/gpu/A100"
    v = verdict(task(DeviceRequest(full), bound=(full,)), numa_node(TWO, bus=None))
    assert v.outcome == "may"
    assert any("BusAssociativity" in n for n in v.notes)


def test_what_a_failed_numa_attempt_took_stays_taken() -> None:
    # Three NUMA nodes. The task's first request is an unbound group with one instance,
    # the second a bound group whose only GPU is on node 2. The first attempt's take is
    # undone; the second's is not (rank.go keeps using the restored snapshot), so when
    # node 2 comes third, the unbound instance is already gone: it fails.
    unbound = NodeDevices("acme", "fpga", "U", (Instance("u0"),))
    bound = NodeDevices("nvidia", "gpu", "B", (Instance("b2", pci_bus_id="0000:c1:00.0"),))
    n = Node("n", "n", [unbound, bound], topology=Topology((0, 1, 2), {"0000:c1:00.0": 2}))
    t = task(DeviceRequest("acme/fpga/U"), DeviceRequest("nvidia/gpu/B"), bound=("nvidia/gpu/B",))
    v = verdict(t, n)
    assert v.outcome == "may"
    failed = [leaf for leaf in v.failures]
    assert failed and all(
        f.request.name == "acme/fpga/U" for leaf in failed for f in leaf.failures[:1]
    )


# --------------------------------------------------------------------- the job


NUMA_JOB = """\
job "train" {
  datacenters = ["dc1"]
  group "g" {
    task "main" {
      resources {
        cores = 4
        device "%(device)s" {}
        numa {
          affinity = "%(affinity)s"
          devices  = ["%(bound)s"]
        }
      }
    }
  }
}
"""


def _job(device: str = "nvidia/gpu", affinity: str = "require", bound: str = "") -> str:
    return NUMA_JOB % {"device": device, "affinity": affinity, "bound": bound or device}


def test_the_numa_block_is_read_from_hcl_and_json() -> None:
    hcl = parse_job_text(_job(), "job.hcl", enterprise=True)
    (t,) = hcl.groups[0].tasks
    assert t.numa is not None
    assert (t.numa.affinity, t.numa.devices) == ("require", ("nvidia/gpu",))
    assert t.numa.where == "job.hcl:8"
    api = {
        "Job": {
            "ID": "train",
            "TaskGroups": [
                {
                    "Name": "g",
                    "Tasks": [
                        {
                            "Name": "main",
                            "Resources": {
                                "Devices": [{"Name": "nvidia/gpu"}],
                                "NUMA": {"Affinity": "require", "Devices": ["nvidia/gpu"]},
                            },
                        }
                    ],
                }
            ],
        }
    }
    (t2,) = parse_job_text(json.dumps(api), "job.json", enterprise=True).groups[0].tasks
    assert t2.numa is not None and t2.numa.devices == ("nvidia/gpu",)


@pytest.mark.parametrize(
    ("text", "enterprise", "message"),
    [
        (_job(), False, "numa scheduling requires Nomad Enterprise"),
        (_job(affinity="prefer"), False, "numa scheduling requires Nomad Enterprise"),
        (_job(affinity="strict"), True, "numa affinity must be one of none, prefer, or require"),
        (_job(bound="nvidia/gpu/A100"), True, "numa device 'nvidia/gpu/A100' not requested"),
        (_job(affinity="prefer"), True, 'only be given with affinity = "require"'),
    ],
)
def test_numa_validation(text: str, enterprise: bool, message: str) -> None:
    with pytest.raises(JobError, match=re.escape('job.hcl:8: group "g" task "main" numa: ')) as err:
        parse_job_text(text, "job.hcl", enterprise=enterprise)
    assert message in str(err.value)


def test_affinity_none_is_fine_on_ce() -> None:
    parse_job_text(_job(affinity="none"), "job.hcl")


# --------------------------------------------------------- node JSON, a cluster


def _numa_node_json(bus: bool) -> dict[str, object]:
    group = device_group("nvidia", "gpu", "A100", [("g0", True, ""), ("g1", True, "")])
    group["Instances"][0]["Locality"] = {"PciBusID": "00000000:3b:00.0"}  # type: ignore[index]
    group["Instances"][1]["Locality"] = {"PciBusID": "00000000:af:00.0"}  # type: ignore[index]
    full = node("5b0c7e3a-1111", "gpu-1", [group])
    topo: dict[str, object] = {"Nodes": [0, 1], "Distances": ["ChU=", "FQo="], "Cores": []}
    if bus:
        topo["BusAssociativity"] = BUS
    full["NodeResources"]["Processors"] = {"Topology": topo}
    return full


@pytest.mark.parametrize(("bus", "code", "outcome"), [(True, 1, "fails"), (False, 1, "may")])
def test_check_with_numa_against_node_json(
    tmp_path: Path, bus: bool, code: int, outcome: str
) -> None:
    nodes = tmp_path / "node.json"
    nodes.write_text(json.dumps(_numa_node_json(bus)))
    job = tmp_path / "job.hcl"
    full = "nvidia/gpu/A100"
    job.write_text(
        _job(device=full).replace('device "nvidia/gpu/A100" {}', f'device "{full}" {{ count = 2 }}')
    )
    ce = run_cli("check", str(job), "--node", str(nodes))
    assert ce.returncode == 2
    assert "numa scheduling requires Nomad Enterprise" in ce.stderr
    ent = run_cli("check", "--json", "--enterprise", str(job), "--node", str(nodes))
    assert ent.returncode == code, ent.stderr
    entry = json.loads(ent.stdout)["TaskGroups"][0]["Nodes"][0]
    assert entry["Outcome"] == outcome


def test_the_short_name_job_places_under_enterprise(tmp_path: Path) -> None:
    nodes = tmp_path / "node.json"
    nodes.write_text(json.dumps(_numa_node_json(True)))
    job = tmp_path / "job.hcl"
    job.write_text(_job().replace('device "nvidia/gpu" {}', 'device "nvidia/gpu" { count = 2 }'))
    result = run_cli("check", "--enterprise", str(job), "--node", str(nodes))
    assert result.returncode == 0, result.stderr
    assert "nvidia/gpu/A100 [g0, g1]" in result.stdout


# ------------------------------------------------------------- a plugin on this host


def _sysfs(root: Path) -> None:
    (root / "devices/system/node").mkdir(parents=True)
    (root / "devices/system/node/online").write_text("0-1\n")
    for name, numa in (("0000:3b:00.0", "0"), ("0000:af:00.0", "1"), ("0000:00:1f.0", "-1")):
        d = root / "bus/pci/devices" / name
        d.mkdir(parents=True)
        (d / "numa_node").write_text(numa + "\n")


def test_host_topology_from_sysfs(tmp_path: Path) -> None:
    _sysfs(tmp_path)
    topo = host_topology(str(tmp_path))
    assert topo == Topology((0, 1), {"0000:3b:00.0": 0, "0000:af:00.0": 1})
    assert parse_idset("0-2,5,x,7-8") == (0, 1, 2, 5, 7, 8)
    assert host_topology(str(tmp_path / "none")) is None


PLUGIN = """\
from nomad_device import Device, DeviceGroup, DevicePlugin, serve


class Gpus(DevicePlugin[None]):
    name = "numa-gpus"
    version = "0.1.0"

    def detect(self):
        return [DeviceGroup("nvidia", "gpu", "A100", devices=(
            Device("g0", pci_bus_id="00000000:3b:00.0"),
            Device("g1", pci_bus_id="00000000:af:00.0"),
        ))]

    def reserve(self, ids):
        raise NotImplementedError


if __name__ == "__main__":
    serve(Gpus)
"""


def test_a_plugin_on_this_host_is_judged_with_its_topology(tmp_path: Path) -> None:
    from support.launcher import cli_env

    sysfs = tmp_path / "sys"
    _sysfs(sysfs)
    plugin = tmp_path / "gpus.py"
    plugin.write_text(PLUGIN)
    job = tmp_path / "job.hcl"
    full = "nvidia/gpu/A100"
    job.write_text(_job(device=full))
    env = cli_env(NOMAD_DEVICE_CHECK_SYS_ROOT=str(sysfs))
    result = run_cli("check", "-q", "--enterprise", str(job), str(plugin), env=env)
    assert result.returncode == 0, result.stderr
    assert "nvidia/gpu/A100 [g0] on NUMA node 0" in result.stdout
    assert "nvidia/gpu/A100 [g1] on NUMA node 1" in result.stdout
    assert sys.executable  # the plugin runs with this Python
