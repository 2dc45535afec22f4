"""go-plugin's own gRPC services that every plugin server must offer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import grpc
from google.protobuf import empty_pb2
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nomad_device.goplugin.hclog import StdioCapture
from nomad_device.proto import (
    goplugin_broker_pb2,
    goplugin_broker_pb2_grpc,
    goplugin_controller_pb2,
    goplugin_controller_pb2_grpc,
    goplugin_stdio_pb2,
    goplugin_stdio_pb2_grpc,
)

__all__ = ["HEALTH_SERVICE_NAME", "add_goplugin_services"]

#: go-plugin hosts ping this service name.
HEALTH_SERVICE_NAME = "plugin"

log = logging.getLogger("goplugin.server")


class ControllerService(goplugin_controller_pb2_grpc.GRPCControllerServicer):
    """Answers Shutdown, then lets the server stop once the answer is out."""

    def __init__(self, on_shutdown: Callable[[], None]) -> None:
        self._on_shutdown = on_shutdown

    async def Shutdown(
        self,
        request: goplugin_controller_pb2.Empty,
        context: grpc.aio.ServicerContext[object, object],
    ) -> goplugin_controller_pb2.Empty:
        log.debug("shutdown requested by host")
        asyncio.get_running_loop().call_soon(self._on_shutdown)
        return goplugin_controller_pb2.Empty()


class StdioService(goplugin_stdio_pb2_grpc.GRPCStdioServicer):
    """Forwards raw stdout/stderr output to the host for as long as it listens."""

    def __init__(self, capture: StdioCapture | None) -> None:
        self._capture = capture

    async def StreamStdio(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext[object, object]
    ) -> AsyncIterator[goplugin_stdio_pb2.StdioData]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue(maxsize=1024)

        def offer(channel: int, data: bytes) -> None:
            def put() -> None:
                if not queue.full():  # a host that does not read loses output, not memory
                    queue.put_nowait((channel, data))

            loop.call_soon_threadsafe(put)

        if self._capture is not None:
            self._capture.add_listener(offer)
        try:
            while True:
                channel, data = await queue.get()
                yield goplugin_stdio_pb2.StdioData(channel=channel, data=data)  # type: ignore[arg-type]
        finally:
            if self._capture is not None:
                self._capture.remove_listener(offer)


class BrokerService(goplugin_broker_pb2_grpc.GRPCBrokerServicer):
    """Accepts and holds the broker stream; nothing here brokers connections."""

    async def StartStream(
        self,
        request_iterator: AsyncIterator[goplugin_broker_pb2.ConnInfo],
        context: grpc.aio.ServicerContext[object, object],
    ) -> AsyncIterator[goplugin_broker_pb2.ConnInfo]:
        async for info in request_iterator:
            log.debug("ignoring broker message", extra={"service_id": info.service_id})
        return
        yield  # pragma: no cover - makes this an async generator


async def add_goplugin_services(
    server: grpc.aio.Server, capture: StdioCapture | None, on_shutdown: Callable[[], None]
) -> health_aio.HealthServicer:
    health = health_aio.HealthServicer()
    await health.set(HEALTH_SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    goplugin_controller_pb2_grpc.add_GRPCControllerServicer_to_server(
        ControllerService(on_shutdown), server
    )
    goplugin_stdio_pb2_grpc.add_GRPCStdioServicer_to_server(StdioService(capture), server)
    goplugin_broker_pb2_grpc.add_GRPCBrokerServicer_to_server(BrokerService(), server)
    return health
