"""The class a plugin author subclasses.

An author describes *what is there* (``detect``), *how a task gets it*
(``reserve``) and *what it measures* (``stats``); the engine turns that into
the long-lived streams Nomad needs. Every method may be sync or ``async``:
sync ones run on the plugin's own worker threads (see ``plugin/calls.py``) so
they never block the event loop, and ``detect()`` and ``stats()`` never run
concurrently with themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from nomad_device.model import DeviceGroup, DeviceGroupStats, PluginInfo, Reservation
from nomad_device.plugin.calls import AuthorCalls, calls_of, describe, slow_after, tunable

if TYPE_CHECKING:
    from nomad_device.plugin.engine import FingerprintEngine
    from nomad_device.wire.hclspec import Spec

__all__ = ["DevicePlugin"]

ConfigT = TypeVar("ConfigT")


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
    #: Seconds between ``detect`` calls; :meth:`rescan` wakes it sooner. The
    #: period bounds how stale the devices can be, and it is the only mechanism
    #: where no event source is available.
    fingerprint_period: float = 5.0
    #: Seconds to wait after a :meth:`rescan` before ``detect`` runs, so that a
    #: burst of events (a thousand files created at once) costs one ``detect``.
    rescan_settle: float = 0.02
    #: Seconds ``detect`` may keep failing before the devices it last found are
    #: reported unhealthy, with the error as the reason (``math.inf``: never).
    #: Until then Nomad keeps them as they were; a success restores them.
    detect_grace_period: float = 30.0
    #: A ``detect``, ``stats`` or ``reserve`` call still running after this many
    #: seconds (or three periods for ``detect`` and ``stats``, up to a minute)
    #: is logged as a warning, and again when it returns.
    slow_call_seconds: float = 10.0

    def __init__(self) -> None:
        self.config: ConfigT = cast(ConfigT, None)
        self.configured = False
        self.log = logging.getLogger(self.name or type(self).__name__)
        self._engine: FingerprintEngine | None = None
        self._calls: AuthorCalls | None = None

    # -- base plugin ----------------------------------------------------------

    def plugin_info(self) -> PluginInfo:
        """What PluginInfo answers: ``name`` and ``version`` as a device plugin."""
        return PluginInfo(name=self.name or type(self).__name__, version=self.version)

    def config_schema(self) -> Spec:
        """The hclspec schema; derived from ``Config`` unless overridden."""
        from nomad_device.config import config_spec
        from nomad_device.wire.hclspec import Object

        return config_spec(self.Config) if self.Config is not None else Object({})

    def decode_config(self, data: bytes) -> ConfigT:
        """Turn SetConfig's msgpack into ``ConfigT``; raise ``InvalidArgument`` (or the SDK's
        ``ConfigError``) naming the field to refuse it."""
        from nomad_device.config import decode_config
        from nomad_device.wire import hclspec

        if self.Config is not None:
            return cast(ConfigT, decode_config(self.Config, data))
        return cast(ConfigT, hclspec.decode(self.config_schema(), data) if data else {})

    def configure(self, config: ConfigT) -> Awaitable[None] | None:
        """Hook after a successful decode; raise ``InvalidArgument`` to refuse the config.

        A refusal reaches Nomad as INVALID_ARGUMENT and the old config stays.
        Any other exception (a ``ValueError`` too) is taken for a bug: logged
        with its traceback and answered INTERNAL; the old config stays as well.
        """
        return None

    def close(self) -> Awaitable[None] | None:
        """Hook run once before the process exits (Shutdown or SIGTERM); release things here.

        It is time-boxed to one second (the host SIGKILLs two seconds after
        Shutdown), and ``atexit`` handlers do not run: the process leaves with
        ``os._exit`` so that a stuck worker thread cannot keep it alive.
        """
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
        """Optional event source, started with the first Fingerprint stream.

        Call :meth:`rescan` whenever something may have changed (udev, inotify,
        a socket...). An ``async def watch`` runs on the event loop and is
        cancelled when the last stream closes. A plain ``def watch`` runs in
        its own daemon thread and may block; Python cannot stop a thread, so it
        keeps running when streams close, and it is never started twice.
        A watcher that returns ends watching quietly; one that raises is logged
        and restarted after a back-off. Detection keeps polling meanwhile.
        """

    watch.nothing_to_watch = True  # type: ignore[attr-defined]

    def rescan(self) -> None:
        """Ask for a ``detect`` soon instead of at the next period.

        Safe and cheap from any thread: calls made while a ``detect`` runs or
        settles (:attr:`rescan_settle`) are coalesced into one more ``detect``.
        """
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
        calls = calls_of(self)
        failures = 0
        while True:
            try:
                limit = slow_after(tunable(self, "slow_call_seconds"), interval)
                groups = await calls.call("stats", self.stats, slow_after=limit)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 60 == 0:
                    logging.getLogger("nomad_device.stats").error(
                        "stats() failed: %s",
                        describe(exc),
                        exc_info=exc,
                        extra={"failures": failures},
                    )
                groups = []
            if groups:
                yield groups
            await asyncio.sleep(interval)
