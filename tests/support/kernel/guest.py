"""What the scenarios ask of the guest and of QEMU: plugging, reading sysfs, reading messages.

Expectations are read from the guest's sysfs with its shell, independently of the
plugin's code. Devices are plugged and unplugged over QMP; a USB unplug is waited
for by its ``DEVICE_DELETED`` event, a PCI one by the kernel's ``remove`` uevent.
"""

from __future__ import annotations

import shlex

from nomad_device.model import Device, DeviceGroup
from support.kernel.kernel_vm import Groups, Vm


def group(groups: Groups, key: str) -> DeviceGroup | None:
    return next((g for g in groups if g.key == key), None)


def devices(groups: Groups, key: str) -> dict[str, Device]:
    found = group(groups, key)
    return {} if found is None else {d.id: d for d in found.devices}


def sysfs_nodes(vm: Vm, directory: str) -> set[str]:
    """The /dev path of every node at or below a sysfs directory: each ``dev`` file's
    directory names its node by ``DEVNAME`` in its ``uevent``."""
    script = (
        f"find {shlex.quote(directory.rstrip('/') + '/')} -name dev -type f"
        " | while read -r f; do sed -n 's/^DEVNAME=//p' \"${f%/dev}/uevent\"; done"
    )
    return {f"/dev/{name}" for name in vm.sh(script).split()}


def usb_device_dir(vm: Vm, serial: str) -> str:
    """The sysfs directory of the plugged USB device with this serial number."""
    script = (
        "for d in /sys/bus/usb/devices/*; do"
        f' if [ "$(cat $d/serial 2>/dev/null)" = {shlex.quote(serial)} ]; then readlink -f $d; fi;'
        " done"
    )
    found = vm.sh(script).split()
    assert len(found) == 1, f"USB serial {serial}: {found}"
    return found[0]


def hex_attr(vm: Vm, path: str) -> int:
    return int(vm.read(path), 16)


# ------------------------------------------------------------------------ USB


def plug_usb_serial(vm: Vm, ident: str, serial: str) -> None:
    """An FTDI adapter (QEMU's ``usb-serial``: 0403:6001) on the xHCI controller; it
    attaches only with ``always-plugged``, its chardev a null one."""
    vm.qmp.command("chardev-add", id=f"{ident}-chr", backend={"type": "null", "data": {}})
    vm.qmp.command(
        "device_add",
        driver="usb-serial",
        id=ident,
        bus="xhci.0",
        chardev=f"{ident}-chr",
        serial=serial,
        **{"always-plugged": True},
    )


def plug_usb_disk(vm: Vm, ident: str, serial: str, size: int = 32 << 20) -> None:
    """A USB stick (QEMU's ``usb-storage``: 46f4:0001) backed by nothing (``null-co``)."""
    vm.qmp.command(
        "blockdev-add", driver="null-co", **{"node-name": f"{ident}-blk"}, size=size,
        **{"read-zeroes": True},
    )  # fmt: skip
    vm.qmp.command(
        "device_add", driver="usb-storage", id=ident, bus="xhci.0", drive=f"{ident}-blk",
        serial=serial,
    )  # fmt: skip


def unplug(vm: Vm, ident: str, backend: str | None = None) -> None:
    """``device_del``, once QEMU says the device is gone; then its backend goes too."""
    vm.qmp.command("device_del", id=ident)
    vm.qmp.wait_event("DEVICE_DELETED", {"device": ident})
    if backend == "chardev":
        vm.qmp.command("chardev-remove", id=f"{ident}-chr")
    elif backend == "blockdev":
        vm.qmp.command("blockdev-del", **{"node-name": f"{ident}-blk"})


def unplug_pci(vm: Vm, ident: str, address: str) -> list[tuple[float, dict[str, str]]]:
    """``device_del`` of a PCI function, once the guest has ejected it: QEMU 7.2 sends
    no ``DEVICE_DELETED`` for a function unplugged through ACPI (q35's hot-plug into a
    root port), so the kernel's ``remove`` uevent for it is waited for. The uevents
    from the ``device_del`` on."""
    since = uevent_index(vm)
    vm.qmp.command("device_del", id=ident)

    def removed(events: list[dict[str, str]]) -> bool:
        return any(
            e.get("ACTION") == "remove" and e.get("DEVPATH", "").endswith("/" + address)
            for e in events
        )

    return vm.wait_uevents(removed, since)


def uevent_index(vm: Vm) -> int:
    """How many uevents the agent has so far: where to start looking for new ones."""
    return len(vm.uevents())


def write(vm: Vm, path: str, value: str) -> None:
    """``echo value > path`` in the guest (a sysfs control file)."""
    vm.sh(f"echo {shlex.quote(value)} > {shlex.quote(path)}")
