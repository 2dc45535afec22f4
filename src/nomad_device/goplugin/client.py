"""The host side of go-plugin: launch a plugin executable and talk to it.

Mirrors what go-plugin's Go client does, because that is what real hosts do:
the environment it sets, how it reads the handshake and the plugin's hclog
stderr, and how it kills (Shutdown RPC, a grace period, then SIGKILL to the
PID only).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import grpc
from google.protobuf import empty_pb2

from nomad_device.goplugin import handshake as hs
from nomad_device.goplugin.hclog import HclogEntry, parse_line, python_level
from nomad_device.proto import (
    goplugin_controller_pb2,
    goplugin_controller_pb2_grpc,
    goplugin_stdio_pb2_grpc,
)

if TYPE_CHECKING:
    from nomad_device.goplugin.tls import KeyPair
    from nomad_device.goplugin.tlsproxy import TLSBridge

__all__ = ["KillResult", "PluginError", "PluginProcess", "ReattachConfig"]

#: go-plugin's default wait for the handshake line.
DEFAULT_START_TIMEOUT: Final = 60.0
#: go-plugin's wait between Shutdown and SIGKILL.
KILL_GRACE: Final = 2.0
#: How long a kill waits, once the process is gone, for its last stderr lines.
#: go-plugin waits for its stderr reader without a bound; a grandchild holding
#: the pipe open must not hang the host, hence one.
STDERR_DRAIN: Final = 2.0


#: As go-plugin's client: no retries, and no 4 MiB cap on messages (a plugin with
#: 100,000 devices sends stats messages of tens of MiB).
_CHANNEL_OPTIONS: Final = [
    ("grpc.enable_retries", 0),
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
]


class PluginError(RuntimeError):
    """The plugin could not be started or reached."""


@dataclass(frozen=True)
class ReattachConfig:
    """Enough to find a running plugin again after the host restarted."""

    network: str
    address: str
    pid: int
    protocol_version: int
    server_cert_pem: bytes | None = None


@dataclass(frozen=True)
class KillResult:
    """How a kill ended: ``graceful`` (exited after Shutdown), ``forced``
    (SIGKILL after the grace period) or ``gone`` (was not running)."""

    outcome: str
    seconds: float
    returncode: int | None


LogCallback = Callable[[HclogEntry], None]


class PluginProcess:
    """A running plugin (launched or reattached) with an open gRPC channel."""

    def __init__(
        self,
        reattach: ReattachConfig,
        channel: grpc.Channel,
        process: subprocess.Popen[bytes] | None,
        logger: logging.Logger,
    ) -> None:
        self.reattach_config = reattach
        self.channel = channel
        self.process = process
        self.logger = logger
        self._stdio_thread: threading.Thread | None = None
        self._bridge: TLSBridge | None = None
        self._client_pair: KeyPair | None = None
        self._channel_closed = False
        self.stdio: list[tuple[int, bytes]] = []
        #: The thread relaying a launched plugin's stderr (None when reattached).
        self.stderr_relay: threading.Thread | None = None
        #: True once this side began to end the connection (``close()`` or ``kill()``):
        #: from then on, an end of any stream is ours, not the plugin's.
        self.closing = False

    # -- construction -------------------------------------------------------

    @classmethod
    def launch(
        cls,
        command: Sequence[str],
        handshake: hs.HandshakeConfig,
        *,
        versions: Sequence[int] | None = None,
        env: Mapping[str, str] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        logger: logging.Logger | None = None,
        on_log: LogCallback | None = None,
        auto_mtls: bool = False,
        min_port: int | None = None,
        max_port: int | None = None,
        unix_socket_dir: str | None = None,
        cwd: str | None = None,
    ) -> PluginProcess:
        """Start ``command`` as go-plugin's client would and connect to it."""
        logger = logger or logging.getLogger(f"plugin.{os.path.basename(command[0])}")
        environ = dict(os.environ if env is None else env)
        environ[handshake.magic_cookie_key] = handshake.magic_cookie_value
        environ[hs.ENV_PROTOCOL_VERSIONS] = ",".join(
            str(v) for v in (versions or [handshake.protocol_version])
        )
        if min_port is not None:
            environ[hs.ENV_MIN_PORT] = str(min_port)
        if max_port is not None:
            environ[hs.ENV_MAX_PORT] = str(max_port)
        if unix_socket_dir is not None:
            environ[hs.ENV_UNIX_SOCKET_DIR] = unix_socket_dir
        client_pair = None
        if auto_mtls:
            from nomad_device.goplugin.tls import generate_keypair

            client_pair = generate_keypair()
        if client_pair is not None:
            environ[hs.ENV_CLIENT_CERT] = client_pair.cert_pem.decode()

        try:
            process = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=environ,
                cwd=cwd,
            )
        except OSError as exc:
            raise PluginError(f"cannot start plugin {command[0]!r}: {exc}") from exc

        recent: collections.deque[str] = collections.deque(maxlen=20)
        relay = threading.Thread(
            target=_relay_stderr,
            args=(process, logger, on_log, recent),
            name="plugin-stderr",
            daemon=True,
        )
        relay.start()
        try:
            line = _read_handshake(process, start_timeout, recent, relay)
            parsed = hs.HandshakeLine.parse(line)
            accepted = versions or [handshake.protocol_version]
            if parsed.app_version not in accepted:
                raise PluginError(
                    f"incompatible API version with plugin: plugin version "
                    f"{parsed.app_version}, client versions {list(accepted)}"
                )
            if parsed.protocol != "grpc":
                raise PluginError(f"plugin speaks {parsed.protocol!r}; only grpc is supported")
            if parsed.cert and client_pair is None:
                raise PluginError("plugin sent a certificate although none was requested")
            if client_pair is not None and not parsed.cert:
                raise PluginError("AutoMTLS requested but the plugin sent no certificate")
            from nomad_device.goplugin.tls import cert_from_handshake

            config = ReattachConfig(
                parsed.network,
                parsed.address,
                process.pid,
                parsed.app_version,
                cert_from_handshake(parsed.cert) if parsed.cert else None,
            )
            plugin = cls._connect(config, process, logger, client_pair, start_timeout)
        except BaseException:
            _force_kill(process)
            raise
        plugin.stderr_relay = relay
        return plugin

    @classmethod
    def reattach(
        cls,
        config: ReattachConfig,
        *,
        logger: logging.Logger | None = None,
        client_pair: KeyPair | None = None,
        timeout: float = 10.0,
    ) -> PluginProcess:
        """Connect to a plugin some earlier host launched."""
        if not _pid_alive(config.pid):
            raise PluginError(f"reattach: plugin process {config.pid} is not running")
        return cls._connect(
            config, None, logger or logging.getLogger("plugin.reattached"), client_pair, timeout
        )

    @classmethod
    def _connect(
        cls,
        config: ReattachConfig,
        process: subprocess.Popen[bytes] | None,
        logger: logging.Logger,
        client_pair: KeyPair | None,
        timeout: float,
    ) -> PluginProcess:
        channel, bridge = _open_channel(config, client_pair, timeout)
        plugin = cls(config, channel, process, logger)
        plugin._bridge = bridge
        plugin._client_pair = client_pair
        plugin._start_stdio()
        return plugin

    # -- use ----------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.reattach_config.pid

    def _start_stdio(self) -> None:
        """Open StreamStdio as go-plugin does; keep what arrives for callers."""
        stub = goplugin_stdio_pb2_grpc.GRPCStdioStub(self.channel)

        def run() -> None:
            with contextlib.suppress(grpc.RpcError, ValueError):
                for data in stub.StreamStdio(empty_pb2.Empty()):
                    self.stdio.append((data.channel, data.data))
                    self.logger.debug(
                        "plugin stdio", extra={"channel": data.channel, "data": data.data}
                    )

        self._stdio_thread = threading.Thread(target=run, name="plugin-stdio", daemon=True)
        self._stdio_thread.start()

    def _close_channel(self) -> None:
        self.closing = True
        if self._channel_closed:
            return
        self._channel_closed = True
        self.channel.close()
        if self._bridge is not None:
            self._bridge.close()

    def close(self) -> None:
        """Drop the connection without stopping the plugin (a host 'dying')."""
        self._close_channel()

    def kill(self, grace: float = KILL_GRACE) -> KillResult:
        """Shutdown RPC, wait ``grace`` seconds, then SIGKILL the PID only.

        Like go-plugin's ``Kill``, it returns once the plugin's stderr has been
        read to its end too, so every line the plugin wrote has been relayed
        (``on_log`` called) by then.
        """
        start = time.monotonic()
        self.closing = True
        if not self._alive():
            self._close_channel()
            self._drain_stderr()
            return KillResult("gone", 0.0, self._returncode())
        graceful = self._shutdown_rpc(grace)
        self._close_channel()
        if graceful and self._wait(grace):
            self._drain_stderr()
            return KillResult("graceful", time.monotonic() - start, self._returncode())
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self._wait(5.0)
        self._drain_stderr()
        return KillResult("forced", time.monotonic() - start, self._returncode())

    def _drain_stderr(self) -> None:
        relay = self.stderr_relay
        if relay is not None and relay is not threading.current_thread():
            relay.join(STDERR_DRAIN)

    def _shutdown_rpc(self, grace: float) -> bool:
        """Call Shutdown; False when the plugin could not be asked to exit.

        After :meth:`close` the channel is gone (and gRPC crashes the process on a
        call through a closed channel), so the call goes over a connection of its own.
        """
        channel, bridge = self.channel, None
        if self._channel_closed:
            try:
                channel, bridge = _open_channel(self.reattach_config, self._client_pair, grace)
            except PluginError:
                return False
        try:
            stub = goplugin_controller_pb2_grpc.GRPCControllerStub(channel)
            stub.Shutdown(goplugin_controller_pb2.Empty(), timeout=grace)
        except grpc.RpcError as exc:
            # The plugin may close the connection as it exits; that is fine.
            code = exc.code() if isinstance(exc, grpc.Call) else None
            if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                self.logger.warning("error closing client during kill: %s", exc)
                return False
        finally:
            if channel is not self.channel:
                channel.close()
                if bridge is not None:
                    bridge.close()
        return True

    def _alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return _pid_alive(self.pid)

    def _returncode(self) -> int | None:
        return self.process.returncode if self.process is not None else None

    def _wait(self, timeout: float) -> bool:
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _pid_alive(self.pid):
                return True
            time.sleep(0.02)
        return not _pid_alive(self.pid)


def _open_channel(
    config: ReattachConfig, client_pair: KeyPair | None, timeout: float
) -> tuple[grpc.Channel, TLSBridge | None]:
    """A ready channel to the plugin (through a TLS bridge for AutoMTLS)."""
    target = f"unix:{config.address}" if config.network == "unix" else config.address
    bridge: TLSBridge | None = None
    if config.server_cert_pem is not None:
        if client_pair is None:
            raise PluginError("the plugin uses AutoMTLS: a client key pair is needed")
        # TLS through Python's OpenSSL: gRPC's BoringSSL cannot speak go-plugin's
        # P-521 certificates (see docs/interop.md).
        from nomad_device.goplugin.tlsproxy import TLSBridge

        bridge = TLSBridge(config.network, config.address, config.server_cert_pem, client_pair)
        target = f"unix:{bridge.address}"
    channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError as exc:
        channel.close()
        if bridge is not None:
            bridge.close()
        raise PluginError(f"cannot connect to plugin at {config.address}") from exc
    return channel, bridge


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ", 1)[1][:1] != b"Z"
    except (OSError, IndexError):
        return True


def _read_handshake(
    process: subprocess.Popen[bytes],
    timeout: float,
    recent: collections.deque[str],
    relay: threading.Thread,
) -> str:
    result: list[str] = []
    done = threading.Event()
    assert process.stdout is not None
    stdout = process.stdout

    def read() -> None:
        first = stdout.readline()
        result.append(first.decode("utf-8", "replace"))
        done.set()
        # Everything after the handshake is read and thrown away, as go-plugin does.
        while stdout.read(65536):
            pass

    threading.Thread(target=read, name="plugin-stdout", daemon=True).start()
    if not done.wait(timeout):
        _force_kill(process)
        raise PluginError(f"timeout while waiting for plugin to start ({timeout:g}s)")
    line = result[0]
    if not line.strip():
        code = process.wait(5)
        relay.join(2)  # the relay ends at EOF: then ``recent`` holds the last lines
        tail = "\n".join(recent)
        raise PluginError(
            f"plugin exited before we could connect (exit status {code})"
            + (f"; its last output:\n{tail}" if tail else "")
        )
    return line


#: How many distinct errors of an ``on_log`` callback are logged (then they are counted).
_CALLBACK_ERRORS_LOGGED: Final = 10


def _relay_stderr(
    process: subprocess.Popen[bytes],
    logger: logging.Logger,
    on_log: LogCallback | None,
    recent: collections.deque[str],
) -> None:
    """Read the plugin's stderr to the end, whatever ``on_log`` does.

    A relay that stopped reading would let the pipe fill, and the plugin's next
    write to stderr -- a log line from its event loop -- would block it. So a
    raising callback is logged (once per distinct error) and reading goes on.
    """
    assert process.stderr is not None
    seen: set[tuple[str, str]] = set()
    for raw in process.stderr:
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        recent.append(text)
        try:
            entry = parse_line(text)
        except ValueError:
            entry = HclogEntry("debug", text, None, raw=True)
        if on_log is not None:
            try:
                on_log(entry)
            except Exception as exc:
                _callback_failed(logger, exc, seen)
        logger.log(
            python_level(entry.level),
            entry.message,
            extra={"plugin_module": entry.module, "plugin_fields": dict(entry.fields)},
        )


def _callback_failed(logger: logging.Logger, exc: Exception, seen: set[tuple[str, str]]) -> None:
    key = (type(exc).__name__, str(exc))
    if key in seen or len(seen) > _CALLBACK_ERRORS_LOGGED:
        return
    seen.add(key)
    if len(seen) > _CALLBACK_ERRORS_LOGGED:
        logger.error("the on_log callback keeps failing; further distinct errors are not logged")
        return
    logger.error(
        "the on_log callback raised %s: %s (the plugin's stderr is still relayed)",
        key[0],
        exc,
        exc_info=exc,
    )


def _force_kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)
