"""Static builders: canned answers for the hooks of a :class:`DevicePlugin`.

Each ``static_*`` function returns a callable to plug into a
:class:`~nomad_device.testing.MockDevicePlugin` (or to assign to a plugin's
method in a test); each ``error_*`` function returns one that always raises.
They are the Python counterparts of the fixed-answer helpers that Nomad's Go
SDK ships beside its mock plugin, adapted to this SDK's hooks:

========================  =====================================================
Nomad (Go)                here
========================  =====================================================
``StaticInfo``            :func:`static_info`
``StaticConfigSchema``    :func:`static_schema` (and :data:`TEST_SPEC`)
``NoopSetConfig``         :func:`noop_configure`
``StaticFingerprinter``   :func:`static_fingerprint` (a ``detect``) or
                          :func:`static_fingerprint_stream` (a raw stream)
``ErrorChFingerprinter``  :func:`error_fingerprint`
``StaticReserve``         :func:`static_reservation`
``ErrorReserve``          :func:`error_reserve`
``StaticStats``           :func:`static_stats` (a ``stats``) or
                          :func:`static_stats_stream` (a raw stream)
``ErrorChStats``          :func:`error_stats`
========================  =====================================================

One difference matters: in this SDK a failing ``detect`` or ``stats`` never ends
the stream towards Nomad (the engine logs and backs off), so the ``error_*``
helpers test how *your* code and the engine cope, not how Nomad reacts to an
ended stream.

:func:`device_group` and :func:`group_stats` build model values tersely.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import TypeAlias

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
    StatValue,
)
from nomad_device.wire import hclspec

__all__ = [
    "TEST_SPEC",
    "AttributeLike",
    "device_group",
    "error_fingerprint",
    "error_reserve",
    "error_stats",
    "group_stats",
    "noop_configure",
    "static_fingerprint",
    "static_fingerprint_stream",
    "static_info",
    "static_reservation",
    "static_schema",
    "static_stats",
    "static_stats_stream",
]

#: A small schema for tests: optional ``foo`` (string), ``bar`` (number), ``baz`` (bool).
TEST_SPEC: hclspec.Object = hclspec.Object(
    {
        "foo": hclspec.Attr("foo", "string"),
        "bar": hclspec.Attr("bar", "number"),
        "baz": hclspec.Attr("baz", "bool"),
    }
)

#: An attribute as given to :func:`device_group`: an :class:`Attribute`, a bare
#: value, or a ``(value, unit)`` pair.
AttributeLike: TypeAlias = Attribute | int | float | str | bool | tuple[int | float, str]


def _attribute(value: AttributeLike) -> Attribute:
    if isinstance(value, Attribute):
        return value
    if isinstance(value, tuple):
        number, unit = value
        return Attribute(number, unit)
    return Attribute(value)


def device_group(
    vendor: str,
    type: str,
    name: str,
    ids: Iterable[str | Device] = (),
    attributes: Mapping[str, AttributeLike] | None = None,
    *,
    unhealthy: Mapping[str, str] | None = None,
) -> DeviceGroup:
    """A group from device IDs; ``unhealthy`` maps IDs to a health description.

    >>> device_group("acme", "gpu", "x1", ["0", "1"], {"memory": (4, "GiB")}).key
    'acme/gpu/x1'
    """
    sick = dict(unhealthy or {})
    devices = tuple(
        d if isinstance(d, Device) else Device(d, d not in sick, sick.get(d, "")) for d in ids
    )
    attrs = {k: _attribute(v) for k, v in (attributes or {}).items()}
    return DeviceGroup(vendor, type, name, devices, attrs)


def group_stats(
    group: DeviceGroup,
    summary: Callable[[str], StatValue] | StatValue | None = None,
) -> DeviceGroupStats:
    """Stats for every device of ``group``; ``summary`` is a value or one per device ID."""
    instances: dict[str, DeviceStats] = {}
    for device in group.devices:
        value = summary(device.id) if callable(summary) else summary
        instances[device.id] = DeviceStats(summary=value or StatValue(int_numerator=0))
    return DeviceGroupStats(group.vendor, group.type, group.name, instances)


# ------------------------------------------------------------------ base plugin


def static_info(name: str = "mock-device", version: str = "0.1.0") -> Callable[[], PluginInfo]:
    """An ``info`` hook answering with a fixed :class:`PluginInfo`."""
    info = PluginInfo(name, version)
    return lambda: info


def static_schema(spec: hclspec.Spec = TEST_SPEC) -> Callable[[], hclspec.Spec]:
    """A ``config_schema`` hook answering with ``spec`` (default :data:`TEST_SPEC`)."""
    return lambda: spec


def noop_configure() -> Callable[[object], None]:
    """A ``configure`` hook accepting any config."""

    def configure(config: object) -> None:
        return None

    return configure


# ------------------------------------------------------------------ fingerprint


def static_fingerprint(*groups: DeviceGroup) -> Callable[[], list[DeviceGroup]]:
    """A ``detect`` hook that always finds exactly ``groups``.

    The engine sends the first (and, as nothing changes, only) message at once
    and keeps the stream open -- what Nomad's static fingerprinter does.
    """
    found = list(groups)
    return lambda: list(found)


def static_fingerprint_stream(
    *states: Sequence[DeviceGroup], interval: float = 0.0
) -> Callable[[], AsyncIterator[Sequence[DeviceGroup]]]:
    """A raw ``fingerprint_stream``: each state in turn, then the stream stays open.

    With no states, one empty message is sent (Nomad needs a first message).
    """
    sequence = [list(s) for s in states] or [[]]

    async def stream() -> AsyncIterator[Sequence[DeviceGroup]]:
        for i, state in enumerate(sequence):
            if i and interval:
                await asyncio.sleep(interval)
            yield state
        await asyncio.Event().wait()  # open until the host cancels

    return stream


def error_fingerprint(exc: BaseException) -> Callable[[], list[DeviceGroup]]:
    """A ``detect`` hook that always raises ``exc``."""

    def detect() -> list[DeviceGroup]:
        raise exc

    return detect


# ---------------------------------------------------------------------- reserve


def static_reservation(
    reservation: Reservation | None = None,
    *,
    envs: Mapping[str, str] | None = None,
    mounts: Iterable[Mount] = (),
    devices: Iterable[DeviceSpec] = (),
) -> Callable[[Sequence[str]], Reservation]:
    """A ``reserve`` hook answering every request with the same reservation."""
    answer = reservation or Reservation(dict(envs or {}), tuple(mounts), tuple(devices))
    return lambda ids: answer


def error_reserve(exc: BaseException) -> Callable[[Sequence[str]], Reservation]:
    """A ``reserve`` hook that always raises ``exc`` (e.g. ``NotFound("...")``)."""

    def reserve(ids: Sequence[str]) -> Reservation:
        raise exc

    return reserve


# ------------------------------------------------------------------------ stats


def static_stats(*groups: DeviceGroupStats) -> Callable[[], list[DeviceGroupStats]]:
    """A ``stats`` hook that always reports ``groups`` (sent once per interval)."""
    found = list(groups)
    return lambda: list(found)


def static_stats_stream(
    *groups: DeviceGroupStats,
) -> Callable[[float], AsyncIterator[Sequence[DeviceGroupStats]]]:
    """A raw ``stats_stream``: ``groups`` at once, then again every interval."""
    found = list(groups)

    async def stream(interval: float) -> AsyncIterator[Sequence[DeviceGroupStats]]:
        while True:
            yield list(found)
            await asyncio.sleep(interval)

    return stream


def error_stats(exc: BaseException) -> Callable[[], list[DeviceGroupStats]]:
    """A ``stats`` hook that always raises ``exc``."""

    def stats() -> list[DeviceGroupStats]:
        raise exc

    return stats
