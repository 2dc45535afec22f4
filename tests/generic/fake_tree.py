"""A fake ``/dev`` and ``/sys`` for nomad-device-generic, laid out as Linux lays them out.

This machine has no USB bus and no udevd, so USB devices, their interface
nodes and ``/dev/serial/by-id`` links are built here: sysfs directories with
the attribute files the kernel provides (``idVendor``, ``serial``, ``busnum``,
``dev``, ``uevent`` ...), the ``/sys/dev/char/M:m`` and ``/sys/bus/usb/devices``
links, and real device nodes made with ``mknod`` (hence root). The plugin is
pointed at the tree with ``NOMAD_DEVICE_GENERIC_DEV_ROOT`` and ``..._SYS_ROOT``.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nomad_device.plugins.generic.roots import ENV_DEV_ROOT, ENV_SYS_ROOT

USB_MAJOR = 189
TTY_USB_MAJOR = 188


def require_root(why: str = "the fake /dev tree is made of real device nodes (mknod)") -> None:
    """Skip without root outside CI; in CI (``CI=true``, run as root) fail instead."""
    if os.geteuid() == 0:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run as root: {why}")
    pytest.skip(f"needs root: {why}")


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

    @property
    def env(self) -> dict[str, str]:
        return {ENV_DEV_ROOT: str(self.dev), ENV_SYS_ROOT: str(self.sys)}

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
