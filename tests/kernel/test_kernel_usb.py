"""USB devices hot-plugged into a real kernel: found with their serials, nodes and
attributes; unplugged while reserved and plugged back under the same ID; a storm of
plugs and unplugs ends in the right state with few messages.

QEMU's USB devices cannot take other vendor and product IDs than their own
(``usb-serial`` is an FTDI 0403:6001, ``usb-storage`` 46f4:0001); serials they can.
"""

from __future__ import annotations

import os

import pytest
from support.kernel.guest import (
    devices,
    plug_usb_disk,
    plug_usb_serial,
    sysfs_nodes,
    uevent_index,
    unplug,
    usb_device_dir,
)
from support.kernel.kernel_vm import FIGURES, Groups, GuestPlugin, Vm

from nomad_device.host import CallError
from nomad_device.model import Attribute, DeviceSpec

pytestmark = pytest.mark.timeout(900)

SERIAL = "generic/usb-serial/usb-serial"
DISK = "generic/usb-disk/usb-disk"


def test_a_serial_adapter_and_a_stick_are_found_with_their_nodes(
    vm: Vm, plugin: GuestPlugin, addresses: dict[str, str]
) -> None:
    plugin.current()
    plug_usb_serial(vm, "ser1", "NOMAD-SER-1")
    plug_usb_disk(vm, "disk1", "NOMAD-DISK-1")
    adapter, stick = "0403:6001:NOMAD-SER-1", "46f4:0001:NOMAD-DISK-1"

    def both_healthy(groups: Groups) -> bool:
        a, s = devices(groups, SERIAL).get(adapter), devices(groups, DISK).get(stick)
        return a is not None and s is not None and a.healthy and s.healthy

    groups = plugin.wait_for(both_healthy)
    # The stick's block device comes after its USB device: wait for its size too.
    if "size" not in next(g for g in groups if g.key == DISK).attributes:
        groups = plugin.wait_for(
            lambda gs: "size" in next(g for g in gs if g.key == DISK).attributes
        )

    xhci = addresses["xhci"]
    for key, ident, serial, vendor, product, name in (
        (SERIAL, adapter, "NOMAD-SER-1", 0x0403, 0x6001, "QEMU USB SERIAL"),
        (DISK, stick, "NOMAD-DISK-1", 0x46F4, 0x0001, "QEMU USB HARDDRIVE"),
    ):
        found = next(g for g in groups if g.key == key)
        (device,) = found.devices
        assert (device.id, device.healthy, device.pci_bus_id) == (ident, True, xhci), device
        attrs = found.attributes
        assert attrs["usb_vendor_id"] == Attribute(vendor)
        assert attrs["usb_product_id"] == Attribute(product)
        assert attrs["usb_serial"] == Attribute(serial)
        assert attrs["usb_product"] == Attribute(name)
        assert attrs["usb_manufacturer"] == Attribute("QEMU")
    stick_nodes = sysfs_nodes(vm, usb_device_dir(vm, "NOMAD-DISK-1"))
    (disk,) = [p for p in stick_nodes if p.startswith("/dev/sd")]
    sectors = int(vm.read(f"/sys/block/{disk.removeprefix('/dev/')}/size"))
    assert next(g for g in groups if g.key == DISK).attributes["size"] == Attribute(
        sectors * 512 >> 20, "MiB"
    )

    # Every node the kernel made for each device, and nothing else: the tty below the
    # adapter's interface, the stick's disk (and its SCSI bsg node), each one's bus node.
    reservation = plugin.reserve([adapter, stick])
    granted = {d.host_path for d in reservation.devices}
    expected = sysfs_nodes(vm, usb_device_dir(vm, "NOMAD-SER-1")) | stick_nodes
    assert granted == expected, (granted, expected)
    assert all(d == DeviceSpec(d.host_path, d.host_path, "rw") for d in reservation.devices)
    tty = next(p for p in expected if p.startswith("/dev/ttyUSB"))
    assert reservation.envs["GENERIC_USB_SERIAL_PATHS"] == tty
    assert reservation.envs["GENERIC_USB_DISK_PATHS"] == disk

    stats = {g.name: g for g in plugin.stats()}
    port = os.path.basename(usb_device_dir(vm, "NOMAD-SER-1"))
    adapter_stats = stats["usb-serial"].instance_stats[adapter].stats
    assert adapter_stats is not None
    speed = float(vm.read(f"/sys/bus/usb/devices/{port}/speed"))
    assert adapter_stats.attributes["usb_port"].string_value == port
    assert adapter_stats.attributes["usb_speed"].float_numerator == speed

    unplug(vm, "disk1", "blockdev")
    unplug(vm, "ser1", "chardev")


def test_unplugged_while_reserved_it_stays_unhealthy_and_comes_back_under_its_id(
    vm: Vm, plugin: GuestPlugin
) -> None:
    ident = "0403:6001:NOMAD-SER-2"
    plugin.current()
    plug_usb_serial(vm, "ser2", "NOMAD-SER-2")
    plugin.wait_for(lambda gs: getattr(devices(gs, SERIAL).get(ident), "healthy", False))
    before = plugin.reserve([ident])

    unplug(vm, "ser2", "chardev")
    groups = plugin.wait_for(
        lambda gs: ident in devices(gs, SERIAL) and not devices(gs, SERIAL)[ident].healthy
    )
    gone = devices(groups, SERIAL)[ident]
    assert gone.health_description.startswith("not present since "), gone
    with pytest.raises(CallError) as refused:
        plugin.reserve([ident])
    assert refused.value.code.name == "FAILED_PRECONDITION"
    assert "cannot reserve devices that are gone" in refused.value.details

    plug_usb_serial(vm, "ser2", "NOMAD-SER-2")
    plugin.wait_for(lambda gs: getattr(devices(gs, SERIAL).get(ident), "healthy", False))
    after = plugin.reserve([ident])
    expected = sysfs_nodes(vm, usb_device_dir(vm, "NOMAD-SER-2"))
    assert {d.host_path for d in after.devices} == expected
    # The bus node is a new one: the kernel numbers devices in enumeration order.
    assert {d.host_path for d in after.devices} != {d.host_path for d in before.devices}
    unplug(vm, "ser2", "chardev")


def test_a_plug_storm_ends_in_the_right_state_with_few_messages(
    vm: Vm, plugin: GuestPlugin
) -> None:
    """Five adapters, each unplugged as soon as the kernel has made its tty (but the
    last): each plug brings the plugin a dozen uevents, with no pause in between. Each
    adapter has a serial of its own, so the first message showing the last one alone is
    the final state."""
    cycles = 5
    plugin.current()
    first_message = len(plugin.messages)
    first_uevent = uevent_index(vm)
    serials = [f"NOMAD-STORM-{n}" for n in range(cycles)]
    for n, serial in enumerate(serials):
        since = uevent_index(vm)
        plug_usb_serial(vm, f"storm{n}", serial)
        if n < cycles - 1:
            vm.wait_uevents(_tty_added, since)
            unplug(vm, f"storm{n}", "chardev")
    last = f"0403:6001:{serials[-1]}"

    def final(groups: Groups) -> bool:
        found = {i: d for i, d in devices(groups, SERIAL).items() if "STORM" in i}
        return set(found) == {last} and found[last].healthy

    plugin.wait_for(final)
    sent = plugin.read - first_message
    kernel = len(vm.uevents(first_uevent))
    assert sent <= 2 * cycles - 1, f"{sent} messages for {cycles} plugs and {kernel} uevents"
    reservation = plugin.reserve([last])
    assert {d.host_path for d in reservation.devices} == sysfs_nodes(
        vm, usb_device_dir(vm, serials[-1])
    )
    FIGURES["USB storm"] = (
        f"{cycles} plugs, {cycles - 1} unplugs: {kernel} uevents, {sent} messages"
    )
    unplug(vm, f"storm{cycles - 1}", "chardev")


def _tty_added(events: list[dict[str, str]]) -> bool:
    return any(
        e.get("ACTION") == "add" and e.get("DEVNAME", "").startswith("ttyUSB") for e in events
    )
