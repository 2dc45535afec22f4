"""A fake ``/dev`` and ``/sys`` for nomad-device-generic, laid out as Linux lays them out.

This machine has no USB bus and no udevd, so USB devices, their interface
nodes and ``/dev/serial/by-id`` links are built here: sysfs directories with
the attribute files the kernel provides (``idVendor``, ``serial``, ``busnum``,
``dev``, ``uevent`` ...), the ``/sys/dev/char/M:m`` and ``/sys/bus/usb/devices``
links, and real device nodes made with ``mknod`` (hence root). The plugin is
pointed at the tree with ``NOMAD_DEVICE_GENERIC_DEV_ROOT`` and ``..._SYS_ROOT``.

PCI functions (:meth:`FakeTree.pci`) follow the layout of this VM's own
``/sys/devices/pci0000:00/0000:00:02.0`` (a virtio block device: ``vendor``,
``device``, ``class``, ``subsystem_*``, ``enable``, ``numa_node`` as hex or
decimal text with a newline, the ``driver`` link into ``/sys/bus/pci/drivers``,
``/sys/bus/pci/devices/<address>`` linking to the directory, nodes in child
directories such as ``virtio1/block/vda``); the PCIe files this VM lacks
(``current_link_speed`` ..., ``aer_dev_*``, ``iommu_group``) are written as
Debian's 6.1 kernel writes them for QEMU's PCIe devices and root ports in the
real-kernel tier (``tests/kernel``), which also showed what ``enable`` reads
under VFIO and ``pci-stub`` and that ports carry AER counters of their own.
Each function has a ``resource`` with one memory BAR and the first 64 bytes of
``config``, whose Command register a driver that enables it sets
(:meth:`FakeTree.config` clears it as a reset does).
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nomad_device.plugins.generic.roots import ENV_DEV_ROOT, ENV_PCI_IDS, ENV_SYS_ROOT

USB_MAJOR = 189
TTY_USB_MAJOR = 188
MISC_MAJOR = 10
VFIO_CONTAINER_MINOR = 196


def require_root(why: str = "the fake /dev tree is made of real device nodes (mknod)") -> None:
    """Skip without root outside CI; in CI (``CI=true``, run as root) fail instead."""
    if os.geteuid() == 0:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run as root: {why}")
    pytest.skip(f"needs root: {why}")


@dataclass
class PciHandle:
    address: str
    syspath: Path
    nodes: list[Path] = field(default_factory=list)  # under the fake /dev
    dev_links: list[Path] = field(default_factory=list)  # /sys/dev/{char,block} links


@dataclass(frozen=True)
class Link:
    """``current_link_speed`` ... as the kernel prints them: ``16.0 GT/s PCIe``, lanes."""

    speed: str = "16.0 GT/s PCIe"
    width: int = 16
    max_speed: str = "16.0 GT/s PCIe"
    max_width: int = 16


#: The lines of ``aer_dev_fatal`` and ``aer_dev_nonfatal`` as Debian's 6.1.0-57 kernel
#: writes them (tests/kernel), before the total.
_AER_UNCORRECTABLE = (
    "Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF",
    "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked",
    "TLPBlockedErr", "PoisonTLPBlocked", "DMWrReqBlocked", "IDECheck", "MisIDETLP",
    "PCRC_CHECK", "TLPXlatBlocked",
)  # fmt: skip
#: ... and of ``aer_dev_correctable``.
_AER_CORRECTABLE = (
    "RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF",
)  # fmt: skip


def aer_text(total: int, which: str) -> str:
    """``aer_dev_fatal`` / ``_nonfatal`` / ``_correctable``: one line per error kind, then
    the total (``TOTAL_ERR_FATAL``, ``TOTAL_ERR_NONFATAL``, ``TOTAL_ERR_COR``)."""
    names = _AER_CORRECTABLE if which == "correctable" else _AER_UNCORRECTABLE
    lines = [f"{name} 0" for name in names]
    lines.append(f"TOTAL_ERR_{'COR' if which == 'correctable' else which.upper()} {total}")
    return "\n".join(lines) + "\n"


@dataclass
class UsbHandle:
    port: str
    syspath: Path
    nodes: list[Path] = field(default_factory=list)  # under the fake /dev
    dev_links: list[Path] = field(default_factory=list)  # /sys/dev/char links
    links: list[Path] = field(default_factory=list)  # by-id symlinks


def mkdirs(path: Path) -> Path:
    """``mkdir -p`` with mode 0755 whatever the umask: the plugin offers nothing from a
    directory that anyone but root may write (see plugins/generic/trust.py)."""
    missing, parent = [], path
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        directory.mkdir()
        directory.chmod(0o755)
    return path


class FakeTree:
    def __init__(self, base: Path) -> None:
        self.dev = base / "dev"
        self.sys = base / "sys"
        for path in (
            self.dev,
            self.sys / "dev" / "char",
            self.sys / "dev" / "block",
            self.sys / "devices" / "virtual",
            self.sys / "bus" / "usb" / "devices",
            self.sys / "class",
        ):
            mkdirs(path)
        self._next_devnum: dict[int, int] = {}

        self.ids_file: Path | None = None

    @property
    def env(self) -> dict[str, str]:
        env = {ENV_DEV_ROOT: str(self.dev), ENV_SYS_ROOT: str(self.sys)}
        if self.ids_file is not None:
            env[ENV_PCI_IDS] = str(self.ids_file)
        return env

    def numa(self, online: str) -> None:
        """The host's NUMA nodes (``/sys/devices/system/node/online``, ``0-1``)."""
        node = mkdirs(self.sys / "devices" / "system" / "node")
        (node / "online").write_text(online + "\n")

    def pci_ids(self, text: str) -> Path:
        """A ``pci.ids`` for the plugin to read names from (root's, mode 0644)."""
        share = mkdirs(self.sys.parent / "share")
        self.ids_file = share / "pci.ids"
        self.ids_file.write_text(text)
        self.ids_file.chmod(0o644)
        return self.ids_file

    # -- plumbing ------------------------------------------------------------------

    def _class(self, subsystem: str) -> Path:
        path = self.sys / "class" / subsystem
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _sysdev(self, directory: Path, kind: str, major: int, minor: int, devname: str,
                subsystem: str, extra: str = "") -> Path:  # fmt: skip
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "dev").write_text(f"{major}:{minor}\n")
        (directory / "uevent").write_text(
            f"MAJOR={major}\nMINOR={minor}\nDEVNAME={devname}\n{extra}"
        )
        link = directory / "subsystem"
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(self._class(subsystem), directory))
        index = self.sys / "dev" / kind / f"{major}:{minor}"
        if index.is_symlink():
            index.unlink()
        index.symlink_to(os.path.relpath(directory, index.parent))
        return index

    def node(self, name: str, kind: str, major: int, minor: int, mode: int = 0o660) -> Path:
        path = self.dev / name
        mkdirs(path.parent)
        if path.exists() or path.is_symlink():
            path.unlink()
        fmt = stat.S_IFCHR if kind == "char" else stat.S_IFBLK
        os.mknod(path, fmt | mode, os.makedev(major, minor))
        return path

    # -- plain devices ----------------------------------------------------------------

    def char(self, name: str, major: int, minor: int, subsystem: str = "misc",
             sysdir: str | None = None) -> Path:  # fmt: skip
        """A character device like /dev/kvm: node, sysfs entry and index link."""
        directory = self.sys / "devices" / (sysdir or f"virtual/{subsystem}/{name}")
        self._sysdev(directory, "char", major, minor, name, subsystem)
        return self.node(name, "char", major, minor)

    def block(self, name: str, major: int, minor: int, sectors: int,
              sysdir: str | None = None) -> Path:  # fmt: skip
        directory = self.sys / "devices" / (sysdir or f"virtual/block/{name}")
        self._sysdev(directory, "block", major, minor, name, "block", "DEVTYPE=disk\n")
        (directory / "size").write_text(f"{sectors}\n")
        return self.node(name, "block", major, minor)

    def link(self, name: str, target: str) -> Path:
        """A udev-style symlink such as serial/by-id/usb-...-if00-port0 -> ../../ttyUSB0."""
        path = self.dev / name
        mkdirs(path.parent)
        if path.is_symlink() or path.exists():
            path.unlink()
        path.symlink_to(target)
        return path

    def remove(self, name: str) -> None:
        (self.dev / name).unlink()

    # -- USB ---------------------------------------------------------------------------

    def usb(
        self,
        port: str,
        vendor_id: int,
        product_id: int,
        *,
        serial: str | None = None,
        manufacturer: str = "",
        product: str = "",
        tty: tuple[str, int] | None = None,
        speed: str = "12",
        controller: str = "0000:00:14.0",
        make_nodes: bool = True,
    ) -> UsbHandle:
        """Plug a USB device into ``port`` (``1-1.4``); ``tty`` adds a ttyUSB interface node.

        ``make_nodes=False`` leaves /dev alone (the nodes must exist already), so that
        only sysfs changes and nothing under /dev gives the change away.
        """
        bus = int(port.split("-")[0])
        devnum = self._next_devnum.get(bus, 1) + 1
        self._next_devnum[bus] = devnum
        syspath = self.sys / "devices" / "pci0000:00" / controller / f"usb{bus}" / port
        syspath.mkdir(parents=True, exist_ok=True)
        attrs = {
            "idVendor": f"{vendor_id:04x}",
            "idProduct": f"{product_id:04x}",
            "busnum": str(bus),
            "devnum": str(devnum),
            "speed": speed,
            "authorized": "1",
            "manufacturer": manufacturer,
            "product": product,
        }
        if serial is not None:
            attrs["serial"] = serial
        for name, value in attrs.items():
            if value or name in ("idVendor", "idProduct"):
                (syspath / name).write_text(value + "\n")
        handle = UsbHandle(port, syspath)
        minor = (bus - 1) * 128 + devnum - 1
        bus_name = f"bus/usb/{bus:03d}/{devnum:03d}"
        handle.dev_links.append(
            self._sysdev(syspath, "char", USB_MAJOR, minor, bus_name, "usb", "DEVTYPE=usb_device\n")
        )
        handle.nodes.append(
            self.node(bus_name, "char", USB_MAJOR, minor) if make_nodes else self.dev / bus_name
        )
        listing = self.sys / "bus" / "usb" / "devices" / port
        if listing.is_symlink():
            listing.unlink()
        listing.symlink_to(os.path.relpath(syspath, listing.parent))
        if tty is not None:
            name, tty_minor = tty
            interface = syspath / f"{port}:1.0"
            interface.mkdir()
            (interface / "bInterfaceClass").write_text("ff\n")
            tty_dir = interface / name / "tty" / name
            handle.dev_links.append(
                self._sysdev(tty_dir, "char", TTY_USB_MAJOR, tty_minor, name, "tty")
            )
            handle.nodes.append(
                self.node(name, "char", TTY_USB_MAJOR, tty_minor) if make_nodes else self.dev / name
            )
        return handle

    def unplug(self, handle: UsbHandle) -> None:
        for path in [*handle.links, *handle.nodes, *handle.dev_links]:
            if path.is_symlink() or path.exists():
                path.unlink()
        listing = self.sys / "bus" / "usb" / "devices" / handle.port
        if listing.is_symlink():
            listing.unlink()
        shutil.rmtree(handle.syspath)

    # -- PCI ---------------------------------------------------------------------------

    def pci(
        self,
        address: str,
        vendor_id: int,
        device_id: int,
        class_code: int,
        *,
        subsystem: tuple[int, int] | None = None,
        driver: str | None = None,
        numa_node: int = -1,
        link: Link | None = None,
        aer: tuple[int, int] | None = None,
        iommu_group: int | None = None,
        parent: str = "pci0000:00",
        files: dict[str, str] | None = None,
    ) -> PciHandle:
        """A PCI function at ``/sys/devices/<parent>/<address>``; ``parent`` may be a
        path through bridges (``pci0000:00/0000:00:01.1``). ``files`` adds driver
        attributes relative to the function (``mem_info_vram_total``)."""
        syspath = mkdirs(self.sys / "devices" / parent / address)
        sub_vendor, sub_device = subsystem or (vendor_id, device_id)
        attrs = {
            "vendor": f"0x{vendor_id:04x}",
            "device": f"0x{device_id:04x}",
            "class": f"0x{class_code:06x}",
            "subsystem_vendor": f"0x{sub_vendor:04x}",
            "subsystem_device": f"0x{sub_device:04x}",
            "numa_node": str(numa_node),
            "enable": "1" if driver else "0",
            "revision": "0x01",
        }
        if link is not None:
            attrs.update(
                current_link_speed=link.speed,
                current_link_width=str(link.width),
                max_link_speed=link.max_speed,
                max_link_width=str(link.max_width),
            )
        for name, value in attrs.items():
            (syspath / name).write_text(value + "\n")
        # One 64 KiB memory BAR, then the other five BARs, the ROM and the rest unset,
        # as the kernel's ``resource`` lists them.
        base = 0xF000_0000 + (int(address.replace(":", "").replace(".", ""), 16) & 0xFFF) * 0x10000
        lines = [f"0x{base:016x} 0x{base + 0xFFFF:016x} 0x{0x40200:016x}"]
        lines += [f"0x{0:016x} 0x{0:016x} 0x{0:016x}"] * 16
        (syspath / "resource").write_text("\n".join(lines) + "\n")
        if aer is not None:
            self.aer(syspath, *aer)
        for name, text in (files or {}).items():
            mkdirs((syspath / name).parent)
            (syspath / name).write_text(text)
        listing = mkdirs(self.sys / "bus" / "pci" / "devices") / address
        if listing.is_symlink():
            listing.unlink()
        listing.symlink_to(os.path.relpath(syspath, listing.parent))
        handle = PciHandle(address, syspath)
        self.bind(handle, driver)
        if iommu_group is not None:
            group = mkdirs(self.sys / "kernel" / "iommu_groups" / str(iommu_group) / "devices")
            (group / address).symlink_to(os.path.relpath(syspath, group))
            (syspath / "iommu_group").symlink_to(os.path.relpath(group.parent, syspath))
        return handle

    def set_attr(self, handle: PciHandle, name: str, value: str) -> None:
        """Change one attribute file of a function, replaced whole (a read of the kernel's
        is whole: a scan must never see it empty)."""
        staged = handle.syspath / f".{name}.new"
        staged.write_text(value + "\n")
        staged.replace(handle.syspath / name)

    def aer(self, syspath: Path, fatal: int, nonfatal: int, correctable: int = 0) -> None:
        """The AER totals; each file replaced whole, as a read of the kernel's is whole."""
        for name, text in (
            ("aer_dev_fatal", aer_text(fatal, "fatal")),
            ("aer_dev_nonfatal", aer_text(nonfatal, "nonfatal")),
            ("aer_dev_correctable", aer_text(correctable, "correctable")),
        ):
            if (syspath / name).exists() and (syspath / name).read_text() == text:
                continue
            staged = syspath / f".{name}.new"
            staged.write_text(text)
            staged.replace(syspath / name)

    def bind(self, handle: PciHandle, driver: str | None) -> None:
        """Bind ``driver`` (None: unbind), as ``/sys/bus/pci/drivers/<name>/bind`` would:
        the ``driver`` link, ``enable``, and the ``uevent`` the kernel writes from them
        (``pci_uevent``: ``DRIVER`` while bound, then the IDs and the modalias). As a
        real kernel shows (tests/kernel): a function bound to a VFIO driver or to
        ``pci-stub`` reads ``enable`` 0, since neither enables it when it binds."""
        path = handle.syspath
        link = path / "driver"
        if link.is_symlink():
            link.unlink()
        if driver is not None:
            target = mkdirs(self.sys / "bus" / "pci" / "drivers" / driver)
            link.symlink_to(os.path.relpath(target, path))
        enables = driver is not None and "vfio" not in driver and driver != "pci-stub"
        (path / "enable").write_text("1\n" if enables else "0\n")

        def hexattr(name: str) -> int:
            return int((path / name).read_text(), 16)

        code = hexattr("class")
        vendor, device = hexattr("vendor"), hexattr("device")
        # A driver that enables it turns on memory decoding and bus mastering.
        self.config(handle, command=0x0006 if enables else 0)
        sub_vendor, sub_device = hexattr("subsystem_vendor"), hexattr("subsystem_device")
        lines = [f"DRIVER={driver}"] if driver else []
        lines += [
            f"PCI_CLASS={code:X}",
            f"PCI_ID={vendor:04X}:{device:04X}",
            f"PCI_SUBSYS_ID={sub_vendor:04X}:{sub_device:04X}",
            f"PCI_SLOT_NAME={handle.address}",
            f"MODALIAS=pci:v{vendor:08X}d{device:08X}sv{sub_vendor:08X}sd{sub_device:08X}"
            f"bc{code >> 16:02X}sc{code >> 8 & 0xFF:02X}i{code & 0xFF:02X}",
        ]
        (path / "uevent").write_text("\n".join(lines) + "\n")

    def config(self, handle: PciHandle, *, command: int = 0x0006, dead: bool = False) -> None:
        """The first 64 bytes of ``config``, which a user may read: IDs, the Command
        register, the class, BAR 0 at the address ``resource`` gives; ``command=0``
        with BAR 0 cleared as a reset leaves the function, ``dead`` all ones (what
        a function reads when its link is down). Replaced whole."""
        path = handle.syspath
        if dead:
            data = b"\xff" * 64
        else:
            code = int((path / "class").read_text(), 16)
            bar = 0
            if command:
                bar = int((path / "resource").read_text().split()[0], 16)
            data = (
                int((path / "vendor").read_text(), 16).to_bytes(2, "little")
                + int((path / "device").read_text(), 16).to_bytes(2, "little")
                + command.to_bytes(2, "little")
                + bytes([0x10, 0x00, 0x01])  # status (a capability list), revision
                + code.to_bytes(3, "little")
                + bytes(4)  # cache line, latency timer, header type, BIST
                + bar.to_bytes(4, "little")
            ).ljust(64, b"\0")
        staged = path / ".config.new"
        staged.write_bytes(data)
        staged.replace(path / "config")

    def pci_node(
        self,
        handle: PciHandle,
        where: str,
        devname: str,
        major: int,
        minor: int,
        *,
        subsystem: str,
        make_node: bool = True,
    ) -> Path:
        """A node below the function: ``where`` is its sysfs directory relative to the
        function (``drm/renderD128``), ``devname`` its name under /dev (``dri/renderD128``)."""
        kind = "block" if subsystem == "block" else "char"
        handle.dev_links.append(
            self._sysdev(handle.syspath / where, kind, major, minor, devname, subsystem)
        )
        node = self.node(devname, kind, major, minor) if make_node else self.dev / devname
        handle.nodes.append(node)
        return node

    def virtual_node(self, sysdir: str, devname: str, major: int, minor: int,
                     subsystem: str, class_name: str | None = None) -> Path:  # fmt: skip
        """A node of no device's (``/sys/devices/virtual/...``), such as /dev/kfd; listed
        under ``/sys/class/<class_name>`` when given."""
        directory = self.sys / "devices" / "virtual" / sysdir
        self._sysdev(directory, "char", major, minor, devname, subsystem)
        if class_name is not None:
            entry = mkdirs(self.sys / "class" / class_name) / directory.name
            if not entry.is_symlink():
                entry.symlink_to(os.path.relpath(directory, entry.parent))
        return self.node(devname, "char", major, minor)

    def vfio(self, group: int, major: int = 511, minor: int = 0) -> list[Path]:
        """VFIO's group node /dev/vfio/<group> and container /dev/vfio/vfio."""
        nodes = [self.virtual_node(f"vfio/{group}", f"vfio/{group}", major, minor, "vfio", "vfio")]
        container = self.dev / "vfio" / "vfio"
        if not container.exists():
            nodes.append(
                self.virtual_node(
                    "misc/vfio", "vfio/vfio", MISC_MAJOR, VFIO_CONTAINER_MINOR, "misc", "misc"
                )
            )
        return nodes

    def remove_pci(self, handle: PciHandle) -> None:
        """Hot-unplug: the function, its nodes and index links go."""
        for path in [*handle.nodes, *handle.dev_links]:
            if path.is_symlink() or path.exists():
                path.unlink()
        (self.sys / "bus" / "pci" / "devices" / handle.address).unlink()
        shutil.rmtree(handle.syspath)
