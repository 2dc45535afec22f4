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

The HTTP work runs in a thread of its own (``nomad-release``); everything it
learns is applied on the plugin's loop, so the state has one writer. Nothing
here blocks Fingerprint, Reserve or Stats: when the API cannot be reached or
the token is refused, the plugin serves its devices as before, says why once
and retries with back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from nomad_device.errors import FailedPrecondition
from nomad_device.model import (
    DeviceGroup,
    DeviceGroupStats,
    DeviceStats,
    StatObject,
    StatValue,
)
from nomad_device.plugin.backoff import Backoff
from nomad_device.plugin.calls import AUTHOR_POOL, calls_of, describe
from nomad_device.plugin.ledger import DeviceKey, Group, Ledger, Record, Release, holding_of
from nomad_device.plugin.nomadapi import (
    AgentClient,
    AgentSettings,
    ApiError,
    ApiNotFound,
    ApiRefused,
    NomadConfig,
    agent_settings,
    read_token,
)

if TYPE_CHECKING:
    from nomad_device.plugin.base import DevicePlugin
    from nomad_device.plugin.engine import FingerprintEngine

__all__ = [
    "HELD_BY",
    "RELEASE_POOL",
    "StateFile",
    "Tracker",
    "follow",
    "settings_for",
    "tracker_of",
]

log = logging.getLogger("nomad_device.release")

#: The stat each held instance carries: the allocation's ID.
HELD_BY: Final = "held_by"
#: The plugin's worker pool ``released()`` runs on (``worker_pools`` sizes it).
RELEASE_POOL: Final = "release"
#: How often the allocation list is read again while the stream runs: the
#: stream's namespaces are fixed when it starts, and its buffer is finite.
RESYNC_SECONDS: Final = 60.0
#: A stream that sends nothing (Nomad's heartbeat comes every 30 s) this long is dead.
STREAM_READ_TIMEOUT: Final = 75.0
#: A release whose ``released()`` is quicker than this never shows as unhealthy.
CLEANING_SETTLE: Final = 0.05
#: Longest failure reason kept (it is a health description).
MAX_REASON: Final = 200
STATE_FILE: Final = "released.json"

# ------------------------------------------------------------------------- the state file


class StateFile:
    """``<state_dir>/released.json``: the records, written whole and renamed into place.

    The directory is made (0700) if missing and used only if it is a real
    directory owned by root or the plugin's user that others may not write to:
    whoever can write the file can stop a device being cleaned.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, STATE_FILE)
        self.problem = ""

    def prepare(self) -> bool:
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            info = os.lstat(self.directory)
        except OSError as exc:
            self.problem = f"cannot use {self.directory}: {(exc.strerror or str(exc)).lower()}"
            return False
        if not stat.S_ISDIR(info.st_mode):
            self.problem = f"{self.directory} is not a directory"
        elif info.st_uid not in (0, os.geteuid()):
            self.problem = f"{self.directory} is owned by uid {info.st_uid}"
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            self.problem = f"{self.directory} is writable by group or others"
        else:
            return True
        return False

    def load(self) -> dict[DeviceKey, Record]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read(64 * 1024 * 1024))
        out: dict[DeviceKey, Record] = {}
        for item in data.get("devices", []) if isinstance(data, dict) else []:
            parts = [item.get(k) for k in ("vendor", "type", "name", "id", "alloc")]
            vendor, type_, name, device_id, alloc = parts
            created = item.get("created", 0)
            if (
                isinstance(vendor, str)
                and isinstance(type_, str)
                and isinstance(name, str)
                and isinstance(device_id, str)
                and isinstance(alloc, str)
                and isinstance(item.get("done"), bool)
                and isinstance(created, int)
            ):
                out[(vendor, type_, name, device_id)] = Record(alloc, item["done"], created)
        return out

    def save(self, records: Mapping[DeviceKey, Record]) -> None:
        devices = [
            {"vendor": k[0], "type": k[1], "name": k[2], "id": k[3], "alloc": r.alloc,
             "created": r.created, "done": r.done}
            for k, r in sorted(records.items())
        ]  # fmt: skip
        data = json.dumps({"version": 1, "devices": devices}, indent=1).encode()
        temp = f"{self.path}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, self.path)
        dirfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)


class _Saver:
    """Writes the latest records in a thread of its own; a burst of changes is one write."""

    def __init__(self, file: StateFile | None) -> None:
        self._file = file
        self._cond = threading.Condition()
        self._pending: dict[DeviceKey, Record] | None = None
        self._writing = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._failed = ""

    def request(self, records: dict[DeviceKey, Record]) -> None:
        if self._file is None:
            return
        with self._cond:
            self._pending = records
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="nomad-release-state", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        assert self._file is not None
        while True:
            with self._cond:
                while self._pending is None and not self._stopped:
                    self._cond.wait()
                if self._pending is None:
                    return
                records, self._pending = self._pending, None
                self._writing = True
            try:
                self._file.save(records)
                self._failed = ""
            except (OSError, ValueError) as exc:
                why = f"cannot write {self._file.path}: {exc}"
                if why != self._failed:
                    log.warning("%s; what is handled now may be handled again after a restart", why)
                self._failed = why
            finally:
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()

    def stop(self, timeout: float) -> None:
        """Write what is pending (within ``timeout``), then end the thread."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            while (self._pending is not None or self._writing) and self._thread is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)


# -------------------------------------------------------------------------- the follower


class _Stopped(Exception):
    pass


class _Follower:
    """The thread that talks to the agent; what it learns goes to the tracker's loop."""

    def __init__(self, tracker: Tracker) -> None:
        self._tracker = tracker
        self._settings = tracker.settings
        self._stop = threading.Event()
        self._clients: list[AgentClient] = []
        self._lock = threading.Lock()
        self._said = ""
        self._following = ""
        self._unknown: set[str] = set()
        self.thread = threading.Thread(target=self._run, name="nomad-release", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            client.abort()

    def _client(self, token: str) -> AgentClient:
        client = AgentClient(self._settings, token)
        with self._lock:
            if self._stop.is_set():
                raise _Stopped
            self._clients.append(client)
        return client

    def _run(self) -> None:
        self._tracker.load_state()
        backoff = Backoff(reset_after=RESYNC_SECONDS)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._session()
            except _Stopped:
                return
            except ApiError as exc:
                problem = str(exc)
            except Exception as exc:  # a bug here must not end release tracking for good
                problem = f"{type(exc).__name__}: {describe(exc)}"
                log.error("release tracking failed: %s", problem, exc_info=exc)
            finally:
                with self._lock:
                    self._clients.clear()
            if self._stop.is_set():
                return
            delay = backoff.failed(ran_for=time.monotonic() - started)
            self._say(problem, delay)
            self._stop.wait(delay)

    def _say(self, problem: str, delay: float) -> None:
        """Once per distinct problem at warning level; the repeats at debug."""
        self._following = ""
        if problem != self._said:
            log.warning(
                "release tracking: %s; devices are served as before, retrying in %gs",
                problem,
                delay,
                extra={"address": self._settings.address},
            )
            self._said = problem
        else:
            log.debug("release tracking: %s; retrying in %gs", problem, delay)

    def _session(self) -> None:
        token = read_token(self._settings)
        client = self._client(token)
        lister = self._client(token)
        me, _ = client.get_json("/v1/agent/self")
        node = _node_id(me)
        if node is None:
            raise ApiError(
                f"the agent at {self._settings.address} is not a Nomad client"
                " (/v1/agent/self has no stats.client.node_id)"
            )
        index = self._catch_up(lister, node)
        if self._following != node:
            log.info(
                "release tracking: following the allocations of node %s",
                node,
                extra={"address": self._settings.address, "node_id": node},
            )
            self._following, self._said = node, ""
        resync = time.monotonic() + RESYNC_SECONDS
        query = {"topic": "Allocation", "namespace": "*", "index": str(index)}
        for line in client.stream("/v1/event/stream", query, STREAM_READ_TIMEOUT):
            if self._stop.is_set():
                raise _Stopped
            self._events(line, node)
            if time.monotonic() >= resync:
                self._catch_up(lister, node)
                resync = time.monotonic() + RESYNC_SECONDS
        if self._stop.is_set():
            raise _Stopped
        raise ApiError("the event stream ended")

    def _catch_up(self, client: AgentClient, node: str) -> int:
        """Read the node's allocations; ask for past holders it leaves out; hand it over."""
        body, headers = client.get_json(f"/v1/node/{quote(node, safe='')}/allocations")
        if body is not None and not isinstance(body, list):
            raise ApiError("/v1/node/<id>/allocations did not answer a list")
        holdings = [h for h in map(holding_of, body or ()) if h is not None and h.node == node]
        gone: set[str] = set()
        for alloc in sorted(self._tracker.ledger.absent_holders(h.alloc for h in holdings)):
            try:
                found, _ = client.get_json(f"/v1/allocation/{quote(alloc, safe='')}")
            except ApiNotFound:
                gone.add(alloc)
                continue
            except ApiRefused as exc:
                if alloc not in self._unknown:
                    log.warning(
                        "release tracking: cannot tell whether allocation %s still holds its"
                        " devices; they count as held: %s",
                        alloc,
                        exc,
                    )
                    self._unknown.add(alloc)
                continue
            h = holding_of(found)
            if h is None or h.node != node:
                gone.add(alloc)  # on another node (this one's identity changed): not here
            else:
                holdings.append(h)
        self._tracker.post(lambda: self._tracker.ledger.sync(holdings, gone))
        if self._stop.is_set():
            raise _Stopped
        index = {k.lower(): v for k, v in headers.items()}.get("x-nomad-index", "0")
        return int(index) if index.isdigit() else 0

    def _events(self, line: bytes, node: str) -> None:
        if node.encode() not in line:
            return  # a heartbeat, or only other nodes' allocations: not worth decoding
        try:
            message = json.loads(line)
        except ValueError as exc:
            raise ApiError(f"the event stream sent something that is not JSON: {exc}") from None
        events = message.get("Events") if isinstance(message, dict) else None
        found = []
        for event in events if isinstance(events, list) else ():
            if not isinstance(event, dict) or event.get("Topic") != "Allocation":
                continue
            payload = event.get("Payload")
            h = holding_of(payload.get("Allocation") if isinstance(payload, dict) else None)
            if h is not None and h.node == node:
                found.append(h)
        if found:
            self._tracker.post(lambda: self._tracker.ledger.update(found))


def _node_id(answer: object) -> str | None:
    stats = answer.get("stats") if isinstance(answer, dict) else None
    client = stats.get("client") if isinstance(stats, dict) else None
    node = client.get("node_id") if isinstance(client, dict) else None
    return node if isinstance(node, str) and node else None


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
        self._saver = _Saver(None)
        self._saved = -1
        self._follower = _Follower(self)
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
        self._saver = _Saver(file)
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
        log.info("devices released", extra=fields)
        failed: dict[str, str] = {}
        if not getattr(type(plugin).released, "nothing_to_do", False):
            try:
                result = await calls_of(plugin).call(
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

_trackers: dict[int, Tracker] = {}


def tracker_of(plugin: object) -> Tracker | None:
    """The plugin's tracker, if it follows releases."""
    tracker = _trackers.get(id(plugin))
    return tracker if tracker is not None and tracker.plugin is plugin else None


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
    current = tracker_of(plugin)
    if current is not None and current.settings == settings:
        return
    if current is not None:
        current.stop()
        del _trackers[id(plugin)]
    if settings is None:
        if engine is not None:
            engine.republish()
        return
    from nomad_device.plugin.lifetime import lifetime_of

    tracker = Tracker(plugin, engine, settings, asyncio.get_running_loop())
    _trackers[id(plugin)] = tracker

    async def closing() -> None:  # on the loop: the tracker's timers and tasks live there
        tracker.stop()
        if _trackers.get(id(plugin)) is tracker:
            del _trackers[id(plugin)]

    lifetime_of(plugin).on_close(closing)
    tracker.start()
    if engine is not None:
        engine.republish()
