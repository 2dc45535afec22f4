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

The driver does not create those nodes: ``nvidia-modprobe`` does, on demand,
when CUDA or NVML first opens an instance. A reservation naming a node that is
not there makes docker and the exec driver refuse to start the task, so
:func:`ensure_capability_node` creates a missing one as ``nvidia-modprobe``
would (``modprobe-utils/nvidia-modprobe-utils.c``, ``nvidia_cap_mknod``): a
character device with the ``nvidia-caps`` major from ``/proc/devices``, the
minor above, and the owner and mode the capability's file under
``/proc/driver/nvidia/capabilities`` gives (``DeviceFileUID``,
``DeviceFileGID``, ``DeviceFileMode``; nothing when ``DeviceFileModify`` is 0).
"""

from __future__ import annotations

import os
import stat
from typing import Final

__all__ = [
    "MIG_MINORS",
    "MigMinorsError",
    "NodeError",
    "capability_minors",
    "capability_paths",
    "ensure_capability_node",
    "group_name",
    "read_mig_minors",
]

#: Where the driver lists MIG capability minors, relative to the proc root.
MIG_MINORS: Final = "driver/nvidia-caps/mig-minors"


#: Where the driver describes each capability, relative to the proc root.
CAPABILITIES: Final = "driver/nvidia/capabilities"
#: The character-device driver of the capability nodes, as /proc/devices names it.
CAPS_DRIVER: Final = "nvidia-caps"
#: nvidia-modprobe's defaults when the capability file says nothing (0666, root).
_DEFAULT_MODE: Final = 0o666


class MigMinorsError(LookupError):
    """A MIG instance's capability is not in the driver's list."""


class NodeError(OSError):
    """A capability node that is missing and cannot be created; the message says why."""


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


def capability_paths(gpu_minor: int, gpu_instance: int, compute_instance: int) -> tuple[str, str]:
    """The two capabilities of a MIG device, as ``mig-minors`` names them."""
    return (
        f"gpu{gpu_minor}/gi{gpu_instance}/access",
        f"gpu{gpu_minor}/gi{gpu_instance}/ci{compute_instance}/access",
    )


def capability_minors(
    minors: dict[str, int], gpu_minor: int, gpu_instance: int, compute_instance: int
) -> tuple[int, int]:
    """The (GPU instance, compute instance) capability minors of one MIG device."""
    found: list[int] = []
    for capability in capability_paths(gpu_minor, gpu_instance, compute_instance):
        minor = minors.get(capability)
        if minor is None:
            raise MigMinorsError(f"MIG capability {capability} is not listed in {MIG_MINORS}")
        found.append(minor)
    return found[0], found[1]


def _caps_major(proc_root: str) -> int | None:
    """The ``nvidia-caps`` character-device major from ``/proc/devices``."""
    try:
        with open(os.path.join(proc_root, "devices"), encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    block = False
    for line in lines:
        if line.strip().endswith(":"):
            block = line.strip() == "Character devices:"
            continue
        parts = line.split()
        if block and len(parts) == 2 and parts[1] == CAPS_DRIVER and parts[0].isdigit():
            return int(parts[0])
    return None


def _file_attributes(proc_root: str, capability: str) -> dict[str, int]:
    """``DeviceFileMode: 292`` and the like from the driver's capability file."""
    path = os.path.join(proc_root, CAPABILITIES, capability.replace("/gi", "/mig/gi", 1))
    found: dict[str, int] = {}
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                name, sep, value = line.partition(":")
                if sep and value.strip().isdigit():
                    found[name.strip()] = int(value.strip())
    except OSError:
        pass
    return found


def ensure_capability_node(dev_root: str, proc_root: str, capability: str, minor: int) -> None:
    """Make sure ``nvidia-caps/nvidia-cap<minor>`` exists under ``dev_root``; NodeError if not."""
    directory = os.path.join(dev_root, "nvidia-caps")
    path = os.path.join(directory, f"nvidia-cap{minor}")
    if os.path.lexists(path):
        return
    where = f"{path} does not exist"
    fix = f"run nvidia-modprobe -f /proc/{CAPABILITIES}/{capability.replace('/gi', '/mig/gi', 1)}"
    major = _caps_major(proc_root)
    if major is None:
        raise NodeError(f"{where} and cannot be made: no {CAPS_DRIVER} in /proc/devices; {fix}")
    attributes = _file_attributes(proc_root, capability)
    if attributes.get("DeviceFileModify", 1) == 0:
        raise NodeError(f"{where}, and the driver forbids making it (DeviceFileModify: 0); {fix}")
    mode = attributes.get("DeviceFileMode", _DEFAULT_MODE) & 0o777
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        try:
            os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
        except FileExistsError:
            return  # another reservation made it meanwhile
        try:
            os.chmod(path, mode)
            os.chown(path, attributes.get("DeviceFileUID", 0), attributes.get("DeviceFileGID", 0))
        except OSError:
            os.unlink(path)
            raise
    except OSError as exc:
        raise NodeError(f"{where} and cannot be made ({exc.strerror or exc}); {fix}") from None
