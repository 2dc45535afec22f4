"""Releases: which allocation holds each of a plugin's devices, and when none does any more.

Nomad's device protocol has Reserve and nothing after it. The agent the
plugin runs beside knows when an allocation ends, and says so over its HTTP
API (:mod:`.nomadapi`); with a ``nomad { ... }`` block in its config, a plugin
follows it:

- the node is the agent's own (``/v1/agent/self``: ``stats.client.node_id``);
- its allocations come from ``/v1/node/<id>/allocations`` at start, after
  every gap in the event stream and once a minute, and as they change from
  ``/v1/event/stream?topic=Allocation`` (every namespace; the stream cannot
  be filtered by node, so every allocation change the token may read passes
  by and is dropped unless it is this node's);
- a device is *held* while an allocation on the node that holds it has not
  reached a terminal client status (``complete``, ``failed``, ``lost``), and
  *released* when its last holder has: the author's ``released(device_ids)``
  is called then, once per device and holder, with the devices one
  allocation gave back together;
- while ``released()`` runs (and after it failed, until a retry succeeds)
  the device is reported unhealthy, ``being cleaned after <allocation>``, so
  Nomad places nothing on it; a Reserve that names it waits for the end of
  the cleaning (``release_wait``) and is refused if it failed;
- which releases were handled is kept in ``<state_dir>/released.json``: a
  restarted plugin rebuilds who holds what from the API and calls
  ``released()`` for what ended while it was away, and not again for what
  it had handled. A holder the API no longer lists is asked for by ID
  (``/v1/allocation/<id>``): gone (404) means released. Without the file
  (first start, or a directory that may not be trusted) the last holder of
  each device that the list still shows as ended counts as not handled:
  cleaning twice is safer than not at all.

The HTTP work runs in a thread of its own (``nomad-release``,
:mod:`.follower`); everything it learns is applied on the plugin's loop, so
the state (:mod:`.ledger`, its records in :mod:`.releasestate`) has one
writer. This module is the tracker that ties them together and what the
engine, Reserve and Stats see of it. Nothing
here blocks Fingerprint, Reserve or Stats: when the API cannot be reached or
the token is refused, the plugin serves its devices as before, says why once
and retries with back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from nomad_device.errors import FailedPrecondition
from nomad_device.model import (
    DeviceGroup,
    DeviceGroupStats,
    DeviceStats,
    StatObject,
    StatValue,
)
from nomad_device.plugin.backoff import Backoff
from nomad_device.plugin.calls import AUTHOR_POOL, describe
from nomad_device.plugin.follower import Follower
from nomad_device.plugin.ledger import DeviceKey, Group, Ledger, Release
from nomad_device.plugin.nomadapi import AgentSettings, NomadConfig, agent_settings
from nomad_device.plugin.releasestate import Saver, StateFile
from nomad_device.plugin.runtime import runtime_of

if TYPE_CHECKING:
    from nomad_device.plugin.base import DevicePlugin
    from nomad_device.plugin.engine import FingerprintEngine

__all__ = [
    "HELD_BY",
    "RELEASE_POOL",
    "Tracker",
    "follow",
    "settings_for",
]

log = logging.getLogger("nomad_device.release")

#: The stat each held instance carries: the allocation's ID.
HELD_BY: Final = "held_by"
#: The plugin's worker pool ``released()`` runs on (``worker_pools`` sizes it).
RELEASE_POOL: Final = "release"
#: A release whose ``released()`` is quicker than this never shows as unhealthy.
CLEANING_SETTLE: Final = 0.05
#: Longest failure reason kept (it is a health description).
MAX_REASON: Final = 200

# --------------------------------------------------------------------------- the tracker


class Tracker:
    """Release tracking for one plugin: the ledger, the follower thread, the author's
    ``released()`` calls, and what Fingerprint, Reserve and Stats see of it."""

    def __init__(
        self,
        plugin: DevicePlugin[Any],
        engine: FingerprintEngine | None,
        settings: AgentSettings,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.plugin = plugin
        self.engine = engine
        self.settings = settings
        self.loop = loop
        self.ledger = Ledger()
        self._file: StateFile | None = None
        self._saver = Saver(None)
        self._saved = -1
        self._follower = Follower(self)
        self._changed = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._backoffs: dict[str, Backoff] = {}
        self._said: dict[str, str] = {}
        self._refresh_at: float | None = None
        self._stopped = False

    # -- life ----------------------------------------------------------------------------

    def start(self) -> None:
        if self.engine is not None:
            self.engine.overlay = self.overlay
        self._follower.start()

    def stop(self) -> None:
        """End the thread, the pending retries and the running calls' waits; flush the state."""
        if self._stopped:
            return
        self._stopped = True
        self._follower.stop()
        for timer in self._timers:
            timer.cancel()
        for task in self._tasks:
            task.cancel()
        if self.engine is not None and self.engine.overlay == self.overlay:
            self.engine.overlay = None
        self._saver.stop(timeout=0.1)

    def load_state(self) -> None:
        """In the follower thread, first: the records of the last run, if they may be trusted."""
        file = StateFile(self.settings.state_dir)
        if not file.prepare():
            log.warning(
                "release tracking: %s; releases are not remembered across restarts (the last"
                " holder of each device counts as not handled at start)",
                file.problem,
            )
            return
        try:
            records = file.load()
        except (OSError, ValueError) as exc:
            log.warning(
                "release tracking: cannot read %s (%s); the last holder of each device counts"
                " as not handled",
                file.path,
                exc,
            )
            records = {}
        self.ledger.load(records)
        self._file = file
        self._saver = Saver(file)
        self._saved = self.ledger.version

    def post(self, change: Callable[[], list[Release]]) -> None:
        """From the follower thread: apply ``change`` to the ledger on the loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: the plugin is gone
            self.loop.call_soon_threadsafe(self._apply, change)

    def _apply(self, change: Callable[[], list[Release]]) -> None:
        if self._stopped:
            return
        try:
            due = change()
        except Exception as exc:
            log.error("release tracking: %s", describe(exc), exc_info=exc)
            return
        self._changed_now(due)

    def _changed_now(self, due: list[Release]) -> None:
        if self.ledger.version != self._saved:
            self._saved = self.ledger.version
            self._saver.request(self.ledger.records())
        for release in due:
            task = self.loop.create_task(self._release(release), name="released")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._notify()
        self._refresh(0.0)

    def _notify(self) -> None:
        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        task = self.loop.create_task(notify())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the author's released() ---------------------------------------------------------

    async def _release(self, release: Release) -> None:
        plugin = self.plugin
        self._refresh(CLEANING_SETTLE)
        self._notify()
        fields = {"alloc_id": release.alloc, "ids": ",".join(release.ids)}
        if release.name:
            fields["alloc_name"] = release.name
        if release.alloc in self._backoffs:  # a retry: said once, when they were released
            log.debug("cleaning released devices again", extra=fields)
        else:
            log.info("devices released", extra=fields)
        failed: dict[str, str] = {}
        if not getattr(type(plugin).released, "nothing_to_do", False):
            try:
                result = await runtime_of(plugin).calls.call(
                    AUTHOR_POOL + RELEASE_POOL, plugin.released, release.ids, what="released()"
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                why = _reason(describe(exc)) or type(exc).__name__
                failed = dict.fromkeys(release.ids, why)
            else:
                if isinstance(result, Mapping):
                    failed = {
                        i: _reason(str(why)) or "failed"
                        for i, why in result.items()
                        if i in release.ids
                    }
        if self._stopped:
            return
        if failed:
            retry = Release(
                release.alloc, release.name, tuple(k for k in release.devices if k[3] in failed)
            )
            backoff = self._backoffs.setdefault(release.alloc, Backoff())
            delay = backoff.failed()
            text = "; ".join(f"{i}: {why}" for i, why in sorted(failed.items()))
            # Once per allocation and reason at warning level; the retries' repeats at debug.
            level = logging.DEBUG if self._said.get(release.alloc) == text else logging.WARNING
            self._said[release.alloc] = text
            log.log(
                level,
                "cleaning after a release failed; the devices stay unhealthy, retrying in %gs: %s",
                delay,
                text,
                extra={**fields, "ids": ",".join(sorted(failed))},
            )
            self._later(delay, lambda: self._retry(retry))
        else:
            self._backoffs.pop(release.alloc, None)
            self._said.pop(release.alloc, None)
        self._changed_now(self.ledger.finished(release, failed))

    def _retry(self, release: Release) -> None:
        if not self._stopped:
            self._changed_now(self.ledger.retry(release))

    def _later(self, delay: float, fn: Callable[[], None]) -> None:
        """A timer of the tracker's, cancelled when it stops."""

        def fire() -> None:
            self._timers.discard(handle)
            fn()

        handle = self.loop.call_later(delay, fire)
        self._timers.add(handle)

    # -- Fingerprint -------------------------------------------------------------------

    def overlay(self, groups: tuple[DeviceGroup, ...]) -> tuple[DeviceGroup, ...]:
        """The engine's hook: learn the plugin's groups; show cleaning devices unhealthy."""
        try:
            keys = [(g.vendor, g.type, g.name) for g in groups]
            version = self.ledger.version
            due = self.ledger.observe_groups(keys)
            if due or self.ledger.version != version:
                self.loop.call_soon(self._changed_now, due)
            cleaning = self.ledger.cleaning()
            if not cleaning:
                return groups
            return tuple(_with_cleaning(g, cleaning) for g in groups)
        except Exception as exc:  # never in the way of the fingerprint
            log.error("release tracking: overlay failed: %s", describe(exc), exc_info=exc)
            return groups

    def _refresh(self, delay: float) -> None:
        """Have the engine publish again (cleaning started or ended) after ``delay``."""
        engine = self.engine
        if engine is None:
            return
        when = self.loop.time() + delay
        if self._refresh_at is not None and self._refresh_at <= when:
            return
        self._refresh_at = when

        def fire() -> None:
            if self._refresh_at == when:
                self._refresh_at = None
            if not self._stopped:
                engine.republish()

        self._later(delay, fire)

    # -- Reserve ----------------------------------------------------------------------------

    async def gate(self, ids: Sequence[str]) -> None:
        """Wait for the cleaning of ``ids`` to end; refuse what failed or takes too long."""
        wait = _seconds(getattr(self.plugin, "release_wait", 60.0), 60.0)
        deadline = self.loop.time() + wait
        async with self._changed:
            while True:
                state = self.ledger.cleaning_state(ids)
                failed = {i: c for i, c in state.items() if c.failed and not c.running}
                if failed:
                    raise FailedPrecondition(
                        "; ".join(f"device {i}: {c.reason}" for i, c in sorted(failed.items()))
                    )
                if not state:
                    return
                left = deadline - self.loop.time()
                if left <= 0:
                    raise FailedPrecondition(
                        "; ".join(
                            f"device {i} is {c.reason} (waited {wait:g}s)"
                            for i, c in sorted(state.items())
                        )
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)

    # -- Stats ----------------------------------------------------------------------------

    def annotate(self, groups: object) -> object:
        """The author's stats with ``held_by`` on every held instance."""
        held = self.ledger.held()
        if not held or not isinstance(groups, list | tuple):
            return groups
        by_group: dict[Group, dict[str, str]] = {}
        for key, alloc in held.items():
            by_group.setdefault(key[:3], {})[key[3]] = alloc
        out: list[object] = []
        for group in groups:
            if not isinstance(group, DeviceGroupStats):
                out.append(group)
                continue
            mine = by_group.pop((group.vendor, group.type, group.name), None)
            if not mine or not isinstance(group.instance_stats, Mapping):
                out.append(group)
                continue
            stats: dict[str, object] = dict(group.instance_stats)
            for device_id, alloc in mine.items():
                stats[device_id] = _with_holder(stats.get(device_id), alloc)
            out.append(DeviceGroupStats(group.vendor, group.type, group.name, stats))  # type: ignore[arg-type]
        for (vendor, type_, name), mine in sorted(by_group.items()):
            added = {i: _new_holder_stats(alloc) for i, alloc in mine.items()}
            out.append(DeviceGroupStats(vendor, type_, name, added))
        return out


def _reason(text: str) -> str:
    """A failure as a health description: one line, not too long."""
    return " ".join(text.split())[:MAX_REASON]


def _seconds(value: object, fallback: float) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return fallback
    return number if number >= 0 else fallback


def _with_cleaning(group: DeviceGroup, cleaning: Mapping[DeviceKey, str]) -> DeviceGroup:
    head = (group.vendor, group.type, group.name)
    if not any(key[:3] == head for key in cleaning):
        return group
    devices = tuple(
        dataclasses.replace(d, healthy=False, health_description=reason)
        if (reason := cleaning.get((*head, d.id))) is not None
        else d
        for d in group.devices
    )
    return dataclasses.replace(group, devices=devices)


def _held_value(alloc: str) -> StatValue:
    return StatValue(string_value=alloc, desc="the allocation holding the device")


def _new_holder_stats(alloc: str) -> DeviceStats:
    return DeviceStats(stats=StatObject({HELD_BY: _held_value(alloc)}))


def _with_holder(stats: object, alloc: str) -> object:
    if stats is None:
        return _new_holder_stats(alloc)
    value = _held_value(alloc)
    if not isinstance(stats, DeviceStats):
        return stats  # the engine reports what is wrong with it
    tree = stats.stats
    if tree is None:
        tree = StatObject()
    elif not isinstance(tree, StatObject) or not isinstance(tree.attributes, Mapping):
        return stats
    return DeviceStats(
        summary=stats.summary,
        stats=StatObject({**tree.attributes, HELD_BY: value}, tree.nested),
        timestamp=stats.timestamp,
    )


# ------------------------------------------------------------------ the servicer's hooks


def settings_for(plugin: DevicePlugin[Any], nomad: object) -> AgentSettings | None:
    """The agent to follow for a ``nomad_config()`` (None: none); refuses one that cannot work."""
    if nomad is None:
        return None
    if not isinstance(nomad, NomadConfig):
        raise TypeError(f"nomad_config() returned a {type(nomad).__name__}, not a NomadConfig")
    return agent_settings(nomad, plugin.name or type(plugin).__name__)


def follow(
    plugin: DevicePlugin[Any], engine: FingerprintEngine | None, settings: AgentSettings | None
) -> None:
    """On the plugin's loop, after a config was applied: start, keep or stop following."""
    runtime = runtime_of(plugin)
    current = runtime.tracker
    if current is not None and current.settings == settings:
        return
    if current is not None:
        current.stop()
        runtime.tracker = None
    if settings is None:
        if engine is not None:
            engine.republish()
        return
    tracker = runtime.tracker = Tracker(plugin, engine, settings, asyncio.get_running_loop())

    async def closing() -> None:  # on the loop: the tracker's timers and tasks live there
        tracker.stop()
        if runtime.tracker is tracker:
            runtime.tracker = None

    runtime.lifetime.on_close(closing)
    tracker.start()
    if engine is not None:
        engine.republish()
