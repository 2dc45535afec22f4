"""Nodes and their allocations from a live Nomad cluster, over its HTTP API.

Configured from the environment exactly as the ``nomad`` CLI configures its
API client (``api.DefaultConfig`` in Nomad): ``NOMAD_ADDR`` (default
``http://127.0.0.1:4646``; ``unix://`` paths too), ``NOMAD_REGION`` and
``NOMAD_NAMESPACE`` (query parameters), ``NOMAD_TOKEN`` (the ``X-Nomad-Token``
header), ``NOMAD_HTTP_AUTH`` (basic auth), ``NOMAD_CACERT``/``NOMAD_CAPATH``,
``NOMAD_CLIENT_CERT``/``NOMAD_CLIENT_KEY``, ``NOMAD_TLS_SERVER_NAME`` and
``NOMAD_SKIP_VERIFY`` (read with Go's ``ParseBool``; TLS 1.2 at least), and
proxies by Go's rules (``proxy.py``: never for loopback, ``NO_PROXY``
honoured, ``ALL_PROXY`` ignored).

A whole cluster in few requests: ``GET /v1/nodes?resources=true`` (the list
stubs with their ``NodeResources``) and ``GET /v1/allocations?resources=true``
(every namespace, without task states, non-terminal only by a ``filter``
expression), both paged with ``per_page``/``next_token`` and fetched side by
side. The stubs lack ``ComputedClass``; it is asked per node
(``/v1/node/<id>``, several at a time) only for nodes whose class could
change a verdict (see :func:`~nomad_device.placement.evaluate.class_candidates`).

Every answer is capped in size (:data:`MAX_ANSWER_BYTES`, after gzip) and in
nesting, and the address is shown with its user information redacted.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import quote, urlsplit

from nomad_device.golang.proxy import ProxyError, proxy_for, redact_url
from nomad_device.golang.strconv import parse_bool
from nomad_device.placement.model import Allocation, Node

__all__ = ["MAX_ANSWER_BYTES", "ApiConfig", "ApiError", "NomadApi", "read_cluster"]

DEFAULT_ADDRESS: Final = "http://127.0.0.1:4646"
#: The most one answer may hold, decompressed. A page of 500 node stubs with
#: their resources is a few MiB; anything near this is not a Nomad answer.
MAX_ANSWER_BYTES: Final = 128 * 1024 * 1024
#: Page sizes: a few MiB of JSON each, so that memory stays flat however large the cluster.
NODES_PER_PAGE: Final = 500
ALLOCATIONS_PER_PAGE: Final = 2000
#: The most items a list may page through: far more nodes or live allocations than any
#: cluster has, so that a server that pages forever is refused, not followed.
MAX_LISTED: Final = 2_000_000
#: How many ``/v1/node/<id>`` requests run at once.
PARALLEL: Final = 16
#: ``Allocation.ClientTerminalStatus``, as a filter: what the server need not send.
LIVE_ALLOCATIONS: Final = (
    'ClientStatus != "complete" and ClientStatus != "failed" and ClientStatus != "lost"'
)


T = TypeVar("T")


class ApiError(RuntimeError):
    """The cluster could not be asked (unreachable, refused, or an answer we cannot read)."""


@dataclass
class ApiConfig:
    address: str = DEFAULT_ADDRESS
    region: str = ""
    namespace: str = ""
    token: str = ""
    http_auth: str = ""
    cacert: str = ""
    capath: str = ""
    client_cert: str = ""
    client_key: str = ""
    server_name: str = ""
    insecure: bool = False
    #: The proxy settings (``HTTP_PROXY``, ``NO_PROXY`` ...), read as Go reads them.
    proxy_env: Mapping[str, str] | None = None

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> ApiConfig:
        e = os.environ if env is None else env
        cfg = ApiConfig(
            address=e.get("NOMAD_ADDR") or DEFAULT_ADDRESS,
            region=e.get("NOMAD_REGION", ""),
            namespace=e.get("NOMAD_NAMESPACE", ""),
            token=e.get("NOMAD_TOKEN", ""),
            http_auth=e.get("NOMAD_HTTP_AUTH", ""),
            cacert=e.get("NOMAD_CACERT", ""),
            capath=e.get("NOMAD_CAPATH", ""),
            client_cert=e.get("NOMAD_CLIENT_CERT", ""),
            client_key=e.get("NOMAD_CLIENT_KEY", ""),
            server_name=e.get("NOMAD_TLS_SERVER_NAME", ""),
            proxy_env=dict(e),
        )
        skip = e.get("NOMAD_SKIP_VERIFY", "")
        if skip and parse_bool(skip) is not None:
            cfg.insecure = bool(parse_bool(skip))
        return cfg

    @property
    def display(self) -> str:
        """The address as messages show it: no user name, no password."""
        return redact_url(self.address)

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.cacert or None, capath=self.capath or None)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.client_cert:
            ctx.load_cert_chain(self.client_cert, self.client_key or None)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


class NomadApi:
    """A small read-only client; use as a context manager."""

    def __init__(self, cfg: ApiConfig, timeout: float = 30.0) -> None:
        try:
            import httpx
        except ImportError:
            from nomad_device.placement.jobspec import CLI_EXTRA_HINT

            raise ApiError(f"--nomad needs httpx: {CLI_EXTRA_HINT}") from None
        self.cfg = cfg
        parts = urlsplit(cfg.address)
        transport = None
        proxy = None
        if parts.scheme == "unix":
            transport = httpx.HTTPTransport(uds=parts.path)
            base = "http://127.0.0.1"
        elif parts.scheme in ("http", "https"):
            host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
            base = f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
            try:
                proxy = proxy_for(base, cfg.proxy_env or {})
            except ProxyError as exc:
                raise ApiError(str(exc)) from None
        else:
            raise ApiError(
                f"invalid NOMAD_ADDR {cfg.display!r}: scheme must be http, https or unix"
            )
        auth = None
        if parts.username is not None:
            auth = (parts.username, parts.password or "")
        elif cfg.http_auth:
            user, _, password = cfg.http_auth.partition(":")
            auth = (user, password)
        headers = {"X-Nomad-Token": cfg.token} if cfg.token else {}
        self.params: dict[str, str] = {}
        if cfg.region:
            self.params["region"] = cfg.region
        if cfg.namespace:
            self.params["namespace"] = cfg.namespace
        tls = base.startswith("https") or (proxy or "").startswith("https")
        try:
            # Plain HTTP needs no context (building httpx's default one costs 50 ms).
            verify: ssl.SSLContext | bool = cfg.ssl_context() if tls else False
        except (OSError, ssl.SSLError) as exc:
            raise ApiError(f"cannot set up TLS: {exc}") from None
        self._extensions: dict[str, Any] = (
            {"sni_hostname": cfg.server_name} if cfg.server_name else {}
        )
        self.base = base
        self.proxy = proxy
        try:
            self.client = httpx.Client(
                base_url=base,
                headers=headers,
                auth=auth,
                verify=verify,
                transport=transport,
                timeout=timeout,
                http2=False,
                proxy=proxy,
                # Proxies, .netrc and CA bundles come from our configuration, as the nomad
                # CLI's do, not from httpx's reading of the environment.
                trust_env=False,
                limits=httpx.Limits(max_connections=PARALLEL + 2),
            )
        except ImportError as exc:  # a socks5 proxy without httpx's socks extra
            raise ApiError(f"cannot use the proxy {redact_url(proxy or '')}: {exc}") from None
        self._httpx = httpx

    def __enter__(self) -> NomadApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def get(self, path: str, params: Mapping[str, str] | None = None) -> tuple[bytes, str]:
        """The answer's body (at most :data:`MAX_ANSWER_BYTES`) and its next-page token."""
        httpx = self._httpx
        query = {**self.params, **(params or {})}
        try:
            with self.client.stream("GET", path, params=query, extensions=self._extensions) as resp:
                if resp.status_code != 200:
                    text = _text(resp.read()[:4096])
                    if resp.status_code == 403:
                        raise ApiError(
                            f"GET {path}: 403 {text} (the token in NOMAD_TOKEN needs node:read, "
                            "and read-job where allocations are listed)"
                        )
                    raise ApiError(f"GET {path}: {resp.status_code} {text[:200]}")
                declared = resp.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
                    raise ApiError(_too_big(self.cfg.display + path))
                chunks = []
                size = 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise ApiError(_too_big(self.cfg.display + path))
                    chunks.append(chunk)
                return b"".join(chunks), resp.headers.get("X-Nomad-NextToken", "")
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach Nomad at {self.cfg.display}: {exc}") from None

    def pages(
        self,
        path: str,
        params: Mapping[str, str],
        per_page: int,
        decode: Callable[[bytes], list[T]],
        stop: threading.Event | None = None,
    ) -> Iterator[list[T]]:
        """Every page of a paginated list, decoded, in order, until ``stop`` is set.

        Nomad's paginator fills every page but the last, so a short page ends the
        list whatever token comes with it; a token given twice, or more pages than
        :data:`MAX_LISTED` items fill, is an answer no Nomad gives.
        """
        token = ""
        seen: set[str] = set()
        for _ in range(-(-MAX_LISTED // per_page)):
            if stop is not None and stop.is_set():
                return
            query = {**params, "per_page": str(per_page)}
            if token:
                query["next_token"] = token
            body, token = self.get(path, query)
            items = decode(body)
            yield items
            if not token or len(items) < per_page:
                return
            if token in seen:
                raise ApiError(
                    f"GET {path}: the next-page token {token[:40]!r} came twice (Nomad's never "
                    "does): is NOMAD_ADDR a Nomad agent?"
                )
            seen.add(token)
        raise ApiError(
            f"GET {path}: still more pages after {MAX_LISTED:,} items, more than any cluster "
            "holds: is NOMAD_ADDR a Nomad agent?"
        )

    def node_class(self, node_id: str) -> str:
        from nomad_device.placement.apijson import decode_computed_class

        path = f"/v1/node/{quote(node_id, safe='')}"
        body, _ = self.get(path)
        return decode_computed_class(body, self.cfg.display + path)


def _text(body: bytes) -> str:
    return body.decode("utf-8", "replace").strip()


def _size(n: int) -> str:
    return f"{n // (1 << 20)} MiB" if n >= 1 << 20 else f"{n // 1024} KiB"


def _too_big(where: str) -> str:
    return (
        f"{where}: the answer is larger than {_size(MAX_ANSWER_BYTES)}, more "
        "than any Nomad page holds: is NOMAD_ADDR a Nomad agent?"
    )


def read_cluster(
    cfg: ApiConfig,
    considered: Callable[[Node], bool],
    needs_class: Callable[[list[Node]], list[str]],
) -> tuple[list[Node], str]:
    """Every node of the cluster with what its allocations hold, and a line saying where
    they came from. ``needs_class`` names the nodes whose ``ComputedClass`` matters."""
    try:
        import msgspec  # noqa: F401
    except ImportError:
        from nomad_device.placement.jobspec import CLI_EXTRA_HINT

        raise ApiError(f"--nomad needs msgspec: {CLI_EXTRA_HINT}") from None
    from nomad_device.placement.apijson import Interned, decode_allocations, decode_nodes

    with NomadApi(cfg) as api:
        held: dict[str, list[Allocation]] = {}
        failure: list[BaseException] = []
        stop = threading.Event()

        def allocations() -> None:
            where = f"{cfg.display}/v1/allocations"
            params = {
                "resources": "true",
                "task_states": "false",
                "namespace": "*",
                "filter": LIVE_ALLOCATIONS,
            }
            try:
                for page in api.pages(
                    "/v1/allocations",
                    params,
                    ALLOCATIONS_PER_PAGE,
                    lambda body: decode_allocations(body, where),
                    stop,
                ):
                    for node_id, alloc in page:
                        held.setdefault(node_id, []).append(alloc)
            except BaseException as exc:  # handed to the main thread
                failure.append(exc)

        fetcher = threading.Thread(target=allocations, name="nomad-allocations", daemon=True)
        fetcher.start()
        nodes: list[Node] = []
        interned: Interned = {}
        try:
            where = f"{cfg.display}/v1/nodes"
            for page in api.pages(
                "/v1/nodes",
                {"resources": "true"},
                NODES_PER_PAGE,
                lambda body: decode_nodes(body, where, interned),
            ):
                nodes.extend(page)
            fetcher.join()
        finally:
            # On an error or a signal the fetcher is told to stop and not waited for: it
            # is a daemon thread, and its request ends with the client.
            stop.set()
        if failure:
            raise failure[0]
        for node in nodes:
            if considered(node):
                node.allocations = sorted(held.get(node.id, ()), key=lambda a: a.id)
        wanted = needs_class(nodes)
        if wanted:
            with ThreadPoolExecutor(PARALLEL) as pool:
                classes = dict(zip(wanted, pool.map(api.node_class, wanted), strict=True))
            for node in nodes:
                if node.id in classes:
                    node.computed_class = classes[node.id]
    source = f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} of the cluster at {cfg.display}"
    return nodes, source
