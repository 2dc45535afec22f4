"""PCI matching on this machine's real PCI functions, over the real wire.

The test VM has a virtio block device (``1af4:1042``, whose descendant in
sysfs is ``/dev/vda``) and a virtio RNG (``1af4:1044``, whose ``/dev/hwrng``
belongs to ``/sys/devices/virtual/misc``, not to the function). The plugin runs
on the real ``/sys`` and ``/dev`` with the page's ``virtio-disk`` preset; every
expectation is read from sysfs here, independently of the plugin's code.
Nothing is opened or changed: a reservation only names nodes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.fake_tree import require_root
from support.generic import COMMAND, by_key, encode_agent_text, preset_text
from support.processes import Launcher

from nomad_device.model import Attribute, DeviceSpec

pytestmark = pytest.mark.timeout(120)

PCI = Path("/sys/bus/pci/devices")


def function(vendor: int, device: int) -> Path | None:
    for entry in sorted(PCI.iterdir()) if PCI.is_dir() else []:
        try:
            ids = (int((entry / "vendor").read_text(), 16), int((entry / "device").read_text(), 16))
        except (OSError, ValueError):
            continue
        if ids == (vendor, device):
            return entry
    return None


def needed(vendor: int, device: int, what: str) -> Path:
    found = function(vendor, device)
    if found is None:
        reason = f"no {what} ({vendor:04x}:{device:04x}) on this machine"
        if os.environ.get("CI") == "true" and Path("/dev/vda").exists():
            pytest.fail(f"{reason}, yet /dev/vda exists: the test VM changed")
        pytest.skip(reason)
    return found


def hexattr(path: Path, name: str) -> int:
    return int((path / name).read_text(), 16)


def disk_nodes(address: Path) -> list[str]:
    """The /dev paths of the block devices below the function: the disk, then its
    partitions, as ``/sys/block/<disk>`` lists them."""
    real = os.path.realpath(address)
    disks = sorted(
        d.name for d in Path("/sys/block").iterdir() if os.path.realpath(d).startswith(real + "/")
    )
    out = []
    for disk in disks:
        out.append(f"/dev/{disk}")
        parts = [p.name for p in Path("/sys/block", disk).iterdir() if (p / "partition").exists()]
        out.extend(f"/dev/{p}" for p in sorted(parts, key=lambda n: (len(n), n)))
    return out


def test_the_virtio_disk_and_rng_by_their_pci_identity(launch: Launcher) -> None:
    require_root()
    disk = needed(0x1AF4, 0x1042, "virtio block PCI function")
    rng = function(0x1AF4, 0x1044)
    text = preset_text("virtio-disk")
    rng_block = (
        '    device "virtio-rng" {\n      pci {\n        vendor_id = "1af4"\n'
        '        device_id = "1044"\n      }\n    }\n'
    )
    if rng is not None:
        text = text.replace("  config {\n", "  config {\n" + rng_block, 1)
    launched = launch(COMMAND, env=dict(os.environ))
    launched.client.set_config(encode_agent_text(text))
    with launched.client.fingerprint() as stream:
        groups = by_key(stream.next(15))

    group = groups["generic/disk/virtio-disk"]
    (device,) = group.devices
    assert (device.id, device.healthy, device.pci_bus_id) == (disk.name, True, disk.name), device
    attrs = group.attributes
    assert attrs["pci_vendor_id"] == Attribute(0x1AF4)
    assert attrs["pci_device_id"] == Attribute(0x1042)
    assert attrs["pci_class"] == Attribute(f"{hexattr(disk, 'class'):06x}")
    assert attrs["pci_subsystem_vendor_id"] == Attribute(hexattr(disk, "subsystem_vendor"))
    assert attrs["pci_driver"] == Attribute(os.path.basename(os.readlink(disk / "driver")))
    numa = int((disk / "numa_node").read_text())
    assert attrs.get("numa_node") == (Attribute(numa) if numa >= 0 else None)
    link = disk / "max_link_speed"
    assert ("pci_link_speed_max" in attrs) == link.exists()  # legacy PCI on this VM
    nodes = disk_nodes(disk)
    assert nodes and nodes[0] == "/dev/vda", nodes
    sectors = int(Path("/sys/block/vda/size").read_text())
    unit = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    size = attrs["size"]
    assert size.value * unit[size.unit] == sectors * 512  # type: ignore[operator]

    reservation = launched.client.reserve([device.id])
    assert reservation.devices == tuple(DeviceSpec(n, n, "r") for n in nodes)
    assert reservation.envs["GENERIC_VIRTIO_DISK_PATHS"] == "/dev/vda"

    if rng is not None:
        (sick,) = groups["generic/virtio-rng/virtio-rng"].devices
        driver = os.path.basename(os.readlink(rng / "driver"))
        assert not sick.healthy
        assert sick.health_description == (
            f"{rng.name} has no device node of its own (bound to {driver})"
        )


def test_nodes_keeps_the_disk_without_its_partitions(launch: Launcher) -> None:
    require_root()
    disk = needed(0x1AF4, 0x1042, "virtio block PCI function")
    text = preset_text("virtio-disk").replace(
        'permissions = "r"', 'permissions = "r"\n      nodes       = ["vda"]', 1
    )
    launched = launch(COMMAND, env=dict(os.environ))
    launched.client.set_config(encode_agent_text(text))
    with launched.client.fingerprint() as stream:
        (group,) = stream.next(15)
    (device,) = group.devices
    assert launched.client.reserve([device.id]).devices == (
        DeviceSpec("/dev/vda", "/dev/vda", "r"),
    )
    assert disk.name == device.id


def test_the_virtio_preset_passes_the_conformance_suite(tmp_path: Path) -> None:
    from nomad_device.testing.conformance import SuiteOptions, run_conformance

    require_root()
    disk = needed(0x1AF4, 0x1042, "virtio block PCI function")
    agent = tmp_path / "agent.hcl"
    agent.write_text(preset_text("virtio-disk"))
    options = SuiteOptions(config_file=agent, plugin_name="nomad-device-generic")
    report = run_conformance(COMMAND, options)
    report.assert_ok(allow_warnings=False)
    assert "1 device(s)" in report.result("device-groups-valid").summary
    assert disk.name
