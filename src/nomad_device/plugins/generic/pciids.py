"""Product names from the PCI ID database (``pci.ids``), when the node has one.

``pci.ids`` (from pciutils or hwdata; what ``lspci`` prints names from) lists
vendors, their devices and the devices' subsystems, one per line, indented by
tabs::

    1002  Advanced Micro Devices, Inc. [AMD/ATI]
    \\t740f  Aldebaran/MI200 [Instinct MI210]
    \\t\\t1002 0c34  Instinct MI210
    C 00  Unclassified device

Names are a convenience, never required: a node without the file, or with
one the safety rules refuse (:mod:`.trust`: it must be root's and writable by
nobody else), gets no name attributes, and a device the file does not know
gets none either.

The file is about 1.3 MB and a host has a handful of PCI products, so it is
not loaded: it is read through once for the IDs asked about, and read again
only when it changes (another inode, size or time) or new IDs are asked
about. Gzip-compressed copies (``pci.ids.gz``) are read the same way.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Final

__all__ = ["PciIds", "PciKey", "PciNames"]

#: (vendor, device, subsystem vendor, subsystem device); None where not known.
PciKey = tuple[int, int, int | None, int | None]

#: Lines longer than this are not names (the format's lines are short).
_MAX_LINE: Final = 512


@dataclass(frozen=True)
class PciNames:
    """What ``pci.ids`` calls one function; "" where it has no entry."""

    vendor: str = ""
    device: str = ""
    subsystem: str = ""


@dataclass(frozen=True)
class _Source:
    path: str
    identity: tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns


def _hex(text: str) -> int | None:
    try:
        return int(text, 16) if len(text) == 4 else None
    except ValueError:
        return None


@contextmanager
def _open(path: str) -> Iterator[IO[str]]:
    if path.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as text:
            yield text
    else:
        with open(path, encoding="utf-8", errors="replace") as plain:
            yield plain


def _read(path: str, wanted: set[PciKey]) -> dict[PciKey, PciNames]:
    """One pass over the file for the products in ``wanted``."""
    vendors = {key[0] for key in wanted}
    devices = {key[:2] for key in wanted}
    found_vendor: dict[int, str] = {}
    found_device: dict[tuple[int, int], str] = {}
    found_subsystem: dict[PciKey, str] = {}
    vendor: int | None = None
    device: int | None = None
    with _open(path) as lines:
        for raw in lines:
            line = raw.rstrip("\n")
            if not line or line.startswith("#") or len(line) > _MAX_LINE:
                continue
            if line.startswith("C "):
                break  # the class list follows the vendors; nothing more to find
            if line.startswith("\t\t"):
                if vendor is None or device is None or (vendor, device) not in devices:
                    continue
                ids, _, name = line[2:].partition("  ")
                sub_vendor, _, sub_device = ids.partition(" ")
                key = (vendor, device, _hex(sub_vendor), _hex(sub_device))
                if key in wanted:
                    found_subsystem[key] = name.strip()
            elif line.startswith("\t"):
                device = _hex(line[1:5])
                if vendor in vendors and device is not None and (vendor, device) in devices:
                    found_device[(vendor, device)] = line[5:].strip()
            else:
                vendor, device = _hex(line[:4]), None
                if vendor in vendors:
                    found_vendor[vendor] = line[4:].strip()
    return {
        key: PciNames(
            found_vendor.get(key[0], ""),
            found_device.get(key[:2], ""),
            found_subsystem.get(key, ""),
        )
        for key in wanted
    }


class PciIds:
    """Names for PCI products, from the first ``pci.ids`` among ``paths`` that exists.

    ``refusal(path)`` says why a file may not be read (the safety rules), or
    None; :attr:`note` holds the last reason a file was skipped, for the log.
    """

    def __init__(self, paths: Sequence[str], refusal: Callable[[str], str | None]) -> None:
        self._paths = tuple(paths)
        self._refusal = refusal
        self._source: _Source | None = None
        self._names: dict[PciKey, PciNames] = {}
        self.note = ""

    def _find(self) -> _Source | None:
        self.note = ""
        for path in self._paths:
            try:
                info = os.stat(path)
            except OSError:
                continue
            why = self._refusal(path)
            if why is not None:
                self.note = f"{path} is not read for PCI product names: {why}"
                continue
            return _Source(path, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))
        return None

    def names(self, keys: Iterable[PciKey]) -> Mapping[PciKey, PciNames]:
        """Names for each key; a file that cannot be read gives empty names."""
        wanted = set(keys)
        if not wanted:
            return {}
        source = self._find()
        if source != self._source:
            self._source, self._names = source, {}
        missing = wanted - self._names.keys()
        if missing and source is not None:
            try:
                self._names.update(_read(source.path, missing))
            except (OSError, EOFError, ValueError) as exc:  # gzip says BadGzipFile (OSError)
                self.note = f"{source.path} could not be read for PCI product names: {exc}"
        return {key: self._names.get(key, PciNames()) for key in wanted}
