"""What tells the plugin to rescan: kernel uevents, and inotify on the glob directories.

Both only say *that* something may have changed; the rescan finds out what.
Except in one respect: how the kernel's error recovery of a PCI function
ended is in its uevent alone, so ``pci`` uevents are handed to the plugin too
(:class:`~.health.AerMarks`) before their rescan.

- **Kernel uevents** for the subsystems whose devices a block can match
  (:data:`SUBSYSTEMS`) arrive when the kernel adds, removes, binds or changes
  a device: the earliest sign of a USB device being plugged in, of a PCI
  function appearing or being bound to another driver, and of AER recovery.
- **inotify** on each pattern's fixed directory (``/dev``,
  ``/dev/serial/by-id`` ...) and, for USB blocks, on ``/dev`` and
  ``/dev/bus/usb`` (for PCI blocks ``/dev``, ``/dev/dri``, ``/dev/accel``,
  ``/dev/vfio``): nodes and links appear there after the uevent, once udev
  (or devtmpfs) has made them; a directory that does not exist yet is watched
  for from its parent by the source itself. Where a pattern's wildcards span
  directories, the watch descends only into directories that may lead to a
  match, are root's alone, and are on the same filesystem, and holds at most
  the block's ``max_watches``: no user can make the plugin spend root's
  inotify watches, and a tree that outgrows the cap is seen at the poll
  period.
- **inotify on CDI spec directories** (``cdi`` blocks' ``spec_dirs``), for
  ``.json`` and ``.yaml`` files written, replaced, removed or their modes
  changed, and the directories themselves appearing or going: a regenerated
  spec is seen at once, a generator's temporary file costs nothing. A
  directory that does not exist yet is watched for from its parent.

Where a facility is unavailable the source logs it once and stays silent:
the fingerprint period is then the only mechanism.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from nomad_device.plugins.generic.config import Kind
from nomad_device.plugins.generic.discovery import id_base
from nomad_device.plugins.generic.patterns import leads_to_match
from nomad_device.plugins.generic.roots import Roots
from nomad_device.plugins.generic.trust import untrusted_dir
from nomad_device.sources import (
    CHANGES,
    LISTING,
    FileEvent,
    Inotify,
    UEvent,
    inotify,
    uevents,
)

__all__ = [
    "SUBSYSTEMS",
    "EventWatch",
    "Tree",
    "cdi_spec_dirs",
    "descend",
    "spec_change",
    "watch_dirs",
]

_USB_DIR: Final = "/dev/bus/usb"
#: Where the nodes of PCI functions appear: a driver's own, DRM's, accel's, VFIO's.
_PCI_DIRS: Final = ("/dev", "/dev/dri", "/dev/accel", "/dev/vfio")

#: How long a change in a CDI spec directory may wait behind the one before (the
#: sources' 250 ms default would hold a generator's rename that follows its write of
#: the temporary file by more than the 2 ms settle; the directories are root's, and
#: 20 batches a second is no storm).
SPEC_MAX_DELAY: Final = 0.05

#: Kernel subsystems whose uevents may change what a block matches.
SUBSYSTEMS: Final = (
    "usb",
    "usbmisc",
    "tty",
    "misc",
    "mem",
    "block",
    "video4linux",
    "hidraw",
    "input",
    "sound",
    "net",
    "apex",
    "pci",  # a function added, removed, bound or unbound, AER recovery
    "drm",  # render and card nodes
    "accel",
    "vfio",  # VFIO group nodes
    "vfio-dev",  # VFIO's per-device (iommufd) nodes
)


@dataclass(frozen=True)
class Tree:
    """One block's recursive watches: patterns whose wildcards span directories."""

    label: str
    dirs: tuple[str, ...]  # real paths: the patterns' fixed directories
    patterns: tuple[str, ...]  # in /dev/... form
    max_watches: int


def watch_dirs(kinds: Sequence[Kind], roots: Roots) -> tuple[list[str], list[Tree]]:
    """Directories to watch (real paths): flat ones, and each block's trees.

    A pattern whose wildcards span several components (``/dev/bus/usb/*/*``)
    needs its fixed directory watched recursively; any other, only that
    directory. Companions count as patterns. USB blocks watch ``/dev`` and
    ``/dev/bus/usb/*/*``; PCI blocks ``/dev``, ``/dev/dri``, ``/dev/accel`` and
    ``/dev/vfio``.
    """
    flat: dict[str, None] = {}
    trees: list[Tree] = []
    for kind in kinds:
        dirs: dict[str, None] = {}
        patterns: list[str] = []
        for pattern in kind.patterns:
            base = id_base(pattern)
            if base is None:
                directory = pattern.rsplit("/", 1)[0] or "/"
                flat.setdefault(roots.real(directory), None)
                continue
            rest = pattern[len(base) :].strip("/")
            if "/" in rest:
                dirs.setdefault(roots.real(base), None)
                patterns.append(pattern)
            else:
                flat.setdefault(roots.real(base), None)
        if kind.usb:
            flat.setdefault(roots.dev, None)
            dirs.setdefault(roots.real(_USB_DIR), None)
            patterns.append(_USB_DIR + "/*/*")
        if kind.pci:
            for directory in _PCI_DIRS:
                flat.setdefault(roots.real(directory), None)
        if dirs:
            trees.append(Tree(kind.label, tuple(dirs), tuple(patterns), kind.max_watches))
    return list(flat), trees


def cdi_spec_dirs(kinds: Sequence[Kind]) -> list[str]:
    """The spec directories of the blocks' ``cdi`` matchers: files written, renamed,
    removed or chmod-ed there (a regenerated spec, a spec made writable) mean a rescan."""
    dirs: dict[str, None] = {}
    for kind in kinds:
        if kind.cdi is not None:
            dirs.update(dict.fromkeys(kind.cdi.spec_dirs))
    return list(dirs)


def spec_change(event: FileEvent) -> bool:
    """Whether a change in a spec directory can change what it defines: one to a
    ``.json`` or ``.yaml`` file, or to the directory itself. The library's own watch
    ignores the rest: a generator's temporary file is nothing until renamed into place."""
    if event.path == event.root:
        return True
    name = os.path.basename(event.path)
    dot = name.rfind(".")
    return dot >= 0 and name[dot:] in (".json", ".yaml")


def descend(tree: Tree, roots: Roots) -> Callable[[str], bool]:
    """Which subdirectories a tree's inotify source watches: those that may lead to a
    match, inside directories only root can write (matches anywhere else would be
    refused, :mod:`.trust`: watching there would let any user spend root's watches)."""

    def wanted(real: str) -> bool:
        canonical = roots.canonical(real)
        if not any(leads_to_match(p, canonical) for p in tree.patterns):
            return False
        return untrusted_dir(real) is None and untrusted_dir(os.path.dirname(real)) is None

    return wanted


class EventWatch:
    """Every uevent and every inotify batch becomes one ``rescan()``.

    :meth:`run` watches what the config's patterns need; the plugin's
    ``configure()`` calls ``rewatch()``, so the SDK starts it again for new
    patterns.
    """

    def __init__(
        self,
        roots: Roots,
        rescan: Callable[[], None],
        pci_event: Callable[[UEvent], None] | None = None,
    ) -> None:
        self._roots = roots
        self._rescan = rescan
        self._pci_event = pci_event  # told of each pci uevent before its rescan

    async def run(self, kinds: Callable[[], Sequence[Kind]]) -> None:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._uevents(), name="uevents")
            tasks.create_task(self._files(kinds), name="inotify")

    async def _uevents(self) -> None:
        with uevents(SUBSYSTEMS) as source:
            async for event in source:
                if event.subsystem == "pci" and self._pci_event is not None:
                    self._pci_event(event)
                self._rescan()

    async def _files(self, kinds: Callable[[], Sequence[Kind]]) -> None:
        flat, trees = watch_dirs(kinds(), self._roots)
        sources = [inotify(*flat, mask=LISTING)] if flat else []
        specs = cdi_spec_dirs(kinds())
        spec_source = inotify(*specs, mask=CHANGES, max_delay=SPEC_MAX_DELAY) if specs else None
        if spec_source is not None:
            sources.append(spec_source)
        for tree in trees:
            source = inotify(
                *tree.dirs,
                recursive=True,
                mask=LISTING,
                max_watches=tree.max_watches,
                one_filesystem=True,
                descend=descend(tree, self._roots),
            )
            sources.append(source)
        async with asyncio.TaskGroup() as tasks:
            for source in sources:
                wanted = spec_change if source is spec_source else None
                tasks.create_task(self._drain(source, wanted))

    async def _drain(
        self, source: Inotify, wanted: Callable[[FileEvent], bool] | None = None
    ) -> None:
        """A rescan per batch (only for batches with an event ``wanted`` accepts, if given)."""
        async with source:  # the watches are placed off the loop
            if source.available:
                self._rescan()  # whatever changed before they were in place
            async for batch in source:
                if wanted is None or batch.overflow or any(map(wanted, batch.events)):
                    self._rescan()
