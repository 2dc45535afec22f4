"""Write, test and run HashiCorp Nomad device plugins in Python.

The public surface: the model values, the author's :class:`DevicePlugin` with
:func:`serve`, errors that carry a gRPC status, and the host-side
:class:`DevicePluginClient`. Everything else lives in subpackages.
"""

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
from nomad_device.plugin import DevicePlugin, serve

__all__ = [
    "Attribute",
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
    "NotFound",
    "PluginInfo",
    "Reservation",
    "StatObject",
    "StatValue",
    "Unavailable",
    "serve",
]
