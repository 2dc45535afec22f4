"""What tells the plugin to rescan: kernel uevents, and inotify on the glob directories.

Both only say *that* something may have changed; the rescan finds out what.

- **Kernel uevents** for the subsystems whose devices a block can match
  (:data:`SUBSYSTEMS`) arrive when the kernel adds, removes, binds or changes
  a device: the earliest sign of a USB device being plugged in.
- **inotify** on each pattern's fixed directory (``/dev``,
  ``/dev/serial/by-id`` ...) and, for USB blocks, on ``/dev`` and
  ``/dev/bus/usb``: nodes and links appear there after the uevent, once udev
  (or devtmpfs) has made them; a directory that does not exist yet is watched
  for from its parent by the source itself.

Where a facility is unavailable the source logs it once and stays silent:
the fingerprint period is then the only mechanism.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final

from nomad_device.plugins.generic.config import Kind
from nomad_device.plugins.generic.discovery import id_base
from nomad_device.plugins.generic.roots import Roots
from nomad_device.sources import LISTING, Inotify, inotify, uevents

__all__ = ["SUBSYSTEMS", "EventWatch", "watch_dirs"]

#: Kernel subsystems whose uevents may change what a block matches.
SUBSYSTEMS: Final = (
    "usb",
    "usbmisc",
    "tty",
    "misc",
    "mem",
    "block",
    "video4linux",
    "hidraw",
    "input",
    "sound",
    "net",
    "apex",
)


def watch_dirs(kinds: Sequence[Kind], roots: Roots) -> tuple[list[str], list[str]]:
    """Directories to watch (real paths): ``(flat, recursive)``.

    A pattern whose wildcards span several components (``/dev/bus/usb/*/*``)
    needs its fixed directory watched recursively; any other, only that
    directory.
    """
    flat: dict[str, None] = {}
    recursive: dict[str, None] = {}
    for kind in kinds:
        for pattern in kind.paths:
            base = id_base(pattern)
            if base is None:
                directory = pattern.rsplit("/", 1)[0] or "/"
                flat.setdefault(roots.real(directory), None)
                continue
            rest = pattern[len(base) :].strip("/")
            target = recursive if "/" in rest else flat
            target.setdefault(roots.real(base), None)
        if kind.usb:
            flat.setdefault(roots.dev, None)
            recursive.setdefault(f"{roots.dev}/bus/usb", None)
    for directory in recursive:
        flat.pop(directory, None)
    return list(flat), list(recursive)


class _ThreadSafeEvent:
    """An asyncio.Event that any thread may set (``configure`` runs in a worker thread)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def clear(self) -> None:
        """Start waiting afresh on the running loop; read what it guards after this."""
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def set(self) -> None:
        loop, event = self._loop, self._event
        if loop is not None and event is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)

    async def wait(self) -> None:
        assert self._event is not None
        await self._event.wait()


class EventWatch:
    """Every uevent and every inotify batch becomes one ``rescan()``.

    The inotify watches follow the config: :meth:`reconfigured` (from any
    thread) closes them, and :meth:`run` builds new ones for the new patterns.
    """

    def __init__(self, roots: Roots, rescan: Callable[[], None]) -> None:
        self._roots = roots
        self._rescan = rescan
        self._changed = _ThreadSafeEvent()

    def reconfigured(self) -> None:
        self._changed.set()

    async def run(self, kinds: Callable[[], Sequence[Kind]]) -> None:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._uevents(), name="uevents")
            tasks.create_task(self._files(kinds), name="inotify")

    async def _uevents(self) -> None:
        with uevents(SUBSYSTEMS) as source:
            async for _event in source:
                self._rescan()

    async def _files(self, kinds: Callable[[], Sequence[Kind]]) -> None:
        while True:
            self._changed.clear()
            flat, recursive = watch_dirs(kinds(), self._roots)
            sources = []
            if flat:
                sources.append(inotify(*flat, mask=LISTING))
            if recursive:
                sources.append(inotify(*recursive, recursive=True, mask=LISTING))
            try:
                async with asyncio.TaskGroup() as tasks:
                    for source in sources:
                        tasks.create_task(self._drain(source))
                    if any(source.available for source in sources):
                        self._rescan()  # whatever changed before the watches were in place
                    await self._changed.wait()
                    for source in sources:
                        source.close()  # ends the drains; the loop watches the new patterns
            finally:
                for source in sources:
                    source.close()

    async def _drain(self, source: Inotify) -> None:
        with source:
            async for _batch in source:
                self._rescan()
