"""Calling author code: sync or async, off the event loop, never re-entered.

Authors write plain methods and rightly assume that ``detect()`` is not running
twice at once. The engine cannot stop a sync call once it runs (Python has no
thread cancellation), so a cancelled caller leaves the call running in its
thread; the next caller of the same method waits for it to finish first. That
rule lives here, per plugin instance, so it survives the detection loop being
stopped and restarted as streams come and go.

Sync calls run on the plugin's own bounded worker threads, never on asyncio's
default executor, and are grouped so that one kind of call cannot starve
another:

========== ======= ===========================================================
kind       threads why
========== ======= ===========================================================
detect     1       never concurrent with itself, so one thread is all it uses
stats      1       likewise
reserve    8       Nomad may reserve for several allocations at once; a hung
                   ``reserve()`` holds one of these, never a detect thread
other      2       ``configure()``, ``close()`` and anything else
pool:NAME  2       an author's own work (:meth:`DevicePlugin.run_blocking`),
                   sized by the plugin's ``worker_pools``
========== ======= ===========================================================

Workers are daemon threads started on demand: a call stuck forever costs one
thread of its kind and never keeps the process from exiting. A call that runs
longer than its ``slow_after`` is logged once as a warning while it runs, and
again when it finally returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

if TYPE_CHECKING:
    import queue

__all__ = [
    "AUTHOR_POOL",
    "POOL_SIZES",
    "AuthorCalls",
    "describe",
    "slow_after",
    "tunable",
]

log = logging.getLogger("nomad_device.calls")

T = TypeVar("T")

#: Worker threads per kind of call (see the module docstring).
POOL_SIZES: Final = {"detect": 1, "stats": 1, "reserve": 8, "other": 2}
#: Kinds whose calls never overlap, even across restarts of the caller.
SERIAL_KINDS: Final = frozenset({"detect", "stats"})
#: A periodic call is slow after three periods, but never later than this
#: (unless the plugin's own threshold is larger).
SLOW_PERIOD_CAP: Final = 60.0


def slow_after(floor: float, period: float | None = None) -> float:
    """When a call counts as far too slow: ``floor`` seconds, or three periods up to a minute."""
    if period is None:
        return float(floor)
    return max(float(floor), min(3 * float(period), SLOW_PERIOD_CAP))


_Job = tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]


class _Pool:
    """A bounded pool of daemon threads, started on demand."""

    def __init__(self, name: str, size: int) -> None:
        self._name = name
        self._size = size
        import queue  # here: pools start with the first call, after the handshake

        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self._name} pool is shut down")
            self._jobs.put((future, fn, args))
            if not self._idle.acquire(blocking=False) and self._threads < self._size:
                self._threads += 1
                threading.Thread(
                    target=self._work, name=f"{self._name}-{self._threads}", daemon=True
                ).start()
        return future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args = job
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del job, future, fn, args
            self._idle.release()

    def shutdown(self) -> None:
        """Let idle workers exit; a worker still in a call exits after it."""
        with self._lock:
            self._closed = True
            for _ in range(self._threads):
                self._jobs.put(None)


class _Timer:
    """Warns once if a call outlives ``limit`` seconds, and again when it ends."""

    def __init__(self, what: str, limit: float | None, loop: asyncio.AbstractEventLoop) -> None:
        self._what = what
        self._loop = loop
        self._start = time.monotonic()
        self._warned = False
        self._handle = loop.call_later(limit, self._warn) if limit is not None else None

    def _elapsed(self) -> float:
        return time.monotonic() - self._start

    def _warn(self) -> None:
        self._warned = True
        elapsed = self._elapsed()
        log.warning(
            "%s has been running for %.1fs and has not returned",
            self._what,
            elapsed,
            extra={"elapsed_s": round(elapsed, 3)},
        )

    def done(self, _: object = None) -> None:
        """Call from any thread when the call ended (even if nobody waits for it)."""
        if self._handle is None:
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: the process is going away
            self._loop.call_soon_threadsafe(self._finish)

    def _finish(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._warned:
            elapsed = self._elapsed()
            log.warning(
                "%s returned after %.1fs",
                self._what,
                elapsed,
                extra={"elapsed_s": round(elapsed, 3)},
            )


class _Serial:
    """What is still running of the last call of one method, if anything."""

    def __init__(self) -> None:
        self.running: concurrent.futures.Future[Any] | asyncio.Future[Any] | None = None

    async def wait_idle(self) -> None:
        loop = asyncio.get_running_loop()
        while (previous := self.running) is not None and not previous.done():
            if isinstance(previous, concurrent.futures.Future):
                waiter: asyncio.Future[Any] = asyncio.wrap_future(previous)
            elif previous.get_loop() is loop:
                waiter = previous
            else:  # left behind by a loop that is gone
                return
            # asyncio.wait neither raises the call's error nor cancels it.
            await asyncio.wait([waiter])


#: Prefix of the kinds that name an author's own pool (``run_blocking(pool=...)``).
AUTHOR_POOL: Final = "pool:"
#: Threads of an author's pool that ``worker_pools`` does not size.
DEFAULT_POOL_SIZE: Final = 2


class AuthorCalls:
    """The worker threads and the one-at-a-time rule for one plugin instance.

    ``sizes`` gives the threads of the author's own pools, by pool name.
    """

    def __init__(self, sizes: Mapping[str, int] | None = None) -> None:
        self._pools: dict[str, _Pool] = {}
        self._serial = {kind: _Serial() for kind in SERIAL_KINDS}
        self._lock = threading.Lock()
        self._sizes = dict(sizes or {})
        self._closed = False

    def _size(self, kind: str) -> int:
        if kind.startswith(AUTHOR_POOL):
            size = self._sizes.get(kind[len(AUTHOR_POOL) :], DEFAULT_POOL_SIZE)
            if isinstance(size, int) and not isinstance(size, bool) and size >= 1:
                return size
            log.error(
                "worker_pools[%r] = %r is not a positive number of threads; using %d",
                kind[len(AUTHOR_POOL) :],
                size,
                DEFAULT_POOL_SIZE,
            )
            return DEFAULT_POOL_SIZE
        return POOL_SIZES.get(kind, 2)

    def _pool(self, kind: str) -> _Pool:
        with self._lock:
            if self._closed and kind.startswith(AUTHOR_POOL):
                raise RuntimeError(
                    f"the plugin is closed: nothing more runs on its {kind[len(AUTHOR_POOL) :]!r}"
                    " pool"
                )
            pool = self._pools.get(kind)
            if pool is None:
                name = kind.replace(":", "-") if kind.startswith(AUTHOR_POOL) else kind
                pool = self._pools[kind] = _Pool(f"author-{name}", self._size(kind))
            return pool

    async def call(
        self,
        kind: str,
        fn: Callable[..., T | Awaitable[T]],
        *args: Any,
        what: str | None = None,
        slow_after: float | None = None,
    ) -> T:
        """Run ``fn(*args)`` as a call of ``kind`` and return its result.

        Cancelling the caller cancels an async call; a sync one keeps its
        thread until it returns, and a serial kind's next call waits for it.
        """
        serial = self._serial.get(kind)
        if serial is not None:
            await serial.wait_idle()
        loop = asyncio.get_running_loop()
        timer = _Timer(what or f"{kind}()", slow_after, loop)
        if inspect.iscoroutinefunction(fn):
            task = asyncio.ensure_future(fn(*args))
            task.add_done_callback(timer.done)
            if serial is not None:
                serial.running = task
            return cast(T, await task)
        future = self._pool(kind).submit(fn, *args)
        future.add_done_callback(timer.done)
        if serial is not None:
            serial.running = future
        result = await asyncio.wrap_future(future)
        if inspect.isawaitable(result):
            return cast(T, await result)
        return result

    def close_author_pools(self) -> None:
        """Refuse new work on the author's own pools (the plugin is closing)."""
        with self._lock:
            self._closed = True
            pools = [p for kind, p in self._pools.items() if kind.startswith(AUTHOR_POOL)]
        for pool in pools:
            pool.shutdown()

    def shutdown(self) -> None:
        """Release idle worker threads (for hosts that outlive the plugin, like tests)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown()


def describe(exc: BaseException) -> str:
    """``str(exc)``, even for an author's exception whose ``__str__`` is broken."""
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__} that cannot be printed>"


#: Default values of the plugin's tunables, used when an author sets one to garbage.
_TUNABLES: Final = {
    "fingerprint_period": 5.0,
    "rescan_settle": 0.02,
    "detect_grace_period": 30.0,
    "slow_call_seconds": 10.0,
}


def tunable(plugin: object, name: str) -> float:
    """A plugin's numeric setting; a value that is not a number is logged and ignored."""
    value = getattr(plugin, name, None)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if math.isnan(number) or number < 0:
        fallback = _TUNABLES[name]
        if (type(plugin), name) not in _complained:  # once, not every period
            _complained.add((type(plugin), name))
            log.error("%s = %r is not a non-negative number; using %g", name, value, fallback)
        return fallback
    return number


_complained: set[tuple[type, str]] = set()
