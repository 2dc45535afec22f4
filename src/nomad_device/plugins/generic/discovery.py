"""Finding the devices each block describes: ``/dev`` globs, USB devices and PCI functions.

A scan is a pure function of the config and what is under the roots now; it
remembers nothing between calls except a cache of sysfs lookups. Health,
probes and the vanished-device policy are layered on top by the plugin.

**Identity.** Device IDs must survive plugin restarts and, for USB, replugging:

- a glob match is named by its path below the pattern's fixed directory:
  ``/dev/loop*`` gives ``loop0``, ``/dev/serial/by-id/*`` gives the link's own
  name (``usb-FTDI_FT232R_USB_UART_A10K1X2B-if00-port0``), ``/dev/bus/usb/*/*``
  gives ``001/004``; a pattern without wildcards (``/dev/net/tun``) gives the
  file name (``tun``). Should two matches get the same name, both are named by
  their path under ``/dev`` instead (``a/x``, ``b/x``);
- a USB device is ``vvvv:pppp:<serial>`` (``10c4:ea60:0001``) when it has a
  serial no other plugged-in device of that model shares, else
  ``vvvv:pppp@<port path>`` (``1a86:7523@1-1.4``): the sysfs name of the port
  it is plugged into, which does not change when it is replugged there.
  Bus and device numbers (``/dev/bus/usb/001/004``) are enumeration order and
  are never part of an ID;
- a PCI function is its address (``0000:3b:00.0``), as sysfs names it.

**Nodes.** A USB device brings the nodes the kernel made for it and its
interfaces, a PCI function those below it in sysfs (and its VFIO group's when
a VFIO driver has it), both narrowed by the block's ``nodes``; every device of
a block also brings the block's ``companions`` (``/dev/kfd``). Each node goes
through :mod:`.trust`, and a device with one node it may not have is not
offered at all.

**Claims.** A node, a USB device or a PCI function matched by several blocks
belongs to the block whose label sorts first (companions are shared and
claim nothing); the others do not offer it (Nomad would
otherwise give one device to two tasks). The scan reports such overlaps for the
log.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from nomad_device.model import Attribute
from nomad_device.plugins.generic.config import Kind
from nomad_device.plugins.generic.nearmiss import pci_nearest, usb_nearest
from nomad_device.plugins.generic.patterns import fixed_dir
from nomad_device.plugins.generic.pci import (
    PciFunction,
    PciIdentity,
    class_text,
    matches_nodes,
    pci_bandwidth,
    pci_functions,
    read_function,
)
from nomad_device.plugins.generic.pciids import PciIds, PciKey, PciNames
from nomad_device.plugins.generic.roots import Roots
from nomad_device.plugins.generic.sysfs import (
    SysfsCache,
    SysNode,
    UsbDevice,
    usb_bus_present,
    usb_devices,
    usb_nodes,
)
from nomad_device.plugins.generic.trust import Checked, PathCheck

if TYPE_CHECKING:  # CDI's modules load with the first cdi block
    from nomad_device.plugins.generic.cdidevices import CdiFinder, CdiMatch

__all__ = [
    "Found",
    "Node",
    "ScanResult",
    "Scanner",
    "id_base",
    "natural_key",
    "order_key",
    "size_attribute",
]

_SERIAL_SAFE: Final = re.compile(r"[^A-Za-z0-9._+-]+")
_DIGITS: Final = re.compile(r"(\d+)")
_BINARY_UNITS: Final = (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30))
_BINARY_UNITS_SMALL: Final = (("MiB", 1 << 20), ("KiB", 1 << 10))


@functools.lru_cache(maxsize=1 << 16)
def natural_key(text: str) -> tuple[object, ...]:
    """``loop2`` before ``loop10``."""
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(text))


def order_key(found: Found) -> tuple[object, ...]:
    """The order devices are reported in: ``loop2`` before ``loop10``, and PCI addresses
    (fixed-width hex) as text, which is bus order (``0000:9a:00.0`` after ``0000:33:00.0``)."""
    return (found.id,) if found.source == "pci" else natural_key(found.id)


def size_attribute(size: int) -> Attribute:
    """A size in a unit Nomad compares: the largest binary unit that holds it exactly.

    Nomad has no plain byte unit; a size that is no whole number of KiB (an odd
    count of 512-byte sectors) is given as a fraction of KiB, which is exact.
    """
    for unit, multiple in (*_BINARY_UNITS, *_BINARY_UNITS_SMALL):
        if size and size % multiple == 0:
            return Attribute(size // multiple, unit)
    if size % 1024 == 0:
        return Attribute(size // 1024, "KiB")
    return Attribute(size / 1024, "KiB")


@dataclass(frozen=True)
class Node:
    """One filesystem path a device brings.

    ``path`` is where it was found (under the dev root, a symlink for by-id
    matches), ``resolved`` the real node behind it, which is what a task driver
    is given (libcontainer refuses symlinks), and ``task_path`` where the task
    sees it by default: the ``/dev/...`` name it was matched by.
    """

    path: str
    resolved: str
    task_path: str
    kind: str  # char, block, file, directory, socket, fifo, other, missing
    major: int = -1
    minor: int = -1
    expect: tuple[str, int, int] | None = None  # what sysfs says the node must be
    known: bool | None = None  # whether sysfs has a device with these numbers (None: no index)
    stamp: object = None  # inode and ctime: a node made anew has new ones
    ident: tuple[int, int] | None = None  # device and inode of the file behind the path

    @property
    def is_device(self) -> bool:
        return self.kind in ("char", "block")


@dataclass(frozen=True)
class Found:
    """One physical device of one block, as the scan saw it."""

    label: str
    id: str
    source: str  # "path", "usb" or "pci"
    nodes: tuple[Node, ...]  # its own, the primary node first
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    pci_bus_id: str | None = None
    size_bytes: int | None = None
    usb_speed: float | None = None
    usb_authorized: bool = True
    usb_port: str | None = None
    companions: tuple[Node, ...] = ()  # the block's, shared with its other devices
    pci: PciFunction | None = None
    expect_driver: str | None = None  # the driver the matching pci block names
    unfiltered: tuple[str, ...] = ()  # nodes left out by the block's ``nodes``
    cdi: CdiMatch | None = None  # the CDI device (source "cdi")

    @property
    def all_nodes(self) -> tuple[Node, ...]:
        """What a reservation grants: its own nodes, then the companions."""
        return self.nodes + self.companions

    @property
    def device_key(self) -> str | None:
        """What makes two matches one physical device besides their nodes."""
        if self.source == "usb" and self.usb_port is not None:
            return f"usb {self.usb_port}"
        if self.source == "pci" and self.pci is not None:
            return f"pci {self.pci.address}"
        if self.cdi is not None:
            return f"cdi {self.cdi.device.qualified}"
        return None


@dataclass
class ScanResult:
    found: dict[str, list[Found]]  # by block label, in natural ID order
    empty_patterns: set[tuple[str, str]]  # (label, pattern) matching nothing
    notes: set[str]  # overlaps and ambiguities, for the log
    refused: dict[tuple[str, str], str] = field(default_factory=dict)  # (label, path): why
    usb_unmatched: set[str] = field(default_factory=set)  # labels whose usb blocks match nothing
    usb_bus: bool = True  # whether sysfs has a USB bus at all
    pci_unmatched: set[str] = field(default_factory=set)  # labels whose pci blocks match nothing
    # ("usb" or "pci", label) of an unmatched block: what came closest (nearmiss).
    nearest: dict[tuple[str, str], str] = field(default_factory=dict)


_KIND_OF_MODE: Final = (
    (stat.S_ISCHR, "char"),
    (stat.S_ISBLK, "block"),
    (stat.S_ISREG, "file"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISFIFO, "fifo"),
)


def kind_of(mode: int) -> str:
    for test, name in _KIND_OF_MODE:
        if test(mode):
            return name
    return "other"


def id_base(pattern: str) -> str | None:
    """The fixed directory of a glob (``/dev/serial/by-id``), None without wildcards."""
    return fixed_dir(pattern)


def _path_id(pattern: str, canonical: str, base: str | None = "") -> str:
    """The ID of a match: its path below ``base``, the pattern's fixed directory."""
    if base == "":
        base = id_base(pattern)
    if base is None:
        return os.path.basename(canonical) or canonical
    prefix = base.rstrip("/") + "/"
    if canonical.startswith(prefix):
        return canonical[len(prefix) :]
    return os.path.relpath(canonical, base)


def _node(checked: Checked, task_path: str) -> Node:
    info = checked.info
    if info is None:
        return Node(checked.path, checked.resolved, task_path, "missing")
    kind, ident = kind_of(info.st_mode), (info.st_dev, info.st_ino)
    if kind in ("char", "block"):
        major, minor = os.major(info.st_rdev), os.minor(info.st_rdev)
        stamp = (info.st_ino, info.st_ctime_ns)
        return Node(
            checked.path, checked.resolved, task_path, kind, major, minor,
            stamp=stamp, ident=ident,
        )  # fmt: skip
    return Node(checked.path, checked.resolved, task_path, kind, ident=ident)


def _fallback_id(canonical: str) -> str:
    return canonical[len("/dev/") :] if canonical.startswith("/dev/") else canonical.lstrip("/")


class Scanner:
    """Runs scans under one pair of roots, keeping sysfs lookups between them."""

    def __init__(self, roots: Roots) -> None:
        self.roots = roots
        self.sysfs = SysfsCache(roots)
        self.trust = PathCheck(roots, self.sysfs)
        self.pci_ids = PciIds(roots.pci_ids_paths, self._unreadable)
        self._cdi: CdiFinder | None = None

    def _unreadable(self, path: str) -> str | None:
        """Why a file the plugin reads names from is not to be believed (:mod:`.trust`)."""
        checked = self.trust.check(path)
        if not checked.ok:
            return checked.refusal
        if checked.info is None or not stat.S_ISREG(checked.info.st_mode):
            return "not a regular file"
        return None

    # -- nodes ---------------------------------------------------------------------

    def inspect(
        self, real: str, task_path: str, patterns: Sequence[str], refused: dict[str, str]
    ) -> Node | None:
        """Stat one path through :mod:`.trust`; a dangling symlink or vanished file is
        ``missing``. A path that may not be offered is None, its reason in ``refused``
        (by its ``/dev/...`` name)."""
        checked = self.trust.check(real, patterns)
        if not checked.ok:
            refused[task_path] = checked.refusal
            return None
        return _node(checked, task_path)

    def recheck(self, node: Node, patterns: Sequence[str]) -> str | None:
        """Why ``node`` may no longer be granted as the scan saw it (Reserve asks); None if
        it may. Every directory is looked at afresh."""
        checked = self.trust.check(node.path, patterns, fresh=True)
        if not checked.ok:
            return f"{node.task_path}: {checked.refusal}"
        if checked.info is None:
            return f"{node.task_path} does not exist any more"
        now = _node(checked, node.task_path)
        if now.resolved != node.resolved:
            was, shown = self.roots.canonical(node.resolved), self.roots.canonical(now.resolved)
            return f"{node.task_path} leads to {shown} now, not to {was}"
        if (now.kind, now.major, now.minor) != (node.kind, node.major, node.minor):
            was = f"{node.kind} {node.major}:{node.minor}" if node.is_device else node.kind
            return f"{node.task_path} changed since the last scan (it was: {was})"
        if not node.is_device and now.ident != node.ident:
            # A device node is judged by its numbers (udev may make it anew on a
            # replug); anything mounted by path must be the very file seen.
            return f"{node.task_path} was replaced since the last scan"
        return None

    # -- one block ---------------------------------------------------------------------

    def _glob(self, pattern: str) -> list[str]:
        real = self.roots.real(pattern)
        if real != pattern:
            fixed = self.roots.dev
            real = glob.escape(fixed) + real[len(fixed) :]
        return sorted(glob.glob(real))

    def _path_devices(
        self, kind: Kind, empty: set[tuple[str, str]], refused: dict[str, str]
    ) -> list[Found]:
        """One device per matched path, the same node matched twice counted once
        (named by a symlink's name when one of the matches is a symlink)."""
        by_node: dict[str, tuple[bool, Found]] = {}
        for pattern in kind.paths:
            base = id_base(pattern)
            matches = self._glob(pattern)
            if not matches:
                empty.add((kind.label, pattern))
            for real in matches:
                canonical = self.roots.canonical(real)
                node = self.inspect(real, canonical, kind.patterns, refused)
                if node is None:
                    continue
                is_link = node.path != node.resolved and os.path.islink(real)
                found = self._path_found(kind, _path_id(pattern, canonical, base), node)
                previous = by_node.get(node.resolved)
                if previous is None or (is_link and not previous[0]):
                    by_node[node.resolved] = (is_link, found)
        return [found for _, found in by_node.values()]

    def _path_found(self, kind: Kind, device_id: str, node: Node) -> Found:
        if not node.is_device:
            return Found(kind.label, device_id, "path", (node,))
        attributes: dict[str, Attribute] = {
            "major": Attribute(node.major),
            "minor": Attribute(node.minor),
        }
        info = self.sysfs.lookup(node.kind, node.major, node.minor, node.stamp)
        node = self._known(node, info is not None)
        size = None
        usb = None
        pci = None
        if info is not None:
            pci = info.pci_bus_id
            usb = info.usb
            if info.subsystem:
                attributes["subsystem"] = Attribute(info.subsystem)
            if node.kind == "block":
                size = self.sysfs.block_size(info)
                if size is not None:
                    attributes["size"] = size_attribute(size)
        if usb is not None:
            attributes.update(_usb_attributes(usb))
        return Found(
            kind.label,
            device_id,
            "path",
            (node,),
            attributes,
            pci,
            size,
            usb.speed if usb else None,
            usb.authorized if usb else True,
            usb.sysname if usb else None,
        )

    def _known(self, node: Node, known: bool) -> Node:
        """Record whether sysfs has a device with the node's numbers (where it lists any)."""
        if self.sysfs.has_index(node.kind):
            return dataclasses.replace(node, known=known)
        return node

    def _usb_found(
        self, kind: Kind, device_id: str, device: UsbDevice, refused: dict[str, str]
    ) -> Found | None:
        usb_nodes_ = usb_nodes(device)
        # The interfaces' nodes (tty, hidraw, video...) are what programs open;
        # the bus node (/dev/bus/usb/BBB/DDD, libusb's) comes last.
        ordered = [n for n in usb_nodes_ if not n.devname.startswith("bus/usb/")]
        ordered += [n for n in usb_nodes_ if n.devname.startswith("bus/usb/")]
        wanted = [n for n in ordered if matches_nodes(kind.nodes, n.devname)]
        nodes = self._sys_nodes(wanted, kind.patterns, refused)
        if nodes is None:
            return None  # one node it may not have: none of it is offered
        sizes = (self._block_size(n) for n in wanted if n.kind == "block")
        size = next((s for s in sizes if s is not None), None)
        attributes = _usb_attributes(device)
        if size is not None:
            attributes["size"] = size_attribute(size)
        return Found(
            kind.label,
            device_id,
            "usb",
            tuple(nodes),
            attributes,
            self.sysfs.pci_bus_id(device.syspath),
            size,
            device.speed,
            device.authorized,
            device.sysname,
            unfiltered=_left_out(usb_nodes_, wanted),
        )

    def _sys_nodes(
        self, sys_nodes: Sequence[SysNode], patterns: Sequence[str], refused: dict[str, str]
    ) -> list[Node] | None:
        """Nodes sysfs names, each through :mod:`.trust`; None if one may not be offered."""
        nodes = []
        for sys_node in sys_nodes:
            node = self._sys_node(sys_node.devname, sys_node, patterns, refused)
            if node is None:
                return None
            nodes.append(node)
        return nodes

    def _sys_node(
        self, devname: str, sys_node: SysNode | None, patterns: Sequence[str],
        refused: dict[str, str],
    ) -> Node | None:  # fmt: skip
        """``/dev/<devname>``, expected to be what sysfs says (when it says anything)."""
        node = self.inspect(self.roots.devname(devname), f"/dev/{devname}", patterns, refused)
        if node is None or sys_node is None:
            return node
        return dataclasses.replace(node, expect=(sys_node.kind, sys_node.major, sys_node.minor))

    # -- PCI -------------------------------------------------------------------------------

    def _pci_found(
        self,
        kind: Kind,
        ident: PciIdentity,
        expect_driver: str | None,
        names: PciNames,
        refused: dict[str, str],
    ) -> Found | None:
        function = read_function(self.roots, ident)
        wanted = [n for n in function.nodes if matches_nodes(kind.nodes, n.devname)]
        nodes = self._sys_nodes(wanted, kind.patterns, refused)
        if nodes is None:
            return None
        for devname, sys_node in function.vfio_nodes:
            node = self._sys_node(devname, sys_node, kind.patterns, refused)
            if node is None:
                return None
            nodes.append(node)
        attributes = _pci_attributes(function, names)
        # The whole disk comes before its partitions in sysfs order.
        sizes = (self._block_size(n) for n in wanted if n.kind == "block")
        size = next((s for s in sizes if s is not None), None)
        if size is not None:
            attributes["size"] = size_attribute(size)
        return Found(
            kind.label,
            ident.address,
            "pci",
            tuple(nodes),
            attributes,
            ident.address,
            size,
            pci=function,
            expect_driver=expect_driver,
            unfiltered=_left_out(function.nodes, wanted),
        )

    def _pci_matches(
        self, kind: Kind, functions: Sequence[PciIdentity], notes: set[str]
    ) -> list[tuple[PciIdentity, str | None]]:
        """The functions a block's pci matchers take, each with the driver it expects."""
        taken = []
        for ident in functions:
            ids = _pci_key(ident)
            other_driver = None
            for matcher in kind.pci:
                if not matcher.identity_matches(ident.address, ids, ident.class_code):
                    continue
                if matcher.driver_matches(ident.driver):
                    taken.append((ident, matcher.driver))
                    break
                other_driver = matcher.driver
            else:
                if other_driver is not None:
                    notes.add(
                        f'PCI function {ident.address} would be device "{kind.label}"\'s, but it'
                        f" is bound to {ident.driver}, not {other_driver}; it is left out"
                    )
        return taken

    def _companions(
        self, kind: Kind, empty: set[tuple[str, str]], refused: dict[str, str]
    ) -> tuple[Node, ...] | None:
        """The block's companion nodes; None when one of them may not be offered."""
        nodes: list[Node] = []
        for pattern in kind.companions:
            matches = self._glob(pattern) if id_base(pattern) else [self.roots.real(pattern)]
            if not matches:
                empty.add((kind.label, pattern))
            for real in matches:
                node = self.inspect(real, self.roots.canonical(real), kind.patterns, refused)
                if node is None:
                    return None
                if node.is_device:
                    info = self.sysfs.lookup(node.kind, node.major, node.minor, node.stamp)
                    node = self._known(node, info is not None)
                nodes.append(node)
        return tuple(nodes)

    def _block_size(self, node: SysNode) -> int | None:
        info = self.sysfs.lookup("block", node.major, node.minor)
        return None if info is None else self.sysfs.block_size(info)

    # -- CDI -------------------------------------------------------------------------------

    def _cdi_finder(self) -> CdiFinder:
        """CDI's modules load with the first cdi block (:mod:`.cdidevices`)."""
        if self._cdi is None:
            from nomad_device.plugins.generic.cdidevices import CdiFinder

            self._cdi = CdiFinder(self)
        return self._cdi

    # -- everything ------------------------------------------------------------------------

    def scan(self, kinds: Sequence[Kind]) -> ScanResult:
        self.sysfs.new_scan()
        self.trust.new_scan()
        if self._cdi is not None:
            self._cdi.new_scan()
        empty: set[tuple[str, str]] = set()
        notes: set[str] = set()
        refused: dict[tuple[str, str], str] = {}
        wants_usb = any(k.usb for k in kinds)
        usb = usb_devices(self.roots) if wants_usb else []
        usb_unmatched: set[str] = set()
        usb_ids = _usb_ids(usb, notes)
        functions = pci_functions(self.roots) if any(k.pci for k in kinds) else []
        pci_taken = {k.label: self._pci_matches(k, functions, notes) for k in kinds if k.pci}
        names = self.pci_ids.names(_pci_key(i) for taken in pci_taken.values() for i, _ in taken)
        if self.pci_ids.note:
            notes.add(self.pci_ids.note)
        pci_unmatched = {label for label, taken in pci_taken.items() if not taken}
        nearest = {
            ("pci", k.label): pci_nearest(k.pci, functions)
            for k in kinds
            if k.label in pci_unmatched
        }
        claimed_nodes: dict[str, str] = {}
        claimed_devices: dict[str, str] = {}
        ids: dict[str, str] = {}
        result: dict[str, list[Found]] = {}
        for kind in sorted(kinds, key=lambda k: k.label):
            mine: dict[str, str] = {}
            candidates = self._path_devices(kind, empty, mine)
            matched = False
            for device in usb:
                if any(m.matches(*_usb_key(device)) for m in kind.usb):
                    matched = True
                    found = self._usb_found(kind, usb_ids[device.syspath], device, mine)
                    if found is not None:
                        candidates.append(found)
            if kind.usb and not matched:
                usb_unmatched.add(kind.label)
                nearest["usb", kind.label] = usb_nearest(kind.usb, usb)
            for ident, driver in pci_taken.get(kind.label, ()):
                names_of = names.get(_pci_key(ident), PciNames())
                found = self._pci_found(kind, ident, driver, names_of, mine)
                if found is not None:
                    candidates.append(found)
            if kind.cdi is not None:
                candidates.extend(self._cdi_finder().found(kind, mine, notes))
            companions = self._companions(kind, empty, mine) if kind.companions else ()
            if companions is None:
                candidates = []  # a companion it may not have: the block offers nothing
            elif companions:
                candidates = [dataclasses.replace(f, companions=companions) for f in candidates]
            refused.update({(kind.label, path): why for path, why in mine.items()})
            kept = []
            for found in _unique_ids(candidates):
                owner = _claim(found, kind.label, claimed_nodes, claimed_devices)
                if owner is not None:
                    notes.add(
                        f'device {found.id!r} matches both device "{owner}" and device'
                        f' "{kind.label}"; only device "{owner}" offers it'
                    )
                    continue
                other = ids.setdefault(found.id, kind.label)
                if other != kind.label:
                    notes.add(
                        f'device ID {found.id!r} of device "{kind.label}" is already used'
                        f' by device "{other}"; it is left out'
                    )
                    continue
                kept.append(found)
            kept.sort(key=order_key)
            result[kind.label] = kept
        bus = usb_bus_present(self.roots) if wants_usb else True
        return ScanResult(
            result, empty, notes, refused, usb_unmatched, bus, pci_unmatched, nearest=nearest
        )


def _usb_key(device: UsbDevice) -> tuple[int, int, str, str, str]:
    return (device.vendor_id, device.product_id, device.serial, device.manufacturer, device.product)


def _usb_attributes(device: UsbDevice) -> dict[str, Attribute]:
    attributes = {
        "usb_vendor_id": Attribute(device.vendor_id),
        "usb_product_id": Attribute(device.product_id),
    }
    for name, value in (
        ("usb_manufacturer", device.manufacturer),
        ("usb_product", device.product),
        ("usb_serial", device.serial),
    ):
        if value:
            attributes[name] = Attribute(value)
    return attributes


def _usb_ids(devices: Iterable[UsbDevice], notes: set[str]) -> dict[str, str]:
    """Serial-based IDs where the serial tells devices apart, port-based otherwise."""
    devices = list(devices)
    seen: dict[tuple[int, int, str], int] = {}
    for device in devices:
        serial = _SERIAL_SAFE.sub("_", device.serial).strip("_")
        if serial:
            key = (device.vendor_id, device.product_id, serial)
            seen[key] = seen.get(key, 0) + 1
    ids: dict[str, str] = {}
    for device in devices:
        model = f"{device.vendor_id:04x}:{device.product_id:04x}"
        serial = _SERIAL_SAFE.sub("_", device.serial).strip("_")
        if serial and seen[(device.vendor_id, device.product_id, serial)] == 1:
            ids[device.syspath] = f"{model}:{serial}"
        else:
            if serial:
                notes.add(
                    f"USB devices {model} share the serial {device.serial!r}; they are"
                    " named by the port they are plugged into"
                )
            ids[device.syspath] = f"{model}@{device.sysname}"
    return ids


def _unique_ids(candidates: list[Found]) -> list[Found]:
    """Path matches that would share an ID are named by their path under /dev."""
    counts: dict[str, int] = {}
    for found in candidates:
        counts[found.id] = counts.get(found.id, 0) + 1
    out = []
    for found in candidates:
        if counts[found.id] > 1 and found.source == "path":
            found = dataclasses.replace(found, id=_fallback_id(found.nodes[0].task_path))
        out.append(found)
    return out


def _claim(found: Found, label: str, nodes: dict[str, str], devices: dict[str, str]) -> str | None:
    """The block that already owns this device, or None after claiming it for ``label``.

    A device is known by its own nodes and its USB port or PCI address; the
    block's companions are shared by design and claim nothing. A CDI device is
    known by its qualified name alone: CDI devices share nodes by design (a MIG
    device and its GPU, every device and the spec's control nodes).
    """
    keys = [n.resolved for n in found.nodes if n.kind != "missing" and found.source != "cdi"]
    owner = next((nodes[k] for k in keys if k in nodes), None)
    device = found.device_key
    if owner is None and device is not None:
        owner = devices.get(device)
    if owner is not None and owner != label:
        return owner
    for key in keys:
        nodes[key] = label
    if device is not None:
        devices[device] = label
    return None


def _pci_key(ident: PciIdentity) -> PciKey:
    return (ident.vendor_id, ident.device_id, ident.subsystem_vendor_id, ident.subsystem_device_id)


def _left_out(every: Sequence[SysNode], kept: Sequence[SysNode]) -> tuple[str, ...]:
    return tuple(n.devname for n in every if n not in kept)


_MIB: Final = 1 << 20


def _pci_attributes(function: PciFunction, names: PciNames) -> dict[str, Attribute]:
    """Identity, locality, link and memory, in the names and units of Nomad's GPU
    attributes where they overlap (``memory`` in MiB, ``pci_bandwidth`` in MB/s)."""
    ident = function.ident
    attributes = {
        "pci_vendor_id": Attribute(ident.vendor_id),
        "pci_device_id": Attribute(ident.device_id),
        "pci_class": Attribute(class_text(ident.class_code)),
    }
    optional: tuple[tuple[str, object, str], ...] = (
        ("pci_subsystem_vendor_id", ident.subsystem_vendor_id, ""),
        ("pci_subsystem_device_id", ident.subsystem_device_id, ""),
        ("pci_driver", ident.driver, ""),
        ("numa_node", function.numa_node, ""),
        ("pci_link_speed", function.link.speed, ""),
        ("pci_link_width", function.link.width, ""),
        ("pci_link_speed_max", function.link.max_speed, ""),
        ("pci_link_width_max", function.link.max_width, ""),
        ("pci_bandwidth", pci_bandwidth(function.link.max_speed, function.link.max_width), "MB/s"),
        ("memory", None if function.memory_bytes is None else function.memory_bytes // _MIB, "MiB"),
        ("pci_vendor_name", names.vendor, ""),
        ("pci_device_name", names.device, ""),
        ("pci_subsystem_name", names.subsystem, ""),
    )
    for name, value, unit in optional:
        if isinstance(value, (int, float, str)) and value != "":
            attributes[name] = Attribute(value, unit)
    return attributes
