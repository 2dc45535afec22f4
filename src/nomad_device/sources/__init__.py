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
"""

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
