"""What a bundle's native code asks of a node's C library, read from the ELF files themselves.

A wheel's manylinux tag says which glibc it was *built* to run on; the symbol
versions its libraries reference say what they really need. The bundle's
glibc floor is the newest ``GLIBC_x.y`` any of its ELF files references (the
interpreter it brings included), so the floor is measured, not assumed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MACHINES", "ElfInfo", "glibc_floor", "read_elf"]

#: e_machine values of the CPUs bundles are built for, by ``uname -m`` name.
MACHINES = {"x86_64": 62, "aarch64": 183}

_SHT_DYNAMIC = 6
_SHT_GNU_VERNEED = 0x6FFFFFFE
_DT_NEEDED = 1


@dataclass(frozen=True)
class ElfInfo:
    """The parts of an ELF file a node must satisfy."""

    machine: int
    needed: tuple[str, ...] = ()  # DT_NEEDED libraries
    versions: frozenset[str] = field(default_factory=frozenset)  # e.g. GLIBC_2.17

    @property
    def glibc(self) -> tuple[int, int] | None:
        found = [_glibc_version(v) for v in self.versions]
        known = [v for v in found if v is not None]
        return max(known) if known else None


def _glibc_version(name: str) -> tuple[int, int] | None:
    if not name.startswith("GLIBC_"):
        return None
    parts = name[len("GLIBC_") :].split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None  # GLIBC_PRIVATE


def read_elf(path: Path) -> ElfInfo | None:
    """The machine, needed libraries and symbol versions of a 64-bit little-endian ELF, or None."""
    data = path.read_bytes()
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    (machine,) = struct.unpack_from("<H", data, 18)
    (shoff,) = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    needed: list[str] = []
    versions: set[str] = set()
    for _name, kind, _flags, _addr, offset, size, link, info, _align, entsize in sections:
        if kind == _SHT_DYNAMIC:
            strtab = sections[link][4]
            for pos in range(offset, offset + size, entsize or 16):
                tag, value = struct.unpack_from("<qQ", data, pos)
                if tag == _DT_NEEDED:
                    needed.append(_string(data, strtab + value))
        elif kind == _SHT_GNU_VERNEED:
            strtab = sections[link][4]
            pos = offset
            for _ in range(info):
                _version, count, _file, aux, following = struct.unpack_from("<HHIII", data, pos)
                entry = pos + aux
                for _ in range(count):
                    _hash, _flags2, _other, name, after = struct.unpack_from("<IHHII", data, entry)
                    versions.add(_string(data, strtab + name))
                    entry += after
                pos += following
    return ElfInfo(machine, tuple(needed), frozenset(versions))


def _string(data: bytes, start: int) -> str:
    return data[start : data.index(b"\0", start)].decode("ascii", "replace")


def glibc_floor(paths: Iterable[Path]) -> tuple[tuple[int, int] | None, dict[str, ElfInfo]]:
    """The newest glibc version any of ``paths`` needs, and what each ELF file needs."""
    floor: tuple[int, int] | None = None
    infos: dict[str, ElfInfo] = {}
    for path in paths:
        if not path.is_file() or path.is_symlink():
            continue
        with open(path, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                continue
        info = read_elf(path)
        if info is None:
            continue
        infos[str(path)] = info
        version = info.glibc
        if version is not None and (floor is None or version > floor):
            floor = version
    return floor, infos
