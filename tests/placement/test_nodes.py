"""Node and allocation JSON as Nomad's API writes it (``api.Node``, ``api.Allocation``)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from support.fake_nomad import allocation, device_group, node

from nomad_device.model import Attribute as ModelAttribute
from nomad_device.model import Device, DeviceGroup
from nomad_device.placement import jsonpos
from nomad_device.placement.attribute import Attribute
from nomad_device.placement.nodes import (
    NodeError,
    allocation_from_json,
    load_nodes,
    node_from_groups,
)

GPU = device_group(
    "nvidia",
    "gpu",
    "T4",
    [("GPU-1", True, ""), ("GPU-2", False, "hot")],
    memory={"Int": 16, "Unit": "GiB"},
    clock={"Float": 1.59, "Unit": "GHz"},
    model="T4",
    ecc=True,
)


def test_node_fields(tmp_path: Path) -> None:
    path = tmp_path / "n.json"
    path.write_text(
        json.dumps(
            node(
                "abcdef12-3456",
                "gpu-1",
                [GPU],
                datacenter="dc2",
                pool="gpus",
                computed_class="v1:42",
            )
        )
    )
    (n,) = load_nodes(str(path))
    assert (n.id, n.name, n.datacenter, n.node_pool, n.computed_class) == (
        "abcdef12-3456",
        "gpu-1",
        "dc2",
        "gpus",
        "v1:42",
    )
    (dev,) = n.devices
    assert [(i.id, i.healthy, i.health_description) for i in dev.instances] == [
        ("GPU-1", True, ""),
        ("GPU-2", False, "hot"),
    ]
    assert dev.attributes == {
        "memory": Attribute(int_value=16, unit="GiB"),
        "clock": Attribute(float_value=1.59, unit="GHz"),
        "model": Attribute(string_value="T4"),
        "ecc": Attribute(bool_value=True),
    }


def test_draining_nodes_are_marked(tmp_path: Path) -> None:
    path = tmp_path / "n.json"
    path.write_text(json.dumps([node("a", "a", [GPU], drain=True), node("b", "b", [GPU])]))
    assert [n.draining for n in load_nodes(str(path))] == [True, False]


def test_allocation_devices_per_task() -> None:
    raw = allocation(
        "8f2c1a9d-0000",
        "web.api[0]",
        "n1",
        {
            "a": [("nvidia", "gpu", "T4", ["GPU-1"])],
            "b": [("nvidia", "gpu", "T4", ["GPU-2"]), ("x", "y", "z", ["q"])],
        },
        client_status="running",
    )
    alloc = allocation_from_json(jsonpos.parse(json.dumps(raw)), "allocs.json", "[0]")
    assert alloc.name == "web.api[0]" and alloc.client_status == "running" and alloc.job_id == "web"
    assert alloc.devices == {("nvidia", "gpu", "T4"): ("GPU-1", "GPU-2"), ("x", "y", "z"): ("q",)}


def test_plugin_fingerprint_as_a_node() -> None:
    group = DeviceGroup(
        "nomad",
        "file",
        "mock",
        (Device("device01", healthy=False, health_description="bad"), Device("device02")),
        {"size": ModelAttribute(3, "MiB"), "note": ModelAttribute("x")},
    )
    n = node_from_groups([group], "example-fs-device")
    (dev,) = n.devices
    assert [i.id for i in dev.instances] == ["device01", "device02"]
    assert dev.attributes["size"] == Attribute(int_value=3, unit="MiB")
    assert dev.attributes["note"] == Attribute(string_value="x")


def test_damaged_node_json_only_ever_gives_node_errors(tmp_path: Path) -> None:
    text = json.dumps(node("abcdef12-3456", "gpu-1", [GPU]), indent=1)
    rng = random.Random(11)
    path = tmp_path / "n.json"
    for _ in range(200):
        damaged = text
        at = rng.randrange(len(damaged))
        damaged = (
            damaged[:at]
            + rng.choice(['"', "{", "]", "1", "null", "", ","])
            + damaged[at + rng.randint(0, 4) :]
        )
        path.write_text(damaged)
        try:
            load_nodes(str(path))
        except NodeError as exc:
            assert str(exc).startswith(str(path)), exc


@pytest.mark.parametrize("text", ["[]", '"x"', "{}", '{"ID": "n"}'])
def test_not_a_node(tmp_path: Path, text: str) -> None:
    path = tmp_path / "n.json"
    path.write_text(text)
    with pytest.raises(NodeError):
        load_nodes(str(path))
