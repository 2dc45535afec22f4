"""The class a plugin author subclasses.

An author describes *what is there* (``detect``), *how a task gets it*
(``reserve``) and *what it measures* (``stats``); the engine turns that into
the long-lived streams Nomad needs. Every method may be sync or ``async``:
sync ones run in a worker thread so they never block the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from nomad_device.model import DeviceGroup, DeviceGroupStats, PluginInfo, Reservation

if TYPE_CHECKING:
    from nomad_device.plugin.engine import FingerprintEngine
    from nomad_device.wire.hclspec import Spec

__all__ = ["DevicePlugin", "call_author"]

ConfigT = TypeVar("ConfigT")
T = TypeVar("T")


async def call_author(fn: Callable[..., T | Awaitable[T]], *args: Any) -> T:
    """Call author code that may be sync or async without blocking the loop."""
    if inspect.iscoroutinefunction(fn):
        return cast(T, await fn(*args))
    result = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(result):
        return cast(T, await result)
    return result


class DevicePlugin(Generic[ConfigT]):
    """Subclass, set ``name`` (and ``version``, ``Config``), implement ``detect``.

    ``Config`` is a dataclass: it yields both the schema Nomad shows operators
    and the decoder for what Nomad sends. After ``SetConfig`` the decoded value
    is ``self.config`` and :meth:`configure` runs.
    """

    #: The plugin's name as Nomad will know it (``plugin "<name>"`` picks the file).
    name: ClassVar[str] = ""
    #: Semver of the plugin itself.
    version: ClassVar[str] = "0.1.0"
    #: A dataclass describing the config block, or None for no config.
    Config: ClassVar[type[Any] | None] = None
    #: Seconds between ``detect`` calls; :meth:`rescan` wakes it sooner.
    fingerprint_period: float = 5.0

    def __init__(self) -> None:
        self.config: ConfigT = cast(ConfigT, None)
        self.configured = False
        self.log = logging.getLogger(self.name or type(self).__name__)
        self._engine: FingerprintEngine | None = None

    # -- base plugin ----------------------------------------------------------

    def plugin_info(self) -> PluginInfo:
        return PluginInfo(name=self.name or type(self).__name__, version=self.version)

    def config_schema(self) -> Spec:
        """The hclspec schema; derived from ``Config`` unless overridden."""
        from nomad_device.config import config_spec
        from nomad_device.wire.hclspec import Object

        return config_spec(self.Config) if self.Config is not None else Object({})

    def decode_config(self, data: bytes) -> ConfigT:
        """Turn SetConfig's msgpack into ``ConfigT``; raise ValueError naming the field."""
        from nomad_device.config import decode_config
        from nomad_device.wire import hclspec

        if self.Config is not None:
            return cast(ConfigT, decode_config(self.Config, data))
        return cast(ConfigT, hclspec.decode(self.config_schema(), data) if data else {})

    def configure(self, config: ConfigT) -> Awaitable[None] | None:
        """Hook after a successful decode; raise ValueError/InvalidArgument to refuse."""
        return None

    # -- device plugin ----------------------------------------------------------

    def detect(self) -> Sequence[DeviceGroup] | Awaitable[Sequence[DeviceGroup]]:
        """Everything that is there now, with health. Called every period."""
        raise NotImplementedError(f"{type(self).__name__} must implement detect()")

    def reserve(self, device_ids: Sequence[str]) -> Reservation | Awaitable[Reservation]:
        """How a task gets the given devices. Default: nothing to mount."""
        return Reservation()

    def stats(self) -> Sequence[DeviceGroupStats] | Awaitable[Sequence[DeviceGroupStats]]:
        """Current statistics. Default: none."""
        return []

    # -- event sources ----------------------------------------------------------

    async def watch(self) -> None:
        """Optional event source, run while any Fingerprint stream is open.

        Call :meth:`rescan` whenever something may have changed (udev, inotify,
        a socket...). Exceptions are logged and the watcher restarted after a
        back-off; detection keeps polling meanwhile.
        """

    def rescan(self) -> None:
        """Ask for a ``detect`` now instead of at the next period (thread-safe)."""
        if self._engine is not None:
            self._engine.wake()

    # -- raw streams (override for full control) --------------------------------

    def fingerprint_stream(self) -> AsyncIterator[Sequence[DeviceGroup]]:
        """The Fingerprint stream: full states, each different from the last.

        Override only if ``detect`` does not fit; the engine still validates
        every message and restarts the iterator if it fails or ends.
        """
        if self._engine is None:
            raise RuntimeError("plugin is not being served")
        return self._engine.stream()

    async def stats_stream(self, interval: float) -> AsyncIterator[Sequence[DeviceGroupStats]]:
        """The Stats stream: ``stats()`` every ``interval`` seconds, first at once."""
        failures = 0
        while True:
            try:
                groups = await call_author(self.stats)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 60 == 0:
                    logging.getLogger("nomad_device.stats").error(
                        "stats() failed: %s", exc, exc_info=exc, extra={"failures": failures}
                    )
                groups = []
            if groups:
                yield groups
            await asyncio.sleep(interval)
