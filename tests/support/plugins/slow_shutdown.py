"""A go-plugin server that answers Shutdown but takes far too long to exit."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import grpc
from sdk_plugin import SyncPlugin

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.server import ServeConfig, serve
from nomad_device.plugin.servicer import register


async def _register(server: grpc.aio.Server) -> None:
    await register(SyncPlugin(), server)


async def _linger() -> None:
    await asyncio.sleep(30)


if __name__ == "__main__":
    serve(ServeConfig(NOMAD_HANDSHAKE, {2: _register}, on_stop=_linger))
