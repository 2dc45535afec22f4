"""What a plugin starts, and what stops it: timers, clean-up, the end of its life.

A plugin's streams come and go (Nomad opens and closes Fingerprint and Stats
streams as it likes), but the process lives on, and so do the things a plugin
started: child processes, threads, timers, handles on hardware. They belong
to the plugin, not to a stream, and the plugin's end is the one moment the
SDK knows about for certain (Shutdown, SIGTERM, a test harness closing). So:

- :meth:`Lifetime.call_later` schedules work on the plugin's own loop (a
  coroutine function as a task, a plain function on the plugin's ``work``
  pool), from any thread, before or after the loop is known;
- :meth:`Lifetime.on_close` registers clean-up;
- :func:`~nomad_device.plugin.serve.close_plugin` ends it all in one order:
  pending timers are cancelled, the author's ``close()`` runs, then the
  registered clean-up in reverse order, then the author's pools refuse work.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Final

from nomad_device.plugin.calls import AUTHOR_POOL, AuthorCalls, describe

__all__ = ["CLEANUP_TIMEOUT", "Lifetime", "Scheduled"]

log = logging.getLogger("nomad_device.lifetime")

#: How long the clean-up registered with ``on_close`` may take in all, after
#: the author's ``close()``. It is for quick things (killing child processes,
#: freeing handles); the host SIGKILLs the process 2 s after Shutdown.
CLEANUP_TIMEOUT: Final = 0.3
#: The pool a plain ``call_later`` function runs on.
WORK_POOL: Final = "work"


def _name(fn: Callable[..., object]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


class Scheduled:
    """A pending :meth:`Lifetime.call_later`; :meth:`cancel` works from any thread."""

    __slots__ = ("_handle", "_lifetime", "cancelled", "fn", "when")

    def __init__(self, lifetime: Lifetime, when: float, fn: Callable[[], object]) -> None:
        self._lifetime = lifetime
        self._handle: asyncio.TimerHandle | None = None
        #: ``time.monotonic()`` at which it is due.
        self.when = when
        self.fn = fn
        #: True once cancelled (by :meth:`cancel` or the plugin closing).
        self.cancelled = False

    def cancel(self) -> None:
        """Never call it (if it has not started yet). Idempotent, safe from any thread."""
        self.cancelled = True
        self._lifetime._forget(self)

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled else f"due in {self.when - time.monotonic():.3f}s"
        return f"<Scheduled {_name(self.fn)} {state}>"


class Lifetime:
    """One plugin's timers and clean-up, and whether it has closed."""

    def __init__(self, calls: AuthorCalls) -> None:
        self._calls = calls
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled: set[Scheduled] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closers: list[Callable[[], object]] = []
        self.closed = False

    # -- the loop ----------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the plugin is served on; timers asked for before now start now."""
        with self._lock:
            self._loop = loop
            pending = list(self._scheduled)
        for item in pending:
            self._arm(item)

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    # -- timers --------------------------------------------------------------------

    def call_later(self, delay: float, fn: Callable[[], object]) -> Scheduled:
        """Call ``fn`` in about ``delay`` seconds; see the module docstring."""
        if not callable(fn):
            raise TypeError(f"call_later needs a callable, not {type(fn).__name__}")
        delay = float(delay)
        if math.isnan(delay):
            raise ValueError("call_later delay must be a number of seconds, not NaN")
        item = Scheduled(self, time.monotonic() + max(0.0, delay), fn)
        with self._lock:
            if self.closed:
                item.cancelled = True
                log.debug("call_later(%s) after close: not scheduled", _name(fn))
                return item
            self._scheduled.add(item)
            loop = self._loop
        if loop is not None:
            if self._on_loop():
                self._arm(item)
            else:
                with contextlib.suppress(RuntimeError):  # closed: the process is going away
                    loop.call_soon_threadsafe(self._arm, item)
        return item

    def _arm(self, item: Scheduled) -> None:
        """On the loop: start the timer of ``item`` unless it was cancelled meanwhile."""
        loop = self._loop
        if loop is None or item.cancelled or item._handle is not None:
            return
        # The default loop's clock is time.monotonic(), the clock `when` was read on.
        item._handle = loop.call_at(loop.time() + (item.when - time.monotonic()), self._fire, item)

    def _forget(self, item: Scheduled) -> None:
        with self._lock:
            self._scheduled.discard(item)
        handle = item._handle
        if handle is not None:
            if self._on_loop():
                handle.cancel()
            elif self._loop is not None:
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(handle.cancel)

    def _fire(self, item: Scheduled) -> None:
        with self._lock:
            if item.cancelled or item not in self._scheduled:
                return
            self._scheduled.discard(item)
        task = asyncio.ensure_future(self._run(item.fn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, fn: Callable[[], object]) -> None:
        try:
            if inspect.iscoroutinefunction(fn):
                await fn()
            else:
                result = await self._calls.call(
                    AUTHOR_POOL + WORK_POOL, fn, what=f"call_later({_name(fn)})"
                )
                if inspect.isawaitable(result):
                    await result
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("call_later(%s) failed: %s", _name(fn), describe(exc), exc_info=exc)

    def pending(self) -> int:
        """How many timers are waiting (for tests and debugging)."""
        with self._lock:
            return len(self._scheduled)

    # -- clean-up --------------------------------------------------------------------

    def on_close(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` when the plugin closes (after its ``close()``, last registered first)."""
        if not callable(fn):
            raise TypeError(f"on_close needs a callable, not {type(fn).__name__}")
        with self._lock:
            if not self.closed:
                self._closers.append(fn)
                return
        log.warning("on_close(%s) after the plugin closed: not run", _name(fn))

    async def stop_timers(self) -> None:
        """First step of closing: nothing scheduled starts any more; what runs is cancelled."""
        with self._lock:
            self.closed = True
            scheduled, self._scheduled = list(self._scheduled), set()
            tasks = list(self._tasks)
        for item in scheduled:
            item.cancelled = True
            if item._handle is not None:
                item._handle.cancel()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLEANUP_TIMEOUT)

    async def run_closers(self, timeout: float = CLEANUP_TIMEOUT) -> None:
        """Last step: the ``on_close`` clean-up, newest first, within ``timeout`` in all."""
        with self._lock:
            closers, self._closers = self._closers[::-1], []
        if not closers:
            return
        calls = self._calls
        deadline = time.monotonic() + timeout
        for fn in closers:
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning(
                    "clean-up ran out of time (%gs); not run: %s",
                    timeout,
                    ", ".join(_name(f) for f in closers[closers.index(fn) :]),
                )
                return
            try:
                if inspect.iscoroutinefunction(fn):
                    await asyncio.wait_for(fn(), left)
                else:
                    result = await asyncio.wait_for(
                        calls.call("other", fn, what=f"on_close({_name(fn)})"), left
                    )
                    if inspect.isawaitable(result):
                        await asyncio.wait_for(result, max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                log.warning("clean-up %s did not finish within %gs", _name(fn), timeout)
            except Exception as exc:
                log.error("clean-up %s failed: %s", _name(fn), describe(exc), exc_info=exc)
