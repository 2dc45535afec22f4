"""How a task gets reserved devices: device cgroup rules, mounts and environment.

For every node of every reserved device (each physical device once, however
many of its shared instances were asked for):

- a device node becomes a ``DeviceSpec``: the resolved host node (drivers such
  as exec refuse symlinks), the task path, and the block's permissions; the
  exec and docker drivers turn it into a device cgroup rule and a node in the
  task;
- any other path (a file, a directory, a socket matched by a glob) becomes a
  bind mount, read-only unless the block's ``permissions`` are set and
  include ``w`` (the default, ``rw``, is for device nodes only).

Task paths: by default the ``/dev/...`` path the device was matched by (a
by-id link's own path). A ``task_path`` ending in ``/`` is a directory that
receives each node under its own name; any other ``task_path`` is where the
device's primary node goes, so it can serve one device per reservation.

Environment, per block (``<L>`` is the label in upper case, other characters
as ``_``; several blocks reserved for one task do not overwrite each other):

- ``GENERIC_<L>_IDS``: the physical device IDs, comma-separated;
- ``GENERIC_<L>_PATHS``: each device's primary node as the task sees it, in
  the same order;

then the block's own ``env``. A device's companions (``/dev/kfd``) come after
its own nodes and are granted once however many devices share them.

CDI devices (a ``cdi`` block) get what their spec's edits say, merged as CDI
merges several devices: each node at its container path with CDI's
permissions (``rwm`` unless the spec says otherwise), each bind mount
read-only where its options say ``ro``, the spec's variables (one set twice
keeps its first place and its last value), then ``GENERIC_<L>_IDS`` and
``GENERIC_<L>_PATHS`` (each device's first own node), ``GENERIC_<L>_CDI_SKIPPED``
naming what Nomad cannot carry (hooks ...), and the block's ``env``.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Sequence

from nomad_device.errors import FailedPrecondition, InvalidArgument
from nomad_device.model import DeviceSpec, Mount, Reservation
from nomad_device.plugins.generic.config import Kind
from nomad_device.plugins.generic.discovery import Node
from nomad_device.plugins.generic.inventory import Entry, Snapshot

__all__ = ["reserve", "rfc3339", "task_path_of"]


def rfc3339(wall: float) -> str:
    """``2026-03-01T09:30:00Z``: when a device was last seen, for operators."""
    moment = _dt.datetime.fromtimestamp(wall, _dt.UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def task_path_of(kind: Kind, node: Node, primary: bool) -> str:
    chosen = kind.task_path
    if chosen is None:
        return node.task_path
    if chosen.endswith("/"):
        return chosen + os.path.basename(node.task_path)
    return chosen if primary else node.task_path


def _quoted(ids: Sequence[str]) -> str:
    return ", ".join(f'"{i}"' for i in ids)


def _cdi_grants(
    members: Sequence[Entry], envs: dict[str, str], specs: list[DeviceSpec], mounts: list[Mount]
) -> None:
    """CDI devices of one block, merged as CDI merges them (:func:`.cdi.merge`): each
    node a ``DeviceSpec`` with CDI's permissions, each bind mount read-only where its
    options say ``ro``, the variables in CDI's order; what cannot be carried is named
    in ``GENERIC_<L>_CDI_SKIPPED``."""
    from nomad_device.plugins.generic import cdi
    from nomad_device.plugins.generic.cdidevices import BIND_TYPES, primary, uncarried

    devices = [e.found.cdi.device for e in members if e.found.cdi is not None]
    applied = cdi.apply(cdi.merge(devices))
    scanned = {
        (host, node.task_path): node
        for e in members
        if e.found.cdi is not None
        for host, node in zip(e.found.cdi.hosts, e.found.nodes, strict=True)
    }
    for spec in applied.device_nodes:
        node = scanned.get((spec.host, spec.path))
        access = cdi.cgroup_access(spec)
        if node is not None and node.kind != "missing" and access:
            specs.append(DeviceSpec(spec.path, node.resolved, access))
    for mount in applied.mounts:
        node = scanned.get((mount.host_path, mount.container_path))
        if node is not None and node.kind != "missing" and mount.type in BIND_TYPES:
            mounts.append(Mount(mount.container_path, node.resolved, mount.read_only))
    envs.update(applied.env_map())
    prefix = members[0].kind.env_prefix
    envs[prefix + "IDS"] = ",".join(e.found.id for e in members)
    envs[prefix + "PATHS"] = ",".join(p for d in devices if (p := primary(d)) is not None)
    skipped = uncarried(applied)
    if skipped:
        envs[prefix + "CDI_SKIPPED"] = "; ".join(skipped)


def reserve(snapshot: Snapshot, device_ids: Sequence[str]) -> tuple[Reservation, list[Entry]]:
    """The reservation for ``device_ids`` (instance IDs) and the devices behind them."""
    if not device_ids:
        raise InvalidArgument("no device IDs given")
    unknown = [i for i in dict.fromkeys(device_ids) if i not in snapshot.by_instance]
    if unknown:
        noun = "device" if len(unknown) == 1 else "devices"
        raise InvalidArgument(f"unknown {noun} {_quoted(unknown)}")
    entries: dict[tuple[str, str], Entry] = {}
    for instance in device_ids:
        entry = snapshot.by_instance[instance]
        entries.setdefault(entry.key, entry)
    gone = [e for e in entries.values() if not e.present]
    if gone:
        detail = "; ".join(f'"{e.found.id}": {e.reason}' for e in gone)
        raise FailedPrecondition(f"cannot reserve devices that are gone: {detail}")

    by_kind: dict[str, list[Entry]] = {}
    for entry in entries.values():
        by_kind.setdefault(entry.kind.label, []).append(entry)
    envs: dict[str, str] = {}
    specs: list[DeviceSpec] = []
    mounts: list[Mount] = []
    granted: set[tuple[str, str]] = set()
    for members in by_kind.values():
        kind = members[0].kind
        if kind.cdi is not None:
            _cdi_grants(members, envs, specs, mounts)
            envs.update(kind.env)
            continue
        literal = kind.task_path is not None and not kind.task_path.endswith("/")
        if literal and len(members) > 1:
            raise InvalidArgument(
                f'device "{kind.label}": task_path "{kind.task_path}" can hold one device, but'
                f" {len(members)} were reserved ({_quoted([e.found.id for e in members])});"
                ' give a directory ending in "/" to reserve several'
            )
        primaries = []
        for entry in members:
            for index, node in enumerate(entry.found.all_nodes):
                task_path = task_path_of(kind, node, index == 0)
                if index == 0:
                    primaries.append(task_path)
                if node.kind == "missing" or (node.resolved, task_path) in granted:
                    continue
                granted.add((node.resolved, task_path))
                if node.is_device:
                    specs.append(DeviceSpec(task_path, node.resolved, kind.permissions))
                else:
                    mounts.append(Mount(task_path, node.resolved, not kind.writable_mounts))
        prefix = kind.env_prefix
        envs[prefix + "IDS"] = ",".join(e.found.id for e in members)
        envs[prefix + "PATHS"] = ",".join(primaries)
        envs.update(kind.env)
    return Reservation(envs, tuple(mounts), tuple(specs)), list(entries.values())
