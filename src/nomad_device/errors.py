"""Errors an author raises to give Nomad a precise gRPC status.

Plain exceptions, no grpc import: the servicer maps ``code`` to a status.
Only these (and the SDK's own config-decoding errors) choose a status; any
other exception from author code, a ``ValueError`` included, is an author bug:
it becomes INTERNAL and is logged with its traceback.
"""

from __future__ import annotations

from typing import ClassVar, Final

__all__ = [
    "STATUS_CODES",
    "DevicePluginError",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "Unavailable",
]

#: gRPC's status code names (``grpc.StatusCode`` members) an error may carry;
#: OK is not an error. Spelt out here so this module needs no grpc import.
STATUS_CODES: Final = frozenset(
    {
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    }
)


class DevicePluginError(Exception):
    """Base class; ``code`` is a gRPC status code name (see :data:`STATUS_CODES`).

    A subclass is checked when it is defined, so a misspelt ``code`` fails at
    import time instead of reaching Nomad as UNKNOWN.
    """

    code: ClassVar[str] = "INTERNAL"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.code not in STATUS_CODES:
            raise TypeError(
                f"{cls.__qualname__}.code = {cls.code!r} is not a gRPC status code name; "
                f"use one of {', '.join(sorted(STATUS_CODES))}"
            )

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(DevicePluginError):
    """The request itself is wrong (bad config, unknown device ID).

    Raised from ``configure()`` it refuses the config: SetConfig fails with
    INVALID_ARGUMENT and the old config stays.
    """

    code = "INVALID_ARGUMENT"


class NotFound(DevicePluginError):
    """Something the request names does not exist (a device this plugin never reported)."""

    code = "NOT_FOUND"


class FailedPrecondition(DevicePluginError):
    """The plugin is not in a state to answer (e.g. not configured yet)."""

    code = "FAILED_PRECONDITION"


class Unavailable(DevicePluginError):
    """A transient problem; the caller may retry."""

    code = "UNAVAILABLE"


class Internal(DevicePluginError):
    """The plugin failed in a way the caller cannot help; what any other exception becomes."""

    code = "INTERNAL"
