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
while a ``detect()`` runs or settles, they cause one more ``detect()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from nomad_device.constants import DROPPED_FIELD
from nomad_device.model import DeviceGroup, DeviceGroupStats
from nomad_device.plugin.calls import calls_of, describe, slow_after, tunable

if TYPE_CHECKING:
    from nomad_device.plugin.base import DevicePlugin

__all__ = [
    "FingerprintEngine",
    "ProblemLog",
    "backoff_delay",
    "printable",
    "resilient",
    "valid_groups",
    "valid_stats",
]

log = logging.getLogger("nomad_device.engine")

BACKOFF_START: Final = 1.0
BACKOFF_MAX: Final = 60.0
#: Longest health description built from a ``detect()`` error.
MAX_REASON: Final = 200

T = TypeVar("T")


def backoff_delay(failures: int, start: float = BACKOFF_START, cap: float = BACKOFF_MAX) -> float:
    """Exponential back-off: 1 s, 2 s, 4 s ... up to ``cap``."""
    return float(min(cap, start * 2 ** max(0, failures - 1)))


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


def _items(groups: object) -> list[object]:
    return list(groups) if isinstance(groups, list | tuple) else [groups]


def _group_problem(i: int, group: object) -> str | None:
    if not isinstance(group, DeviceGroup):
        return f"item {i} is a {type(group).__name__}, not a DeviceGroup"
    issues = group.validate()
    return f"group {group.key!r}: " + "; ".join(issues) if issues else None


def _stats_problem(i: int, group: object) -> str | None:
    if not isinstance(group, DeviceGroupStats):
        return f"item {i} is a {type(group).__name__}, not a DeviceGroupStats"
    issues = group.validate()
    if not issues:
        return None
    return f"stats group {group.vendor}/{group.type}/{group.name}: " + "; ".join(issues)


def check_groups(groups: object) -> tuple[list[DeviceGroup], list[str]]:
    """The groups Nomad would accept, and the problems of the others."""
    kept: list[DeviceGroup] = []
    found: list[str] = []
    for i, group in enumerate(_items(groups)):
        problem = _group_problem(i, group)
        if problem is None:
            kept.append(group)  # type: ignore[arg-type]
        else:
            found.append(problem)
    return kept, found


def check_stats(groups: object) -> tuple[list[DeviceGroupStats], list[str]]:
    kept: list[DeviceGroupStats] = []
    found: list[str] = []
    for i, group in enumerate(_items(groups)):
        problem = _stats_problem(i, group)
        if problem is None:
            kept.append(group)  # type: ignore[arg-type]
        else:
            found.append(problem)
    return kept, found


def valid_groups(groups: object, problems: ProblemLog | None = None) -> tuple[DeviceGroup, ...]:
    """Keep the groups Nomad would accept; log the rest (never send them)."""
    kept, found = check_groups(groups)
    (problems or ProblemLog()).report(found, "invalid device group", "device_group")
    return tuple(kept)


def valid_stats(groups: object, problems: ProblemLog | None = None) -> list[DeviceGroupStats]:
    kept, found = check_stats(groups)
    (problems or ProblemLog()).report(found, "invalid stats group", "stats_group")
    return kept


async def resilient(factory: Callable[[], AsyncIterator[T]], what: str) -> AsyncIterator[T]:
    """Run an author's raw stream; if it fails or ends, log and restart it.

    The stream towards Nomad must never end, whatever the author's iterator does.
    """
    failures = 0
    while True:
        try:
            async for item in factory():
                failures = 0
                yield item
            log.warning("%s ended; restarting it", what)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("%s failed: %s", what, describe(exc), exc_info=exc)
        failures += 1
        await asyncio.sleep(backoff_delay(failures))


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
        self._calls = calls_of(plugin)
        self._state: tuple[DeviceGroup, ...] = ()
        self._version = 0
        self._changed: asyncio.Condition | None = None
        self._wake: asyncio.Event | None = None
        self._wake_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._problems = ProblemLog()
        # What detect() last found, and since when it has been failing.
        self._good: tuple[DeviceGroup, ...] = ()
        self._failing_since: float | None = None
        self._failures = 0
        self._reported_unhealthy = False
        # A sync watch() runs in its own thread, which outlives a stopped loop.
        self._watch_thread: concurrent.futures.Future[Any] | None = None

    @property
    def state(self) -> tuple[DeviceGroup, ...]:
        return self._state

    @property
    def version(self) -> int:
        return self._version

    def wake(self) -> None:
        """Request a detection now; safe from any thread, cheap when repeated."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._wake_pending:
            return
        self._wake_pending = True
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._on_wake()
            return
        with contextlib.suppress(RuntimeError):  # closed in the meantime
            loop.call_soon_threadsafe(self._on_wake)

    def _on_wake(self) -> None:
        # Cleared before setting: a wake-up after this point schedules another.
        self._wake_pending = False
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

    async def _publish(self, groups: tuple[DeviceGroup, ...]) -> None:
        assert self._changed is not None
        if self._version and groups == self._state:
            return
        async with self._changed:
            self._state = groups
            self._version += 1
            self._changed.notify_all()

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
        # Read again: detect() may have set the period for the next scan itself.
        return max(0.01, tunable(plugin, "fingerprint_period"))

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
            try:
                delay = await self._detect_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug here must not stop detection for good
                log.error("detection loop failed: %s", describe(exc), exc_info=exc)
                delay = BACKOFF_START
            woken = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), delay)
                woken = True
            if woken:
                settle = tunable(self._plugin, "rescan_settle")
                if settle > 0:
                    # Let a burst of events finish: one detect() for all of them.
                    await asyncio.sleep(settle)

    async def _watch_loop(self) -> None:
        watch = self._plugin.watch
        failures = 0
        while True:
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
                failures += 1
                delay = backoff_delay(failures)
                log.error(
                    "watch() failed; restarting it in %gs: %s", delay, describe(exc), exc_info=exc
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
            threading.Thread(target=run, name="watch", daemon=True).start()
        result = await asyncio.wrap_future(running)
        if inspect.isawaitable(result):
            await result
