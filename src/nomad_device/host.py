"""Drive a device plugin executable as a Nomad client does, with typed results.

Used by the launcher, the test harnesses and the conformance suite; works for
Python and Go plugins alike because it only speaks the wire protocol.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import grpc
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nomad_device.constants import DEVICE_API_VERSION, NOMAD_HANDSHAKE
from nomad_device.goplugin.client import KillResult, PluginProcess, ReattachConfig
from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.model import DeviceGroup, DeviceGroupStats, PluginInfo, Reservation
from nomad_device.proto import base_pb2, base_pb2_grpc, device_pb2, device_pb2_grpc
from nomad_device.wire import convert

__all__ = ["CallError", "DevicePluginClient", "Stream"]

T = TypeVar("T")
M = TypeVar("M")


class CallError(Exception):
    """A plugin call failed; ``code`` is the gRPC status code."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details

    @classmethod
    def wrap(cls, method: str, exc: grpc.RpcError) -> CallError:
        if isinstance(exc, grpc.Call):
            return cls(method, exc.code(), exc.details() or "")
        return cls(method, grpc.StatusCode.UNKNOWN, str(exc))


class Stream(Generic[T]):
    """An open server stream; iterate it, ``cancel()`` to end it from our side.

    Iteration stops cleanly only when the end is ours: after :meth:`cancel`
    (also done by :meth:`next` on a timeout and by leaving a ``with`` block),
    or once our side began to close the connection (``kill()``, ``close()``).
    Any other end the plugin gives the stream -- CANCELLED included, which a
    plugin that cancels its own handler sends -- raises :class:`CallError`:
    a Nomad client counts every such end as the plugin failing.
    """

    def __init__(
        self,
        method: str,
        call: Any,
        convert_fn: Callable[[Any], T],
        closed: Callable[[], bool] | None = None,
    ) -> None:
        self._method = method
        self._call = call
        self._convert = convert_fn
        self._closed = closed
        self._cancelled = False

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        try:
            return self._convert(next(self._call))
        except grpc.RpcError as exc:
            if self._ended_by_us(exc):
                raise StopIteration from None
            raise CallError.wrap(self._method, exc) from None

    def _ended_by_us(self, exc: grpc.RpcError) -> bool:
        if not isinstance(exc, grpc.Call) or exc.code() != grpc.StatusCode.CANCELLED:
            return False
        return self._cancelled or (self._closed is not None and self._closed())

    def next(self, timeout: float) -> T:
        """The next message within ``timeout`` seconds.

        On timeout the stream is cancelled (so nothing is left reading in the
        background) and TimeoutError is raised: for a Fingerprint stream that is
        how a test says "still open, nothing new".
        """
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(self.__next__)
            try:
                return future.result(timeout)
            except concurrent.futures.TimeoutError:
                self.cancel()
                raise TimeoutError(f"{self._method}: no message within {timeout:g}s") from None

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()

    def __enter__(self) -> Stream[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class DevicePluginClient:
    """A Nomad-like host for one device plugin process."""

    def __init__(self, process: PluginProcess) -> None:
        self.process = process
        channel = process.channel
        self._base = base_pb2_grpc.BasePluginStub(channel)
        self._device = device_pb2_grpc.DevicePluginStub(channel)
        self._health = health_pb2_grpc.HealthStub(channel)

    @classmethod
    def launch(
        cls,
        command: Sequence[str],
        *,
        logger: logging.Logger | None = None,
        on_log: Callable[[HclogEntry], None] | None = None,
        start_timeout: float = 60.0,
        **options: Any,
    ) -> DevicePluginClient:
        """Start the executable as a Nomad client would (see PluginProcess.launch)."""
        process = PluginProcess.launch(
            command,
            NOMAD_HANDSHAKE,
            logger=logger,
            on_log=on_log,
            start_timeout=start_timeout,
            min_port=options.pop("min_port", 10000),
            max_port=options.pop("max_port", 25000),
            **options,
        )
        return cls(process)

    @classmethod
    def reattach(cls, config: ReattachConfig, **options: Any) -> DevicePluginClient:
        return cls(PluginProcess.reattach(config, **options))

    # -- base plugin -----------------------------------------------------------

    def info(self, timeout: float | None = 30) -> PluginInfo:
        pb = self._unary("PluginInfo", self._base.PluginInfo, base_pb2.PluginInfoRequest(), timeout)
        return PluginInfo(pb.name, pb.plugin_version, tuple(pb.plugin_api_versions), pb.type)

    def schema_proto(self, timeout: float | None = 30) -> Any:
        """The raw hclspec.Spec message (for byte-level comparisons)."""
        pb = self._unary(
            "ConfigSchema", self._base.ConfigSchema, base_pb2.ConfigSchemaRequest(), timeout
        )
        return pb.spec

    def schema(self, timeout: float | None = 30) -> Any:
        """The config schema as our Spec model."""
        from nomad_device.wire import hclspec

        return hclspec.from_proto(self.schema_proto(timeout))

    def set_config(
        self,
        msgpack_config: bytes,
        *,
        api_version: str = DEVICE_API_VERSION,
        timeout: float | None = 30,
    ) -> None:
        """Send config bytes (cty msgpack, as Nomad encodes them)."""
        request = base_pb2.SetConfigRequest(
            msgpack_config=msgpack_config, plugin_api_version=api_version
        )
        self._unary("SetConfig", self._base.SetConfig, request, timeout)

    def health(self, service: str = "plugin", timeout: float | None = 10) -> str:
        request = health_pb2.HealthCheckRequest(service=service)
        pb = self._unary("Health.Check", self._health.Check, request, timeout)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(pb.status))

    # -- device plugin ---------------------------------------------------------

    def fingerprint(self) -> Stream[list[DeviceGroup]]:
        call = self._device.Fingerprint(device_pb2.FingerprintRequest())
        return Stream(
            "Fingerprint",
            call,
            lambda pb: [convert.group_from_proto(g) for g in pb.device_group],
            self._closed,
        )

    def reserve(self, device_ids: Sequence[str], timeout: float | None = 30) -> Reservation:
        request = device_pb2.ReserveRequest(device_ids=list(device_ids))
        pb = self._unary("Reserve", self._device.Reserve, request, timeout)
        return convert.reservation_from_proto(pb.container_res)

    def stats(self, interval: float | _dt.timedelta = 1.0) -> Stream[list[DeviceGroupStats]]:
        seconds = interval.total_seconds() if isinstance(interval, _dt.timedelta) else interval
        duration = duration_pb2.Duration()
        duration.FromNanoseconds(round(seconds * 1e9))
        call = self._device.Stats(device_pb2.StatsRequest(collection_interval=duration))
        return Stream(
            "Stats",
            call,
            lambda pb: [convert.group_stats_from_proto(g) for g in pb.groups],
            self._closed,
        )

    # -- lifetime ----------------------------------------------------------------

    @property
    def reattach_config(self) -> ReattachConfig:
        return self.process.reattach_config

    def kill(self) -> KillResult:
        return self.process.kill()

    def __enter__(self) -> DevicePluginClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def _closed(self) -> bool:
        return self.process.closing

    def _unary(self, method: str, fn: Any, request: Any, timeout: float | None) -> Any:
        try:
            return fn(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise CallError.wrap(method, exc) from None
