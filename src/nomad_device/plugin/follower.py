"""The thread that follows the local agent: its node, that node's allocations, their changes.

It asks ``/v1/agent/self`` for the node, reads the node's allocation list
(at start, after every gap in the stream, and each minute: the stream's
namespaces are fixed when it starts and its buffer is finite), asks for past
holders the list leaves out by ID (a 404 means gone), and reads the event
stream from the list's index. Everything it learns is handed to the
tracker's loop (``Tracker.post``), where the ledger is changed; the thread
itself only reads the ledger. A problem is logged once at warning level
(the repeats at debug), and the thread tries again with back-off.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

from nomad_device.plugin.backoff import Backoff
from nomad_device.plugin.calls import describe
from nomad_device.plugin.ledger import holding_of
from nomad_device.plugin.nomadapi import (
    AgentClient,
    ApiError,
    ApiNotFound,
    ApiRefused,
    read_token,
)

if TYPE_CHECKING:
    from nomad_device.plugin.release import Tracker

__all__ = ["RESYNC_SECONDS", "STREAM_READ_TIMEOUT", "Follower"]

log = logging.getLogger("nomad_device.release")

#: How often the allocation list is read again while the stream runs.
RESYNC_SECONDS: Final = 60.0
#: A stream that sends nothing (Nomad's heartbeat comes every 30 s) this long is dead.
STREAM_READ_TIMEOUT: Final = 75.0


class _Stopped(Exception):
    pass


class Follower:
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
