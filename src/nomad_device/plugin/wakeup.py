"""A wake-up flag that any thread may set and a coroutine awaits.

``asyncio.Event`` may only be set on its own loop's thread, yet the code that
learns something changed often runs elsewhere: ``configure()`` and sync
``detect()`` in worker threads, a blocking ``watch()`` in its own thread.
Plugins used to hand-roll ``loop.call_soon_threadsafe(event.set)`` for this,
each with its own way of finding the loop; :class:`Wakeup` is that once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

__all__ = ["Wakeup"]


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Wakeup:
    """Set from any thread, awaited on any loop; a ``set()`` before the wait is kept.

    Like ``asyncio.Event`` it stays set until :meth:`clear`. Typical use: clear,
    read what the flag guards, then wait, so a change that lands in between is
    never missed.
    """

    __slots__ = ("_flag", "_lock", "_waiters")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flag = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def set(self) -> None:
        """Wake every waiter; safe from any thread, cheap when already set."""
        with self._lock:
            if self._flag:
                return
            self._flag = True
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there
                loop.call_soon_threadsafe(_release, waiter)

    def clear(self) -> None:
        with self._lock:
            self._flag = False

    def is_set(self) -> bool:
        return self._flag

    async def wait(self) -> None:
        """Return once the flag is set (at once if it is)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._flag:
                return
            waiter: asyncio.Future[None] = loop.create_future()
            entry = (loop, waiter)
            self._waiters.append(entry)
        try:
            await waiter
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._waiters.remove(entry)
