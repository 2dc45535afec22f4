"""MIG: how instances are grouped, and which capability nodes a task needs.

With MIG enabled, NVML names each MIG device ``<GPU name> MIG <profile>``
(``NVIDIA A100-SXM4-40GB MIG 1g.5gb``); that name is the group, exactly as the
Go plugin reports it, so all instances of one profile share a group and jobs
can ask for ``nvidia/gpu/NVIDIA A100-SXM4-40GB MIG 1g.5gb``.

A process reaches a MIG instance through two capability device nodes, one for
its GPU instance and one for its compute instance. The driver lists their minor
numbers in ``/proc/driver/nvidia-caps/mig-minors``, one ``<capability> <minor>``
per line (``gpu0/gi1/access 12``, ``gpu0/gi1/ci0/access 13``, where ``gpu0``
is the GPU's minor number); the nodes are ``/dev/nvidia-caps/nvidia-cap<minor>``.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["MIG_MINORS", "MigMinorsError", "capability_minors", "group_name", "read_mig_minors"]

#: Where the driver lists MIG capability minors, relative to the proc root.
MIG_MINORS: Final = "driver/nvidia-caps/mig-minors"


class MigMinorsError(LookupError):
    """A MIG instance's capability is not in the driver's list."""


def group_name(mig_name: str | None, parent_name: str | None) -> str:
    """The group of a MIG device: NVML's name for it, which carries the profile."""
    if mig_name:
        return mig_name
    return f"{parent_name} MIG" if parent_name else "N/A"


def read_mig_minors(proc_root: str) -> dict[str, int]:
    """``{"gpu0/gi1/access": 12, ...}``; empty when the file is absent (MIG never enabled)."""
    path = os.path.join(proc_root, MIG_MINORS)
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    minors: dict[str, int] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            minors[parts[0]] = int(parts[1])
    return minors


def capability_minors(
    minors: dict[str, int], gpu_minor: int, gpu_instance: int, compute_instance: int
) -> tuple[int, int]:
    """The (GPU instance, compute instance) capability minors of one MIG device."""
    found: list[int] = []
    for capability in (
        f"gpu{gpu_minor}/gi{gpu_instance}/access",
        f"gpu{gpu_minor}/gi{gpu_instance}/ci{compute_instance}/access",
    ):
        minor = minors.get(capability)
        if minor is None:
            raise MigMinorsError(f"MIG capability {capability} is not listed in {MIG_MINORS}")
        found.append(minor)
    return found[0], found[1]
