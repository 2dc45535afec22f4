"""A stand-in for a Nomad client agent's HTTP API, to test a plugin that follows releases.

It serves what :mod:`nomad_device.plugin.release` reads, shaped as Nomad's
HTTP API writes it (from ``api/allocations.go``, ``api/event_stream.go``,
``nomad/structs`` and ``command/agent/event_endpoint.go``, not recorded
from a cluster):

- ``GET /v1/agent/self``: ``stats.client.node_id``;
- ``GET /v1/node/<id>/allocations``: the node's allocations, with
  ``X-Nomad-Index``;
- ``GET /v1/allocation/<id>``: one allocation, 404 once garbage-collected;
- ``GET /v1/event/stream?topic=Allocation&index=N``: newline-separated JSON,
  the buffered events from index ``N`` on, then each change as it happens,
  ``{}`` as a heartbeat; the body runs until the connection closes (the
  agent hijacks the connection and writes no length).

A test drives it: :meth:`place` an allocation on a node's devices,
:meth:`set_status` it (``running``, ``complete``, ``failed``, ``lost``),
:meth:`gc` it; ``event=False`` makes a change the stream never tells (as for a
plugin that was down), :meth:`drop_streams` cuts every open stream,
:meth:`stop` and :meth:`start` again on the same address are an agent
restart. ``token`` makes it answer 403 to any other ``X-Nomad-Token``;
``hidden`` namespaces are those the token may not read (left out of lists
and streams, 403 by ID). Every request is kept in :attr:`requests`.

Example::

    agent = FakeNomadAgent()
    address = agent.start()
    agent.place("a1", [("acme", "gpu", "x1", ["GPU-0"])])
    agent.set_status("a1", "running")
    ...
    agent.set_status("a1", "complete")   # the plugin's released(["GPU-0"]) follows
    agent.stop()
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import ssl
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["FakeNomadAgent", "Request"]

#: (vendor, type, name, device IDs): one ``AllocatedDeviceResource``.
Devices = Sequence[tuple[str, str, str, Sequence[str]]]


@dataclass(frozen=True)
class Request:
    """One request the fake answered."""

    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


@dataclass
class FakeNomadAgent:
    """Nomad's client agent API for release tracking; see the module docstring."""

    node_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    token: str = ""
    #: Seconds between heartbeats on an open event stream (Nomad: 30).
    heartbeat: float = 0.5
    #: Events kept for a stream that asks for an older index (Nomad: 100 by default).
    buffer: int = 100
    hidden: set[str] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Condition()
        self._index = 100
        self._allocs: dict[str, dict[str, Any]] = {}
        self._events: list[tuple[int, bytes]] = []
        self._streams: set[socket.socket] = set()
        self._generation = 0
        self._server: socketserver.BaseServer | None = None
        self._thread: threading.Thread | None = None
        self._address: tuple[str, int] | str | None = None
        self._tls: ssl.SSLContext | None = None

    # -- the cluster ------------------------------------------------------------------------

    def place(
        self,
        alloc_id: str,
        devices: Devices,
        *,
        node_id: str | None = None,
        status: str = "pending",
        name: str = "",
        namespace: str = "default",
        task: str = "main",
        event: bool = True,
    ) -> dict[str, Any]:
        """A new allocation holding ``devices`` (on this agent's node unless ``node_id``)."""
        with self._lock:
            self._index += 1
            job = (name or "job.group[0]").partition(".")[0]
            alloc = {
                "ID": alloc_id,
                "Namespace": namespace,
                "EvalID": str(uuid.uuid4()),
                "Name": name or f"{job}.group[0]",
                "NodeID": node_id or self.node_id,
                "NodeName": "node",
                "JobID": job,
                "TaskGroup": "group",
                "DesiredStatus": "run",
                "DesiredDescription": "",
                "ClientStatus": status,
                "ClientDescription": "",
                "AllocatedResources": {
                    "Tasks": {
                        task: {
                            "Cpu": {"CpuShares": 100},
                            "Memory": {"MemoryMB": 300},
                            "Networks": None,
                            "Devices": [
                                {"Vendor": v, "Type": t, "Name": n, "DeviceIDs": list(ids)}
                                for v, t, n, ids in devices
                            ],
                        }
                    },
                    "Shared": {"DiskMB": 300},
                },
                "CreateIndex": self._index,
                "ModifyIndex": self._index,
                "CreateTime": time.time_ns(),
                "ModifyTime": time.time_ns(),
            }
            self._allocs[alloc_id] = alloc
            self._changed(alloc, "PlanResult", event)
            return dict(alloc)

    def set_status(self, alloc_id: str, status: str, *, event: bool = True) -> None:
        """The client reports a new status (``complete``, ``failed`` and ``lost`` are terminal)."""
        with self._lock:
            self._index += 1
            alloc = self._allocs[alloc_id]
            alloc["ClientStatus"] = status
            if status in ("complete", "failed", "lost"):
                alloc["DesiredStatus"] = "stop" if status != "failed" else alloc["DesiredStatus"]
            alloc["ModifyIndex"] = self._index
            alloc["ModifyTime"] = time.time_ns()
            self._changed(alloc, "AllocationUpdated", event)

    def gc(self, alloc_id: str) -> None:
        """The allocation is garbage-collected: gone from lists, 404 by ID, no event."""
        with self._lock:
            self._index += 1
            del self._allocs[alloc_id]

    def allocation(self, alloc_id: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._allocs[alloc_id])

    def _changed(self, alloc: dict[str, Any], kind: str, event: bool) -> None:
        if not event or alloc["Namespace"] in self.hidden:
            return
        payload = {
            "Index": self._index,
            "Events": [
                {
                    "Topic": "Allocation",
                    "Type": kind,
                    "Key": alloc["ID"],
                    "Namespace": alloc["Namespace"],
                    "FilterKeys": [alloc["JobID"], ""],
                    "Index": self._index,
                    "Payload": {"Allocation": alloc},
                }
            ],
        }
        self._events.append((self._index, json.dumps(payload).encode() + b"\n"))
        del self._events[: -self.buffer]
        self._lock.notify_all()

    # -- the server -------------------------------------------------------------------------

    @property
    def address(self) -> str:
        if isinstance(self._address, str):
            return f"unix://{self._address}"
        if self._address is None:
            raise RuntimeError("the fake agent was never started")
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{self._address[0]}:{self._address[1]}"

    def start(self, unix_socket: Path | None = None, tls: ssl.SSLContext | None = None) -> str:
        """Serve (on loopback TCP, or ``unix_socket``; TLS with ``tls``); the address.

        Started again after :meth:`stop`, it listens where it did before.
        """
        handler = self._handler()
        if unix_socket is not None or isinstance(self._address, str):
            path = str(unix_socket) if unix_socket is not None else str(self._address)
            Path(path).unlink(missing_ok=True)

            class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
                daemon_threads = True

            server: socketserver.BaseServer = UnixServer(path, handler)
            self._address = path
        else:
            port = self._address[1] if isinstance(self._address, tuple) else 0

            class TcpServer(ThreadingHTTPServer):
                daemon_threads = True
                allow_reuse_address = True

            tcp = TcpServer(("127.0.0.1", port), handler)
            if tls is not None:
                self._tls = tls
            if self._tls is not None:
                tcp.socket = self._tls.wrap_socket(tcp.socket, server_side=True)
            self._address = ("127.0.0.1", tcp.server_address[1])
            server = tcp
        with self._lock:
            self._generation += 1
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self.address

    def stop(self) -> None:
        """Stop answering and cut every open stream (an agent going down)."""
        server = self._server
        if server is None:
            return
        self._server = None
        server.shutdown()
        server.server_close()
        self.drop_streams()
        if self._thread is not None:
            self._thread.join(10)

    def drop_streams(self) -> None:
        """Cut every open event stream (the client must read the list to catch up)."""
        with self._lock:
            self._generation += 1
            streams, self._streams = list(self._streams), set()
            self._lock.notify_all()
        for sock in streams:
            # The plain socket's shutdown, for TLS too: the handler's thread may be writing.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def stream_count(self) -> int:
        """Event streams open now."""
        with self._lock:
            return len(self._streams)

    def asked(self, path_prefix: str = "") -> list[str]:
        """The paths asked for, in order (those starting with ``path_prefix``)."""
        return [r.path for r in list(self.requests) if r.path.startswith(path_prefix)]

    # -- answers ----------------------------------------------------------------------------

    def _visible(self, alloc: dict[str, Any]) -> bool:
        return alloc["Namespace"] not in self.hidden

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                path = unquote(parts.path)
                fake.requests.append(Request(path, query, dict(self.headers)))
                if fake.token and self.headers.get("X-Nomad-Token") != fake.token:
                    self.reply(403, b"Permission denied")
                elif path == "/v1/agent/self":
                    self.reply_json(fake._self())
                elif path.startswith("/v1/node/") and path.endswith("/allocations"):
                    node = path.removeprefix("/v1/node/").removesuffix("/allocations")
                    with fake._lock:
                        allocs = [
                            dict(a)
                            for a in fake._allocs.values()
                            if a["NodeID"] == node and fake._visible(a)
                        ]
                        index = max([a["ModifyIndex"] for a in allocs] or [fake._index])
                    self.reply_json(allocs, index)
                elif path.startswith("/v1/allocation/"):
                    with fake._lock:
                        alloc = fake._allocs.get(path.removeprefix("/v1/allocation/"))
                        alloc = None if alloc is None else dict(alloc)
                    if alloc is None:
                        self.reply(404, b"alloc not found")
                    elif not fake._visible(alloc):
                        self.reply(403, b"Permission denied")
                    else:
                        self.reply_json(alloc, alloc["ModifyIndex"])
                elif path == "/v1/event/stream":
                    self.stream(query)
                else:
                    self.reply(404, b"Invalid URL path")

            def reply_json(self, value: object, index: int | None = None) -> None:
                with fake._lock:
                    index = fake._index if index is None else index
                self.reply(200, json.dumps(value).encode(), index)

            def reply(self, code: int, data: bytes, index: int | None = None) -> None:
                self.send_response(code)
                ctype = "application/json" if code == 200 else "text/plain; charset=utf-8"
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                if index is not None:
                    self.send_header("X-Nomad-Index", str(index))
                self.end_headers()
                self.wfile.write(data)

            def stream(self, query: dict[str, list[str]]) -> None:
                topics = query.get("topic", [])
                if topics and not any(t.split(":")[0] in ("Allocation", "*") for t in topics):
                    self.reply(400, b"this fake streams allocations only")
                    return
                want = int((query.get("index") or ["0"])[0] or 0)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

                def news(generation: int, sent: int) -> bool:
                    return fake._generation != generation or bool(
                        fake._events and fake._events[-1][0] > sent
                    )

                with fake._lock:
                    generation = fake._generation
                    fake._streams.add(self.connection)
                    pending = [line for i, line in fake._events if want == 0 or i >= want]
                    sent = fake._events[-1][0] if fake._events else 0
                try:
                    self.wfile.write(b"{}\n")
                    self.wfile.write(b"".join(pending))
                    self.wfile.flush()
                    while True:
                        with fake._lock:
                            fake._lock.wait_for(partial(news, generation, sent), fake.heartbeat)
                            if fake._generation != generation:
                                return
                            fresh = [line for i, line in fake._events if i > sent]
                            if fake._events:
                                sent = fake._events[-1][0]
                        self.wfile.write(b"".join(fresh) if fresh else b"{}\n")
                        self.wfile.flush()
                except OSError:
                    return
                finally:
                    with fake._lock:
                        fake._streams.discard(self.connection)

        return Handler

    def _self(self) -> dict[str, Any]:
        with self._lock:
            count = sum(1 for a in self._allocs.values() if a["NodeID"] == self.node_id)
        return {
            "config": {"Region": "global", "Datacenter": "dc1", "Client": {"Enabled": True}},
            "member": {"Name": "fake-agent", "Status": "alive"},
            "stats": {
                "client": {
                    "node_id": self.node_id,
                    "known_servers": "127.0.0.1:4647",
                    "num_allocations": str(count),
                    "last_heartbeat": "1s",
                    "heartbeat_ttl": "15s",
                },
                "nomad": {"server": "false", "leader": "false"},
            },
        }
