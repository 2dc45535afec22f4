"""Drive a device plugin from a test: in this process, or as a real subprocess.

Both harnesses offer the same synchronous API as
:class:`~nomad_device.host.DevicePluginClient` (``info``, ``schema``,
``set_config``, ``health``, ``fingerprint``, ``reserve``, ``stats``), plus a few
conveniences for tests.

- :class:`InProcessHarness` serves a :class:`DevicePlugin` *instance* through the
  SDK's real servicers on a ``grpc.aio`` server bound to a unix socket in a
  private temporary directory. Calls cross real gRPC, so status codes, the
  stream rules and validation behave exactly as in production, yet a test can
  reach into the plugin object, its logs land in the test's ``logging`` (and
  pytest's ``caplog``), and start-up costs milliseconds.
- :class:`SubprocessHarness` launches an executable the way Nomad does and
  keeps its hclog lines; use it for anything about the process itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import grpc

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.client import KILL_GRACE, KillResult, PluginProcess, ReattachConfig
from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.host import DevicePluginClient, Stream
from nomad_device.model import DeviceGroup, DeviceGroupStats, PluginInfo, Reservation
from nomad_device.plugin.base import DevicePlugin
from nomad_device.wire import hclspec

__all__ = ["InProcessHarness", "SubprocessHarness"]

ConfigInput = bytes | Mapping[str, object] | object | None


class _HarnessAPI:
    """The host-side calls both harnesses share."""

    client: DevicePluginClient
    timeout: float = 10.0

    def info(self) -> PluginInfo:
        return self.client.info(self.timeout)

    def schema(self) -> hclspec.Spec:
        spec: hclspec.Spec = self.client.schema(self.timeout)
        return spec

    def schema_proto(self) -> Any:
        return self.client.schema_proto(self.timeout)

    def set_config(self, config: ConfigInput = None) -> bytes:
        """Send ``SetConfig`` and return the bytes sent.

        ``config`` may be the raw msgpack bytes, a config dataclass instance
        (encoded as Nomad would), a mapping shaped like an HCL config body
        (decoded against the plugin's schema), or None for the defaults-only
        config Nomad sends when the operator wrote no config block.
        """
        data = self.config_bytes(config)
        self.client.set_config(data, timeout=self.timeout)
        return data

    def config_bytes(self, config: ConfigInput = None) -> bytes:
        """The ``SetConfig`` bytes :meth:`set_config` would send for ``config``."""
        from nomad_device.agentconfig import setconfig

        if isinstance(config, bytes | bytearray):
            return bytes(config)
        if config is None:
            return setconfig.defaults_only_config(self.schema())
        if isinstance(config, Mapping):
            return setconfig.config_from_json(self.schema(), config)
        from nomad_device.config import encode_config

        return encode_config(config)

    def health(self, service: str = "plugin") -> str:
        return self.client.health(service, self.timeout)

    def fingerprint(self) -> Stream[list[DeviceGroup]]:
        return self.client.fingerprint()

    def first_fingerprint(self, timeout: float | None = None) -> list[DeviceGroup]:
        """Open a Fingerprint stream, return its first message and close it."""
        with self.client.fingerprint() as stream:
            return stream.next(self.timeout if timeout is None else timeout)

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        return self.client.reserve(device_ids, self.timeout)

    def stats(self, interval: float = 1.0) -> Stream[list[DeviceGroupStats]]:
        return self.client.stats(interval)


#: As the host client's channel: no retries, no 4 MiB cap on messages.
_CHANNEL_OPTIONS: Final = [
    ("grpc.enable_retries", 0),
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
]


class _InProcessPlugin(PluginProcess):
    """The host's view of a plugin served in this very process.

    ``kill()`` does what a host's kill does to a plugin (Shutdown, then the
    server goes away) but never signals a process: the PID is our own.
    """

    def __init__(
        self,
        reattach: ReattachConfig,
        channel: grpc.Channel,
        logger: logging.Logger,
        close_harness: Callable[[], None],
        stopped: threading.Event,
    ) -> None:
        super().__init__(reattach, channel, None, logger)
        self._close_harness = close_harness
        self._stopped = stopped

    def kill(self, grace: float = KILL_GRACE) -> KillResult:
        from nomad_device.proto import goplugin_controller_pb2, goplugin_controller_pb2_grpc

        start = time.monotonic()
        if self._stopped.is_set():
            self._close_channel()
            return KillResult("gone", 0.0, None)
        stub = goplugin_controller_pb2_grpc.GRPCControllerStub(self.channel)
        try:
            stub.Shutdown(goplugin_controller_pb2.Empty(), timeout=grace)
        except grpc.RpcError as exc:
            self.logger.debug("Shutdown during kill: %s", exc)
        self._close_channel()
        graceful = self._stopped.wait(grace)
        self._close_harness()  # whatever Shutdown did, the server goes now
        outcome = "graceful" if graceful else "forced"
        return KillResult(outcome, time.monotonic() - start, 0 if graceful else None)


class InProcessHarness(_HarnessAPI):
    """Serve ``plugin`` in this process over gRPC on a private unix socket.

    Use as a context manager (or call :meth:`close`)::

        with InProcessHarness(MyPlugin()) as h:
            h.set_config()
            groups = h.first_fingerprint()

    The server runs on its own event loop in a background thread, so the test
    itself stays synchronous. ``plugin`` is reachable as :attr:`plugin`.
    """

    def __init__(self, plugin: DevicePlugin[Any] | type[DevicePlugin[Any]], timeout: float = 10.0):
        self.plugin: DevicePlugin[Any] = plugin() if isinstance(plugin, type) else plugin
        self.timeout = timeout
        self._dir = tempfile.mkdtemp(prefix="nomad-device-harness-")
        self.address = os.path.join(self._dir, "plugin.sock")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="in-process-plugin", daemon=True
        )
        self._server: grpc.aio.Server | None = None
        self._shutdown_task: asyncio.Task[None] | None = None
        self._closed = False
        self._stopped = threading.Event()
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout)
            channel = grpc.insecure_channel(f"unix:{self.address}", options=_CHANNEL_OPTIONS)
            grpc.channel_ready_future(channel).result(timeout)
        except BaseException:
            self.close()
            raise
        # The PID is this process's: the client's kill() is ours, and never signals it.
        reattach = ReattachConfig(
            "unix", self.address, os.getpid(), NOMAD_HANDSHAKE.protocol_version
        )
        self._process = _InProcessPlugin(
            reattach, channel, logging.getLogger("plugin.in-process"), self.close, self._stopped
        )
        self.client = DevicePluginClient(self._process)

    async def _start(self) -> None:
        from nomad_device.goplugin.server import build_server
        from nomad_device.goplugin.services import add_goplugin_services
        from nomad_device.plugin.servicer import register

        server = build_server()  # the production server's options, 4 MiB cap lifted
        loop = asyncio.get_running_loop()

        def on_shutdown() -> None:
            # As a served plugin does on Shutdown: stop serving, run close().
            self._shutdown_task = loop.create_task(self._stop())

        await add_goplugin_services(server, None, on_shutdown)
        await register(self.plugin, server)
        server.add_insecure_port(f"unix:{self.address}")
        await server.start()
        self._server = server

    async def _stop(self) -> None:
        from nomad_device.goplugin.server import STOP_GRACE_SECONDS
        from nomad_device.plugin.runtime import runtime_of
        from nomad_device.plugin.serve import close_plugin

        server, self._server = self._server, None
        if server is not None:
            await server.stop(STOP_GRACE_SECONDS)
            await close_plugin(self.plugin)
        runtime_of(self.plugin).calls.shutdown()  # idle author threads go too
        self._stopped.set()
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Stop the server (running the plugin's ``close()``) and the loop; idempotent."""
        if self._closed:
            return
        self._closed = True
        process = getattr(self, "_process", None)
        if process is not None:
            process.close()
        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(self.timeout)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(self.timeout)
        if not self._loop.is_running():
            self._loop.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> InProcessHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SubprocessHarness(_HarnessAPI):
    """Launch a plugin executable as Nomad would; kill it on exit.

    ``logs`` collects every stderr line as parsed hclog (plain-text lines are
    kept too, marked ``raw``)::

        with SubprocessHarness([sys.executable, "-m", "my_plugin"]) as h:
            assert h.info().name == "my-plugin"
            assert h.kill().outcome == "graceful"
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        start_timeout: float = 30.0,
        timeout: float = 10.0,
    ) -> None:
        self.command = list(command)
        self.timeout = timeout
        self.logs: list[HclogEntry] = []
        self.client = DevicePluginClient.launch(
            self.command,
            on_log=self.logs.append,
            start_timeout=start_timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )
        self.kill_result: KillResult | None = None

    @property
    def pid(self) -> int:
        return self.client.process.pid

    def messages(self) -> list[str]:
        """The ``@message`` of every log line so far."""
        return [entry.message for entry in list(self.logs)]

    def kill(self) -> KillResult:
        """Stop the plugin as Nomad does (Shutdown, 2 s grace, SIGKILL); idempotent."""
        if self.kill_result is None:
            self.kill_result = self.client.kill()
        return self.kill_result

    def __enter__(self) -> SubprocessHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
