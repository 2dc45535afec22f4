"""gRPC servicers: Nomad's BasePlugin and DevicePlugin over an author's plugin.

This layer owns the protocol rules an author should not have to know: status
codes, the stats interval convention, that a stream towards Nomad never ends,
and that nothing invalid is ever sent.

Status codes: a :class:`~nomad_device.errors.DevicePluginError` carries its
own; the SDK's config-decoding errors (``ConfigError``, ``CtyDecodeError``) are
INVALID_ARGUMENT; anything else from author code is a bug, logged with its
traceback and answered INTERNAL with a short message. Everything converted to
protobuf is converted inside these guards: a stream skips (and logs) a group
it cannot convert, a unary call answers INTERNAL.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from nomad_device.constants import DEVICE_API_VERSION, PLUGIN_TYPE_DEVICE
from nomad_device.errors import DevicePluginError
from nomad_device.model import PluginInfo, Reservation
from nomad_device.plugin.base import DevicePlugin
from nomad_device.plugin.calls import describe, slow_after, tunable
from nomad_device.plugin.engine import (
    FingerprintEngine,
    ProblemLog,
    check_groups,
    check_stats,
    printable,
    resilient,
)
from nomad_device.plugin.runtime import runtime_of
from nomad_device.proto import base_pb2, base_pb2_grpc, device_pb2, device_pb2_grpc
from nomad_device.wire import convert, hclspec

__all__ = [
    "BaseServicer",
    "DeviceServicer",
    "fingerprint_response",
    "register",
    "stats_response",
    "status_for",
]

log = logging.getLogger("nomad_device.server")

Context = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")

#: Nomad's convention: a zero collection interval means one second.
DEFAULT_STATS_INTERVAL = 1.0
#: Longest message put in an INTERNAL status (the traceback is in the log).
MAX_DETAILS = 300


class _BadOutput(Exception):
    """Author code returned something that cannot go on the wire."""


def _is_refusal(exc: BaseException) -> bool:
    """The SDK's own errors for config that cannot be decoded."""
    from nomad_device.config import ConfigError
    from nomad_device.wire.cty import CtyDecodeError

    return isinstance(exc, ConfigError | CtyDecodeError)


def status_for(exc: BaseException, what: str) -> tuple[grpc.StatusCode, str]:
    """The status and message for an exception from ``what``; logs the unexpected ones."""
    if isinstance(exc, DevicePluginError):
        return getattr(grpc.StatusCode, exc.code), printable(str(exc.message), MAX_DETAILS)
    if _is_refusal(exc):
        return grpc.StatusCode.INVALID_ARGUMENT, printable(describe(exc), MAX_DETAILS)
    message = describe(exc)
    log.error("%s failed: %s", what, message, exc_info=exc)
    text = message if isinstance(exc, _BadOutput) else f"{type(exc).__name__}: {message}"
    return grpc.StatusCode.INTERNAL, printable(f"{what} failed: {text}", MAX_DETAILS)


async def _abort_for(context: Context, exc: BaseException, what: str) -> NoReturn:
    code, details = status_for(exc, what)
    await context.abort(code, details)


async def _guarded(context: Context, what: str, call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        await _abort_for(context, exc, what)


def _converted(kind: str, what: str, fn: Callable[[], T]) -> T:
    """Convert author output, naming the output when it does not fit."""
    try:
        return fn()
    except Exception as exc:
        raise _BadOutput(f"{what} returned {kind} that cannot be sent: {exc}") from exc


def fingerprint_response(groups: object, problems: ProblemLog) -> device_pb2.FingerprintResponse:
    """The groups Nomad would accept, converted one by one; the rest logged once."""
    kept, found = check_groups(groups)
    response = device_pb2.FingerprintResponse()
    add = response.device_group.add
    for group in kept:
        try:
            convert.group_to_proto(group, into=add())
        except Exception as exc:
            del response.device_group[-1]
            found.append(f"group {group.key!r} does not convert: {type(exc).__name__}: {exc}")
    problems.report(found, "invalid device group", "device_group")
    return response


def stats_response(groups: object, problems: ProblemLog) -> device_pb2.StatsResponse:
    kept, found = check_stats(groups)
    response = device_pb2.StatsResponse()
    add = response.groups.add
    for group in kept:
        try:
            convert.group_stats_to_proto(group, into=add())
        except Exception as exc:
            del response.groups[-1]
            key = f"{group.vendor}/{group.type}/{group.name}"
            found.append(f"stats group {key!r} does not convert: {type(exc).__name__}: {exc}")
    problems.report(found, "invalid stats group", "stats_group")
    return response


def _info_to_proto(info: object) -> base_pb2.PluginInfoResponse:
    if not isinstance(info, PluginInfo):
        raise _BadOutput(f"plugin_info() returned a {type(info).__name__}, not a PluginInfo")
    problems = info.validate()
    if problems:
        raise _BadOutput("plugin_info() returned an invalid PluginInfo: " + "; ".join(problems))
    return base_pb2.PluginInfoResponse(
        type=PLUGIN_TYPE_DEVICE,  # type: ignore[arg-type]
        plugin_api_versions=list(info.api_versions),
        plugin_version=info.version,
        name=info.name,
    )


def _reservation_to_proto(reservation: object) -> device_pb2.ReserveResponse:
    if not isinstance(reservation, Reservation):
        kind = type(reservation).__name__
        raise _BadOutput(f"reserve() returned a {kind}, not a Reservation")
    problems = reservation.validate()
    if problems:
        raise _BadOutput("reserve() returned an invalid Reservation: " + "; ".join(problems))
    container = _converted(
        "a Reservation", "reserve()", lambda: convert.reservation_to_proto(reservation)
    )
    return device_pb2.ReserveResponse(container_res=container)


class BaseServicer(base_pb2_grpc.BasePluginServicer):
    def __init__(self, plugin: DevicePlugin[Any]) -> None:
        self.plugin = plugin
        self._config_lock = asyncio.Lock()

    async def PluginInfo(
        self, request: base_pb2.PluginInfoRequest, context: Context
    ) -> base_pb2.PluginInfoResponse:
        async def info() -> base_pb2.PluginInfoResponse:
            return _info_to_proto(await _author(self.plugin, self.plugin.plugin_info))

        return await _guarded(context, "PluginInfo", info)

    async def ConfigSchema(
        self, request: base_pb2.ConfigSchemaRequest, context: Context
    ) -> base_pb2.ConfigSchemaResponse:
        async def schema() -> base_pb2.ConfigSchemaResponse:
            spec = await _author(self.plugin, self.plugin.config_schema)
            proto = _converted("a schema", "config_schema()", lambda: hclspec.to_proto(spec))
            return base_pb2.ConfigSchemaResponse(spec=proto)

        return await _guarded(context, "ConfigSchema", schema)

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
                # Go plugins word it the same way; operators read it when the agent
                # refuses to start. Only a refusal is INVALID_ARGUMENT: anything else
                # is a bug in the plugin, logged with its traceback.
                code, details = status_for(exc, "SetConfig")
                if isinstance(exc, DevicePluginError) or _is_refusal(exc):
                    details = printable(f"SetConfig failed: {details}", MAX_DETAILS)
                await context.abort(code, details)
        return base_pb2.SetConfigResponse()


async def _author(plugin: DevicePlugin[Any], hook: Callable[..., T], *args: Any) -> T:
    """A base-plugin hook, off the loop like every other (``other`` pool)."""
    name = getattr(hook, "__name__", "hook")
    return await runtime_of(plugin).calls.call("other", hook, *args, what=f"{name}()")


async def apply_config(plugin: DevicePlugin[Any], data: bytes) -> None:
    """Decode and hand the config to the author; errors leave the old config."""
    config = await _author(plugin, plugin.decode_config, bytes(data))
    follow = await _releases_for(plugin, config)
    await _author(plugin, plugin.configure, config)
    plugin.config = config
    plugin.configured = True
    log.debug("config set", extra={"config": repr(config)})
    if follow is not None:
        follow()


# -- release tracking (plugin/release.py), loaded only for a config that asks for it --


async def _releases_for(plugin: DevicePlugin[Any], config: object) -> Callable[[], None] | None:
    """What to do about release tracking once ``config`` is applied (None: nothing)."""
    nomad = await _author(plugin, plugin.nomad_config, config)
    runtime = runtime_of(plugin)
    if nomad is None and runtime.tracker is None:
        return None
    from nomad_device.plugin import release

    settings = release.settings_for(plugin, nomad)
    return lambda: release.follow(plugin, runtime.engine, settings)


async def ensure_configured(plugin: DevicePlugin[Any]) -> None:
    """A host that never sent SetConfig gets the schema's defaults."""
    if not plugin.configured:
        log.debug("no SetConfig received; applying defaults")
        await apply_config(plugin, b"")


class DeviceServicer(device_pb2_grpc.DevicePluginServicer):
    def __init__(self, plugin: DevicePlugin[Any], base: BaseServicer) -> None:
        self.plugin = plugin
        self._base = base
        self._stats_problems = ProblemLog()
        self._fp_problems = ProblemLog()

    async def _configured(self, context: Context) -> None:
        async with self._base._config_lock:
            try:
                await ensure_configured(self.plugin)
            except Exception as exc:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    printable(
                        f"plugin is not configured and its defaults do not decode: {exc}",
                        MAX_DETAILS,
                    ),
                )

    async def Fingerprint(
        self, request: device_pb2.FingerprintRequest, context: Context
    ) -> AsyncIterator[device_pb2.FingerprintResponse]:
        await self._configured(context)
        async for groups in resilient(self.plugin.fingerprint_stream, "fingerprint stream"):
            yield fingerprint_response(groups, self._fp_problems)

    async def Reserve(
        self, request: device_pb2.ReserveRequest, context: Context
    ) -> device_pb2.ReserveResponse:
        await self._configured(context)
        ids = list(request.device_ids)
        plugin = self.plugin

        async def reserve() -> device_pb2.ReserveResponse:
            tracker = runtime_of(plugin).tracker
            if tracker is not None:
                await tracker.gate(ids)  # devices being cleaned after a release
            reservation = await runtime_of(plugin).calls.call(
                "reserve",
                plugin.reserve,
                ids,
                slow_after=slow_after(tunable(plugin, "slow_call_seconds")),
            )
            return _reservation_to_proto(reservation)

        return await _guarded(context, "Reserve", reserve)

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
            tracker = runtime_of(self.plugin).tracker
            # held_by on each held instance
            sent = groups if tracker is None else tracker.annotate(groups)
            yield stats_response(sent, self._stats_problems)


async def register(plugin: DevicePlugin[Any], server: grpc.aio.Server) -> None:
    """Attach the plugin's Nomad services to a go-plugin server."""
    runtime = runtime_of(plugin)
    runtime.engine = FingerprintEngine(plugin)
    runtime.lifetime.bind(asyncio.get_running_loop())
    base = BaseServicer(plugin)
    base_pb2_grpc.add_BasePluginServicer_to_server(base, server)
    device_pb2_grpc.add_DevicePluginServicer_to_server(DeviceServicer(plugin, base), server)
