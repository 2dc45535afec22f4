"""A device plugin whose every answer is a settable function.

Like the mock in Nomad's Go SDK, each hook of :class:`MockDevicePlugin` is an
attribute holding a callable; swap it at any time (even while a stream is open)
to script a scenario, and read :attr:`MockDevicePlugin.calls` to assert what the
host asked. Callables may be sync or ``async``. Unset hooks behave like an
empty, healthy plugin: no devices, no stats, an empty reservation.

Serve it in-process with :class:`~nomad_device.testing.InProcessHarness`, or
over the real wire with ``serve(MockDevicePlugin(...))`` in a script.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nomad_device.model import DeviceGroup, DeviceGroupStats, PluginInfo, Reservation
from nomad_device.plugin.base import DevicePlugin
from nomad_device.wire import hclspec

__all__ = ["MockCall", "MockDevicePlugin"]

DetectFn = Callable[[], Sequence[DeviceGroup] | Awaitable[Sequence[DeviceGroup]]]
ReserveFn = Callable[[Sequence[str]], Reservation | Awaitable[Reservation]]
StatsFn = Callable[[], Sequence[DeviceGroupStats] | Awaitable[Sequence[DeviceGroupStats]]]
ConfigureFn = Callable[[Any], Awaitable[None] | None]
FingerprintStreamFn = Callable[[], AsyncIterator[Sequence[DeviceGroup]]]
StatsStreamFn = Callable[[float], AsyncIterator[Sequence[DeviceGroupStats]]]


@dataclass(frozen=True)
class MockCall:
    """One call the host made: the hook's name and its arguments."""

    method: str
    args: tuple[object, ...] = ()


class MockDevicePlugin(DevicePlugin[Any]):
    """A :class:`DevicePlugin` driven entirely by settable callables.

    ``decode_fn`` receives the raw ``SetConfig`` bytes (as Nomad's mock
    ``SetConfigF`` does) and returns the config object; by default the bytes are
    decoded against the schema into a dict. ``fingerprint_fn`` and
    ``stats_stream_fn`` replace the engine-driven streams when set.
    """

    name = "mock-device"
    version = "0.1.0"

    def __init__(
        self,
        *,
        info_fn: Callable[[], PluginInfo] | None = None,
        schema_fn: Callable[[], hclspec.Spec] | None = None,
        decode_fn: Callable[[bytes], object] | None = None,
        configure_fn: ConfigureFn | None = None,
        detect_fn: DetectFn | None = None,
        fingerprint_fn: FingerprintStreamFn | None = None,
        reserve_fn: ReserveFn | None = None,
        stats_fn: StatsFn | None = None,
        stats_stream_fn: StatsStreamFn | None = None,
        fingerprint_period: float = 5.0,
    ) -> None:
        super().__init__()
        self.info_fn = info_fn
        self.schema_fn = schema_fn
        self.decode_fn = decode_fn
        self.configure_fn = configure_fn
        self.detect_fn = detect_fn
        self.fingerprint_fn = fingerprint_fn
        self.reserve_fn = reserve_fn
        self.stats_fn = stats_fn
        self.stats_stream_fn = stats_stream_fn
        self.fingerprint_period = fingerprint_period
        #: Every call from the host, in order (thread-safe to read).
        self.calls: list[MockCall] = []
        #: Every ``SetConfig`` payload received, in order.
        self.config_bytes: list[bytes] = []
        self._lock = threading.Lock()

    def _record(self, method: str, *args: object) -> None:
        with self._lock:
            self.calls.append(MockCall(method, args))

    def calls_to(self, method: str) -> list[MockCall]:
        """The recorded calls of one hook, e.g. ``calls_to("reserve")``."""
        with self._lock:
            return [c for c in self.calls if c.method == method]

    # -- base plugin ----------------------------------------------------------

    def plugin_info(self) -> PluginInfo:
        self._record("plugin_info")
        return self.info_fn() if self.info_fn is not None else super().plugin_info()

    def config_schema(self) -> hclspec.Spec:
        self._record("config_schema")
        return self.schema_fn() if self.schema_fn is not None else super().config_schema()

    def decode_config(self, data: bytes) -> Any:
        with self._lock:
            self.config_bytes.append(bytes(data))
        if self.decode_fn is not None:
            return self.decode_fn(bytes(data))
        spec = self.schema_fn() if self.schema_fn is not None else super().config_schema()
        return hclspec.decode(spec, data)

    def configure(self, config: Any) -> Awaitable[None] | None:
        self._record("configure", config)
        return self.configure_fn(config) if self.configure_fn is not None else None

    # -- device plugin ----------------------------------------------------------

    def detect(self) -> Sequence[DeviceGroup] | Awaitable[Sequence[DeviceGroup]]:
        self._record("detect")
        return self.detect_fn() if self.detect_fn is not None else []

    def reserve(self, device_ids: Sequence[str]) -> Reservation | Awaitable[Reservation]:
        self._record("reserve", tuple(device_ids))
        return self.reserve_fn(device_ids) if self.reserve_fn is not None else Reservation()

    def stats(self) -> Sequence[DeviceGroupStats] | Awaitable[Sequence[DeviceGroupStats]]:
        self._record("stats")
        return self.stats_fn() if self.stats_fn is not None else []

    def fingerprint_stream(self) -> AsyncIterator[Sequence[DeviceGroup]]:
        self._record("fingerprint")
        if self.fingerprint_fn is not None:
            return self.fingerprint_fn()
        return super().fingerprint_stream()

    def stats_stream(self, interval: float) -> AsyncIterator[Sequence[DeviceGroupStats]]:
        self._record("stats_stream", interval)
        if self.stats_stream_fn is not None:
            return self.stats_stream_fn(interval)
        return super().stats_stream(interval)
