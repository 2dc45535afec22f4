"""What every event source shares: one file descriptor, three ways to read it.

A source is an async iterator (for ``async def watch``), a blocking iterator
(for a ``def watch`` running in its own thread) and a context manager that
closes its descriptor. ``close()`` is safe from any thread and ends the
iteration wherever it is waiting. A source whose kernel facility is
unavailable has no descriptor: it logs why once and then waits, without
yielding, until it is closed or cancelled, so that whoever polls anyway
stays the only mechanism and nothing spins, raises or crashes.
Nothing touches an event loop's thread: a source is opened (watches placed)
when entered or first read, and the async form opens and reads on the
source's own thread, so a hung filesystem holds that thread, never the loop.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import contextlib
import logging
import os
import queue
import select
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from types import TracebackType
from typing import Any, Final, Generic, Self, TypeVar

__all__ = ["DISABLE_ENV", "EventSource", "disabled"]

T = TypeVar("T")
R = TypeVar("R")
#: A call for the async form's thread, and where its result goes.
_Job = tuple[concurrent.futures.Future[Any], Callable[[], Any]]

#: Comma-separated source kinds to treat as unavailable (``inotify``,
#: ``uevent``, or ``all``): how tests and operators exercise the fallback.
DISABLE_ENV: Final = "NOMAD_DEVICE_SOURCES_DISABLE"


def disabled(kind: str) -> bool:
    """Whether ``kind`` is switched off through :data:`DISABLE_ENV`."""
    wanted = {part.strip() for part in os.environ.get(DISABLE_ENV, "").split(",")}
    return kind in wanted or "all" in wanted


class _Closed(Exception):
    """The source was closed while a reader waited."""


class EventSource(abc.ABC, Generic[T]):
    """The shared reading machinery; subclasses decode what the descriptor holds.

    Subclasses implement :meth:`_open` (the descriptor, or ``None`` with a
    reason; called once, by the first reader or ``with``), :meth:`_drain`
    (read what is ready, return whether anything worth reporting arrived)
    and :meth:`_take` (the next item, or ``None``). With ``settle > 0`` what
    arrives is gathered into one item until the descriptor has been quiet
    for ``settle`` seconds, so a single change is reported almost at once.
    While changes keep coming, items are at least ``max_delay`` apart, and
    nothing waits longer than ``max_delay``: a storm of any size costs at
    most one wake-up per ``max_delay``, however the writer's pauses fall.

    One reader at a time: a source is read by one task or one thread.
    """

    def __init__(self, log: logging.Logger, settle: float = 0.0, max_delay: float = 0.0) -> None:
        if settle < 0 or max_delay < 0:
            raise ValueError("settle and max_delay must not be negative")
        self._log = log
        self._settle = settle
        self._max_delay = max(max_delay, settle)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._fd: int | None = None
        self._wake: int | None = None  # an eventfd: close() pokes it to free a blocked reader
        self._poller: select.poll | None = None
        self._readers = 0
        self._opened = False
        self._window_closed = -1e9  # when the last gathering ended (monotonic)
        # The async form's thread, and the call it runs (kept when its caller is cancelled).
        self._jobs: queue.SimpleQueue[_Job | None] | None = None
        self._pending: tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None = None

    # -- for subclasses ---------------------------------------------------------

    @abc.abstractmethod
    def _open(self) -> tuple[int | None, str]:
        """The descriptor (non-blocking, close-on-exec), or None and why it cannot be had."""

    def _open_once(self) -> None:
        """Open the source unless done (as a reader: ``close()`` waits for it)."""
        if not self._enter():
            return
        try:
            if not self._opened:
                self._opened = True
                self._start(*self._open())
        finally:
            self._leave()

    def _start(self, fd: int | None, unavailable: str = "") -> None:
        """Adopt ``fd`` (non-blocking, close-on-exec), or log once why there is none."""
        if fd is not None:
            try:
                self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            except OSError as exc:
                self._close_fd(fd)
                fd, unavailable = None, f"cannot create an eventfd: {exc.strerror or exc}"
        if fd is None:
            self._log.warning(unavailable)
            return
        assert self._wake is not None
        self._fd = fd
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)
        self._poller.register(self._wake, select.POLLIN)

    def _give_up(self, why: str) -> None:
        """Stop reading for good (called by the reader itself); the fallback then applies."""
        self._log.warning(why)
        with self._lock:
            fd, self._fd = self._fd, None
            if self._poller is not None and fd is not None:
                self._poller.unregister(fd)
        if fd is not None:
            self._close_fd(fd)

    def _close_fd(self, fd: int) -> None:
        """Close the source's descriptor (a subclass holding it in an object closes that)."""
        os.close(fd)

    @property
    def available(self) -> bool:
        """False until opened (entered or read), and when the kernel facility is unusable."""
        return self._fd is not None

    @abc.abstractmethod
    def _drain(self, fd: int) -> bool:
        """Read what the kernel has ready on ``fd`` into pending items; whether any were added."""

    @abc.abstractmethod
    def _take(self) -> T | None:
        """Remove and return the next pending item, or None when there is none."""

    @abc.abstractmethod
    def _has_item(self) -> bool:
        """Whether an item is pending, to be taken with :meth:`_take`."""

    # -- closing ------------------------------------------------------------------

    def close(self) -> None:
        """End the iteration and release the descriptor; safe from any thread, idempotent."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            if self._wake is not None:
                with contextlib.suppress(OSError):
                    os.eventfd_write(self._wake, 1)
            if self._readers == 0:
                self._release()
            if self._jobs is not None:
                self._jobs.put(None)  # the thread ends after the call it runs

    def _release(self) -> None:
        """Close the descriptors; with the lock held and no reader inside."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self._close_fd(self._fd)
        if self._wake is not None:
            with contextlib.suppress(OSError):
                os.close(self._wake)
        self._fd = self._wake = None
        self._poller = None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __enter__(self) -> Self:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a thread of its own: open here
            self._open_once()
        # On a loop (``with`` in async code): the first read opens it, off the loop.
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        if not self._opened:
            await self._in_thread(self._open_once)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # A source dropped without close() (``async for ...: break``) still frees its fd.
        with contextlib.suppress(Exception):
            self.close()

    # -- reading, both ways ---------------------------------------------------------

    def _enter(self) -> bool:
        with self._lock:
            if self._closed.is_set():
                return False
            self._readers += 1
            return True

    def _leave(self) -> None:
        with self._lock:
            self._readers -= 1
            if self._closed.is_set() and self._readers == 0:
                self._release()

    def _deadline(self, first: float, last: float) -> float:
        quiet = max(last + self._settle, self._window_closed + self._max_delay)
        return min(quiet, first + self._max_delay)

    # Blocking form.

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        self._open_once()
        if not self._enter():
            raise StopIteration
        try:
            return self._next_blocking()
        except _Closed:
            raise StopIteration from None
        finally:
            self._leave()

    def _poll(self, timeout: float | None) -> bool:
        """Wait for the descriptor: True when readable, False on timeout; _Closed on close."""
        poller, fd = self._poller, self._fd
        if poller is None or fd is None:
            self._closed.wait(timeout)
            if self._closed.is_set():
                raise _Closed
            return False
        millis = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
        ready = poller.poll(millis)
        if self._closed.is_set():
            raise _Closed
        return any(ready_fd == fd for ready_fd, _ in ready)

    def _next_blocking(self) -> T:
        while True:
            if self._has_item():
                item = self._take()
                if item is not None:
                    return item
            if not self._poll(None):
                continue
            if not self._read() or self._settle <= 0:
                continue
            first = last = time.monotonic()
            while (left := self._deadline(first, last) - time.monotonic()) > 0:
                if self._poll(left) and self._read():
                    last = time.monotonic()
            self._window_closed = time.monotonic()

    def _read(self) -> bool:
        fd = self._fd
        return fd is not None and self._drain(fd)

    # Async form: the blocking form on the source's own thread.

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        item = await self._in_thread(self._next_or_end)
        if item is _END:
            raise StopAsyncIteration
        return item  # type: ignore[return-value]

    def _next_or_end(self) -> T | object:
        try:
            return self.__next__()
        except StopIteration:
            return _END

    async def _in_thread(self, fn: Callable[[], R]) -> R:
        """``fn()`` on the source's thread. A call whose caller was cancelled runs
        on, and the next caller of the same ``fn`` takes its result (one reader)."""
        with self._lock:
            pending = self._pending
            if pending is None or pending[0] != fn:
                pending = None
                if not self._closed.is_set():  # else its thread is ending: see below
                    if self._jobs is None:
                        self._jobs = queue.SimpleQueue()
                        threading.Thread(
                            target=_serve, args=(self._jobs,), name="event-source", daemon=True
                        ).start()
                    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
                    self._jobs.put((future, fn))
                    pending = self._pending = (fn, future)
        if pending is None:
            return fn()  # closed: the call returns at once, touching nothing
        try:
            result: R = await asyncio.shield(asyncio.wrap_future(pending[1]))
        except asyncio.CancelledError:
            raise
        except BaseException:
            self._pending = None
            raise
        self._pending = None
        return result


#: What the async form's thread returns when the iteration ended.
_END: Final = object()


def _serve(
    jobs: queue.SimpleQueue[_Job | None],
) -> None:
    """A source's thread: its calls, one at a time, until the source closes.

    It holds the source only while a call runs, so a source dropped unclosed
    is still collected (and closed, which ends the thread).
    """
    while (job := jobs.get()) is not None:
        future, fn = job
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)
        del job, future, fn
