"""Serve gRPC services as a go-plugin plugin process.

The life of the process: refuse to run without the host's cookie; route all
output through hclog; negotiate the app protocol; listen (unix socket by
default); print the handshake; remove the socket directories of plugins that
were SIGKILLed (socketdirs); serve until the host calls Shutdown or sends
SIGTERM; clean up the socket; run the stop hook; exit. Nothing here knows
about Nomad.

Clean-up comes before the stop hook, and on every error path: the host
SIGKILLs a plugin that is slow to exit, and a killed process removes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Final, NoReturn

import grpc

from nomad_device.frozen import frozen
from nomad_device.goplugin import handshake as hs
from nomad_device.goplugin import socketdirs
from nomad_device.goplugin.hclog import TRACE, StdioCapture, install_plugin_logging
from nomad_device.goplugin.services import add_goplugin_services

if TYPE_CHECKING:
    from nomad_device.goplugin.tlsproxy import TLSTerminator

__all__ = [
    "ENV_NETWORK",
    "SERVER_OPTIONS",
    "Registrar",
    "ServeConfig",
    "StartRefused",
    "build_server",
    "serve",
]

#: Our own switch (not go-plugin's): ``tcp`` makes the plugin listen on
#: 127.0.0.1 within PLUGIN_MIN_PORT..PLUGIN_MAX_PORT instead of a unix socket,
#: and only with AutoMTLS (go-plugin's Go servers never listen on TCP on Linux).
ENV_NETWORK: Final = "GOPLUGIN_PY_NETWORK"

#: How long in-flight calls get to finish once a stop is requested. Long-lived
#: streams are cancelled after it; the host waits 2 s in all.
STOP_GRACE_SECONDS: Final = 0.2

#: Every plugin server's options (and any test server that stands in for one).
SERVER_OPTIONS: Final[tuple[tuple[str, int | str], ...]] = (
    ("grpc.so_reuseport", 0),  # two plugins must never share a port
    # No 4 MiB message cap, as go-plugin's default server: large device sets
    # make large fingerprint and stats messages, and large Reserve requests.
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
)

Registrar = Callable[[grpc.aio.Server], Awaitable[None]]

log = logging.getLogger("goplugin.server")


@frozen
class ServeConfig:
    """What to serve: the handshake and, per app protocol version, the services.

    ``on_stop`` runs after the server stopped and its socket was removed
    (release resources there); it is not time-boxed here, so keep it well
    under the host's 2 s grace.
    """

    handshake: hs.HandshakeConfig
    versions: Mapping[int, Registrar]
    network: str | None = None
    log_level: int = TRACE
    on_stop: Callable[[], Awaitable[None]] | None = None
    grpc_options: tuple[tuple[str, int | str], ...] = ()


class StartRefused(RuntimeError):
    """The host asked for something this process cannot do: one log line, no traceback."""


class _Listener:
    __slots__ = ("address", "cleanup", "network")

    def __init__(self, network: str, address: str, cleanup: Callable[[], None]) -> None:
        self.network = network
        self.address = address
        self.cleanup = cleanup


def build_server(options: tuple[tuple[str, int | str], ...] = ()) -> grpc.aio.Server:
    """A ``grpc.aio`` server with :data:`SERVER_OPTIONS` (later ``options`` win)."""
    return grpc.aio.server(options=[*SERVER_OPTIONS, *options])


def serve(config: ServeConfig) -> NoReturn:
    """Run the plugin process to completion; never returns."""
    if not config.handshake.cookie_ok():
        sys.stderr.write(hs.NOT_A_PLUGIN_MESSAGE)
        sys.stderr.flush()
        raise SystemExit(1)

    capture = install_plugin_logging(config.log_level)
    code = 1
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        code = loop.run_until_complete(_serve(config, capture))
    except BaseException as exc:
        if not isinstance(exc, SystemExit | KeyboardInterrupt):
            # A refusal is the whole story; anything else gets its traceback.
            log.error(
                "plugin failed: %s", exc, exc_info=None if isinstance(exc, StartRefused) else exc
            )
    finally:
        if capture is not None:
            capture.stop()
    # os._exit: a sync author call stuck in a worker thread must not keep a
    # shut-down plugin alive past the host's grace period.
    os._exit(code)


async def _serve(config: ServeConfig, capture: StdioCapture | None) -> int:
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_log_loop_exception)
    stop = asyncio.Event()
    # Before the handshake: a host may signal as soon as it has read it.
    _install_signal_handlers(loop, stop)

    version = hs.negotiate_version(os.environ.get(hs.ENV_PROTOCOL_VERSIONS), config.versions.keys())
    server = build_server(config.grpc_options)
    try:
        await add_goplugin_services(server, capture, stop.set)
        await config.versions[version](server)

        credentials, cert_field = _server_credentials()
        listener = await _listen(server, credentials, config.network)
        try:
            line = hs.HandshakeLine(version, listener.network, listener.address, "grpc", cert_field)
            log.debug(
                "plugin address", extra={"network": listener.network, "address": listener.address}
            )
            _write_handshake(capture, line.render())
            # After the handshake and in a thread of its own: serving never waits for it.
            socketdirs.sweep_in_background()
            await stop.wait()
            log.debug("stopping plugin server")
            await server.stop(STOP_GRACE_SECONDS)
        finally:
            listener.cleanup()
    finally:
        # After the clean-up, and on every path: a slow hook may get us SIGKILLed.
        if config.on_stop is not None:
            await config.on_stop()
    return 0


def _write_handshake(capture: StdioCapture | None, text: str) -> None:
    fd = capture.real_stdout if capture is not None else sys.stdout.fileno()
    data = text.encode()
    while data:
        data = data[os.write(fd, data) :]


def _install_signal_handlers(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    interrupts = 0

    def on_interrupt() -> None:
        # The host owns our lifetime; Ctrl-C in its terminal reaches us too.
        nonlocal interrupts
        interrupts += 1
        log.log(TRACE, "plugin received interrupt signal, ignoring", extra={"count": interrupts})

    def on_terminate() -> None:
        log.info("received SIGTERM, stopping")
        stop.set()

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    loop.add_signal_handler(signal.SIGTERM, on_terminate)


def _server_credentials() -> tuple[TLSTerminator | None, str]:
    """AutoMTLS, when the host asked for it: a TLS terminator and our handshake cert.

    TLS is done by OpenSSL in front of a plaintext gRPC socket (see tlsproxy):
    gRPC's own TLS cannot complete go-plugin's P-521 mutual-TLS handshake.
    """
    client_cert = os.environ.get(hs.ENV_CLIENT_CERT, "")
    if not client_cert:
        return None, ""
    try:
        import ssl  # noqa: F401  (what tlsproxy terminates TLS with)
    except ImportError as exc:  # a Python built without OpenSSL
        raise StartRefused(
            f"the host asked for AutoMTLS ({hs.ENV_CLIENT_CERT} is set), which needs Python's "
            f"ssl module, and {sys.executable} cannot import it ({exc}); run the plugin on a "
            "Python built with OpenSSL, or under a host that does not ask for AutoMTLS"
        ) from None
    # Imported here: cryptography is slow to import and most hosts never ask.
    from nomad_device.goplugin.tls import cert_to_handshake, generate_keypair
    from nomad_device.goplugin.tlsproxy import TLSTerminator

    pair = generate_keypair()
    return TLSTerminator(pair, client_cert.encode()), cert_to_handshake(pair)


def _add_port(server: grpc.aio.Server, address: str) -> int:
    return server.add_insecure_port(address)


async def _listen(
    server: grpc.aio.Server, tls: TLSTerminator | None, network: str | None
) -> _Listener:
    try:
        network = network or os.environ.get(ENV_NETWORK) or "unix"
        if network not in ("unix", "tcp"):
            raise ValueError(f"{ENV_NETWORK} must be 'unix' or 'tcp', not {network!r}")
        if network == "tcp" and tls is None:
            # Any local user can connect to 127.0.0.1, and plugins run as root.
            raise ValueError(
                f"{ENV_NETWORK}=tcp needs AutoMTLS (the host sets {hs.ENV_CLIENT_CERT}):"
                " without it any local user could connect to the plugin and configure it;"
                " use the default unix socket"
            )
        if tls is not None:
            # gRPC serves plaintext where only this process can reach it; the
            # terminator takes the public address below.
            _add_port(server, f"unix:{tls.backend_path}")
            await server.start()
        if network == "tcp":
            return await _listen_tcp(server, tls)
        return await _listen_unix(server, tls)
    except BaseException:
        if tls is not None:
            tls.close()
        raise


async def _listen_tcp(server: grpc.aio.Server, tls: TLSTerminator | None) -> _Listener:
    low = _port_env(hs.ENV_MIN_PORT)
    high = _port_env(hs.ENV_MAX_PORT)
    if low > high:
        raise ValueError(
            f"{hs.ENV_MIN_PORT} value of {low} is greater than {hs.ENV_MAX_PORT} value of {high}"
        )
    for port in range(low, high + 1):
        if tls is not None:
            bound = await tls.listen_tcp("127.0.0.1", port)
            if bound:
                return _Listener("tcp", f"127.0.0.1:{bound}", tls.close)
            continue
        try:
            bound = _add_port(server, f"127.0.0.1:{port}")
        except RuntimeError:
            continue
        if bound:
            await server.start()
            return _Listener("tcp", f"127.0.0.1:{bound}", lambda: None)
    if tls is not None:
        tls.close()
    raise RuntimeError(f"couldn't bind plugin TCP listener in ports {low}..{high}")


def _port_env(name: str) -> int:
    text = os.environ.get(name, "")
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"couldn't get value from {name}: {text!r} is not a number") from None


async def _listen_unix(server: grpc.aio.Server, tls: TLSTerminator | None) -> _Listener:
    """A unix socket that only this process's user (and the host's group) can reach.

    Nothing here follows a link another user could plant: the directory is
    opened once (``O_NOFOLLOW``), the socket is bound through that descriptor
    (``/proc/self/fd/N/name``) with its final mode already set by the umask,
    and the group is changed relative to the descriptor without following
    the name. A directory that a local user can write (a shared
    ``PLUGIN_UNIX_SOCKET_DIR``) can then only be used to make the bind fail.
    """
    group = os.environ.get(hs.ENV_UNIX_SOCKET_GROUP, "")
    gid = _group_id(group) if group else None  # refuse a bad group before creating anything
    shared_dir = os.environ.get(hs.ENV_UNIX_SOCKET_DIR, "")
    own_dir = None if shared_dir else socketdirs.private_dir("plugin")
    sock_dir = shared_dir or own_dir
    assert sock_dir is not None
    name = f"plugin{os.urandom(6).hex()}.sock"
    path = os.path.join(sock_dir, name)
    dir_fd: int | None = None

    def cleanup() -> None:
        if tls is not None:
            tls.close()
        if dir_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
            with contextlib.suppress(OSError):
                os.close(dir_fd)
        if own_dir is not None:
            with contextlib.suppress(OSError):
                os.rmdir(own_dir)

    try:
        dir_fd = os.open(sock_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        if own_dir is not None:
            st = os.fstat(dir_fd)
            if st.st_uid != os.geteuid() or st.st_mode & 0o077:
                raise PermissionError(f"socket directory {own_dir} was replaced after it was made")
            socketdirs.hold(dir_fd)  # in use: no other plugin's sweep may take it
            if gid is not None:
                # The group must be able to reach the socket through our private directory.
                os.fchown(dir_fd, -1, gid)
                os.fchmod(dir_fd, 0o710)
        # Where /proc is mounted (every Nomad client), bind through the descriptor.
        fd_dir = f"/proc/self/fd/{dir_fd}"
        through_fd = f"{fd_dir}/{name}" if os.path.isdir(fd_dir) else path
        # The socket is born with its final mode: nobody else may connect in
        # between, and no chmod by name follows.
        old_umask = os.umask(0o117 if gid is not None else 0o177)
        try:
            if tls is None:
                _add_port(server, f"unix:{through_fd}")
                await server.start()
            else:
                await tls.listen_unix(through_fd)
        finally:
            os.umask(old_umask)
        if gid is not None:
            os.chown(name, -1, gid, dir_fd=dir_fd, follow_symlinks=False)
    except BaseException:
        cleanup()
        raise
    return _Listener("unix", path, cleanup)


def _group_id(group: str) -> int:
    if group.isdigit():
        return int(group)
    import grp  # here: only a host that sets PLUGIN_UNIX_SOCKET_GROUP by name needs it

    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"failed to find gid from {group!r}") from None


def _log_loop_exception(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    exc = context.get("exception")
    message = str(context.get("message", "unhandled error in event loop"))
    if isinstance(exc, BaseException):
        log.error("%s: %s", message, exc, exc_info=exc)
    else:
        log.error(message)
