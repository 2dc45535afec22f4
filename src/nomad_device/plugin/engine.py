"""The detection engine behind the Fingerprint stream.

One detection loop per plugin, shared by every open stream: it calls the
author's ``detect`` on a period (or when woken), validates and diffs the result
and publishes a new full state only when it changed. Streams wait on the state
version, so a new stream gets the current state at once and a slow stream
simply skips to the latest. Failures are logged and backed off; they never end
a stream. The last good state is kept through a transient failure; once
``detect()`` has failed for longer than the plugin's ``detect_grace_period``,
its devices are reported unhealthy, with the error as the reason, until it
succeeds again.

Wake-ups (``rescan()``, from any thread) are coalesced: however many arrive
while a ``detect()`` runs or settles, they cause one more ``detect()``. Timed
ones (``rescan(5.0)``) wait in :class:`Deadlines` until they are due.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import contextlib
import dataclasses
import inspect
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from nomad_device.constants import DROPPED_FIELD
from nomad_device.model import DeviceGroup, DeviceGroupStats
from nomad_device.plugin.backoff import BACKOFF_START, Backoff, backoff_delay
from nomad_device.plugin.calls import describe, slow_after, tunable
from nomad_device.plugin.runtime import runtime_of

if TYPE_CHECKING:
    from nomad_device.plugin.base import DevicePlugin

__all__ = [
    "Deadlines",
    "FingerprintEngine",
    "ProblemLog",
    "backoff_delay",
    "printable",
    "resilient",
    "valid_groups",
]

log = logging.getLogger("nomad_device.engine")

#: Longest health description built from a ``detect()`` error.
MAX_REASON: Final = 200
#: Timed rescans closer together than this are one.
DEADLINE_TOLERANCE: Final = 0.001
#: At most this many timed rescans wait at once (the earliest are kept).
MAX_DEADLINES: Final = 1024
#: A ``watch()`` that ran this long before failing is restarted after the
#: first back-off step again, not after the step its last streak reached.
WATCH_RESET_AFTER = 60.0

T = TypeVar("T")
_G = TypeVar("_G", DeviceGroup, DeviceGroupStats)


class Deadlines:
    """Timed rescans waiting (``time.monotonic()``); a keyed one replaces its key's. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: list[float] = []
        self._keyed: dict[str, float] = {}
        self._dropped = False

    def add(self, when: float, key: str | None = None) -> bool:
        """Keep ``when`` (``inf`` with a key: forget that key's); True if it is now the earliest."""
        if key is not None:
            with self._lock:
                self._keyed.pop(key, None)
                if when == math.inf:
                    return False
                earliest = self._earliest()
                self._keyed[key] = when
                return when < earliest
        with self._lock:
            times = self._times
            i = bisect.bisect_left(times, when)
            near = (i > 0 and when - times[i - 1] < DEADLINE_TOLERANCE) or (
                i < len(times) and times[i] - when < DEADLINE_TOLERANCE
            )
            if near:
                return False
            if len(times) >= MAX_DEADLINES:
                if i == len(times):
                    if not self._dropped:
                        self._dropped = True
                        log.warning(
                            "more than %d timed rescans are waiting; later ones are dropped",
                            MAX_DEADLINES,
                        )
                    return False
                times.pop()
            earliest = self._earliest()
            times.insert(i, when)
            return when < earliest

    def drop_due(self, now: float) -> None:
        """Forget the requests a ``detect()`` starting at ``now`` satisfies."""
        due = now + DEADLINE_TOLERANCE
        with self._lock:
            del self._times[: bisect.bisect_right(self._times, due)]
            self._keyed = {k: when for k, when in self._keyed.items() if when > due}

    def _earliest(self) -> float:
        first = self._times[0] if self._times else math.inf
        return min(first, *self._keyed.values()) if self._keyed else first

    def earliest(self) -> float:
        with self._lock:
            return self._earliest()

    def __len__(self) -> int:
        with self._lock:
            return len(self._times) + len(self._keyed)


def printable(text: str, limit: int = MAX_REASON) -> str:
    """``text`` as valid UTF-8 (OS errors may carry surrogate-escaped names), trimmed."""
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return safe if len(safe) <= limit else safe[: limit - 3] + "..."


class ProblemLog:
    """Logs each distinct validation problem once, not on every period.

    Each record carries ``dropped=<kind>`` (``DROPPED_FIELD``), so that a host
    can tell from the log alone that something was left out of a message.
    """

    def __init__(self) -> None:
        self._last: frozenset[str] = frozenset()

    def report(self, problems: list[str], what: str, dropped: str) -> None:
        current = frozenset(problems)
        for problem in sorted(current - self._last):
            log.error("%s not sent to Nomad: %s", what, problem, extra={DROPPED_FIELD: dropped})
        self._last = current


def _checked(groups: object, cls: type[_G]) -> tuple[list[_G], list[str]]:
    """The items of ``groups`` Nomad would accept, and the problems of the others."""
    kept: list[_G] = []
    found: list[str] = []
    for i, group in enumerate(groups if isinstance(groups, list | tuple) else [groups]):
        if not isinstance(group, cls):
            found.append(f"item {i} is a {type(group).__name__}, not a {cls.__name__}")
        elif issues := group.validate():
            if isinstance(group, DeviceGroup):
                label = f"group {group.key!r}"
            else:
                label = f"stats group {group.vendor}/{group.type}/{group.name}"
            found.append(f"{label}: " + "; ".join(issues))
        else:
            kept.append(group)
    return kept, found


def check_groups(groups: object) -> tuple[list[DeviceGroup], list[str]]:
    """The groups Nomad would accept, and the problems of the others."""
    return _checked(groups, DeviceGroup)


def check_stats(groups: object) -> tuple[list[DeviceGroupStats], list[str]]:
    return _checked(groups, DeviceGroupStats)


def valid_groups(groups: object, problems: ProblemLog | None = None) -> tuple[DeviceGroup, ...]:
    """Keep the groups Nomad would accept; log the rest (never send them)."""
    kept, found = check_groups(groups)
    (problems or ProblemLog()).report(found, "invalid device group", "device_group")
    return tuple(kept)


async def resilient(factory: Callable[[], AsyncIterator[T]], what: str) -> AsyncIterator[T]:
    """Run an author's raw stream; if it fails or ends, log and restart it.

    The stream towards Nomad must never end, whatever the author's iterator does.
    """
    backoff = Backoff()
    while True:
        try:
            async for item in factory():
                backoff.succeeded()
                yield item
            log.warning("%s ended; restarting it", what)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("%s failed: %s", what, describe(exc), exc_info=exc)
        await asyncio.sleep(backoff.failed())


def _unhealthy(groups: Sequence[DeviceGroup], reason: str) -> tuple[DeviceGroup, ...]:
    return tuple(
        dataclasses.replace(
            group,
            devices=tuple(
                dataclasses.replace(d, healthy=False, health_description=reason)
                for d in group.devices
            ),
        )
        for group in groups
    )


def _own_watch(plugin: DevicePlugin[Any]) -> bool:
    """Whether the author wrote a ``watch()`` (the base one has nothing to watch)."""
    return not getattr(type(plugin).watch, "nothing_to_watch", False)


class FingerprintEngine:
    """Shared detection loop and the current state for all Fingerprint streams."""

    def __init__(self, plugin: DevicePlugin[Any]) -> None:
        self._plugin = plugin
        self._calls = runtime_of(plugin).calls
        self._state: tuple[DeviceGroup, ...] = ()
        self._version = 0
        self._changed: asyncio.Condition | None = None
        self._wake: asyncio.Event | None = None
        self._wake_pending = False
        # Set on the loop: a rescan is due now (not only a new deadline to wait for).
        self._wake_now = False
        self._deadlines = Deadlines()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._problems = ProblemLog()
        # What detect() last found, and since when it has been failing.
        self._good: tuple[DeviceGroup, ...] = ()
        self._failing_since: float | None = None
        self._failures = 0
        self._reported_unhealthy = False
        # A sync watch() runs in its own thread, which outlives a stopped loop;
        # whether a stream's watch loop is waiting on it (else its failure is logged there).
        self._watch_thread: concurrent.futures.Future[Any] | None = None
        self._watch_awaited = False
        # What detection last gave (or its failure means), before the overlay.
        self._base: tuple[DeviceGroup, ...] = ()
        self._republishing: set[asyncio.Future[None]] = set()
        #: A hook that rewrites each state before it is published (release tracking
        #: marks devices being cleaned unhealthy); it must not raise.
        self.overlay: Callable[[tuple[DeviceGroup, ...]], tuple[DeviceGroup, ...]] | None = None

    def wake(self, delay: float = 0.0, key: str | None = None) -> None:
        """Request a detection now, or in ``delay`` seconds; safe from any thread, cheap."""
        delay = float(delay)
        if math.isnan(delay):
            raise ValueError("rescan delay must be a number of seconds, not NaN")
        if delay > 0 or key is not None:
            if delay == math.inf and key is None:
                return
            if not self._deadlines.add(time.monotonic() + max(0.0, delay), key):
                return  # not the earliest: the loop already waits for an earlier one
            self._poke(self._on_retime)
            return
        if self._wake_pending:
            return
        self._wake_pending = True
        if not self._poke(self._on_wake):
            self._wake_pending = False

    def _poke(self, callback: Callable[[], None]) -> bool:
        """Run ``callback`` on the loop (now, if this is the loop's thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return False
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            callback()
            return True
        try:
            loop.call_soon_threadsafe(callback)
        except RuntimeError:  # closed in the meantime
            return False
        return True

    def _on_wake(self) -> None:
        # Cleared before setting: a wake-up after this point schedules another.
        self._wake_pending = False
        self._wake_now = True
        if self._wake is not None:
            self._wake.set()

    def rewatch(self) -> None:
        """Start ``watch()`` again (see ``DevicePlugin.rewatch``); safe from any thread."""
        self._poke(self._on_rewatch)

    def _on_rewatch(self) -> None:
        for i, task in enumerate(self._tasks):
            if task.get_name() == "watch":
                task.cancel()
                self._tasks[i] = asyncio.create_task(self._watch_loop(after=task), name="watch")

    def _on_retime(self) -> None:
        # No detect now; the loop only computes its wait again.
        if self._wake is not None:
            self._wake.set()

    async def stream(self) -> AsyncIterator[Sequence[DeviceGroup]]:
        """Yield the current state at once (once known), then every change."""
        self._start()
        assert self._changed is not None
        changed = self._changed
        seen = 0

        def fresh() -> bool:
            return self._version != seen

        try:
            while True:
                async with changed:
                    await changed.wait_for(fresh)
                    seen, state = self._version, self._state
                yield state
        finally:
            self._streams -= 1
            if self._streams == 0:
                await self._stop()

    def _start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._changed = asyncio.Condition()
            self._wake = asyncio.Event()
        self._streams += 1
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._detect_loop(), name="detect")]
            if _own_watch(self._plugin):
                self._tasks.append(asyncio.create_task(self._watch_loop(), name="watch"))

    async def _stop(self) -> None:
        log.debug("no Fingerprint stream left; detection paused")
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _publish(self, groups: tuple[DeviceGroup, ...] | None = None) -> None:
        """Publish ``groups`` (None: the last ones again, through the overlay)."""
        assert self._changed is not None
        if groups is not None:
            self._base = groups
        async with self._changed:
            state = self._base if self.overlay is None else self.overlay(self._base)
            if self._version and state == self._state:
                return
            self._state = state
            self._version += 1
            self._changed.notify_all()

    def republish(self) -> None:
        """On the loop: publish the last state again, for an overlay that changed."""
        if self._changed is not None and self._version:
            task = asyncio.ensure_future(self._publish())
            self._republishing.add(task)
            task.add_done_callback(self._republishing.discard)

    async def _detect_once(self) -> float:
        """One ``detect()``: publish what it found (or what its failure means); the next delay."""
        plugin = self._plugin
        period = max(0.01, tunable(plugin, "fingerprint_period"))
        try:
            found = await self._calls.call(
                "detect",
                plugin.detect,
                slow_after=slow_after(tunable(plugin, "slow_call_seconds"), period),
            )
            groups = valid_groups(found, self._problems)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return await self._failed(exc, period)
        if self._failing_since is not None:
            log.info(
                "detect() recovered after %.1fs of failures",
                time.monotonic() - self._failing_since,
            )
        self._failing_since = None
        self._reported_unhealthy = False
        self._good = groups
        await self._publish(groups)
        return period

    async def _failed(self, exc: Exception, period: float) -> float:
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
            self._failures = 0
        self._failures += 1
        failing = now - self._failing_since
        grace = tunable(self._plugin, "detect_grace_period")
        log.error(
            "detect() failed; %s: %s",
            "its devices are reported unhealthy"
            if failing >= grace and self._good
            else "keeping the last known devices",
            describe(exc),
            exc_info=exc,
            extra={"failures": self._failures, "failing_s": round(failing, 3)},
        )
        if self._version == 0:
            # Nomad waits for a first message before registering the node.
            await self._publish(())
        if failing >= grace and self._good:
            if not self._reported_unhealthy:
                log.warning(
                    "detect() has failed for %.1fs (grace period %gs): reporting %d device(s) "
                    "unhealthy until it succeeds",
                    failing,
                    grace,
                    sum(len(g.devices) for g in self._good),
                )
                self._reported_unhealthy = True
            reason = printable(f"detect() failing: {describe(exc)}")
            await self._publish(_unhealthy(self._good, reason))
        delay = min(backoff_delay(self._failures), max(1.0, period))
        if failing < grace:
            # Retry when the grace period ends, so the devices turn unhealthy on time.
            delay = max(0.01, min(delay, grace - failing))
        return delay

    async def _detect_loop(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            wake.clear()
            self._wake_now = False
            self._deadlines.drop_due(time.monotonic())
            try:
                delay = await self._detect_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug here must not stop detection for good
                log.error("detection loop failed: %s", describe(exc), exc_info=exc)
                delay = BACKOFF_START
            if await self._wait(time.monotonic() + delay):
                settle = tunable(self._plugin, "rescan_settle")
                if settle > 0:
                    # Let a burst of events finish: one detect() for all of them.
                    await asyncio.sleep(settle)

    async def _wait(self, next_period: float) -> bool:
        """Wait for the period's end, a timed rescan or a wake-up; True if woken."""
        wake = self._wake
        assert wake is not None
        while not self._wake_now:
            timeout = min(next_period, self._deadlines.earliest()) - time.monotonic()
            if timeout <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)
            wake.clear()  # a new deadline (look again) or a wake-up (the loop condition)
        return True

    async def _watch_loop(self, after: asyncio.Task[None] | None = None) -> None:
        if after is not None:
            await asyncio.wait([after])  # never two runs at once: the old one closes first
        watch = self._plugin.watch
        backoff = Backoff(reset_after=WATCH_RESET_AFTER)
        while True:
            started = time.monotonic()
            try:
                if inspect.iscoroutinefunction(watch):
                    await watch()
                else:
                    await self._watch_in_thread(watch)
                log.debug("watch() returned; it is not restarted until detection restarts")
                return  # a watcher that returns has nothing more to watch
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                ran = time.monotonic() - started
                delay = backoff.failed(ran_for=ran)
                log.error(
                    "watch() failed after %.1fs; restarting it in %gs: %s",
                    ran,
                    delay,
                    describe(exc),
                    exc_info=exc,
                    extra={"failures": backoff.failures},
                )
                await asyncio.sleep(delay)

    async def _watch_in_thread(self, watch: Callable[[], object]) -> None:
        """Run a sync ``watch()`` in its own thread, or wait on the one still running."""
        running = self._watch_thread
        if running is None or running.done():
            running = concurrent.futures.Future()
            running.set_running_or_notify_cancel()  # so a cancelled waiter cannot cancel it
            done = running

            def run() -> None:
                try:
                    result = watch()
                except Exception as exc:
                    done.set_exception(exc)
                except BaseException as exc:
                    done.set_exception(RuntimeError(f"watch() raised {exc!r}"))
                else:
                    done.set_result(result)

            self._watch_thread = running
            running.add_done_callback(self._watch_thread_done)
            threading.Thread(target=run, name="watch", daemon=True).start()
        self._watch_awaited = True
        try:
            result = await asyncio.wrap_future(running)
        finally:
            self._watch_awaited = False
        if inspect.isawaitable(result):
            await result

    def _watch_thread_done(self, done: concurrent.futures.Future[Any]) -> None:
        """In the watch thread: a failure nobody waits for is logged here, or never."""
        exc = done.exception()
        if exc is not None and not self._watch_awaited:
            log.error(
                "watch() failed while no Fingerprint stream was open; it starts again with"
                " the next stream: %s",
                describe(exc),
                exc_info=exc,
            )
