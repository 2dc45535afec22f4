"""Errors an author raises to give Nomad a precise gRPC status.

Plain exceptions, no grpc import: the servicer maps ``code`` to a status. Any
other exception from author code becomes INTERNAL and is logged with its
traceback.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "DevicePluginError",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "Unavailable",
]


class DevicePluginError(Exception):
    """Base class; ``code`` is a gRPC status code name."""

    code: ClassVar[str] = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(DevicePluginError):
    """The request itself is wrong (bad config, unknown device ID)."""

    code = "INVALID_ARGUMENT"


class NotFound(DevicePluginError):
    code = "NOT_FOUND"


class FailedPrecondition(DevicePluginError):
    """The plugin is not in a state to answer (e.g. not configured yet)."""

    code = "FAILED_PRECONDITION"


class Unavailable(DevicePluginError):
    """A transient problem; the caller may retry."""

    code = "UNAVAILABLE"


class Internal(DevicePluginError):
    code = "INTERNAL"
