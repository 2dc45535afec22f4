"""PCI functions in a real kernel: a GPU by its IDs, a display by its class, an NVMe
controller; DRM card, render and framebuffer nodes, block and char nodes, as sysfs
shows them; a hot-plugged display's arrival and unplug seen from the uevents.

``virtio-gpu-pci`` cannot be hot-plugged in QEMU, so it is there from boot; a
``bochs-display`` is hot-plugged into a root port that nothing used before.
"""

from __future__ import annotations

import fnmatch
import os

import pytest
from support.kernel.guest import devices, group, hex_attr, sysfs_nodes, unplug_pci
from support.kernel.kernel_vm import FIGURES, GuestPlugin, Vm, pci_addresses

from nomad_device.model import Attribute

pytestmark = pytest.mark.timeout(900)

GPU = "generic/gpu/virtio-gpu"
DISPLAY = "generic/display/display"
NVME = "generic/nvme/nvme"


def identity(vm: Vm, function: str) -> dict[str, Attribute]:
    """The attributes sysfs says a function's group must have."""
    path = f"/sys/bus/pci/devices/{function}"
    attrs = {
        "pci_vendor_id": Attribute(hex_attr(vm, f"{path}/vendor")),
        "pci_device_id": Attribute(hex_attr(vm, f"{path}/device")),
        "pci_subsystem_vendor_id": Attribute(hex_attr(vm, f"{path}/subsystem_vendor")),
        "pci_subsystem_device_id": Attribute(hex_attr(vm, f"{path}/subsystem_device")),
        "pci_class": Attribute(f"{hex_attr(vm, f'{path}/class'):06x}"),
        "pci_driver": Attribute(os.path.basename(vm.sh(f"readlink {path}/driver").strip())),
    }
    speed = float(vm.read(f"{path}/max_link_speed").split()[0])
    width = int(vm.read(f"{path}/max_link_width"))
    attrs["pci_link_speed_max"] = Attribute(speed)
    attrs["pci_link_width_max"] = Attribute(width)
    attrs["pci_link_speed"] = Attribute(float(vm.read(f"{path}/current_link_speed").split()[0]))
    attrs["pci_link_width"] = Attribute(int(vm.read(f"{path}/current_link_width")))
    return attrs


def test_a_gpu_by_id_and_a_hot_plugged_display_by_class_with_their_drm_nodes(
    vm: Vm, plugin: GuestPlugin, addresses: dict[str, str]
) -> None:
    gpu = addresses["gpu"]
    groups = plugin.current()
    found = group(groups, GPU)
    assert found is not None, groups
    (device,) = found.devices
    assert (device.id, device.healthy, device.pci_bus_id) == (gpu, True, gpu), device
    for name, value in identity(vm, gpu).items():
        assert found.attributes[name] == value, name
    # 2.5 GT/s on one lane (QEMU's root port): 256 MB/s, as Nomad's NVIDIA plugin counts.
    assert found.attributes["pci_bandwidth"] == Attribute(256, "MB/s")
    assert "numa_node" not in found.attributes  # -1 on the root complex: no node

    # The function has a card, a render node and (DRM's fbdev emulation) a framebuffer;
    # the block's nodes = ["card*", "renderD*"] keeps the first two.
    everything = sysfs_nodes(vm, f"/sys/bus/pci/devices/{gpu}")
    kept = {n for n in everything if fnmatch.fnmatch(os.path.basename(n), "card*")} | {
        n for n in everything if fnmatch.fnmatch(os.path.basename(n), "renderD*")
    }
    assert any(os.path.basename(n).startswith("fb") for n in everything), everything
    assert len(kept) == 2, everything
    reservation = plugin.reserve([gpu])
    assert {d.host_path for d in reservation.devices} == kept

    # A bochs-display, hot-plugged: class 038000 like the GPU, told apart by its driver.
    plugin.current()
    vm.qmp.command(
        "device_add", driver="bochs-display", id="bochs", bus="rp-hot1", vgamem=8 << 20, romfile=""
    )
    display = pci_addresses(vm.qmp)["bochs"]
    found = group(
        plugin.wait_for(lambda gs: getattr(devices(gs, DISPLAY).get(display), "healthy", False)),
        DISPLAY,
    )
    assert found is not None
    assert found.devices[0].pci_bus_id == display
    for name, value in identity(vm, display).items():
        assert found.attributes[name] == value, name
    assert found.attributes["pci_driver"] == Attribute("bochs-drm")
    nodes = sysfs_nodes(vm, f"/sys/bus/pci/devices/{display}")
    reservation = plugin.reserve([display])
    assert {d.host_path for d in reservation.devices} == nodes
    assert reservation.envs["GENERIC_DISPLAY_PATHS"].startswith("/dev/dri/card"), reservation

    # Unplugged while reserved: unhealthy, seen from the kernel's uevents (the plugin's
    # fingerprint_period is an hour).
    events = unplug_pci(vm, "bochs", display)
    plugin.wait_for(
        lambda gs: (
            devices(gs, DISPLAY).get(display) is not None
            and devices(gs, DISPLAY)[display].health_description.startswith("not present since")
        )
    )
    assert "bochs" not in pci_addresses(vm.qmp)
    # How long from the kernel's first uevent of the unplug (a DRM node's), and from the
    # function's own, to the SDK's host holding the message: both guest times.
    first = next(t for t, e in events if e.get("ACTION") == "remove")
    own = next(t for t, e in events if e.get("DEVPATH", "").endswith("/" + display))
    for what, since in (("first uevent", first), ("the function's uevent", own)):
        FIGURES[f"PCI hot-unplug, {what} to the SDK host"] = (
            f"{(plugin.stamp - since) * 1e3:.0f} ms"
        )


@pytest.mark.parametrize("ident", ["nvme", "nvme-mp"])
def test_an_nvme_controller_and_its_namespace(
    vm: Vm, plugin: GuestPlugin, addresses: dict[str, str], ident: str
) -> None:
    """A plain controller, whose namespace the kernel puts below it, and one in a
    subsystem, whose namespace native multipath puts under the subsystem, outside the
    function: both bring their namespace's block and generic nodes."""
    address = addresses[ident]
    path = f"/sys/bus/pci/devices/{address}"
    groups = plugin.current()
    device = devices(groups, NVME)[address]
    assert (device.healthy, device.pci_bus_id) == (True, address), device

    (controller,) = vm.sh(f"ls {path}/nvme").split()
    below = sysfs_nodes(vm, path)
    subsystem = vm.sh(
        "for s in /sys/class/nvme-subsystem/*; do"
        f" if [ -e $s/{controller} ]; then readlink -f $s; fi; done"
    ).strip()
    heads = {n for n in sysfs_nodes(vm, subsystem) if n != f"/dev/{controller}"}
    if ident == "nvme-mp":  # (QEMU 8 and later give the plain one a subsystem too)
        assert heads and not heads & below, (heads, below)  # under the subsystem
    nodes = below | heads
    (block,) = [n for n in nodes if vm.sh(f"stat -L -c %F {n}").strip() == "block special file"]
    assert vm.sh(f"stat -L -c %F /dev/{controller}").strip() == "character special file"
    assert any(os.path.basename(n).startswith("ng") for n in nodes), nodes  # generic node

    reservation = plugin.reserve([address])
    assert {d.host_path for d in reservation.devices} == nodes
    # The controller comes first, so it is the primary node.
    assert reservation.envs["GENERIC_NVME_PATHS"] == f"/dev/{controller}"
    sectors = int(vm.read(f"/sys/class/block/{os.path.basename(block)}/size"))
    found = group(groups, NVME)
    assert found is not None
    assert found.attributes["size"] == Attribute(sectors * 512 >> 20, "MiB")
