"""What a task gets for its GPUs: ``NVIDIA_VISIBLE_DEVICES`` and device nodes.

``NVIDIA_VISIBLE_DEVICES`` (the GPU or MIG UUIDs) is what the Go plugin gives,
and what the NVIDIA container runtime reads under the docker driver. The
DeviceSpecs are new: they give a task exactly the device nodes CUDA opens, so
the ``exec`` driver's device cgroup admits the reserved GPUs and nothing else:

- ``/dev/nvidia<minor>`` for each GPU (a MIG instance's parent GPU);
- ``/dev/nvidia-caps/nvidia-cap<N>`` for each MIG instance's GPU-instance
  and compute-instance capabilities;
- ``/dev/nvidiactl``, ``/dev/nvidia-uvm`` and ``/dev/nvidia-uvm-tools``, the
  driver's shared nodes, each only if it exists on the host (``nvidia-uvm``
  appears when its kernel module is loaded).

Host paths are under ``dev_root`` (``/dev``; a driver container may keep them
elsewhere), task paths always under ``/dev``. A reservation names only nodes
that exist: docker and the exec driver refuse to start a task whose device
node is missing. A GPU's node exists once NVML has opened the GPU (NVML runs
``nvidia-modprobe`` for it); a MIG capability node may not, and is created as
``nvidia-modprobe`` would (:func:`.mig.ensure_capability_node`). What cannot be
there is refused with ``FAILED_PRECONDITION`` and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from nomad_device.errors import FailedPrecondition
from nomad_device.model import DeviceSpec, Reservation
from nomad_device.plugins.nvidia.mig import (
    MigMinorsError,
    NodeError,
    capability_minors,
    capability_paths,
    ensure_capability_node,
    read_mig_minors,
)

__all__ = ["CONTROL_NODES", "VISIBLE_DEVICES", "Target", "reservation"]

#: The NVIDIA container runtime's variable, set as the Go plugin sets it.
VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"

#: Nodes every CUDA process opens besides its GPU's own.
CONTROL_NODES: Final = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


@dataclass(frozen=True)
class Target:
    """A reserved GPU or MIG instance, with what its nodes are named after."""

    id: str
    gpu_minor: int | None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    is_mig: bool = False


def _spec(dev_root: str, relative: str) -> DeviceSpec:
    return DeviceSpec(f"/dev/{relative}", os.path.join(dev_root, relative), "rw")


def reservation(targets: Sequence[Target], dev_root: str, proc_root: str) -> Reservation:
    """The reservation for some distinct devices; FailedPrecondition if a node is unknown."""
    nodes: dict[str, None] = {}
    minors: dict[str, int] | None = None
    for target in targets:
        if target.gpu_minor is None:
            raise FailedPrecondition(
                f"cannot give {target.id} to a task: NVML did not report its device minor number"
            )
        gpu_node = f"nvidia{target.gpu_minor}"
        if not os.path.lexists(os.path.join(dev_root, gpu_node)):
            raise FailedPrecondition(
                f"cannot give {target.id} to a task: {os.path.join(dev_root, gpu_node)} does not"
                f" exist; create it with nvidia-modprobe -c {target.gpu_minor}"
            )
        nodes.setdefault(gpu_node, None)
        if not target.is_mig:
            continue
        if target.gpu_instance is None or target.compute_instance is None:
            raise FailedPrecondition(
                f"cannot give {target.id} to a task: NVML did not report its MIG instance IDs"
            )
        if minors is None:
            minors = read_mig_minors(proc_root)
        try:
            gi_cap, ci_cap = capability_minors(
                minors, target.gpu_minor, target.gpu_instance, target.compute_instance
            )
        except MigMinorsError as exc:
            raise FailedPrecondition(f"cannot give {target.id} to a task: {exc}") from None
        paths = capability_paths(target.gpu_minor, target.gpu_instance, target.compute_instance)
        for capability, minor in zip(paths, (gi_cap, ci_cap), strict=True):
            try:
                ensure_capability_node(dev_root, proc_root, capability, minor)
            except NodeError as exc:
                raise FailedPrecondition(f"cannot give {target.id} to a task: {exc}") from None
            nodes.setdefault(f"nvidia-caps/nvidia-cap{minor}", None)
    specs = [_spec(dev_root, node) for node in nodes]
    specs.extend(
        _spec(dev_root, node)
        for node in CONTROL_NODES
        if os.path.exists(os.path.join(dev_root, node))
    )
    return Reservation(
        envs={VISIBLE_DEVICES: ",".join(target.id for target in targets)},
        devices=tuple(specs),
    )
