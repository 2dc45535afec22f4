"""The local Nomad agent's HTTP API, as a plugin that follows its node's allocations reads it.

Nomad's device protocol ends at Reserve: a plugin never hears that the task
holding a device stopped. The agent the plugin runs beside knows, and says
so over its HTTP API; :mod:`.release` follows it. This module is the part
that talks HTTP: the operator's ``nomad { ... }`` block (:class:`NomadConfig`),
its defaults from the environment the ``nomad`` CLI reads, the token and its
file, and a small blocking client on the standard library alone (a plugin
at run time has grpcio, protobuf, msgpack and cryptography, not httpx).

Choices, each for the plugin's trust and the node it runs on:

- **No proxies, ever.** The agent is the one beside the plugin (its node's
  allocations are what is asked for); nothing between them should see the
  token. ``HTTP_PROXY`` and friends in the agent's environment are ignored,
  for loopback and every other address.
- **The token** comes from ``token_file`` (a regular file, not a symbolic
  link, owned by root or by the plugin's user, neither it nor its directory
  writable by group or others, the file not readable by others), read again
  at every connection so a rotated token is picked up; without
  ``token_file``, from ``NOMAD_TOKEN`` in the agent's environment, which only
  whoever started the agent could set. It is sent only as ``X-Nomad-Token``
  to the configured address, never logged (``repr`` hides it) and never put
  in a child process's environment.
- **TLS as the nomad CLI does it**: a CA file or directory (else the
  system's), a client certificate and key, the server name to check (and send
  as SNI), skip-verify only when asked, TLS 1.2 at least.
- **Bounded**: every answer is capped in size, every read has a timeout, and
  a connection can be aborted from another thread (the plugin closing).

Heavy imports (``http.client``, ``ssl``, ``json``) wait for the first
connection: a plugin without a ``nomad`` block never loads them.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from nomad_device.errors import InvalidArgument

if TYPE_CHECKING:
    import http.client
    import socket
    import ssl

__all__ = [
    "DEFAULT_ADDRESS",
    "AgentClient",
    "AgentSettings",
    "ApiError",
    "ApiNotFound",
    "ApiRefused",
    "NomadConfig",
    "agent_settings",
    "read_token",
]

#: Where the agent listens when neither the block nor ``NOMAD_ADDR`` says.
DEFAULT_ADDRESS: Final = "http://127.0.0.1:4646"
#: The state directory when the block does not name one (``<name>`` is the plugin's).
DEFAULT_STATE_DIR: Final = "/var/lib/nomad-device/{name}"
#: The largest answer read (a node's allocations, each with its job, stay far below).
MAX_ANSWER: Final = 64 * 1024 * 1024
#: The longest line of the event stream (one raft index's events).
MAX_LINE: Final = 64 * 1024 * 1024
#: The largest token file read.
MAX_TOKEN_FILE: Final = 64 * 1024
CONNECT_TIMEOUT: Final = 10.0
READ_TIMEOUT: Final = 30.0


@dataclass(frozen=True)
class NomadConfig:
    """``nomad { ... }``: the local agent's HTTP API, to learn when devices are released.

    Every field left empty takes the value the ``nomad`` CLI would read from the
    environment the agent gave the plugin: ``NOMAD_ADDR`` (else
    ``http://127.0.0.1:4646``; ``unix:///path`` too), ``NOMAD_CACERT``,
    ``NOMAD_CAPATH``, ``NOMAD_CLIENT_CERT``, ``NOMAD_CLIENT_KEY``,
    ``NOMAD_TLS_SERVER_NAME``, ``NOMAD_SKIP_VERIFY``; the token from
    ``token_file``, else ``NOMAD_TOKEN``. ``state_dir`` (default
    ``/var/lib/nomad-device/<plugin name>``) keeps which releases were
    handled, so a restarted plugin neither repeats nor misses one.
    """

    address: str = ""
    token_file: str = ""
    ca_file: str = ""
    ca_path: str = ""
    cert_file: str = ""
    key_file: str = ""
    tls_server_name: str = ""
    tls_skip_verify: bool | None = None
    state_dir: str = ""


@dataclass(frozen=True)
class AgentSettings:
    """A :class:`NomadConfig` with the environment's defaults applied and checked."""

    address: str
    scheme: str  # http, https or unix
    host: str  # or the socket's path for unix
    port: int
    token_file: str = ""
    env_token: str = field(default="", repr=False)
    ca_file: str = ""
    ca_path: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    skip_verify: bool = False
    state_dir: str = ""

    @property
    def token_source(self) -> str:
        """Where the token comes from, for messages (never the token)."""
        if self.token_file:
            return f"token_file {self.token_file}"
        return "NOMAD_TOKEN" if self.env_token else "no token"


def agent_settings(
    config: NomadConfig, plugin_name: str, env: Mapping[str, str] | None = None
) -> AgentSettings:
    """Apply the environment's defaults; raise :class:`InvalidArgument` for what cannot work."""
    from urllib.parse import urlsplit

    from nomad_device.golang.strconv import parse_bool

    e = os.environ if env is None else env
    address = config.address or e.get("NOMAD_ADDR", "") or DEFAULT_ADDRESS
    where = "nomad.address" if config.address else "NOMAD_ADDR" if e.get("NOMAD_ADDR") else ""
    try:
        parts = urlsplit(address)
        port = parts.port
    except ValueError as exc:
        raise InvalidArgument(f"{where}: {address!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https", "unix"):
        raise InvalidArgument(
            f"{where}: {address!r}: the scheme must be http, https or unix"
            " (http://127.0.0.1:4646, unix:///run/nomad/http.sock)"
        )
    if parts.username is not None or parts.password is not None:
        raise InvalidArgument(
            f"{where}: user information in the address is not supported; use a token"
        )
    if parts.scheme == "unix":
        host, port = parts.path, 0
        if not host.startswith("/"):
            raise InvalidArgument(f"{where}: {address!r}: a unix address needs an absolute path")
    else:
        host = parts.hostname or ""
        if not host:
            raise InvalidArgument(f"{where}: {address!r} names no host")
        port = port or (443 if parts.scheme == "https" else 80)
    skip = config.tls_skip_verify
    if skip is None:
        skip = bool(parse_bool(e.get("NOMAD_SKIP_VERIFY", "")))
    for name, path in (("token_file", config.token_file), ("state_dir", config.state_dir)):
        if path and not path.startswith("/"):
            raise InvalidArgument(f"nomad.{name}: {path!r} is not an absolute path")
    return AgentSettings(
        address=address,
        scheme=parts.scheme,
        host=host,
        port=port,
        token_file=config.token_file,
        env_token="" if config.token_file else e.get("NOMAD_TOKEN", ""),
        ca_file=config.ca_file or e.get("NOMAD_CACERT", ""),
        ca_path=config.ca_path or e.get("NOMAD_CAPATH", ""),
        cert_file=config.cert_file or e.get("NOMAD_CLIENT_CERT", ""),
        key_file=config.key_file or e.get("NOMAD_CLIENT_KEY", ""),
        server_name=config.tls_server_name or e.get("NOMAD_TLS_SERVER_NAME", ""),
        skip_verify=skip,
        state_dir=config.state_dir or DEFAULT_STATE_DIR.format(name=plugin_name or "plugin"),
    )


class ApiError(Exception):
    """The agent could not be asked, or answered something unusable."""


class ApiRefused(ApiError):
    """The agent refused the token (401 or 403), or the token cannot be read."""


class ApiNotFound(ApiError):
    """404: what was asked for does not exist (a garbage-collected allocation)."""


def _writable_by_others(mode: int) -> bool:
    return bool(mode & (stat.S_IWGRP | stat.S_IWOTH))


def _trusted_owner(uid: int) -> bool:
    return uid in (0, os.geteuid())


def read_token(settings: AgentSettings) -> str:
    """The token to send; :class:`ApiRefused` (naming the file, never its content) if the
    file may not be trusted or read."""
    path = settings.token_file
    if not path:
        return settings.env_token
    what = f"token_file {path}"
    try:
        parent = os.lstat(os.path.dirname(path) or "/")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        reason = "is a symbolic link" if exc.errno == 40 else (exc.strerror or str(exc)).lower()
        raise ApiRefused(f"{what}: {reason}") from None
    try:
        info = os.fstat(fd)
        problem = ""
        if not stat.S_ISREG(info.st_mode):
            problem = "is not a regular file"
        elif not _trusted_owner(info.st_uid):
            problem = f"is owned by uid {info.st_uid}, not root"
        elif _writable_by_others(info.st_mode):
            problem = f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
        elif info.st_mode & stat.S_IROTH:
            problem = f"is readable by others (mode {stat.S_IMODE(info.st_mode):04o})"
        elif not _trusted_owner(parent.st_uid) or (
            _writable_by_others(parent.st_mode) and not parent.st_mode & stat.S_ISVTX
        ):
            problem = "is in a directory that others may write to"
        if problem:
            raise ApiRefused(f"{what} {problem}; the token is not used")
        data = os.read(fd, MAX_TOKEN_FILE + 1)
    except OSError as exc:
        raise ApiRefused(f"{what}: {(exc.strerror or str(exc)).lower()}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_FILE:
        raise ApiRefused(f"{what} is larger than {MAX_TOKEN_FILE // 1024} KiB")
    token = data.decode("utf-8", "replace").strip()
    if not token or any(c in token for c in "\r\n\x00"):
        raise ApiRefused(f"{what} holds no token (one line expected)")
    return token


class AgentClient:
    """Blocking GETs to one agent; one request at a time per instance.

    :meth:`abort` (from any thread) ends the request in progress, so a thread
    blocked on the event stream returns at once.
    """

    def __init__(self, settings: AgentSettings, token: str) -> None:
        self.settings = settings
        self._token = token
        self._ssl: ssl.SSLContext | None = None
        import threading

        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._aborted = False

    def __repr__(self) -> str:
        return f"AgentClient({self.settings.address!r})"

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            import ssl

            s = self.settings
            try:
                ctx = ssl.create_default_context(cafile=s.ca_file or None, capath=s.ca_path or None)
                ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                if s.cert_file:
                    ctx.load_cert_chain(s.cert_file, s.key_file or None)
            except (OSError, ssl.SSLError, ValueError) as exc:
                raise ApiError(f"cannot set up TLS: {exc}") from None
            if s.skip_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx
        return self._ssl

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        import http.client
        import socket

        s = self.settings
        try:
            if s.scheme == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(CONNECT_TIMEOUT)
                try:
                    sock.connect(s.host)
                except BaseException:
                    sock.close()
                    raise
                conn = http.client.HTTPConnection("localhost")
            else:
                sock = socket.create_connection((s.host, s.port), CONNECT_TIMEOUT)
                if s.scheme == "https":
                    try:
                        sock = self._context().wrap_socket(
                            sock, server_hostname=s.server_name or s.host
                        )
                    except BaseException:
                        sock.close()
                        raise
                conn = http.client.HTTPConnection(s.host, s.port)
        except ApiError:
            raise
        except OSError as exc:
            raise ApiError(f"cannot reach Nomad at {s.address}: {_why(exc)}") from None
        sock.settimeout(timeout)
        conn.sock = sock
        with self._lock:
            if self._aborted:
                sock.close()
                raise ApiError("stopped")
            self._sock = sock
        return conn

    def abort(self) -> None:
        """End the request in progress and refuse new ones; safe from any thread."""
        import socket

        with self._lock:
            self._aborted = True
            sock = self._sock
        if sock is not None:
            # The plain socket's shutdown: an SSL reader in another thread wakes on EOF.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def _request(
        self, path: str, query: Mapping[str, str] | None, timeout: float
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        from urllib.parse import urlencode

        target = path + ("?" + urlencode(query) if query else "")
        headers = {"Accept-Encoding": "identity", "User-Agent": "nomad-device-sdk"}
        if self._token:
            headers["X-Nomad-Token"] = self._token
        conn = self._connect(timeout)
        try:
            conn.request("GET", target, headers=headers)
            response = conn.getresponse()
        except OSError as exc:
            self._done(conn)
            raise ApiError(f"GET {path} at {self.settings.address}: {_why(exc)}") from None
        except Exception as exc:  # http.client's own (a malformed status line)
            self._done(conn)
            raise ApiError(f"GET {path} at {self.settings.address}: {exc!r}") from None
        if response.status != 200:
            try:
                text = response.read(4096).decode("utf-8", "replace").strip()
            except OSError:
                text = ""
            finally:
                self._done(conn)
            text = " ".join(text.split())[:200]
            message = f"GET {path}: {response.status} {text}".rstrip()
            if response.status in (401, 403):
                raise ApiRefused(
                    f"{message} (the token, from {self.settings.token_source}, needs"
                    " agent:read, node:read and read-job in every namespace)"
                )
            if response.status == 404:
                raise ApiNotFound(message)
            raise ApiError(message)
        return conn, response

    def get_json(
        self, path: str, query: Mapping[str, str] | None = None
    ) -> tuple[Any, Mapping[str, str]]:
        """The decoded answer and its headers (``X-Nomad-Index``)."""
        import json

        conn, response = self._request(path, query, READ_TIMEOUT)
        try:
            body = response.read(MAX_ANSWER + 1)
        except OSError as exc:
            raise ApiError(f"GET {path}: {_why(exc)}") from None
        finally:
            self._done(conn)
        if len(body) > MAX_ANSWER:
            raise ApiError(f"GET {path}: the answer is larger than {MAX_ANSWER >> 20} MiB")
        try:
            return json.loads(body), dict(response.getheaders())
        except ValueError as exc:
            raise ApiError(f"GET {path}: not JSON: {exc}") from None

    def stream(self, path: str, query: Mapping[str, str], read_timeout: float) -> Iterator[bytes]:
        """Each line of a long answer (the event stream), until it ends; a read that waits
        ``read_timeout`` seconds for a line raises :class:`ApiError`."""
        conn, response = self._request(path, query, read_timeout)
        try:
            while True:
                try:
                    line = response.readline(MAX_LINE + 1)
                except OSError as exc:
                    raise ApiError(f"{path}: {_why(exc)}") from None
                except Exception as exc:  # a broken chunk
                    raise ApiError(f"{path}: {exc!r}") from None
                if not line:
                    return
                if len(line) > MAX_LINE and not line.endswith(b"\n"):
                    raise ApiError(f"{path}: a line longer than {MAX_LINE >> 20} MiB")
                yield line
        finally:
            self._done(conn)

    def _done(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._sock = None
        conn.close()


def _why(exc: BaseException) -> str:
    import socket

    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__
