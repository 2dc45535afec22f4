"""Event sources: tell a watcher *that* something changed, promptly and cheaply.

Nothing here knows what is watching: the sources only turn kernel
notifications into typed values, with the kernel's rough edges handled
(bursts, queue overflow, paths that disappear, facilities that are missing).
Each source is an async iterator, a blocking iterator for code in its own
thread, and a context manager that closes its descriptor:

    async for batch in inotify("/dev/disk/by-id"):
        ...
    for event in uevents(subsystems=["usb"]):
        ...

Where a facility is unavailable the source logs one warning and then waits
without yielding until closed: whoever polls anyway stays the only mechanism.
Only the standard library is used (``ctypes`` for three libc calls, ``socket``
for netlink); docs/architecture.md says why.

Names resolve on first use: a plugin that watches files does not load the
uevent source, nor the other way round.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nomad_device.sources._base import DISABLE_ENV, EventSource
    from nomad_device.sources._inotify import (
        CHANGES,
        LISTING,
        FileEvent,
        FileEvents,
        Inotify,
        flag_names,
        inotify,
    )
    from nomad_device.sources._uevent import UEvent, UEvents, udev_running, uevents

_WHERE = {
    "DISABLE_ENV": "_base",
    "EventSource": "_base",
    "CHANGES": "_inotify",
    "LISTING": "_inotify",
    "FileEvent": "_inotify",
    "FileEvents": "_inotify",
    "Inotify": "_inotify",
    "flag_names": "_inotify",
    "inotify": "_inotify",
    "UEvent": "_uevent",
    "UEvents": "_uevent",
    "udev_running": "_uevent",
    "uevents": "_uevent",
}

__all__ = [
    "CHANGES",
    "DISABLE_ENV",
    "LISTING",
    "EventSource",
    "FileEvent",
    "FileEvents",
    "Inotify",
    "UEvent",
    "UEvents",
    "flag_names",
    "inotify",
    "udev_running",
    "uevents",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
