"""VFIO in a real kernel: a function bound to ``vfio-pci`` under QEMU's virtual IOMMU
brings its group's node and the container node, and its health follows the group's
viability as the other member of its IOMMU group is unbound and bound again.

QEMU's ``edu`` device (1234:11e8, no driver of its own) and a virtio RNG are two
functions of one device behind one root port: one IOMMU group.
"""

from __future__ import annotations

import os

import pytest
from support.kernel.guest import devices, write
from support.kernel.kernel_vm import GuestPlugin, Vm

pytestmark = pytest.mark.timeout(900)

VFIO = "generic/vfio/vfio"


def test_a_vfio_function_and_the_viability_of_its_group(
    vm: Vm, plugin: GuestPlugin, addresses: dict[str, str]
) -> None:
    edu, mate = addresses["edu"], addresses["vfio-mate"]
    iommu = f"/sys/bus/pci/devices/{edu}/iommu_group"
    number = os.path.basename(vm.sh(f"readlink {iommu}").strip())
    assert set(vm.sh(f"ls {iommu}/devices").split()) == {edu, mate}
    mate_driver = os.path.basename(vm.sh(f"readlink /sys/bus/pci/devices/{mate}/driver").strip())

    groups = plugin.current()
    assert devices(groups, VFIO)[edu].health_description == (
        f"no driver is bound to {edu} (expected vfio-pci)"
    )

    # Bound to vfio-pci as an operator does it: driver_override, then a probe.
    vm.sh(f"modprobe -d {vm.kernel.root} vfio-pci")
    write(vm, f"/sys/bus/pci/devices/{edu}/driver_override", "vfio-pci")
    write(vm, "/sys/bus/pci/drivers_probe", edu)
    blocked = (
        f"IOMMU group {number} cannot be given to VFIO: {mate} ({mate_driver})"
        " must be bound to vfio-pci (or unbound) as well"
    )
    plugin.wait_for(lambda gs: devices(gs, VFIO)[edu].health_description == blocked)

    # The other function unbound: the group is viable.
    write(vm, f"/sys/bus/pci/devices/{mate}/driver/unbind", mate)
    plugin.wait_for(lambda gs: devices(gs, VFIO)[edu].healthy)
    nodes = {f"/dev/vfio/{number}", "/dev/vfio/vfio"}
    assert (
        vm.sh(f"stat -c %F {' '.join(sorted(nodes))}").split("\n")[:2]
        == ["character special file"] * 2
    )
    reservation = plugin.reserve([edu])
    assert {d.host_path for d in reservation.devices} == nodes

    # Bound again: not viable again.
    write(vm, f"/sys/bus/pci/drivers/{mate_driver}/bind", mate)
    plugin.wait_for(lambda gs: devices(gs, VFIO)[edu].health_description == blocked)
