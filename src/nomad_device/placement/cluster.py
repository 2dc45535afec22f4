"""Nodes and their allocations from a live Nomad cluster, over its HTTP API.

Configured from the environment exactly as the ``nomad`` CLI configures its
API client (``api.DefaultConfig`` in Nomad): ``NOMAD_ADDR`` (default
``http://127.0.0.1:4646``; ``unix://`` paths too), ``NOMAD_REGION`` and
``NOMAD_NAMESPACE`` (query parameters), ``NOMAD_TOKEN`` (the ``X-Nomad-Token``
header), ``NOMAD_HTTP_AUTH`` (basic auth), ``NOMAD_CACERT``/``NOMAD_CAPATH``,
``NOMAD_CLIENT_CERT``/``NOMAD_CLIENT_KEY``, ``NOMAD_TLS_SERVER_NAME`` and
``NOMAD_SKIP_VERIFY`` (read with Go's ``ParseBool``; TLS 1.2 at least).

Endpoints: ``GET /v1/nodes``, then for each node ``GET /v1/node/<id>`` and
``GET /v1/node/<id>/allocations``.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from nomad_device.placement import jsonpos
from nomad_device.placement.gostrconv import parse_bool

__all__ = ["ApiConfig", "ApiError", "NomadApi"]

DEFAULT_ADDRESS = "http://127.0.0.1:4646"


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
        )
        skip = e.get("NOMAD_SKIP_VERIFY", "")
        if skip and parse_bool(skip) is not None:
            cfg.insecure = bool(parse_bool(skip))
        return cfg

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
            from nomad_device.wire.agentfile import CLI_EXTRA_HINT

            raise ApiError(f"--nomad needs httpx: {CLI_EXTRA_HINT}") from None
        self.cfg = cfg
        parts = urlsplit(cfg.address)
        transport = None
        if parts.scheme == "unix":
            transport = httpx.HTTPTransport(uds=parts.path)
            base = "http://127.0.0.1"
        elif parts.scheme in ("http", "https"):
            base = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
            if ":" in (parts.hostname or ""):
                base = f"{parts.scheme}://[{parts.hostname}]" + (
                    f":{parts.port}" if parts.port else ""
                )
        else:
            raise ApiError(
                f"invalid NOMAD_ADDR {cfg.address!r}: scheme must be http, https or unix"
            )
        auth = None
        if parts.username is not None:
            auth = (parts.username, parts.password or "")
        elif cfg.http_auth:
            user, _, password = cfg.http_auth.partition(":")
            auth = (user, password)
        headers = {"X-Nomad-Token": cfg.token} if cfg.token else {}
        params = {}
        if cfg.region:
            params["region"] = cfg.region
        if cfg.namespace:
            params["namespace"] = cfg.namespace
        try:
            verify: ssl.SSLContext | bool = cfg.ssl_context() if base.startswith("https") else True
        except (OSError, ssl.SSLError) as exc:
            raise ApiError(f"cannot set up TLS: {exc}") from None
        self._extensions: dict[str, Any] = (
            {"sni_hostname": cfg.server_name} if cfg.server_name else {}
        )
        self.base = base
        self.client = httpx.Client(
            base_url=base,
            headers=headers,
            params=params,
            auth=auth,
            verify=verify,
            transport=transport,
            timeout=timeout,
            http2=False,
        )
        self._httpx = httpx

    def __enter__(self) -> NomadApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def get(self, path: str) -> jsonpos.Located:
        httpx = self._httpx
        where = f"{self.cfg.address}{path}"
        try:
            resp = self.client.get(path, extensions=self._extensions)
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach Nomad at {self.cfg.address}: {exc}") from None
        if resp.status_code == 403:
            raise ApiError(
                f"GET {path}: 403 {resp.text.strip()} (the token in NOMAD_TOKEN needs node:read)"
            )
        if resp.status_code != 200:
            raise ApiError(f"GET {path}: {resp.status_code} {resp.text.strip()[:200]}")
        try:
            return jsonpos.parse(resp.text)
        except jsonpos.JSONError as exc:
            raise ApiError(f"{where}:{exc}") from None

    def nodes(self) -> jsonpos.Located:
        return self.get("/v1/nodes")

    def node(self, node_id: str) -> jsonpos.Located:
        return self.get(f"/v1/node/{quote(node_id, safe='')}")

    def allocations(self, node_id: str) -> jsonpos.Located:
        return self.get(f"/v1/node/{quote(node_id, safe='')}/allocations")
