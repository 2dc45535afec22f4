"""A raw plugin (no SDK engine) that ends its own streams with CANCELLED.

A Go plugin does this when its handler returns ``ctx.Err()`` or
``status.Error(codes.Canceled, ...)`` for a context it cancelled itself;
Nomad then drops the plugin. Fingerprint sends one message, then cancels;
Stats with an interval of 7 s stays open (to check our own cancel), any
other interval sends one message, then cancels.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.server import ServeConfig, serve
from nomad_device.proto import device_pb2, device_pb2_grpc


class Cancelling(device_pb2_grpc.DevicePluginServicer):
    async def Fingerprint(  # type: ignore[override]
        self, request: device_pb2.FingerprintRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[device_pb2.FingerprintResponse]:
        group = device_pb2.DeviceGroup(
            vendor="acme",
            device_type="gpu",
            device_name="a1",
            devices=[device_pb2.DetectedDevice(ID="0", healthy=True)],
        )
        yield device_pb2.FingerprintResponse(device_group=[group])
        await context.abort(grpc.StatusCode.CANCELLED, "the plugin gave up")

    async def Stats(  # type: ignore[override]
        self, request: device_pb2.StatsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[device_pb2.StatsResponse]:
        yield device_pb2.StatsResponse()
        if request.collection_interval.seconds == 7:
            await asyncio.Event().wait()  # open until the host cancels
        await context.abort(grpc.StatusCode.CANCELLED, "stats gave up")


async def register(server: grpc.aio.Server) -> None:
    device_pb2_grpc.add_DevicePluginServicer_to_server(Cancelling(), server)


if __name__ == "__main__":
    serve(ServeConfig(NOMAD_HANDSHAKE, {NOMAD_HANDSHAKE.protocol_version: register}))
