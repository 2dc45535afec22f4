"""A stand-in for Nomad's HTTP API on loopback, for ``check --nomad`` tests.

It serves ``/v1/nodes`` (stubs, or with ``resources=true`` their
``NodeResources``), ``/v1/node/<id>``, ``/v1/node/<id>/allocations`` and
``/v1/allocations`` with bodies shaped like Nomad's ``structs.NodeListStub``,
``structs.Node``, ``structs.Allocation`` and ``structs.AllocListStub`` as its
HTTP API writes them (written for these tests from the structs and the
endpoints' code, not recorded from a cluster), paged with ``per_page`` and
``next_token`` as Nomad's paginator pages them, optionally over TLS with a
required client certificate, and checks the ``X-Nomad-Token`` header. Every
request is kept so tests can see what the client sent. Certificates are made
on the spot.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import json
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    now = _dt.datetime.now(_dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("test Nomad CA"))
        .issuer_name(_name("test Nomad CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        common: str, usage: x509.ObjectIdentifier, san: list[x509.GeneralName]
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5))
            .not_valid_after(now + _dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    server, server_key = leaf(
        "server.global.nomad",
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.DNSName("localhost"),
            x509.DNSName("server.global.nomad"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ],
    )
    client, client_key = leaf("cli", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    certs = Certs(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server-key.pem",
        directory / "client.pem",
        directory / "client-key.pem",
    )
    certs.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    certs.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    certs.client_cert.write_bytes(client.public_bytes(serialization.Encoding.PEM))
    _write_key(server_key, certs.server_key)
    _write_key(client_key, certs.client_key)
    return certs


def attr(value: object, unit: str = "") -> dict[str, Any]:
    """An ``api.Attribute``: one of Float/Int/String/Bool, and Unit (always present)."""
    if isinstance(value, bool):
        return {"Bool": value, "Unit": unit}
    if isinstance(value, int):
        return {"Int": value, "Unit": unit}
    if isinstance(value, float):
        return {"Float": value, "Unit": unit}
    return {"String": value, "Unit": unit}


def device_group(
    vendor: str, type_: str, name: str, instances: list[tuple[str, bool, str]], **attrs: Any
) -> dict[str, Any]:
    """An ``api.NodeDeviceResource``."""
    return {
        "Vendor": vendor,
        "Type": type_,
        "Name": name,
        "Instances": [
            {"ID": i, "Healthy": h, "HealthDescription": d, "Locality": None}
            for i, h, d in instances
        ],
        "Attributes": {k: (v if isinstance(v, dict) else attr(v)) for k, v in attrs.items()},
    }


def node(
    node_id: str,
    name: str,
    devices: list[dict[str, Any]],
    *,
    status: str = "ready",
    eligibility: str = "eligible",
    datacenter: str = "dc1",
    pool: str = "default",
    drain: bool = False,
    computed_class: str = "",
) -> dict[str, Any]:
    """An ``api.Node`` with the fields the scheduler reads (and a few it does not)."""
    return {
        "ID": node_id,
        "Name": name,
        "Datacenter": datacenter,
        "NodePool": pool,
        "NodeClass": "",
        "ComputedClass": computed_class,
        "HTTPAddr": "127.0.0.1:4646",
        "TLSEnabled": False,
        "Attributes": {"kernel.name": "linux"},
        "NodeResources": {
            "Cpu": {"CpuShares": 4000, "TotalCpuCores": 4},
            "Memory": {"MemoryMB": 8192},
            "Disk": {"DiskMB": 100000},
            "Networks": None,
            "Devices": devices,
        },
        "Drain": drain,
        "DrainStrategy": {"Deadline": 3600000000000} if drain else None,
        "SchedulingEligibility": eligibility,
        "Status": status,
        "StatusDescription": "",
        "Drivers": {},
        "CreateIndex": 10,
        "ModifyIndex": 12,
    }


def stub(full: dict[str, Any]) -> dict[str, Any]:
    """The ``api.NodeListStub`` of a node (``/v1/nodes`` without ``resources=true``)."""
    keys = ("ID", "Name", "Datacenter", "NodePool", "NodeClass", "Drain", "Status")
    out = {k: full[k] for k in keys}
    out.update(
        Address="127.0.0.1",
        SchedulingEligibility=full["SchedulingEligibility"],
        StatusDescription="",
        Version="2.0.5",
        Drivers={},
        LastDrain=None,
        CreateIndex=full["CreateIndex"],
        ModifyIndex=full["ModifyIndex"],
    )
    return out


def allocation(
    alloc_id: str,
    name: str,
    node_id: str,
    devices: dict[str, list[tuple[str, str, str, list[str]]]],
    *,
    client_status: str = "running",
    desired: str = "run",
) -> dict[str, Any]:
    """An ``api.Allocation``: devices per task in ``AllocatedResources.Tasks[*].Devices``."""
    job, _, rest = name.partition(".")
    return {
        "ID": alloc_id,
        "Namespace": "default",
        "EvalID": "e" + alloc_id[1:],
        "Name": name,
        "NodeID": node_id,
        "JobID": job,
        "TaskGroup": rest.split("[")[0],
        "DesiredStatus": desired,
        "ClientStatus": client_status,
        "AllocatedResources": {
            "Tasks": {
                task: {
                    "Cpu": {"CpuShares": 100},
                    "Memory": {"MemoryMB": 300},
                    "Networks": None,
                    "Devices": [
                        {"Vendor": v, "Type": t, "Name": n, "DeviceIDs": ids}
                        for v, t, n, ids in groups
                    ],
                }
                for task, groups in devices.items()
            },
            "Shared": {"DiskMB": 300},
        },
        "CreateIndex": 20,
        "ModifyIndex": 21,
    }


#: ``Allocation.ClientTerminalStatus`` statuses, for the filter the client sends.
_TERMINAL = ("complete", "failed", "lost")
_LIVE_FILTER = " and ".join(f'ClientStatus != "{s}"' for s in _TERMINAL)


def _page(
    items: list[tuple[str, bytes]],
    query: dict[str, list[str]],
    index: dict[str, int],
    endless: str = "",
) -> tuple[list[bytes], str]:
    """Nomad's paginator: items sorted by token, ``per_page`` of them from ``next_token``
    (``index``: token -> position). ``endless`` (see :class:`FakeNomad`) never ends."""
    per_page = int((query.get("per_page") or ["0"])[0] or 0)
    token = (query.get("next_token") or [""])[0]
    start = index.get(token, 0 if endless else len(items)) if token else 0
    end = len(items) if per_page <= 0 else min(len(items), start + per_page)
    nxt = items[end][0] if end < len(items) else ""
    if endless == "fresh":
        global _FRESH
        _FRESH += 1
        nxt = f"fresh-{_FRESH}"
    elif endless and not nxt:
        nxt = "again"
    return [body for _, body in items[start:end]], nxt


_FRESH = 0


@dataclass
class FakeNomad:
    """Nomad's HTTP API for check: the node list (with ``resources=true``, paged), one
    node, a node's allocations, and the allocation list (``resources``, ``task_states``,
    ``namespace``, the live-allocation ``filter``, paged).

    ``delay`` is added to every answer (a network's round trip); ``override`` maps a path
    to a raw answer body, for tests of what a broken or hostile server sends. Bodies
    are serialised once, so a large fake cluster costs its server little."""

    nodes: list[dict[str, Any]]
    allocations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    token: str = ""
    certs: Certs | None = None
    seen: list[tuple[str, dict[str, list[str]], dict[str, str]]] = field(default_factory=list)
    delay: float = 0.0
    override: dict[str, bytes] = field(default_factory=dict)
    #: A Content-Length to announce instead of the real one (-1: none at all).
    declared: dict[str, int] = field(default_factory=dict)
    #: Lists that never end, as a broken or hostile server pages: ``"same"`` gives the
    #: last page a token too, always the same; ``"fresh"`` gives every page a new one
    #: and starts the list over at each.
    endless: dict[str, str] = field(default_factory=dict)

    def _prepare(self) -> None:
        nodes = sorted(self.nodes, key=lambda n: n["ID"])
        self._full = {n["ID"]: json.dumps(n).encode() for n in nodes}
        self._stubs = [(n["ID"], json.dumps(stub(n)).encode()) for n in nodes]
        self._rich = [
            (
                n["ID"],
                json.dumps(
                    {
                        **stub(n),
                        "NodeResources": n["NodeResources"],
                        "ReservedResources": n.get("ReservedResources"),
                    }
                ).encode(),
            )
            for n in nodes
        ]
        allocs = [a for per_node in self.allocations.values() for a in per_node]
        allocs.sort(key=lambda a: (a["CreateIndex"], a["ID"]))
        self._allocs = [
            (f"{a['CreateIndex']}.{a['ID']}", a.get("Namespace", "default"), a) for a in allocs
        ]
        self._alloc_bodies: dict[tuple[bool, bool], list[tuple[str, str, str, bytes]]] = {}
        for resources in (False, True):
            for states in (False, True):
                self._alloc_bodies[(resources, states)] = [
                    (
                        key,
                        ns,
                        a["ClientStatus"],
                        json.dumps(_alloc_stub(a, resources, states)).encode(),
                    )
                    for key, ns, a in self._allocs
                ]
        self._lists: dict[object, tuple[list[tuple[str, bytes]], dict[str, int]]] = {}
        self._node_allocs = {
            node_id: json.dumps(per_node).encode() for node_id, per_node in self.allocations.items()
        }

    def start(self, unix_socket: Path | None = None) -> str:
        """Serve on loopback TCP (TLS when ``certs``), or on a unix socket."""
        fake = self
        self._prepare()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                fake.seen.append((parts.path, query, dict(self.headers)))
                if fake.delay:
                    time.sleep(fake.delay)
                if fake.token and self.headers.get("X-Nomad-Token") != fake.token:
                    self.reply(403, b"Permission denied")
                    return
                path = parts.path
                if path in fake.declared:
                    # A length that lies, or (-1) none: the body runs until the connection
                    # closes, so only reading it tells its size.
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    if fake.declared[path] >= 0:
                        self.send_header("Content-Length", str(fake.declared[path]))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(fake.override.get(path, b"["))
                    self.close_connection = True
                elif path in fake.override:
                    self.reply(200, fake.override[path])
                elif path == "/v1/nodes":
                    rich = (query.get("resources") or [""])[0] == "true"
                    items = fake._rich if rich else fake._stubs
                    index = fake._indexed(("nodes", rich), items)
                    self.reply_list(_page(items, query, index, fake.endless.get(path, "")))
                elif path == "/v1/allocations":
                    self.allocations(query)
                elif path.startswith("/v1/node/") and path.endswith("/allocations"):
                    node_id = path.removeprefix("/v1/node/").removesuffix("/allocations")
                    self.reply(200, fake._node_allocs.get(node_id, b"[]"))
                elif path.startswith("/v1/node/") and path.removeprefix("/v1/node/") in fake._full:
                    self.reply(200, fake._full[path.removeprefix("/v1/node/")])
                else:
                    self.reply(404, b"node not found")

            def allocations(self, query: dict[str, list[str]]) -> None:
                resources = (query.get("resources") or [""])[0] == "true"
                states = (query.get("task_states") or ["true"])[0] != "false"
                namespace = (query.get("namespace") or ["default"])[0]
                wanted = (query.get("filter") or [""])[0]
                if wanted not in ("", _LIVE_FILTER):
                    self.reply(400, b"this fake knows one filter expression")
                    return
                which = ("allocations", resources, states, namespace, wanted)
                known = fake._lists.get(which)
                items = (
                    known[0]
                    if known is not None
                    else [
                        (key, body)
                        for key, ns, status, body in fake._alloc_bodies[(resources, states)]
                        if namespace in ("*", ns) and not (wanted and status in _TERMINAL)
                    ]
                )
                index = fake._indexed(which, items)
                self.reply_list(_page(items, query, index, fake.endless.get("/v1/allocations", "")))

            def reply_list(self, paged: tuple[list[bytes], str]) -> None:
                bodies, nxt = paged
                self.reply(200, b"[" + b",".join(bodies) + b"]", nxt)

            def reply(self, code: int, data: bytes, next_token: str = "") -> None:
                self.send_response(code)
                self.send_header(
                    "Content-Type", "application/json" if code == 200 else "text/plain"
                )
                self.send_header("Content-Length", str(len(data)))
                if next_token:
                    self.send_header("X-Nomad-NextToken", next_token)
                self.end_headers()
                self.wfile.write(data)

        if unix_socket is not None:

            class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
                daemon_threads = True

            self.server = UnixServer(str(unix_socket), Handler)  # type: ignore[assignment]
            self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
            self.thread.start()
            return f"unix://{unix_socket}"
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        scheme = "http"
        if self.certs is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.certs.server_cert, self.certs.server_key)
            ctx.load_verify_locations(self.certs.ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return f"{scheme}://127.0.0.1:{self.server.server_address[1]}"

    def _indexed(self, which: object, items: list[tuple[str, bytes]]) -> dict[str, int]:
        known = self._lists.get(which)
        if known is None:
            known = self._lists[which] = (items, {key: i for i, (key, _) in enumerate(items)})
        return known[1]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def asked(self) -> list[str]:
        """The paths asked for, in order."""
        return [p for p, _, _ in self.seen]


def _alloc_stub(alloc: dict[str, Any], resources: bool, states: bool) -> dict[str, Any]:
    """``Allocation.Stub``: the list entry, with resources and task states as asked."""
    keys = ("ID", "EvalID", "Name", "Namespace", "NodeID", "JobID", "TaskGroup")
    out: dict[str, Any] = {k: alloc.get(k) for k in keys}
    out.update(
        NodeName="",
        JobType="service",
        JobVersion=0,
        DesiredStatus=alloc.get("DesiredStatus"),
        DesiredDescription="",
        ClientStatus=alloc.get("ClientStatus"),
        ClientDescription="",
        DesiredTransition={},
        TaskStates={"main": {"State": "running", "Failed": False, "Events": []}}
        if states
        else None,
        DeploymentStatus=None,
        FollowupEvalID="",
        NextAllocation="",
        RescheduleTracker=None,
        PreemptedAllocations=None,
        PreemptedByAllocation="",
        CreateIndex=alloc["CreateIndex"],
        ModifyIndex=alloc["ModifyIndex"],
        CreateTime=0,
        ModifyTime=0,
    )
    if resources:
        out["AllocatedResources"] = alloc.get("AllocatedResources")
    return out
