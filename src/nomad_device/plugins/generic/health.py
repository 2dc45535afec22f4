"""Is a device usable? Node checks on every scan; probe verdicts come from :mod:`.probes`.

Node checks are cheap and run on every scan. For each node a device brings:

- it exists (a dangling by-id link counts as missing);
- it is the expected kind: for USB nodes the kind and major:minor sysfs gives
  (a node left over from an earlier device is caught), for glob matches the
  kind it had when first seen, and for device nodes that the kernel has a
  device with that number at all;
- the plugin can ``access()`` it with the permissions the block grants. Nodes
  are never opened: opening ``/dev/watchdog`` arms it, opening a serial port
  toggles DTR and resets many boards.

A probe, the operator's own check, is :mod:`.probes`' business; its last
verdict is one more input to a device's health.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from nomad_device.plugins.generic.discovery import Node

__all__ = ["describe_kind", "node_problem"]

_KIND_WORDS: Final = {
    "char": "character device",
    "block": "block device",
    "file": "regular file",
    "directory": "directory",
    "socket": "socket",
    "fifo": "named pipe",
    "other": "special file",
    "missing": "missing file",
}


def describe_kind(kind: str) -> str:
    return _KIND_WORDS.get(kind, kind)


def _access_words(mode: int) -> str:
    wanted = [w for bit, w in ((os.R_OK, "reading"), (os.W_OK, "writing")) if mode & bit]
    return " and ".join(wanted)


def node_problem(
    node: Node, permissions: str, first_kind: str | None, canonical: Callable[[str], str]
) -> str | None:
    """Why this node makes its device unhealthy, or None when it is fine."""
    where = node.task_path
    if node.kind == "missing":
        if node.resolved != node.path:
            return f"{where} points to {canonical(node.resolved)}, which does not exist"
        return f"{where} does not exist"
    if node.expect is not None:
        kind, major, minor = node.expect
        if node.kind != kind:
            return f"{where} is a {describe_kind(node.kind)}, not a {describe_kind(kind)}"
        if (node.major, node.minor) != (major, minor):
            return (
                f"{where} is {node.major}:{node.minor}, but the kernel's device is"
                f" {major}:{minor} (a stale node?)"
            )
    elif first_kind is not None and node.kind != first_kind:
        return f"{where} is now a {describe_kind(node.kind)}, it was a {describe_kind(first_kind)}"
    elif node.is_device and node.known is False:
        return (
            f"{where} is {describe_kind(node.kind)} {node.major}:{node.minor}, which no"
            " device in the kernel has (a stale node?)"
        )
    mode = (os.R_OK if "r" in permissions else 0) | (os.W_OK if "w" in permissions else 0)
    if mode and not _accessible(node.resolved, mode):
        return f"the plugin (uid {os.geteuid()}) may not open {where} for {_access_words(mode)}"
    return None


def _accessible(path: str, mode: int) -> bool:
    if os.access in os.supports_effective_ids:
        return os.access(path, mode, effective_ids=True)
    return os.access(path, mode)
