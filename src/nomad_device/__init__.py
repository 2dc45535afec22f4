"""Write, test and run HashiCorp Nomad device plugins in Python.

The public surface: the model values, the author's :class:`DevicePlugin` with
:func:`serve`, and errors that carry a gRPC status. The host-side client is
:mod:`nomad_device.host`; test helpers are in :mod:`nomad_device.testing`.

Names resolve on first use, so importing a subpackage (the pytest plugin, the
launcher) does not pay for gRPC until it needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nomad_device.errors import (
        DevicePluginError,
        FailedPrecondition,
        Internal,
        InvalidArgument,
        NotFound,
        Unavailable,
    )
    from nomad_device.model import (
        Attribute,
        Device,
        DeviceGroup,
        DeviceGroupStats,
        DeviceSpec,
        DeviceStats,
        Mount,
        PluginInfo,
        Reservation,
        StatObject,
        StatValue,
    )
    from nomad_device.plugin import Backoff, DevicePlugin, NomadConfig, Scheduled, Wakeup, serve

__all__ = [
    "Attribute",
    "Backoff",
    "Device",
    "DeviceGroup",
    "DeviceGroupStats",
    "DevicePlugin",
    "DevicePluginError",
    "DeviceSpec",
    "DeviceStats",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "Mount",
    "NomadConfig",
    "NotFound",
    "PluginInfo",
    "Reservation",
    "Scheduled",
    "StatObject",
    "StatValue",
    "Unavailable",
    "Wakeup",
    "serve",
]

_ERRORS = {
    "DevicePluginError",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "Unavailable",
}

_PLUGIN_API = {"Backoff", "DevicePlugin", "NomadConfig", "Scheduled", "Wakeup", "serve"}


def __getattr__(name: str) -> Any:
    if name in _ERRORS:
        module = "nomad_device.errors"
    elif name in _PLUGIN_API:
        module = "nomad_device.plugin"
    elif name in __all__:
        module = "nomad_device.model"
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
