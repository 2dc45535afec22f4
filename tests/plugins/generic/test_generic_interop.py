"""The real go-plugin client (interop/cmd/gohost) drives nomad-device-generic as Nomad would.

gohost configures go-plugin as a Nomad agent's plugin loader does, sends the
config bytes our encoder makes (what an agent sends for the same HCL), reads
the first fingerprint, reserves, and kills the plugin the way Nomad does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.fake_tree import FakeTree, require_root

from nomad_device.config import encode_config
from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig, UsbBlock

pytestmark = [pytest.mark.interop, pytest.mark.timeout(900)]

COMMAND = [sys.executable, "-m", "nomad_device.plugins.generic"]


def gohost(interop_bin: Path, env: dict[str, str], *flags: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(interop_bin / "gohost"), *flags, "--", *COMMAND],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        report: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"gohost exited {proc.returncode} without a report:\n{proc.stderr[-4000:]}")
    assert report.get("error") is None, proc.stderr[-4000:]
    return report


def ok(result: dict[str, Any]) -> Any:
    assert result["ok"], result.get("error")
    assert not result.get("invalid"), result["invalid"]
    return result.get("value")


def test_go_host_sees_devices_and_device_specs(interop_bin: Path, tmp_path: Path) -> None:
    require_root()
    tree = FakeTree(tmp_path / "root")
    tree.char("kvm", 10, 232)
    stick = tree.usb("1-2", 0x10C4, 0xEA60, serial="0001", product="CP2102", tty=("ttyUSB0", 0))
    config = GenericConfig(
        device={
            "kvm": DeviceBlock(paths=["/dev/kvm"], share=2),
            "zigbee": DeviceBlock(usb=[UsbBlock(vendor_id="10c4", product_id="ea60")]),
        }
    )
    report = gohost(
        interop_bin,
        tree.env,
        "-quiet",
        "-config-hex",
        encode_config(config).hex(),
        "-reserve",
        "kvm::1",
        "-reserve",
        "10c4:ea60:0001",
        "-reserve",
        "nope",
    )
    assert ok(report["plugin_info"])["name"] == "generic-device"
    schema = ok(report["config_schema"])
    assert schema["fields"] == [
        "device",
        "fingerprint_period",
        "nomad",
        "recovery_quiet_period",
        "vanished_grace",
    ]
    ok(report["set_config"])
    groups = {
        f"{g['vendor']}/{g['type']}/{g['name']}": g for g in ok(report["fingerprint"])["groups"]
    }
    kvm = groups["generic/kvm/kvm"]
    assert [d["id"] for d in kvm["devices"]] == ["kvm::0", "kvm::1"]
    assert all(d["healthy"] for d in kvm["devices"])
    assert kvm["attributes"]["major"] == {"int": 10}
    zigbee = groups["generic/zigbee/zigbee"]
    assert zigbee["devices"] == [
        {
            "id": "10c4:ea60:0001",
            "healthy": True,
            "health_description": "",
            "pci_bus_id": "0000:00:14.0",
        }
    ]
    assert zigbee["attributes"]["usb_vendor_id"] == {"int": 0x10C4}
    assert zigbee["attributes"]["usb_product"] == {"string": "CP2102"}

    kvm_res, zigbee_res, unknown = report["reserve"]
    assert ok(kvm_res) == {
        "envs": {"GENERIC_KVM_IDS": "kvm", "GENERIC_KVM_PATHS": "/dev/kvm"},
        "mounts": [],
        "devices": [
            {"task_path": "/dev/kvm", "host_path": str(tree.dev / "kvm"), "permissions": "rw"}
        ],
    }
    bus = stick.nodes[0]
    assert ok(zigbee_res)["devices"] == [
        {"task_path": "/dev/ttyUSB0", "host_path": str(tree.dev / "ttyUSB0"), "permissions": "rw"},
        {
            "task_path": "/dev/" + str(bus.relative_to(tree.dev)),
            "host_path": str(bus),
            "permissions": "rw",
        },
    ]
    assert not unknown["ok"]
    assert unknown["error"]["code"] == "InvalidArgument"
    assert unknown["error"]["message"] == 'unknown device "nope"'
    stats = ok(report["stats"])
    assert {g["name"] for g in stats["groups"]} == {"kvm", "zigbee"}
    assert report["kill"]["outcome"] == "graceful", report["kill"]


def test_go_host_sees_pci_devices_with_their_locality(interop_bin: Path, tmp_path: Path) -> None:
    """The page's ROCm preset on the fake MI210s (pci_layouts.py), through go-plugin."""
    from support.generic import preset_config
    from support.pci_layouts import PCI_IDS, amd_rocm

    require_root()
    tree = FakeTree(tmp_path / "root")
    tree.pci_ids(PCI_IDS)
    layout = amd_rocm(tree)
    report = gohost(
        interop_bin,
        tree.env,
        "-quiet",
        "-config-hex",
        preset_config("amd").hex(),
        "-reserve",
        "0000:c3:00.0",
    )
    ok(report["set_config"])
    (group,) = ok(report["fingerprint"])["groups"]
    assert (group["vendor"], group["type"], group["name"]) == ("amd", "gpu", "instinct")
    assert group["devices"] == [
        {"id": a, "healthy": True, "health_description": "", "pci_bus_id": a}
        for a in ("0000:03:00.0", "0000:c3:00.0")
    ]
    assert group["attributes"]["memory"] == {"int": 65536, "unit": "MiB"}
    assert group["attributes"]["pci_bandwidth"] == {"int": 32768, "unit": "MB/s"}
    assert group["attributes"]["pci_link_speed"] == {"float": 16.0}
    (reservation,) = report["reserve"]
    render = layout.functions["0000:c3:00.0"].nodes[1]
    assert ok(reservation)["devices"] == [
        {"task_path": "/dev/dri/renderD129", "host_path": str(render), "permissions": "rw"},
        {"task_path": "/dev/kfd", "host_path": str(tree.dev / "kfd"), "permissions": "rw"},
    ]
    assert report["kill"]["outcome"] == "graceful", report["kill"]
