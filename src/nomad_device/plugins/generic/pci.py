"""PCI functions as sysfs describes them: identity, attributes, health inputs and nodes.

``/sys/bus/pci/devices/<address>`` links to each function's directory under
``/sys/devices``. What is read there, all of it documented kernel ABI
(``Documentation/ABI/testing/sysfs-bus-pci``, ``sysfs-bus-pci-devices-aer``)
or the drivers' own:

- identity: ``PCI_ID``, ``PCI_SUBSYS_ID``, ``PCI_CLASS`` and ``DRIVER`` from
  its ``uevent`` (one read per function, for every function at every scan),
  else ``vendor``, ``device``, ``class``, ``subsystem_*`` and the ``driver``
  link;
- locality: ``numa_node`` (``-1``: the platform says nothing);
- state: ``enable``, the first six bytes of ``config`` (vendor and Command
  register: does a function its driver enabled answer, and decode the BARs
  ``resource`` lists), ``current_link_speed`` / ``_width``, ``max_link_speed``
  / ``_width`` (PCIe only), ``aer_dev_fatal`` / ``aer_dev_nonfatal`` (their
  ``TOTAL_ERR_*`` lines; only where AER is on), ``iommu_group``; and the same
  two AER totals of each port above it (the functions its sysfs directory is
  below): an error a port detects on its link is counted on the port alone,
  while the kernel's recovery resets or stops everything below it (seen on a
  real kernel: a fatal error on a root port leaves the device's own counts at
  zero, its link reset and its recovery failed);
- memory, where the driver publishes it: amdgpu's ``mem_info_vram_total``,
  xe's ``tile<N>/physical_vram_size_bytes`` (summed over tiles), and the
  ``drm/card<N>/lmem_total_bytes`` of Intel's out-of-tree i915 (per tile,
  times the card's ``gt/gt<N>`` directories, as Intel's own labeler counts it);
- nodes: every directory below the function with a ``dev`` file (DRM
  ``card``/``renderD`` nodes, ``accel``, block devices and their partitions,
  a driver's own char devices), named by ``DEVNAME`` in its ``uevent``.
  Another PCI function below (behind a bridge) is a device of its own and is
  not entered; symlinks are never followed. A function bound to a VFIO
  driver brings its IOMMU group's node (``/dev/vfio/<group>``, or
  ``noiommu-<group>``) and the container node ``/dev/vfio/vfio``. An NVMe
  controller whose subsystem says it may have several controllers has its
  namespaces (``nvme0n1``, ``ng0n1``) under the subsystem in
  ``/sys/devices/virtual/nvme-subsystem`` instead (native multipath, a real
  kernel shows): they are the function's while the subsystem has no other
  controller.

Reads never raise: a function can vanish half-way through a scan.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from nomad_device.plugins.generic.patterns import matches
from nomad_device.plugins.generic.roots import Roots
from nomad_device.plugins.generic.sysfs import (
    PCI_ADDRESS,
    SysNode,
    bus_devices,
    descendant_nodes,
    node_at,
    read_attr,
    read_int,
    uevent_of,
)

__all__ = [
    "PciFunction",
    "PciIdentity",
    "PciLink",
    "class_text",
    "identity_at",
    "is_vfio_driver",
    "link_generation",
    "matches_nodes",
    "pci_bandwidth",
    "pci_functions",
    "read_function",
]

#: The class code of a PCI-to-PCI bridge (class 06, subclass 04): part of an IOMMU
#: group without being one of its devices.
_BRIDGE_CLASS: Final = 0x0604
#: Drivers that leave a function to VFIO's group viable, besides VFIO's own.
_VFIO_NEUTRAL: Final = frozenset({"pci-stub", "pcieport"})
_SPEED: Final = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s")
_AER_TOTALS: Final = {"fatal": "TOTAL_ERR_FATAL", "nonfatal": "TOTAL_ERR_NONFATAL"}
#: The Command register's I/O and memory space enables; ``resource``'s flags for an
#: I/O or a memory range (IORESOURCE_IO, IORESOURCE_MEM).
_DECODING: Final = 0x3
_IO_OR_MEMORY: Final = 0x300
#: In an NVMe subsystem's directory: its controllers, and its namespaces' block and
#: generic nodes.
_NVME_CONTROLLER: Final = re.compile(r"nvme\d+")
_NVME_NAMESPACE: Final = re.compile(r"(?:nvme|ng)\d+n\d+")
#: PCIe generation by transfer rate (GT/s).
_GENERATIONS: Final = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
#: MB/s per lane by generation, as Nomad's NVIDIA plugin counts them from gen 3
#: on (``pci_bandwidth``); gen 1 and 2 (which it reports as 0) at a quarter and a
#: half of gen 3, the same rounding.
_MB_PER_LANE: Final = {1: 256, 2: 512, 3: 1 << 10, 4: 2 << 10, 5: 3 << 10, 6: 4 << 10}


def is_vfio_driver(driver: str | None) -> bool:
    """``vfio-pci`` and its variant drivers (``mlx5_vfio_pci``, ``nvgrace_gpu_vfio_pci``)."""
    return driver is not None and "vfio" in driver


def link_generation(speed: float | None) -> int | None:
    return None if speed is None else _GENERATIONS.get(speed)


def pci_bandwidth(speed: float | None, width: int | None) -> int | None:
    """MB/s of a link, the figure Nomad's NVIDIA plugin gives the same link."""
    generation = link_generation(speed)
    if generation is None or not width:
        return None
    return width * _MB_PER_LANE[generation]


@dataclass(frozen=True)
class PciIdentity:
    """What a matcher looks at: cheap to read for every function on the host."""

    address: str  # "0000:3b:00.0", as sysfs names it (and Nomad's topology compares)
    syspath: str  # /sys/bus/pci/devices/<address>, the link to its directory
    vendor_id: int
    device_id: int
    class_code: int  # 24 bits: class, subclass, programming interface
    subsystem_vendor_id: int | None
    subsystem_device_id: int | None
    driver: str | None  # None: no driver bound


@dataclass(frozen=True)
class PciLink:
    """The PCIe link, current and maximum; None where sysfs has no figure (plain PCI)."""

    speed: float | None = None  # GT/s
    width: int | None = None
    max_speed: float | None = None
    max_width: int | None = None

    @property
    def degraded(self) -> bool:
        """Trained below what the function can do, in speed or in width."""
        if self.speed is not None and self.max_speed is not None and self.speed < self.max_speed:
            return True
        return self.width is not None and self.max_width is not None and self.width < self.max_width

    def describe(self, current: bool = True) -> str:
        speed, width = (self.speed, self.width) if current else (self.max_speed, self.max_width)
        parts = [f"{speed:g} GT/s" if speed is not None else "", f"x{width}" if width else ""]
        return " ".join(p for p in parts if p) or "unknown"


@dataclass(frozen=True)
class PciFunction:
    """One function as a scan read it."""

    ident: PciIdentity
    numa_node: int | None = None  # None: sysfs gives none (or -1)
    enabled: bool | None = None
    link: PciLink = PciLink()
    aer_fatal: int | None = None
    aer_nonfatal: int | None = None
    #: The ports above it, nearest first: address, fatal and non-fatal AER totals.
    upstream_aer: tuple[tuple[str, int | None, int | None], ...] = ()
    #: Where it is below /sys, as a uevent's ``DEVPATH`` names it (``/devices/pci0000:00/...``).
    devpath: str = ""
    #: From its config space, for a function its driver enabled (None: not read):
    #: whether it answers (not all ones), and whether it decodes the memory or I/O
    #: its BARs were given (None too when it has none).
    answers: bool | None = None
    decodes: bool | None = None
    iommu_group: str | None = None
    memory_bytes: int | None = None
    memory_source: str = ""  # the file(s) it was read from, relative to the function
    nodes: tuple[SysNode, ...] = ()  # its own, in sysfs order
    vfio_nodes: tuple[tuple[str, SysNode | None], ...] = ()  # (devname, what sysfs says)
    vfio_blockers: tuple[str, ...] = ()  # group members VFIO cannot own

    @property
    def address(self) -> str:
        return self.ident.address


def _hex_attr(path: str) -> int | None:
    text = read_attr(path)
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def _driver(syspath: str) -> str | None:
    try:
        return os.path.basename(os.readlink(os.path.join(syspath, "driver")))
    except OSError:
        return None


def _ids(text: str | None) -> tuple[int, int] | None:
    """``1AF4:1042`` (``PCI_ID``, ``PCI_SUBSYS_ID``) as two numbers."""
    first, sep, second = (text or "").partition(":")
    try:
        return (int(first, 16), int(second, 16)) if sep else None
    except ValueError:
        return None


def _identity(address: str, syspath: str) -> PciIdentity | None:
    """From the function's ``uevent``, one read: the kernel writes ``PCI_ID``,
    ``PCI_SUBSYS_ID``, ``PCI_CLASS`` and, while one is bound, ``DRIVER`` there
    (``pci_uevent``); the separate attribute files where it does not."""
    event = uevent_of(syspath)
    ids = _ids(event.get("PCI_ID"))
    try:
        code: int | None = int(event["PCI_CLASS"], 16)
    except (KeyError, ValueError):
        code = None
    if ids is None or code is None:
        vendor = _hex_attr(os.path.join(syspath, "vendor"))
        device = _hex_attr(os.path.join(syspath, "device"))
        code = _hex_attr(os.path.join(syspath, "class"))
        if vendor is None or device is None or code is None:
            return None
        ids = (vendor, device)
        subsystem = (
            _hex_attr(os.path.join(syspath, "subsystem_vendor")),
            _hex_attr(os.path.join(syspath, "subsystem_device")),
        )
        driver = _driver(syspath)
    else:
        sub = _ids(event.get("PCI_SUBSYS_ID"))
        subsystem = sub if sub is not None else (None, None)
        driver = event.get("DRIVER") or None
    return PciIdentity(
        address=address,
        syspath=syspath,
        vendor_id=ids[0],
        device_id=ids[1],
        class_code=code,
        subsystem_vendor_id=subsystem[0],
        subsystem_device_id=subsystem[1],
        driver=driver,
    )


def identity_at(roots: Roots, address: str) -> PciIdentity | None:
    """One function by its address (``0000:3b:00.0``); None if sysfs has no such function."""
    if not PCI_ADDRESS.fullmatch(address):
        return None
    return _identity(address.lower(), os.path.join(roots.sys, "bus", "pci", "devices", address))


def pci_functions(roots: Roots) -> list[PciIdentity]:
    """Every PCI function the kernel lists, by address; unreadable ones skipped.

    Read through the ``/sys/bus/pci/devices`` links (no ``realpath``: a scan that a
    uevent starts reads every function, so each costs one file)."""
    base, names = bus_devices(roots, "pci")
    found = []
    for name in names:
        if not PCI_ADDRESS.fullmatch(name):
            continue
        ident = _identity(name.lower(), os.path.join(base, name))
        if ident is not None:
            found.append(ident)
    return found


def _speed(path: str) -> float | None:
    """``16.0 GT/s PCIe`` (or ``8 GT/s`` on older kernels) -> 16.0; ``Unknown`` -> None."""
    matched = _SPEED.match(read_attr(path) or "")
    return float(matched.group(1)) if matched else None


def _link(syspath: str) -> PciLink:
    def width(name: str) -> int | None:
        value = read_int(os.path.join(syspath, name))
        return value if value else None  # 0: the link is down, no figure

    return PciLink(
        _speed(os.path.join(syspath, "current_link_speed")),
        width("current_link_width"),
        _speed(os.path.join(syspath, "max_link_speed")),
        width("max_link_width"),
    )


def _aer_total(syspath: str, which: str) -> int | None:
    text = read_attr(os.path.join(syspath, f"aer_dev_{which}"))
    if text is None:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == _AER_TOTALS[which]:
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


def _upstream_aer(real: str) -> tuple[tuple[str, int | None, int | None], ...]:
    """The AER totals of the ports the function (its real directory) is below (its
    ancestors in ``/sys/devices`` named as PCI functions), nearest first; ports without
    AER skipped."""
    out = []
    parent = os.path.dirname(real)
    while PCI_ADDRESS.fullmatch(os.path.basename(parent)):
        fatal, nonfatal = _aer_total(parent, "fatal"), _aer_total(parent, "nonfatal")
        if fatal is not None or nonfatal is not None:
            out.append((os.path.basename(parent).lower(), fatal, nonfatal))
        parent = os.path.dirname(parent)
    return tuple(out)


def _config(syspath: str, driver: str | None, enabled: bool) -> tuple[bool | None, bool | None]:
    """Whether a function its driver enabled answers, and decodes its BARs, from the
    first bytes of its config space: a reset that nothing restored (a failed error
    recovery) leaves the Command register at 0, a dead link reads all ones. Not read
    for VFIO (its user owns the Command register), nor while the function is runtime
    suspended (a read would wake one in D3cold)."""
    if not enabled or driver is None or is_vfio_driver(driver):
        return None, None
    status = read_attr(os.path.join(syspath, "power", "runtime_status"))
    if status not in (None, "active", "unsupported"):
        return None, None
    try:
        with open(os.path.join(syspath, "config"), "rb") as f:
            head = f.read(6)
    except OSError:
        return None, None
    if len(head) < 6:
        return None, None
    if head[:2] == b"\xff\xff":
        return False, None
    if int.from_bytes(head[4:6], "little") & _DECODING:
        return True, True
    return True, False if _has_bars(syspath) else None


def _has_bars(syspath: str) -> bool:
    """Whether the kernel gave any of its six BARs a memory or I/O range (``resource``)."""
    for line in (read_attr(os.path.join(syspath, "resource")) or "").splitlines()[:6]:
        try:
            start, end, flags = (int(x, 16) for x in line.split())
        except ValueError:
            continue
        if flags & _IO_OR_MEMORY and end > start:
            return True
    return False


def _memory(syspath: str) -> tuple[int | None, str]:
    """VRAM in bytes where the driver says it, and where it said it."""
    amd = read_int(os.path.join(syspath, "mem_info_vram_total"))
    if amd:
        return amd, "mem_info_vram_total"
    tiles = sorted(glob.glob(os.path.join(glob.escape(syspath), "tile[0-9]*")))
    sizes = [read_int(os.path.join(t, "physical_vram_size_bytes")) for t in tiles]
    if sizes and all(sizes):
        return sum(s for s in sizes if s), "tile*/physical_vram_size_bytes"
    cards = sorted(glob.glob(os.path.join(glob.escape(syspath), "drm", "card[0-9]*")))
    for card in cards:
        per_tile = read_int(os.path.join(card, "lmem_total_bytes"))
        if per_tile:
            count = len(glob.glob(os.path.join(glob.escape(card), "gt", "gt[0-9]*"))) or 1
            return per_tile * count, "drm/card*/lmem_total_bytes"
    return None, ""


def _vfio_nodes(roots: Roots, group: str) -> tuple[tuple[str, SysNode | None], ...]:
    """The group's node (plain or no-IOMMU) and the container, with what sysfs says."""
    vfio_class = os.path.join(roots.sys, "class", "vfio")
    group_node: tuple[str, SysNode | None] = (f"vfio/{group}", None)
    for name in (group, f"noiommu-{group}"):
        path = os.path.join(vfio_class, name)
        if os.path.isdir(path):
            node = node_at(path, f"vfio/{name}")
            group_node = (node.devname if node else f"vfio/{name}", node)
            break
    container = node_at(os.path.join(roots.sys, "class", "misc", "vfio"), "vfio/vfio")
    return (group_node, (container.devname if container else "vfio/vfio", container))


def _vfio_blockers(roots: Roots, group: str, address: str) -> tuple[str, ...]:
    """Members of the IOMMU group bound to a driver that keeps VFIO from owning it."""
    members = os.path.join(roots.sys, "kernel", "iommu_groups", group, "devices")
    try:
        names = sorted(os.listdir(members))
    except OSError:
        return ()
    blockers = []
    for name in names:
        if name == address:
            continue
        path = os.path.join(members, name)
        driver = _driver(path)
        if driver is None or is_vfio_driver(driver) or driver in _VFIO_NEUTRAL:
            continue
        code = _hex_attr(os.path.join(path, "class"))
        if code is not None and code >> 8 == _BRIDGE_CLASS:
            continue
        blockers.append(f"{name} ({driver})")
    return tuple(blockers)


def read_function(roots: Roots, ident: PciIdentity) -> PciFunction:
    """Everything else about a function a block matched."""
    path = ident.syspath
    numa = read_int(os.path.join(path, "numa_node"))
    enable = read_attr(os.path.join(path, "enable"))
    try:
        group: str | None = os.path.basename(os.readlink(os.path.join(path, "iommu_group")))
    except OSError:
        group = None
    memory, source = _memory(path)
    vfio = is_vfio_driver(ident.driver) and group is not None
    real = os.path.realpath(path)
    enabled = None if enable is None else enable.strip() != "0"
    answers, decodes = _config(path, ident.driver, enabled is True)
    return PciFunction(
        ident=ident,
        numa_node=numa if numa is not None and numa >= 0 else None,
        enabled=enabled,
        link=_link(path),
        aer_fatal=_aer_total(path, "fatal"),
        aer_nonfatal=_aer_total(path, "nonfatal"),
        upstream_aer=_upstream_aer(real),
        devpath="/" + os.path.relpath(real, os.path.realpath(roots.sys)),
        answers=answers,
        decodes=decodes,
        iommu_group=group,
        memory_bytes=memory,
        memory_source=source,
        nodes=_nodes(roots, path),
        vfio_nodes=_vfio_nodes(roots, group) if vfio and group else (),
        vfio_blockers=_vfio_blockers(roots, group, ident.address) if vfio and group else (),
    )


def _nodes(roots: Roots, syspath: str) -> tuple[SysNode, ...]:
    """The function's own nodes, then those of the NVMe namespaces that are its alone."""
    if not os.path.isdir(syspath):
        return ()
    own = descendant_nodes(syspath, _is_function)
    controllers = [n.devname for n in own if n.subsystem == "nvme"]
    return tuple(own + [n for c in controllers for n in _nvme_namespaces(roots, c)])


def _nvme_namespaces(roots: Roots, controller: str) -> list[SysNode]:
    """The nodes of the namespaces of ``controller``'s subsystem, when native multipath
    put them under the subsystem and the subsystem has no other controller (a namespace
    reachable through several functions is no one function's)."""
    base = os.path.join(roots.sys, "class", "nvme-subsystem")
    try:
        subsystems = sorted(os.listdir(base))
    except OSError:
        return []
    for name in subsystems:
        path = os.path.join(base, name)
        try:
            entries = sorted(os.listdir(path))
        except OSError:
            continue
        if controller not in entries:
            continue
        if [e for e in entries if _NVME_CONTROLLER.fullmatch(e)] != [controller]:
            return []
        return [
            node
            for e in entries
            if _NVME_NAMESPACE.fullmatch(e)
            for node in descendant_nodes(os.path.join(path, e))
        ]
    return []


def _is_function(name: str) -> bool:
    return PCI_ADDRESS.fullmatch(name) is not None


def class_text(code: int) -> str:
    """``030200``: the class code as ``lspci -n`` prints it, six hex digits."""
    return f"{code:06x}"


def matches_nodes(patterns: Sequence[str], devname: str) -> bool:
    """Whether a node (``dri/renderD128``) is one a block's ``nodes`` asks for: a pattern
    with a ``/`` is matched against the path under /dev, any other against the name."""
    if not patterns:
        return True
    name = devname.rsplit("/", 1)[-1]
    for pattern in patterns:
        bare = pattern.removeprefix("/dev/")
        if matches(bare, devname if "/" in bare else name):
            return True
    return False
