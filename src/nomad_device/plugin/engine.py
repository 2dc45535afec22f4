"""The detection engine behind the Fingerprint stream.

One detection loop per plugin, shared by every open stream: it calls the
author's ``detect`` on a period (or when woken), validates and diffs the result
and publishes a new full state only when it changed. Streams wait on the state
version, so a new stream gets the current state at once and a slow stream
simply skips to the latest. Failures are logged and backed off; they never end
a stream, and the last good state is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

from nomad_device.model import DeviceGroup, DeviceGroupStats

if TYPE_CHECKING:
    from nomad_device.plugin.base import DevicePlugin

__all__ = ["FingerprintEngine", "backoff_delay", "resilient", "valid_groups", "valid_stats"]

log = logging.getLogger("nomad_device.engine")

BACKOFF_START: Final = 1.0
BACKOFF_MAX: Final = 60.0

T = TypeVar("T")


def backoff_delay(failures: int, start: float = BACKOFF_START, cap: float = BACKOFF_MAX) -> float:
    """Exponential back-off: 1 s, 2 s, 4 s ... up to ``cap``."""
    return float(min(cap, start * 2 ** max(0, failures - 1)))


class _ProblemLog:
    """Logs each distinct validation problem once, not on every period."""

    def __init__(self) -> None:
        self._last: frozenset[str] = frozenset()

    def report(self, problems: list[str], what: str) -> None:
        current = frozenset(problems)
        for problem in sorted(current - self._last):
            log.error("%s not sent to Nomad: %s", what, problem)
        self._last = current


def valid_groups(groups: object, problems: _ProblemLog | None = None) -> tuple[DeviceGroup, ...]:
    """Keep the groups Nomad would accept; log the rest (never send them)."""
    found: list[str] = []
    kept: list[DeviceGroup] = []
    items = groups if isinstance(groups, list | tuple) else [groups]
    for i, group in enumerate(items):
        if not isinstance(group, DeviceGroup):
            found.append(f"item {i} is a {type(group).__name__}, not a DeviceGroup")
            continue
        issues = group.validate()
        if issues:
            found.append(f"group {group.key!r}: " + "; ".join(issues))
            continue
        kept.append(group)
    (problems or _ProblemLog()).report(found, "invalid device group")
    return tuple(kept)


def valid_stats(groups: object, problems: _ProblemLog | None = None) -> list[DeviceGroupStats]:
    found: list[str] = []
    kept: list[DeviceGroupStats] = []
    items = groups if isinstance(groups, list | tuple) else [groups]
    for i, group in enumerate(items):
        if not isinstance(group, DeviceGroupStats):
            found.append(f"item {i} is a {type(group).__name__}, not a DeviceGroupStats")
            continue
        issues = group.validate()
        if issues:
            found.append(
                f"stats group {group.vendor}/{group.type}/{group.name}: " + "; ".join(issues)
            )
            continue
        kept.append(group)
    (problems or _ProblemLog()).report(found, "invalid stats group")
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
            log.error("%s failed: %s", what, exc, exc_info=exc)
        failures += 1
        await asyncio.sleep(backoff_delay(failures))


class FingerprintEngine:
    """Shared detection loop and the current state for all Fingerprint streams."""

    def __init__(self, plugin: DevicePlugin[object]) -> None:
        self._plugin = plugin
        self._state: tuple[DeviceGroup, ...] = ()
        self._version = 0
        self._changed: asyncio.Condition | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._problems = _ProblemLog()

    @property
    def state(self) -> tuple[DeviceGroup, ...]:
        return self._state

    @property
    def version(self) -> int:
        return self._version

    def wake(self) -> None:
        """Request a detection now; safe from any thread."""
        loop, event = self._loop, self._wake
        if loop is None or event is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)

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
            self._tasks = [
                asyncio.create_task(self._detect_loop(), name="detect"),
                asyncio.create_task(self._watch_loop(), name="watch"),
            ]

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

    async def _detect_loop(self) -> None:
        from nomad_device.plugin.base import call_author

        assert self._wake is not None
        failures = 0
        while True:
            self._wake.clear()
            try:
                found = await call_author(self._plugin.detect)
                await self._publish(valid_groups(found, self._problems))
                if failures:
                    log.info("detect() recovered", extra={"failures": failures})
                failures = 0
                delay = max(0.01, float(self._plugin.fingerprint_period))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.error(
                    "detect() failed; keeping the last known devices: %s",
                    exc,
                    exc_info=exc,
                    extra={"failures": failures},
                )
                if self._version == 0:
                    # Nomad waits for a first message before registering the node.
                    await self._publish(())
                delay = min(
                    backoff_delay(failures), max(1.0, float(self._plugin.fingerprint_period))
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def _watch_loop(self) -> None:
        failures = 0
        while True:
            try:
                await self._plugin.watch()
                return  # a watcher that returns has nothing more to watch
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.error("watch() failed; restarting it: %s", exc, exc_info=exc)
                await asyncio.sleep(backoff_delay(failures))
