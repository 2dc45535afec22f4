"""Mutual TLS for go-plugin's AutoMTLS, done by OpenSSL instead of gRPC.

Why this exists: go-plugin's Go side makes its throwaway certificates with
ECDSA **P-521** keys, signed with ECDSA-SHA512. The TLS library inside Python's
gRPC (BoringSSL) neither offers nor accepts the ``ecdsa_secp521r1_sha512``
signature scheme, so:

* as a plugin, gRPC's own TLS never gets the Go host's client certificate (the
  Go client only sends a certificate whose signature scheme the server listed;
  the handshake ends with "peer did not return a certificate");
* as a host, gRPC's own TLS cannot reach a Go plugin (the Go server cannot sign
  its handshake with any scheme our ClientHello lists: handshake failure).

Python's :mod:`ssl` (OpenSSL) handles P-521 fine, so the TLS layer runs here
and gRPC speaks plaintext over a unix socket in a private (0700) directory:

* :class:`TLSTerminator` (plugin side): listens on the public address, requires
  and verifies the host's certificate (``PLUGIN_CLIENT_CERT``), offers ALPN
  ``h2`` (grpc-go refuses servers without it) and relays bytes to the gRPC
  server's private socket. It runs on the plugin's event loop.
* :class:`TLSBridge` (host side): a private plaintext unix socket for a gRPC
  channel; each connection is relayed over TLS to the plugin, trusting only
  the certificate from the handshake line, presenting the host's own, with SNI
  and name check ``localhost``. It runs its own event loop in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from nomad_device.goplugin import socketdirs

if TYPE_CHECKING:
    from nomad_device.goplugin.tls import KeyPair

__all__ = ["TLSBridge", "TLSTerminator", "client_context", "server_context"]

#: What a TLS handshake may take before the connection is dropped.
HANDSHAKE_TIMEOUT: Final = 10.0
#: Bytes moved per read.
CHUNK: Final = 256 * 1024
#: The ALPN protocol gRPC over TLS uses.
ALPN_H2: Final = "h2"

log = logging.getLogger("goplugin.tls")


def _load_pair(ctx: ssl.SSLContext, pair: KeyPair, private_dir: str) -> None:
    # ssl only loads a key pair from a file: write it, readable by us only, in
    # a directory only we can enter, and remove it at once.
    fd, path = tempfile.mkstemp(dir=private_dir, suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pair.key_pem + pair.cert_pem)
        ctx.load_cert_chain(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _trust_only(ctx: ssl.SSLContext, cert_pem: bytes, what: str) -> None:
    try:
        ctx.load_verify_locations(cadata=cert_pem.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{what} is not a PEM certificate: {exc}") from None


def server_context(pair: KeyPair, client_cert_pem: bytes, private_dir: str) -> ssl.SSLContext:
    """TLS 1.2+, our certificate, the host's certificate required and trusted alone."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_mode = ssl.CERT_REQUIRED
    _trust_only(ctx, client_cert_pem, "PLUGIN_CLIENT_CERT")
    _load_pair(ctx, pair, private_dir)
    ctx.set_alpn_protocols([ALPN_H2])
    return ctx


def client_context(pair: KeyPair, server_cert_pem: bytes, private_dir: str) -> ssl.SSLContext:
    """TLS 1.2+, our certificate presented, the plugin's certificate trusted alone."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the peer and its name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _trust_only(ctx, server_cert_pem, "the plugin's handshake certificate")
    _load_pair(ctx, pair, private_dir)
    ctx.set_alpn_protocols([ALPN_H2])
    return ctx


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()


async def _relay(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Copy both ways until either side ends, then close both.

    HTTP/2 never half-closes, and TLS cannot, so one end ending ends the pair.
    """
    tasks = [asyncio.ensure_future(_pump(a[0], b[1])), asyncio.ensure_future(_pump(b[0], a[1]))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for _, writer in (a, b):
            writer.close()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.contextmanager
def _top_level(writer: asyncio.StreamWriter) -> Iterator[None]:
    """Body of a connection handler: always close the accepted connection.

    Nobody awaits a handler; a cancelled one (its loop shutting down) would
    only make asyncio print the cancellation, so it ends quietly instead.
    """
    try:
        yield
    except asyncio.CancelledError:
        pass
    finally:
        writer.close()


class _Relays:
    """The open relays of a proxy, so closing the proxy can end them."""

    def __init__(self) -> None:
        self._writers: set[asyncio.StreamWriter] = set()

    async def relay(
        self,
        a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        """:func:`_relay`, with both writers open to :meth:`abort_all` meanwhile."""
        self._writers.update((a[1], b[1]))
        try:
            await _relay(a, b)
        finally:
            self._writers.difference_update((a[1], b[1]))

    def abort_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()


class TLSTerminator:
    """Plugin side: TLS on the public address, plaintext gRPC behind it.

    Create it, bind gRPC (insecure) to :attr:`backend_path`, start gRPC, then
    :meth:`listen_unix` or :meth:`listen_tcp`; :meth:`close` at the end.
    """

    def __init__(self, pair: KeyPair, client_cert_pem: bytes) -> None:
        self._dir = socketdirs.private_dir("plugin-tls")  # mode 0700
        self._dir_fd = os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            socketdirs.hold(self._dir_fd)  # in use: no other plugin's sweep may take it
            self._context = server_context(pair, client_cert_pem, self._dir)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            os.close(self._dir_fd)
            raise
        #: Where the gRPC server must listen (plaintext; nobody else can reach it).
        self.backend_path = os.path.join(self._dir, "grpc.sock")
        self._servers: list[asyncio.AbstractServer] = []
        self._relays = _Relays()

    async def listen_unix(self, path: str) -> None:
        """Accept TLS on a unix socket at ``path`` (the caller sets umask/owner)."""
        server = await asyncio.start_unix_server(
            self._accept, path=path, ssl=self._context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT
        )
        self._servers.append(server)

    async def listen_tcp(self, host: str, port: int) -> int:
        """Accept TLS on ``host:port``; the bound port, or 0 if it is taken."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError:
            sock.close()
            return 0
        server = await asyncio.start_server(
            self._accept, sock=sock, ssl=self._context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT
        )
        self._servers.append(server)
        bound: int = sock.getsockname()[1]
        return bound

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with _top_level(writer):
            try:
                up_reader, up_writer = await asyncio.open_unix_connection(self.backend_path)
            except OSError as exc:
                log.warning("cannot reach the gRPC server behind TLS: %s", exc)
                return
            await self._relays.relay((reader, writer), (up_reader, up_writer))

    def close(self) -> None:
        """Stop accepting, drop open connections, remove the private directory."""
        for server in self._servers:
            server.close()
        self._servers.clear()
        self._relays.abort_all()
        shutil.rmtree(self._dir, ignore_errors=True)
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1


class TLSBridge:
    """Host side: a plaintext unix socket whose connections reach the plugin over TLS.

    ``network``/``address`` are the plugin's (from its handshake line). Point an
    insecure gRPC channel at ``unix:`` + :attr:`address`. Runs in a daemon
    thread; :meth:`close` stops it.
    """

    def __init__(
        self, network: str, address: str, server_cert_pem: bytes, client_pair: KeyPair
    ) -> None:
        if network not in ("unix", "tcp"):
            raise ValueError(f"network must be 'unix' or 'tcp', not {network!r}")
        self._network = network
        self._target = address
        self._dir = tempfile.mkdtemp(prefix="plugin-bridge")  # mode 0700
        try:
            self._context = client_context(client_pair, server_cert_pem, self._dir)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        #: The plaintext socket to connect gRPC to.
        self.address = os.path.join(self._dir, "bridge.sock")
        self._loop = asyncio.new_event_loop()
        self._relays = _Relays()
        self._server: asyncio.AbstractServer | None = None
        self._closed = False
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._server = self._loop.run_until_complete(
                    asyncio.start_unix_server(self._accept, path=self.address)
                )
            except BaseException as exc:
                failure.append(exc)
                started.set()
                self._loop.close()
                return
            started.set()
            try:
                self._loop.run_forever()
            finally:
                pending = asyncio.all_tasks(self._loop)
                for task in pending:
                    task.cancel()
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self._loop.close()

        self._thread = threading.Thread(target=run, name="plugin-tls-bridge", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise failure[0]

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._network == "unix":
            return await asyncio.open_unix_connection(
                self._target,
                ssl=self._context,
                server_hostname="localhost",
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT,
            )
        host, _, port = self._target.rpartition(":")
        return await asyncio.open_connection(
            host.strip("[]"),
            int(port),
            ssl=self._context,
            server_hostname="localhost",
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT,
        )

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with _top_level(writer):
            try:
                up_reader, up_writer = await self._open_upstream()
            except (OSError, ValueError) as exc:
                log.warning("TLS connection to plugin at %s failed: %s", self._target, exc)
                return
            await self._relays.relay((reader, writer), (up_reader, up_writer))

    def close(self) -> None:
        """Stop the bridge and remove its directory (idempotent)."""
        if self._closed:
            return
        self._closed = True

        def stop() -> None:
            if self._server is not None:
                self._server.close()
            self._relays.abort_all()
            self._loop.stop()

        with contextlib.suppress(RuntimeError):  # loop already gone
            self._loop.call_soon_threadsafe(stop)
        self._thread.join(5)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> TLSBridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
