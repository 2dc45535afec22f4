"""``serve(PluginClass)``: the one-line entry point of a plugin executable."""

from __future__ import annotations

from typing import Any, NoReturn

import grpc

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.hclog import install_early_excepthook
from nomad_device.goplugin.server import ServeConfig
from nomad_device.goplugin.server import serve as serve_goplugin
from nomad_device.plugin.base import DevicePlugin
from nomad_device.plugin.servicer import register

__all__ = ["serve"]

# Launched by a host: from the first import on, even a crash while the author's
# module loads must reach the host as hclog, not as raw text.
if NOMAD_HANDSHAKE.cookie_ok():
    install_early_excepthook()


def serve(plugin: type[DevicePlugin[Any]] | DevicePlugin[Any]) -> NoReturn:
    """Serve a device plugin to a Nomad client over go-plugin; never returns.

    Run by hand (without Nomad's cookie) it explains itself and exits 1.
    """
    instance = plugin() if isinstance(plugin, type) else plugin

    async def registrar(server: grpc.aio.Server) -> None:
        await register(instance, server)

    serve_goplugin(
        ServeConfig(
            handshake=NOMAD_HANDSHAKE,
            versions={NOMAD_HANDSHAKE.protocol_version: registrar},
        )
    )
