"""This host's NUMA topology, read as a Nomad client on it reads it.

Nomad's client (``client/lib/numalib/detect_linux.go``, the sysfs scanner)
takes the NUMA nodes from ``/sys/devices/system/node/online`` (node 0 alone
when that file is missing) and the bus of every PCI device from the entries
of ``/sys/bus/pci/devices``: the entry's name (``0000:3b:00.0``, lower-case
hex, as the kernel writes it) maps to the number in its ``numa_node`` file
when that is 0 or more. ``check`` uses this for a plugin run on this host,
whose first fingerprint is the node: the same map Nomad's scheduler compares
a device's ``Locality.PciBusID`` against. ``NOMAD_DEVICE_CHECK_SYS_ROOT``
points it at a fake tree (tests).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from nomad_device.placement.model import Topology

__all__ = ["ENV_SYS_ROOT", "host_topology", "parse_idset"]

ENV_SYS_ROOT: Final = "NOMAD_DEVICE_CHECK_SYS_ROOT"


def parse_idset(text: str) -> tuple[int, ...]:
    """The kernel's list format (``0-3,8``), as ``idset.Parse`` reads it; bad parts skipped."""
    out: set[int] = set()
    for part in text.strip().split(","):
        low, _, high = part.strip().partition("-")
        try:
            first = int(low)
            last = int(high) if high else first
        except ValueError:
            continue
        out.update(range(first, last + 1))
    return tuple(sorted(out))


def host_topology(sys_root: str | None = None) -> Topology | None:
    """The topology of the host at ``sys_root`` (default ``/sys``); None without sysfs."""
    root = Path(sys_root or os.environ.get(ENV_SYS_ROOT) or "/sys")
    if not (root / "devices" / "system").is_dir():
        return None
    try:
        nodes = parse_idset((root / "devices/system/node/online").read_text())
    except OSError:
        nodes = (0,)
    bus: dict[str, int] = {}
    try:
        entries = sorted(os.listdir(root / "bus/pci/devices"))
    except OSError:
        entries = []
    for name in entries:
        try:
            node = int((root / "bus/pci/devices" / name / "numa_node").read_text().strip())
        except (OSError, ValueError):
            continue
        if node >= 0:
            bus[name] = node
    return Topology(nodes or (0,), bus)
