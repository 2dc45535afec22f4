"""go-plugin transport in Python, reusable for any go-plugin host.

Serve side: :func:`serve` with a :class:`ServeConfig`. Host side:
:class:`PluginProcess`. Nothing in this package knows about Nomad.

Names are resolved lazily: a plugin process should not pay for importing the
host side (and the other way round) on every one of its three launches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nomad_device.goplugin.client import (
        KillResult,
        PluginError,
        PluginProcess,
        ReattachConfig,
    )
    from nomad_device.goplugin.handshake import HandshakeConfig, HandshakeError, HandshakeLine
    from nomad_device.goplugin.hclog import TRACE, HclogEntry, parse_line
    from nomad_device.goplugin.server import ServeConfig, serve

_WHERE = {
    "KillResult": "client",
    "PluginError": "client",
    "PluginProcess": "client",
    "ReattachConfig": "client",
    "HandshakeConfig": "handshake",
    "HandshakeError": "handshake",
    "HandshakeLine": "handshake",
    "TRACE": "hclog",
    "HclogEntry": "hclog",
    "parse_line": "hclog",
    "ServeConfig": "server",
    "serve": "server",
}

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
