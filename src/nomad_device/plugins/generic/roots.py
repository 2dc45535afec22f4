"""Where the plugin looks for ``/dev``, ``/sys`` and the PCI ID database.

Operators and jobs always speak of ``/dev/...`` paths. Tests (and a plugin run
in a container that sees the host's trees elsewhere) point the plugin at other
directories with environment variables, read once at start:

- ``NOMAD_DEVICE_GENERIC_DEV_ROOT``: the directory that stands for ``/dev``;
- ``NOMAD_DEVICE_GENERIC_SYS_ROOT``: the directory that stands for ``/sys``;
- ``NOMAD_DEVICE_GENERIC_PCI_IDS``: the ``pci.ids`` file to read product
  names from, instead of the first of :data:`PCI_IDS_PATHS` there is.

Config patterns under ``/dev`` are looked up under the dev root; task paths
and log messages keep the ``/dev/...`` form, while host paths (what the task
driver opens) are the real ones under the root. Environment variables rather
than config keys, so that the schema operators see has no test-only knobs.
A root set this way stands for ``/dev`` or ``/sys`` in the safety rules too
(:mod:`.trust`): it is judged like ``/dev``, the directories above it are not;
so is the directory of a ``pci.ids`` named this way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["ENV_DEV_ROOT", "ENV_PCI_IDS", "ENV_SYS_ROOT", "PCI_IDS_PATHS", "Roots"]

#: The environment variable whose value stands for ``/dev`` (a fake tree in tests).
ENV_DEV_ROOT: Final = "NOMAD_DEVICE_GENERIC_DEV_ROOT"
#: The environment variable whose value stands for ``/sys``.
ENV_SYS_ROOT: Final = "NOMAD_DEVICE_GENERIC_SYS_ROOT"
#: The environment variable naming the ``pci.ids`` file product names are read from.
ENV_PCI_IDS: Final = "NOMAD_DEVICE_GENERIC_PCI_IDS"

#: Where distributions install the PCI ID database: hwdata (Fedora, Arch, SUSE),
#: pciutils / pci.ids (Debian, Ubuntu, Alpine), compressed on some.
PCI_IDS_PATHS: Final = (
    "/usr/share/hwdata/pci.ids",
    "/usr/share/misc/pci.ids",
    "/usr/share/pci.ids",
    "/usr/share/hwdata/pci.ids.gz",
    "/usr/share/misc/pci.ids.gz",
)

_DEV: Final = "/dev"


@dataclass(frozen=True)
class Roots:
    dev: str = _DEV
    sys: str = "/sys"
    pci_ids: str | None = None  # None: the first of PCI_IDS_PATHS that exists

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Roots:
        env = os.environ if env is None else env
        dev = env.get(ENV_DEV_ROOT) or _DEV
        sys = env.get(ENV_SYS_ROOT) or "/sys"
        ids = env.get(ENV_PCI_IDS) or None
        return cls(os.path.abspath(dev), os.path.abspath(sys), ids and os.path.abspath(ids))

    @property
    def pci_ids_paths(self) -> tuple[str, ...]:
        return PCI_IDS_PATHS if self.pci_ids is None else (self.pci_ids,)

    def real(self, canonical: str) -> str:
        """``/dev/ttyUSB0`` -> ``<dev root>/ttyUSB0``; paths outside ``/dev`` stay."""
        if self.dev == _DEV:
            return canonical
        if canonical == _DEV:
            return self.dev
        if canonical.startswith(_DEV + "/"):
            return self.dev + canonical[len(_DEV) :]
        return canonical

    def canonical(self, real: str) -> str:
        """The inverse of :meth:`real`: the path as operators and tasks name it."""
        if self.dev == _DEV:
            return real
        if real == self.dev:
            return _DEV
        if real.startswith(self.dev + "/"):
            return _DEV + real[len(self.dev) :]
        return real

    def devname(self, name: str) -> str:
        """The real path of a node the kernel calls ``name`` (``bus/usb/001/004``)."""
        return f"{self.dev}/{name}"
