"""gRPC servicers: Nomad's BasePlugin and DevicePlugin over an author's plugin.

This layer owns the protocol rules an author should not have to know: status
codes, the stats interval convention, that a stream towards Nomad never ends,
and that nothing invalid is ever sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from nomad_device.constants import DEVICE_API_VERSION, PLUGIN_TYPE_DEVICE
from nomad_device.errors import DevicePluginError
from nomad_device.plugin.base import DevicePlugin, call_author
from nomad_device.plugin.engine import (
    FingerprintEngine,
    _ProblemLog,
    resilient,
    valid_groups,
    valid_stats,
)
from nomad_device.proto import base_pb2, base_pb2_grpc, device_pb2, device_pb2_grpc
from nomad_device.wire import convert, hclspec

__all__ = ["BaseServicer", "DeviceServicer", "register"]

log = logging.getLogger("nomad_device.server")

Context = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")

#: Nomad's convention: a zero collection interval means one second.
DEFAULT_STATS_INTERVAL = 1.0


async def _abort_for(context: Context, exc: BaseException, what: str) -> NoReturn:
    """Turn an author exception into a precise status; log the unexpected ones."""
    if isinstance(exc, DevicePluginError):
        await context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
    if isinstance(exc, ValueError):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    log.error("%s failed: %s", what, exc, exc_info=exc)
    await context.abort(grpc.StatusCode.INTERNAL, f"{what} failed: {exc}")


async def _guarded(context: Context, what: str, call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        await _abort_for(context, exc, what)


class BaseServicer(base_pb2_grpc.BasePluginServicer):
    def __init__(self, plugin: DevicePlugin[Any]) -> None:
        self.plugin = plugin
        self._config_lock = asyncio.Lock()

    async def PluginInfo(
        self, request: base_pb2.PluginInfoRequest, context: Context
    ) -> base_pb2.PluginInfoResponse:
        info = self.plugin.plugin_info()
        return base_pb2.PluginInfoResponse(
            type=PLUGIN_TYPE_DEVICE,  # type: ignore[arg-type]
            plugin_api_versions=list(info.api_versions),
            plugin_version=info.version,
            name=info.name,
        )

    async def ConfigSchema(
        self, request: base_pb2.ConfigSchemaRequest, context: Context
    ) -> base_pb2.ConfigSchemaResponse:
        spec = await _guarded(context, "ConfigSchema", lambda: _sync(self.plugin.config_schema))
        return base_pb2.ConfigSchemaResponse(spec=hclspec.to_proto(spec))

    async def SetConfig(
        self, request: base_pb2.SetConfigRequest, context: Context
    ) -> base_pb2.SetConfigResponse:
        if request.plugin_api_version and request.plugin_api_version != DEVICE_API_VERSION:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"unsupported plugin API version {request.plugin_api_version!r}; "
                f"this plugin speaks {DEVICE_API_VERSION}",
            )
        async with self._config_lock:
            try:
                await apply_config(self.plugin, request.msgpack_config)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Go plugins wrap it the same way; operators read it when the agent refuses
                # to start, so unexpected failures are logged with their traceback too.
                code = exc.code if isinstance(exc, DevicePluginError) else None
                if code is None and not isinstance(exc, ValueError):
                    log.error("SetConfig failed: %s", exc, exc_info=exc)
                    code = "INTERNAL"
                status = getattr(grpc.StatusCode, code or "INVALID_ARGUMENT")
                await context.abort(status, f"SetConfig failed: {exc}")
        return base_pb2.SetConfigResponse()


async def _sync(fn: Callable[[], T]) -> T:
    return fn()


async def apply_config(plugin: DevicePlugin[Any], data: bytes) -> None:
    """Decode and hand the config to the author; errors leave the old config."""
    config = plugin.decode_config(bytes(data))
    await call_author(plugin.configure, config)
    plugin.config = config
    plugin.configured = True
    log.debug("config set", extra={"config": repr(config)})


async def ensure_configured(plugin: DevicePlugin[Any]) -> None:
    """A host that never sent SetConfig gets the schema's defaults."""
    if not plugin.configured:
        log.debug("no SetConfig received; applying defaults")
        await apply_config(plugin, b"")


class DeviceServicer(device_pb2_grpc.DevicePluginServicer):
    def __init__(self, plugin: DevicePlugin[Any], base: BaseServicer) -> None:
        self.plugin = plugin
        self._base = base
        self._stats_problems = _ProblemLog()
        self._fp_problems = _ProblemLog()

    async def _configured(self, context: Context) -> None:
        async with self._base._config_lock:
            try:
                await ensure_configured(self.plugin)
            except Exception as exc:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"plugin is not configured and its defaults do not decode: {exc}",
                )

    async def Fingerprint(
        self, request: device_pb2.FingerprintRequest, context: Context
    ) -> AsyncIterator[device_pb2.FingerprintResponse]:
        await self._configured(context)
        async for groups in resilient(self.plugin.fingerprint_stream, "fingerprint stream"):
            kept = valid_groups(groups, self._fp_problems)
            response = device_pb2.FingerprintResponse()
            for group in kept:
                convert.group_to_proto(group, into=response.device_group.add())
            yield response

    async def Reserve(
        self, request: device_pb2.ReserveRequest, context: Context
    ) -> device_pb2.ReserveResponse:
        await self._configured(context)
        ids = list(request.device_ids)
        reservation = await _guarded(
            context, "Reserve", lambda: call_author(self.plugin.reserve, ids)
        )
        return device_pb2.ReserveResponse(container_res=convert.reservation_to_proto(reservation))

    async def Stats(
        self, request: device_pb2.StatsRequest, context: Context
    ) -> AsyncIterator[device_pb2.StatsResponse]:
        interval = request.collection_interval.ToTimedelta().total_seconds()
        if interval < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"collection interval must not be negative, got {interval:g}s",
            )
        interval = interval or DEFAULT_STATS_INTERVAL
        await self._configured(context)
        stream = resilient(lambda: self.plugin.stats_stream(interval), "stats stream")
        async for groups in stream:
            kept = valid_stats(groups, self._stats_problems)
            response = device_pb2.StatsResponse()
            for group in kept:
                convert.group_stats_to_proto(group, into=response.groups.add())
            yield response


async def register(plugin: DevicePlugin[Any], server: grpc.aio.Server) -> None:
    """Attach the plugin's Nomad services to a go-plugin server."""
    plugin._engine = FingerprintEngine(plugin)
    base = BaseServicer(plugin)
    base_pb2_grpc.add_BasePluginServicer_to_server(base, server)
    device_pb2_grpc.add_DevicePluginServicer_to_server(DeviceServicer(plugin, base), server)
