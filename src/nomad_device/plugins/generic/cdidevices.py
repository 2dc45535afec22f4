"""CDI devices as the generic plugin offers them: trusted spec files, matching, what Nomad lacks.

:mod:`.cdi` reads spec directories as the reference library does; this module
is what the plugin adds around it, and :class:`CdiFinder` is what a scan
(:mod:`.discovery`) asks for a block's devices. It is loaded with the first
``cdi`` block: a plugin without one never reads CDI.

- **Trust** (:class:`CdiSpecs`): a spec file is read only when it passes
  :mod:`.trust` (it and every directory above it root's and writable by
  nobody else, symlinks root's): a spec anyone could write names any host
  path as a mount, which makes it root's equal. It must be a regular file; it
  is read without following a link planted after the check and without
  blocking. Parsed specs are kept by the file's identity (device, inode,
  size, times), so a rescan reads only what changed.
- **Matching** (:func:`select`): the spec kind and device name against the
  block's globs; devices whose names two kinds share are named by their
  qualified name (``nvidia.com/gpu=0``) instead.
- **Host paths** (:class:`CdiFinder`): every node and mount source goes
  through :mod:`.trust` as a ``paths`` match does; a device with one it may
  not have is not offered. Its locality is the PCI function its own nodes
  hang off in sysfs; a node sysfs knows nothing of (NVIDIA's ``/dev/nvidia0``)
  takes the function of the devices of its spec that list it beside nodes
  sysfs places (the GPU's DRM nodes): so a MIG device gets its GPU's.
- **What Nomad cannot carry** (:func:`uncarried`): a reservation holds device
  nodes, bind mounts and environment variables. Hooks, ``intelRdt``,
  ``additionalGids``, ``netDevices``, a node CDI grants no access to
  (``permissions: none``) and a mount that is not a bind mount have no place
  in it; a block says whether such a device is refused (unhealthy, with
  :func:`refusal`) or offered without them.
- **The kernel's nodes** (:class:`Majors`): a node sysfs knows nothing of is
  still the kernel's when its driver holds the major.
- **Attributes** (:func:`annotation_attributes`): the spec's annotations and
  then the device's, as ``cdi_<name>`` (every run of characters other than
  letters, digits and ``_`` becomes ``_``), read as Nomad reads attribute
  strings.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from nomad_device.model import Attribute
from nomad_device.plugins.generic import cdi
from nomad_device.plugins.generic.config import CdiMatcher, Kind, parse_attribute
from nomad_device.plugins.generic.discovery import (
    Found,
    Node,
    Scanner,
    _pci_attributes,
    _pci_key,
)
from nomad_device.plugins.generic.pci import identity_at, read_function
from nomad_device.plugins.generic.pciids import PciNames
from nomad_device.plugins.generic.trust import PathCheck

__all__ = [
    "REFUSAL",
    "CdiFinder",
    "CdiMatch",
    "CdiSpecs",
    "Majors",
    "Selected",
    "annotation_attributes",
    "attribute_name",
    "catalog_notes",
    "own_paths",
    "primary",
    "refusal",
    "select",
    "uncarried",
]

#: What a refused device's reason starts with; the rest lists what it needs.
REFUSAL: Final = "needs CDI hooks Nomad cannot run: "
#: The longest reason: it ends up in ``nomad node status`` tables.
MAX_REASON: Final = 200
#: Mount types a bind mount is (CDI's default, ``""``, is one).
BIND_TYPES: Final = frozenset({"", "bind", "rbind"})
_NOT_NAME: Final = re.compile(r"[^A-Za-z0-9_]+")

_Identity = tuple[str, int, int, int, int, int]


class CdiSpecs:
    """Spec files read through the trust rules, kept until they change."""

    def __init__(self, trust: PathCheck) -> None:
        self._trust = trust
        self._cache: dict[tuple[str, int], tuple[_Identity, cdi.Spec | cdi.SpecError]] = {}
        self._seen: set[tuple[str, int]] = set()
        self._catalogs: dict[tuple[str, ...], cdi.Catalog] = {}

    def new_scan(self) -> None:
        """Forget this scan's catalogs, and the specs of files no longer there."""
        if self._catalogs:
            for key in [k for k in self._cache if k not in self._seen]:
                del self._cache[key]
        self._seen.clear()
        self._catalogs.clear()

    def catalog(self, dirs: Sequence[str]) -> cdi.Catalog:
        """What ``dirs`` define, read once per scan however many blocks name them."""
        key = tuple(dirs)
        found = self._catalogs.get(key)
        if found is None:
            found = self._catalogs[key] = cdi.scan_dirs(dirs, self.load)
        return found

    def load(self, path: str, priority: int) -> cdi.Spec:
        """One spec file, as :func:`.cdi.scan_dirs` asks for it; a file replaced between
        the check and the read (a generator's rename) is looked at once more."""
        try:
            return self._load(path, priority)
        except _Replaced:
            return self._load(path, priority)

    def _load(self, path: str, priority: int) -> cdi.Spec:
        checked = self._trust.check(path)
        if not checked.ok:
            raise cdi.SpecError(f"not read: {checked.refusal}")
        info = checked.info
        if info is None:
            raise cdi.SpecError("it does not exist (a dangling symlink?)")
        if not stat.S_ISREG(info.st_mode):
            raise cdi.SpecError("not a regular file")
        identity = (
            checked.resolved, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns,
            info.st_ctime_ns,
        )  # fmt: skip
        key = (path, priority)
        self._seen.add(key)
        cached = self._cache.get(key)
        if cached is not None and cached[0] == identity:
            outcome = cached[1]
        else:
            try:
                outcome = cdi.read_spec(_read(checked.resolved, info), path, priority)
            except _Replaced:
                raise
            except cdi.SpecError as exc:
                outcome = exc
            self._cache[key] = (identity, outcome)
        if isinstance(outcome, cdi.SpecError):
            raise outcome
        return outcome


class _Replaced(cdi.SpecError):
    """The file is another than the one the trust check looked at."""


def _read(path: str, checked: os.stat_result) -> bytes:
    """The file the trust check saw: no symlink followed now, no blocking on a FIFO put
    in its place, and the same inode, or nothing."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise cdi.SpecError(f"cannot open it: {(exc.strerror or str(exc)).lower()}") from None
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != (checked.st_dev, checked.st_ino):
            raise _Replaced("it was replaced while being read")
        if not stat.S_ISREG(info.st_mode):
            raise cdi.SpecError("not a regular file")
        chunks = []
        total = 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            total += len(chunk)
            if total > cdi.MAX_SPEC_BYTES:
                raise cdi.SpecError(f"larger than {cdi.MAX_SPEC_BYTES >> 20} MiB", unsupported=True)
        return b"".join(chunks)
    except OSError as exc:
        raise cdi.SpecError(f"cannot read it: {(exc.strerror or str(exc)).lower()}") from None
    finally:
        os.close(fd)


class Majors:
    """The major numbers drivers have registered (``/proc/devices``), read once a scan.

    A device node is the kernel's when sysfs has a device with its numbers; some
    drivers make nodes sysfs lists nothing for (NVIDIA's ``/dev/nvidia0``,
    ``/dev/nvidiactl``, ``/dev/nvidia-caps/*``), and for those the driver holding
    the major is what the kernel says.
    """

    def __init__(self, path: str = "/proc/devices") -> None:
        self._path = path
        self._table: dict[str, frozenset[int]] | None = None

    def new_scan(self) -> None:
        self._table = None

    def registered(self, kind: str, major: int) -> bool:
        if self._table is None:
            self._table = self._read()
        return major in self._table.get(kind, frozenset())

    def _read(self) -> dict[str, frozenset[int]]:
        table: dict[str, set[int]] = {"char": set(), "block": set()}
        section: set[int] | None = None
        try:
            with open(self._path, encoding="ascii", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            lines = []
        for line in lines:
            if line.startswith("Character"):
                section = table["char"]
            elif line.startswith("Block"):
                section = table["block"]
            elif section is not None and line.split()[:1] and line.split()[0].isdigit():
                section.add(int(line.split()[0]))
        return {k: frozenset(v) for k, v in table.items()}


@dataclass(frozen=True)
class Selected:
    """A CDI device a block matched, under the ID it is offered by."""

    id: str
    device: cdi.Device
    applied: cdi.Applied  # its edits alone, as CDI applies them


def select(
    matcher: CdiMatcher, catalog: cdi.Catalog, applied: dict[int, Selected] | None = None
) -> list[Selected]:
    """The catalog's devices the block's kind and device globs match. A name that two
    kinds of the block share is given as the qualified name for both. ``applied``
    keeps each device's applied edits while its spec file does not change."""
    chosen = [d for d in catalog.devices.values() if matcher.matches(d.kind, d.name)]
    counts: dict[str, int] = {}
    for device in chosen:
        counts[device.name] = counts.get(device.name, 0) + 1
    out = []
    for device in chosen:
        name = device.name if counts[device.name] == 1 else device.qualified
        known = None if applied is None else applied.get(id(device))
        if known is None or known.device is not device:
            known = Selected(name, device, cdi.apply(device.resolved))
            if applied is not None:
                applied[id(device)] = known
        out.append(known if known.id == name else Selected(name, device, known.applied))
    return out


def uncarried(applied: cdi.Applied) -> tuple[str, ...]:
    """What of ``applied`` a Nomad reservation has no place for, in words."""
    items: list[str] = []
    for hook in applied.hooks:
        text = f"{hook.hook_name} hook {hook.describe()}"
        if text not in items:
            items.append(text)
    if applied.intel_rdt is not None:
        items.append("intelRdt")
    if applied.additional_gids:
        items.append("additionalGids " + ",".join(map(str, applied.additional_gids)))
    if applied.net_devices:
        items.append("netDevices " + ",".join(d.host_interface_name for d in applied.net_devices))
    for node in applied.device_nodes:
        if node.permissions == cdi.NO_PERMISSIONS:
            items.append(f"{node.path} with permissions none")
    for mount in applied.mounts:
        if mount.type not in BIND_TYPES:
            items.append(f"{mount.type} mount at {mount.container_path}")
    return tuple(items)


def refusal(items: Sequence[str]) -> str:
    """The unhealthy reason of a device that needs ``items``, shortened to fit a table."""
    shown: list[str] = []
    for index, item in enumerate(items):
        rest = len(items) - index - 1
        more = f" and {rest} more" if rest else ""
        if shown and len(REFUSAL + ", ".join([*shown, item]) + more) > MAX_REASON:
            return REFUSAL + ", ".join(shown) + f" and {len(items) - index} more"
        shown.append(item)
    return REFUSAL + ", ".join(shown)


def attribute_name(key: str) -> str:
    """``nvidia.com/gpu.product`` -> ``cdi_nvidia_com_gpu_product``."""
    return "cdi_" + _NOT_NAME.sub("_", key).strip("_")


def annotation_attributes(device: cdi.Device) -> dict[str, Attribute]:
    """The spec's annotations, then the device's (which win), as attributes."""
    out: dict[str, Attribute] = {}
    for mapping in (device.spec_annotations, device.annotations):
        for key, value in mapping.items():
            name = attribute_name(key)
            if name != "cdi_":
                out[name] = parse_attribute(value)
    return out


def own_paths(device: cdi.Device) -> tuple[str, ...]:
    """The container paths of the device's own nodes (not its spec's)."""
    return tuple(dict.fromkeys(n.path for n in device.edits.device_nodes))


def primary(device: cdi.Device) -> str | None:
    """The container path that stands for the device in ``GENERIC_<L>_PATHS``."""
    paths = own_paths(device)
    return paths[0] if paths else None


def catalog_notes(catalog: cdi.Catalog) -> Iterable[str]:
    """Log lines for a catalog's problems: refused files, conflicts, an unreadable
    directory."""
    for path, problems in sorted(catalog.errors.items()):
        for problem in problems:
            text = str(problem).removeprefix("failed to load CDI Spec ")
            if "conflicting device" in text:
                yield f"CDI spec {path}: {text}; the device is not offered"
            else:
                yield f"CDI spec {path} is skipped: {text}"
    if catalog.dir_error is not None:
        directory, why = catalog.dir_error
        yield f"CDI spec directory {directory} cannot be listed ({why}); later ones are not read"


@dataclass(frozen=True)
class CdiMatch:
    """What a scan found for one CDI device (:attr:`.discovery.Found.cdi`)."""

    device: cdi.Device
    applied: cdi.Applied  # its edits alone, as CDI applies them
    skipped: tuple[str, ...]  # what of them a reservation cannot carry (:func:`uncarried`)
    hosts: tuple[str, ...]  # the host path of each of the Found's nodes, as the spec says


class CdiFinder:
    """A scan's CDI devices: a block's matches as :class:`.discovery.Found`, each path
    looked at once per scan however many devices bring it."""

    def __init__(self, scanner: Scanner) -> None:
        self.scanner = scanner
        self.specs = CdiSpecs(scanner.trust)
        self.majors = Majors()
        self._nodes: dict[tuple[str, str], Node | None] = {}
        self._pci: dict[str, dict[str, Attribute]] = {}
        self._selected: dict[int, Selected] = {}  # by id(device), kept while it is current
        self._current: dict[int, Selected] = {}

    def new_scan(self) -> None:
        self.specs.new_scan()
        self.majors.new_scan()
        self._nodes.clear()
        self._pci.clear()
        self._selected, self._current = self._current, {}

    def found(self, kind: Kind, refused: dict[str, str], notes: set[str]) -> list[Found]:
        """The devices the block's ``cdi`` matches; one with a path it may not have is
        left out, the reason in ``refused``."""
        assert kind.cdi is not None
        self._nodes.clear()  # a path refused is logged for each block that names it
        catalog = self.specs.catalog(kind.cdi.spec_dirs)
        notes.update(catalog_notes(catalog))
        built: list[tuple[Selected, list[Node], tuple[str, ...], list[Node], set[str]]] = []
        for item in select(kind.cdi, catalog, self._selected):
            self._current[id(item.device)] = item
            paths = self._paths(item, refused)
            if paths is None:
                continue
            nodes, hosts = paths
            own = set(own_paths(item.device))
            mine = [n for n in nodes if n.task_path in own]
            known = {a for n in mine if (a := self._function(n)) is not None}
            built.append((item, nodes, hosts, mine, known))
        by_node: dict[tuple[str, str], set[str]] = {}
        for item, _, _, mine, known in built:
            if len(known) == 1:
                for node in mine:
                    by_node.setdefault((item.device.spec_path, node.path), set()).update(known)
        out = []
        for item, nodes, hosts, mine, known in built:
            if not known:
                for node in mine:
                    known |= by_node.get((item.device.spec_path, node.path), set())
            address = next(iter(known)) if len(known) == 1 else None
            out.append(self._found(kind, item, nodes, hosts, address, notes))
        return out

    def _paths(
        self, item: Selected, refused: dict[str, str]
    ) -> tuple[list[Node], tuple[str, ...]] | None:
        """The device's nodes (its own first) and mount sources, and their host paths as
        the spec gives them; None when one may not be offered."""
        own = own_paths(item.device)
        device_nodes = sorted(item.applied.device_nodes, key=lambda n: n.path not in own)
        wanted = [(n.host, n.path) for n in device_nodes]
        wanted += [(m.host_path, m.container_path) for m in item.applied.mounts]
        nodes = []
        for host, task_path in wanted:
            key = (host, task_path)
            if key not in self._nodes:
                self._nodes[key] = self._inspect(host, task_path, refused)
            node = self._nodes[key]
            if node is None:
                return None
            nodes.append(node)
        return nodes, tuple(host for host, _ in wanted)

    def _inspect(self, host: str, task_path: str, refused: dict[str, str]) -> Node | None:
        scanner = self.scanner
        real = scanner.roots.real(host)
        node = scanner.inspect(real, scanner.roots.canonical(real), (), refused)
        if node is None:
            return None
        node = dataclasses.replace(node, task_path=task_path)
        if node.is_device:
            info = scanner.sysfs.lookup(node.kind, node.major, node.minor, node.stamp)
            if info is not None or not self.majors.registered(node.kind, node.major):
                node = scanner._known(node, info is not None)
        return node

    def _function(self, node: Node) -> str | None:
        if not node.is_device:
            return None
        info = self.scanner.sysfs.lookup(node.kind, node.major, node.minor, node.stamp)
        return None if info is None else info.pci_bus_id

    def _pci_attributes(self, address: str) -> dict[str, Attribute]:
        if address not in self._pci:
            scanner = self.scanner
            ident = identity_at(scanner.roots, address)
            attributes: dict[str, Attribute] = {}
            if ident is not None:
                names = scanner.pci_ids.names([_pci_key(ident)]).get(_pci_key(ident), PciNames())
                attributes = _pci_attributes(read_function(scanner.roots, ident), names)
            self._pci[address] = attributes
        return self._pci[address]

    def _found(
        self,
        kind: Kind,
        item: Selected,
        nodes: list[Node],
        hosts: tuple[str, ...],
        address: str | None,
        notes: set[str],
    ) -> Found:
        assert kind.cdi is not None
        attributes = {"cdi_kind": Attribute(item.device.kind)}
        attributes.update(annotation_attributes(item.device))
        if address is not None:
            attributes.update(self._pci_attributes(address))
        skipped = uncarried(item.applied)
        if skipped and kind.cdi.skip_hooks:
            attributes["cdi_skipped"] = Attribute("; ".join(skipped))
            notes.update(
                f'device "{kind.label}": its CDI devices are offered without what Nomad cannot'
                f' apply (hooks = "skip"): {what}'
                for what in skipped
            )
        return Found(
            kind.label, item.id, "cdi", tuple(nodes), attributes, address,
            cdi=CdiMatch(item.device, item.applied, skipped, hosts),
        )  # fmt: skip
