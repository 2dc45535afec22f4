"""nomad-device-generic on this machine's real /dev and /sys, over the real wire.

Root is needed: nodes such as /dev/kvm are 0600 root, and the plugin's access
check must pass for them to be healthy.
"""

from __future__ import annotations

import os
import stat
from datetime import timedelta
from pathlib import Path

import pytest
from support.fake_tree import require_root
from support.generic import by_key, start
from support.processes import Launcher

from nomad_device.model import Attribute, DeviceSpec
from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig

pytestmark = pytest.mark.timeout(120)

CHAR_NODES = {
    "null": "/dev/null",
    "zero": "/dev/zero",
    "kvm": "/dev/kvm",
    "fuse": "/dev/fuse",
    "tun": "/dev/net/tun",
}
DISKS = ("/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/xvda")


def _is(path: str, test: object) -> bool:
    try:
        return bool(test(os.stat(path).st_mode))  # type: ignore[operator]
    except OSError:
        return False


def _sysfs_subsystem(kind: str, path: str) -> str:
    rdev = os.stat(path).st_rdev
    link = Path(f"/sys/dev/{kind}/{os.major(rdev)}:{os.minor(rdev)}/subsystem")
    return os.path.basename(os.readlink(link))


def test_real_nodes_are_found_checked_and_reserved(launch: Launcher) -> None:
    require_root()
    present = {label: path for label, path in CHAR_NODES.items() if _is(path, stat.S_ISCHR)}
    assert "null" in present and "zero" in present
    blocks = {label: DeviceBlock(paths=[path]) for label, path in present.items()}
    if "kvm" in blocks:
        blocks["kvm"] = DeviceBlock(paths=["/dev/kvm"], share=4)
    loops = sorted(p for p in map(str, Path("/dev").glob("loop[0-9]*")) if _is(p, stat.S_ISBLK))
    if loops:
        blocks["loop"] = DeviceBlock(paths=["/dev/loop[0-9]*"], permissions="rwm")
    disk = next((d for d in DISKS if _is(d, stat.S_ISBLK)), None)
    if disk is not None:
        blocks["disk"] = DeviceBlock(paths=[disk], permissions="r")
    launched = start(launch, GenericConfig(device=blocks, fingerprint_period=timedelta(seconds=5)))
    with launched.client.fingerprint() as stream:
        groups = by_key(stream.next(15))

    for label, path in present.items():
        group = groups[f"generic/{label}/{label}"]
        name = os.path.basename(path)
        expected = [name] if label != "kvm" else [f"kvm::{i}" for i in range(4)]
        assert [d.id for d in group.devices] == expected
        assert all(d.healthy for d in group.devices), group.devices
        rdev = os.stat(path).st_rdev
        assert group.attributes["major"] == Attribute(os.major(rdev))
        assert group.attributes["minor"] == Attribute(os.minor(rdev))
        assert group.attributes["subsystem"] == Attribute(_sysfs_subsystem("char", path))
        ids = [d.id for d in group.devices]
        reservation = launched.client.reserve(ids)
        assert reservation.devices == (DeviceSpec(path, path, "rw"),)
        assert reservation.envs[f"GENERIC_{label.upper()}_IDS"] == name

    if loops:
        group = groups["generic/loop/loop"]
        assert [d.id for d in group.devices] == [os.path.basename(p) for p in loops]
        assert group.attributes["major"] == Attribute(os.major(os.stat(loops[0]).st_rdev))
        assert group.attributes["subsystem"] == Attribute("block")
        reservation = launched.client.reserve([d.id for d in group.devices])
        assert reservation.devices == tuple(DeviceSpec(p, p, "rwm") for p in loops)

    if disk is not None:
        group = groups["generic/disk/disk"]
        (device,) = group.devices
        assert device.healthy, device.health_description
        size = int(Path(f"/sys/class/block/{os.path.basename(disk)}/size").read_text()) * 512
        unit_bytes = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
        attribute = group.attributes["size"]
        assert attribute.value * unit_bytes[attribute.unit] == size  # type: ignore[operator]
        devdir = os.path.realpath(f"/sys/class/block/{os.path.basename(disk)}")
        pci = [p for p in devdir.split("/") if p.count(":") == 2 and "." in p]
        assert device.pci_bus_id == (pci[-1] if pci else None)
        assert launched.client.reserve([device.id]).devices == (DeviceSpec(disk, disk, "r"),)

    with launched.client.stats(0.2) as stats:
        figures = {g.name: g for g in stats.next(15)}
    null = figures["null"].instance_stats["null"]
    assert null.summary is not None and null.summary.string_value == "healthy"
    assert null.stats is not None
    assert null.stats.attributes["reservations"].int_numerator == 1
