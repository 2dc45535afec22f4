"""NUMA in a real kernel: two guest NUMA nodes, a virtio disk behind an expander bridge
on each; ``numa_node`` and the locality as sysfs has them, and ``check --enterprise``
run in the guest against the guest's topology pairs each disk with its node.
"""

from __future__ import annotations

import json
import shlex

import pytest
from support.kernel.guest import group
from support.kernel.kernel_vm import PLUGIN, GuestPlugin, Vm

from nomad_device.model import Attribute

pytestmark = pytest.mark.timeout(900)


def test_each_disk_has_its_node_and_check_pairs_them(
    vm: Vm, plugin: GuestPlugin, addresses: dict[str, str]
) -> None:
    disks = {node: addresses[f"numa{node}"] for node in (0, 1)}
    assert vm.read("/sys/devices/system/node/online") == "0-1"
    groups = plugin.current()
    for node, address in disks.items():
        assert int(vm.read(f"/sys/bus/pci/devices/{address}/numa_node")) == node
        found = group(groups, f"generic/disk/numa/{address}")
        assert found is not None, groups
        (device,) = found.devices
        assert (device.id, device.healthy, device.pci_bus_id) == (address, True, address)
        assert found.attributes["numa_node"] == Attribute(node)

    # One disk with require places on either node, with that node's disk; two do not.
    config = {"device": {"numa": {"type": "disk", "pci": [{"address": a} for a in disks.values()]}}}
    job = {
        "Job": {
            "ID": "numa",
            "Name": "numa",
            "Datacenters": ["*"],
            "TaskGroups": [
                {
                    "Name": f"disks{count}",
                    "Tasks": [
                        {
                            "Name": "task",
                            "Driver": "exec",
                            "Resources": {
                                "NUMA": {"Affinity": "require", "Devices": ["generic/disk/numa"]},
                                "Devices": [{"Name": "generic/disk/numa", "Count": count}],
                            },
                        }
                    ],
                }
                for count in (1, 2)
            ],
        }
    }
    launcher = PLUGIN[0].rsplit("/", 1)[0] + "/nomad-device-launcher"
    script = (
        f'cd "$TMPDIR" && printf %s {shlex.quote(json.dumps(job))} > job.json && '
        f"{launcher} check --enterprise --json job.json"
        f" --config-json {shlex.quote(json.dumps(config))} nomad-device-generic; true"
    )
    report = json.loads(vm.sh(script, timeout=900))
    one, two = report["TaskGroups"]
    (node,) = one["Nodes"]
    assert node["Outcome"] == "places", node
    pairs = {
        (pick["NumaNode"], tuple(pick["DeviceIDs"]))
        for outcome in node["Outcomes"]
        for pick in outcome["Devices"]
    }
    assert pairs == {(n, (a,)) for n, a in disks.items()}, node["Outcomes"]
    (node,) = two["Nodes"]
    assert node["Outcome"] == "fails", node
