"""A raw plugin whose Reserve logs about 1 MiB to stderr from the event loop, then answers.

With a host that stops reading stderr, the pipe fills after 64 KiB and the
plugin's log writes block its event loop: the Reserve call never returns.
"""

from __future__ import annotations

import logging

import grpc

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.server import ServeConfig, serve
from nomad_device.proto import device_pb2, device_pb2_grpc

LINES = 5000

log = logging.getLogger("flood")


class Flood(device_pb2_grpc.DevicePluginServicer):
    async def Reserve(  # type: ignore[override]
        self, request: device_pb2.ReserveRequest, context: grpc.aio.ServicerContext
    ) -> device_pb2.ReserveResponse:
        for i in range(LINES):
            log.warning("line %d of %d: %s", i + 1, LINES, "x" * 200)
        return device_pb2.ReserveResponse()


async def register(server: grpc.aio.Server) -> None:
    device_pb2_grpc.add_DevicePluginServicer_to_server(Flood(), server)


if __name__ == "__main__":
    serve(ServeConfig(NOMAD_HANDSHAKE, {NOMAD_HANDSHAKE.protocol_version: register}))
