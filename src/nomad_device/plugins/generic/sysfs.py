"""What the kernel says about device nodes and USB devices, read from sysfs.

(PCI functions are :mod:`.pci`'s; the node helpers here serve both.) Two
questions are asked of sysfs:

- for a node ``char 188:0``, which device is it: ``/sys/dev/char/188:0``
  links to its directory, whose ancestors give the subsystem, the PCI function
  it hangs off (Nomad's ``Locality``), its size (block devices) and the USB
  device it belongs to;
- which USB devices are plugged in: ``/sys/bus/usb/devices/*`` with
  ``idVendor``, ``idProduct``, ``serial``, ``manufacturer``, ``product``,
  ``busnum``, ``devnum``, and the nodes the kernel made for the device itself
  (``/dev/bus/usb/BBB/DDD``) and for its interfaces (tty, hidraw,
  video4linux, block ...), each from a ``dev`` file and its ``uevent``'s
  ``DEVNAME``.

Reads never raise: a device can vanish half-way through, and a missing file
is an answer (``None``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from nomad_device.plugins.generic.roots import Roots

__all__ = [
    "PCI_ADDRESS",
    "NodeInfo",
    "SysNode",
    "SysfsCache",
    "UsbDevice",
    "bus_devices",
    "descendant_nodes",
    "dev_relative",
    "node_at",
    "read_attr",
    "read_int",
    "subsystem_of",
    "uevent_of",
    "usb_bus_present",
    "usb_devices",
    "usb_nodes",
]

#: A PCI function's sysfs name: domain, bus, device and function (``0000:3b:00.0``).
PCI_ADDRESS: Final = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_DEV_NUMBERS: Final = re.compile(r"(\d+):(\d+)")
#: Interfaces nest a few levels deep (interface, host, target, lun, block, partition).
_MAX_DEPTH: Final = 10
_SECTOR: Final = 512


def read_attr(path: str) -> str | None:
    """A sysfs attribute without its trailing newline; None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    return raw.decode("utf-8", "replace").rstrip("\n")


def read_int(path: str, base: int = 10) -> int | None:
    text = read_attr(path)
    if text is None:
        return None
    try:
        return int(text.strip(), base)
    except ValueError:
        return None


def _read_float(path: str) -> float | None:
    text = read_attr(path)
    if text is None:
        return None
    try:
        return float(text.strip())
    except ValueError:
        return None


def uevent_of(path: str) -> dict[str, str]:
    """A sysfs device's ``uevent`` file as a dict (``DEVNAME``, ``DRIVER`` ...)."""
    text = read_attr(os.path.join(path, "uevent")) or ""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


def subsystem_of(path: str) -> str:
    """The name of the subsystem a sysfs device belongs to (``block``, ``pci``); "" if none."""
    try:
        return os.path.basename(os.readlink(os.path.join(path, "subsystem")))
    except OSError:
        return ""


@dataclass(frozen=True)
class UsbDevice:
    """One USB device (not an interface) as sysfs describes it."""

    sysname: str  # the port path, "1-1.4": bus 1, port 1, then port 4 of that hub
    syspath: str
    vendor_id: int
    product_id: int
    serial: str
    manufacturer: str
    product: str
    busnum: int
    devnum: int
    speed: float | None  # Mbit/s; 1.5 for low speed
    authorized: bool


@dataclass(frozen=True)
class SysNode:
    """A node the kernel made for a device (a USB device or interface, a PCI function's
    child), as its sysfs directory describes it: ``dev`` and ``uevent``'s ``DEVNAME``."""

    devname: str  # relative to /dev: "ttyUSB0", "bus/usb/001/004"
    kind: str  # "char" or "block"
    major: int
    minor: int
    subsystem: str


@dataclass(frozen=True)
class NodeInfo:
    """What sysfs knows about one ``char``/``block`` major:minor."""

    devdir: str
    subsystem: str
    pci_bus_id: str | None
    usb: UsbDevice | None


def _usb_device(path: str, sysname: str) -> UsbDevice | None:
    vendor = read_int(os.path.join(path, "idVendor"), 16)
    product = read_int(os.path.join(path, "idProduct"), 16)
    if vendor is None or product is None:
        return None
    return UsbDevice(
        sysname=sysname,
        syspath=path,
        vendor_id=vendor,
        product_id=product,
        serial=(read_attr(os.path.join(path, "serial")) or "").strip(),
        manufacturer=(read_attr(os.path.join(path, "manufacturer")) or "").strip(),
        product=(read_attr(os.path.join(path, "product")) or "").strip(),
        busnum=read_int(os.path.join(path, "busnum")) or 0,
        devnum=read_int(os.path.join(path, "devnum")) or 0,
        speed=_read_float(os.path.join(path, "speed")),
        authorized=read_attr(os.path.join(path, "authorized")) != "0",
    )


def usb_bus_present(roots: Roots) -> bool:
    """Whether the kernel has a USB bus at all (no ``/sys/bus/usb``: no USB support
    built in or loaded, or a VM without a USB controller)."""
    return os.path.isdir(os.path.join(roots.sys, "bus", "usb"))


def bus_devices(roots: Roots, bus: str) -> tuple[str, list[str]]:
    """``/sys/bus/<bus>/devices`` and the names in it, sorted; none if it cannot be read."""
    base = os.path.join(roots.sys, "bus", bus, "devices")
    try:
        return base, sorted(os.listdir(base))
    except OSError:
        return base, []


def usb_devices(roots: Roots) -> list[UsbDevice]:
    """Every USB device plugged in, by port path; interfaces and unreadable ones skipped."""
    base, names = bus_devices(roots, "usb")
    found = []
    for name in names:
        if ":" in name:
            continue  # an interface ("1-1.4:1.0"), not a device
        path = os.path.realpath(os.path.join(base, name))
        device = _usb_device(path, name)
        if device is not None:
            found.append(device)
    return found


def dev_relative(name: str) -> str | None:
    """``name`` if it is a plain path below /dev (``dri/renderD128``), else None."""
    parts = name.split("/")
    if not name or name.startswith("/") or ".." in parts or "." in parts or "" in parts:
        return None
    return name


def node_at(path: str, default_name: str) -> SysNode | None:
    """The node of the sysfs device at ``path``, if it has one (a ``dev`` file) and a name
    below /dev (``DEVNAME``, else ``default_name``)."""
    numbers = _DEV_NUMBERS.fullmatch((read_attr(os.path.join(path, "dev")) or "").strip())
    if numbers is None:
        return None
    devname = dev_relative(uevent_of(path).get("DEVNAME") or default_name)
    if devname is None:
        return None
    subsystem = subsystem_of(path)
    kind = "block" if subsystem == "block" else "char"
    return SysNode(devname, kind, int(numbers.group(1)), int(numbers.group(2)), subsystem)


def usb_nodes(device: UsbDevice) -> list[SysNode]:
    """The device's own node first, then its interfaces' nodes in sysfs order.

    Child devices behind a hub are devices of their own and are not descended
    into; symlinks (``driver``, ``subsystem``, ``port``) are never followed.
    """
    nodes: list[SysNode] = []
    bus_name = f"bus/usb/{device.busnum:03d}/{device.devnum:03d}"
    own = node_at(device.syspath, bus_name)
    if own is not None:
        nodes.append(own)
    try:
        entries = sorted(os.scandir(device.syspath), key=lambda e: e.name)
    except OSError:
        return nodes
    interface_nodes: list[SysNode] = []
    for entry in entries:
        if ":" in entry.name and entry.is_dir(follow_symlinks=False):
            interface_nodes.extend(descendant_nodes(entry.path))
    nodes.extend(interface_nodes)
    return nodes


def descendant_nodes(
    path: str, stop: Callable[[str], bool] = lambda _name: False, depth: int = 0
) -> list[SysNode]:
    """Every node at ``path`` and below, in sysfs order (parents first, names sorted).

    Symlinks are never followed, and a directory whose name ``stop`` accepts is
    another device's (a PCI function behind a bridge) and is not entered. At most
    :data:`_MAX_DEPTH` levels: interfaces, hosts, targets, disks and partitions.
    """
    out: list[SysNode] = []
    _walk(path, depth, stop, out)
    return out


def _walk(path: str, depth: int, stop: Callable[[str], bool], out: list[SysNode]) -> None:
    node = node_at(path, os.path.basename(path))
    if node is not None:
        out.append(node)
    if depth >= _MAX_DEPTH:
        return
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False) and not stop(entry.name):
                _walk(entry.path, depth + 1, stop, out)
        except OSError:
            continue


class SysfsCache:
    """Node lookups by major:minor, cached while sysfs still links to the same place.

    ``/sys/dev/<kind>/<major>:<minor>`` is one ``readlink``; only when its target
    changes (a replug elsewhere) is the device directory walked again.
    """

    def __init__(self, roots: Roots) -> None:
        self.roots = roots
        self._cache: dict[tuple[str, int, int], tuple[tuple[str, object], NodeInfo]] = {}
        self._devices = os.path.join(roots.sys, "devices")
        self._index: dict[str, bool] = {}

    def new_scan(self) -> None:
        self._index.clear()

    def has_index(self, kind: str) -> bool:
        """Whether sysfs lists ``kind`` nodes at all (it does not in some containers)."""
        known = self._index.get(kind)
        if known is None:
            known = self._index[kind] = os.path.isdir(os.path.join(self.roots.sys, "dev", kind))
        return known

    def lookup(self, kind: str, major: int, minor: int, stamp: object = None) -> NodeInfo | None:
        """The device behind a node; ``stamp`` (the node's inode and ctime) says when
        a node was made anew, so that a different device replugged on the same port,
        with the same numbers, is not mistaken for the old one."""
        link = f"{self.roots.sys}/dev/{kind}/{major}:{minor}"
        try:
            target = os.readlink(link)
        except OSError:
            self._cache.pop((kind, major, minor), None)
            return None
        cached = self._cache.get((kind, major, minor))
        if cached is not None and cached[0] == (target, stamp):
            return cached[1]
        devdir = os.path.realpath(link)
        info = NodeInfo(devdir, subsystem_of(devdir), self.pci_bus_id(devdir), self._usb(devdir))
        self._cache[(kind, major, minor)] = ((target, stamp), info)
        return info

    def devname(self, kind: str, major: int, minor: int) -> str | None:
        """The kernel's name for a node (``ttyUSB0``, ``bus/usb/001/004``), relative to
        /dev: ``DEVNAME`` in ``/sys/dev/<kind>/<major>:<minor>/uevent``; None if unknown."""
        name = uevent_of(f"{self.roots.sys}/dev/{kind}/{major}:{minor}").get("DEVNAME", "")
        return dev_relative(name)

    def forget(self) -> None:
        self._cache.clear()

    @staticmethod
    def block_size(info: NodeInfo) -> int | None:
        """Bytes; sysfs counts 512-byte sectors whatever the device's own block size."""
        sectors = read_int(os.path.join(info.devdir, "size"))
        return None if sectors is None else sectors * _SECTOR

    def _ancestors(self, devdir: str) -> list[str]:
        out = []
        path = devdir
        while path.startswith(self._devices + "/"):
            out.append(path)
            path = os.path.dirname(path)
        return out

    def pci_bus_id(self, devdir: str) -> str | None:
        """The nearest PCI function above a sysfs device directory (``0000:00:02.0``)."""
        for path in self._ancestors(devdir):
            name = os.path.basename(path)
            if PCI_ADDRESS.fullmatch(name):
                return name
        return None

    def _usb(self, devdir: str) -> UsbDevice | None:
        for path in self._ancestors(devdir):
            name = os.path.basename(path)
            if ":" not in name and os.path.exists(os.path.join(path, "idVendor")):
                return _usb_device(path, name)
        return None
