"""Driver bind and unbind through sysfs in a real kernel (``unbind``, ``bind``,
``driver_override``): the device's health follows, with the reason, and a function
another driver took leaves the block.
"""

from __future__ import annotations

import os

import pytest
from support.kernel.guest import devices, sysfs_nodes, write
from support.kernel.kernel_vm import GuestPlugin, Vm

pytestmark = pytest.mark.timeout(900)

BIND = "generic/bind/bind"


def test_health_follows_the_driver_through_unbind_bind_and_driver_override(
    vm: Vm, plugin: GuestPlugin, addresses: dict[str, str]
) -> None:
    disk = addresses["bind"]
    path = f"/sys/bus/pci/devices/{disk}"

    def driver() -> str:
        return os.path.basename(vm.sh(f"readlink {path}/driver || true").strip())

    groups = plugin.current()
    assert devices(groups, BIND)[disk].healthy, groups
    assert driver() == "virtio-pci"
    plugin.reserve([disk])  # in use: when another driver takes it, it stays listed

    write(vm, "/sys/bus/pci/drivers/virtio-pci/unbind", disk)
    assert driver() == ""
    plugin.wait_for(
        lambda gs: (
            devices(gs, BIND)[disk].health_description
            == f"no driver is bound to {disk} (expected virtio-pci)"
        )
    )

    write(vm, "/sys/bus/pci/drivers/virtio-pci/bind", disk)
    plugin.wait_for(lambda gs: devices(gs, BIND)[disk].healthy)
    reservation = plugin.reserve([disk])
    assert {d.host_path for d in reservation.devices} == sysfs_nodes(vm, path)

    # pci-stub takes it: it is no longer the block's (its driver is not virtio-pci), and
    # the reason says so (it is there, so not "not present").
    vm.sh(f"modprobe -d {vm.kernel.root} pci-stub")
    write(vm, f"{path}/driver_override", "pci-stub")
    write(vm, "/sys/bus/pci/drivers/virtio-pci/unbind", disk)
    write(vm, "/sys/bus/pci/drivers_probe", disk)
    assert driver() == "pci-stub"
    plugin.wait_for(
        lambda gs: devices(gs, BIND)[disk].health_description.startswith(
            "bound to pci-stub, not virtio-pci, since "
        )
    )
    logged = [m for level, m, f in plugin.logs() if disk in m or disk in f.values()]
    assert any("pci-stub" in line for line in logged), logged

    # The override cleared and the function probed again: virtio-pci has it back.
    write(vm, f"{path}/driver_override", "")
    write(vm, "/sys/bus/pci/drivers/pci-stub/unbind", disk)
    write(vm, "/sys/bus/pci/drivers_probe", disk)
    assert driver() == "virtio-pci"
    plugin.wait_for(lambda gs: devices(gs, BIND)[disk].healthy)
