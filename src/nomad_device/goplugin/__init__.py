"""go-plugin transport in Python, reusable for any go-plugin host.

Serve side: :func:`serve` with a :class:`ServeConfig`. Host side:
:class:`PluginProcess`. Nothing in this package knows about Nomad.
"""

from nomad_device.goplugin.client import KillResult, PluginError, PluginProcess, ReattachConfig
from nomad_device.goplugin.handshake import HandshakeConfig, HandshakeError, HandshakeLine
from nomad_device.goplugin.hclog import TRACE, HclogEntry, parse_line
from nomad_device.goplugin.server import ServeConfig, serve

__all__ = [
    "TRACE",
    "HandshakeConfig",
    "HandshakeError",
    "HandshakeLine",
    "HclogEntry",
    "KillResult",
    "PluginError",
    "PluginProcess",
    "ReattachConfig",
    "ServeConfig",
    "parse_line",
    "serve",
]
