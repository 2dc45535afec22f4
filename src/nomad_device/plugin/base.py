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
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from nomad_device.model import DeviceGroup, DeviceGroupStats, PluginInfo, Reservation
from nomad_device.plugin.calls import AUTHOR_POOL, describe, slow_after, tunable
from nomad_device.plugin.runtime import runtime_of

if TYPE_CHECKING:
    from nomad_device.plugin.lifetime import Scheduled
    from nomad_device.plugin.nomadapi import NomadConfig
    from nomad_device.wire.hclspec import Spec

__all__ = ["DevicePlugin"]

ConfigT = TypeVar("ConfigT")
T = TypeVar("T")


def _launch_dir() -> str:
    from nomad_device.golang import getwd

    try:
        return getwd()
    except OSError:
        return ""


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
    #: Worker threads of the plugin's own pools for :meth:`run_blocking`, by
    #: pool name (``{"probe": 4}``); a pool not named here gets 2.
    worker_pools: ClassVar[Mapping[str, int]] = {}
    #: Seconds a Reserve naming a device that is being cleaned after a release
    #: waits for the cleaning to end before it is refused (see :meth:`released`).
    release_wait: float = 60.0

    def __init__(self) -> None:
        self.config: ConfigT = cast(ConfigT, None)
        self.configured = False
        self.log = logging.getLogger(self.name or type(self).__name__)
        #: The working directory the host started the plugin in (as Go's
        #: ``os.Getwd`` reports it; empty if it was gone). :func:`serve` then
        #: moves the process to ``/``, so that nothing is ever loaded or
        #: created relative to wherever the agent was started: resolve relative
        #: paths from the config against this.
        self.launch_dir: str = _launch_dir()

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

    # -- releases (opt-in: a ``nomad`` block, see docs/architecture.md) -----------

    def nomad_config(self, config: ConfigT) -> NomadConfig | None:
        """Where the local Nomad agent's API is, to follow releases; None: do not.

        By default the config's ``nomad`` field, when it holds a
        :class:`~nomad_device.plugin.nomadapi.NomadConfig` (add
        ``nomad: NomadConfig | None = None`` to ``Config``); override it to take
        the block from elsewhere. The SDK calls it with each new config, before
        :meth:`configure`; a block that cannot work refuses the config.
        """
        if "nomad_device.plugin.nomadapi" not in sys.modules:
            return None  # nothing imported the block's class: no config can hold one
        from nomad_device.plugin.nomadapi import NomadConfig

        value = getattr(config, "nomad", None)
        return value if isinstance(value, NomadConfig) else None

    def released(
        self, device_ids: Sequence[str]
    ) -> Mapping[str, str] | Awaitable[Mapping[str, str] | None] | None:
        """The allocation that held these devices has ended: clean them for the next task.

        Called once per device and holder, with the devices one allocation gave
        back, when the plugin follows releases (:meth:`nomad_config`). While it
        runs, the devices are reported unhealthy (``being cleaned after
        <allocation>``, so Nomad places nothing on them) and a Reserve naming
        them waits (:attr:`release_wait`); :meth:`cleaning` names the
        allocation. Return None when all are clean, or a mapping of the IDs that
        could not be cleaned to why; raising fails them all. A device that
        failed stays unhealthy with that reason (``cleaning after <allocation>
        failed: ...``) and its cleaning is called again, with back-off, until
        it succeeds. A sync method runs on the plugin's ``release`` pool (2
        threads unless ``worker_pools`` says more). Default: nothing to clean.
        """
        return None

    released.nothing_to_do = True  # type: ignore[attr-defined]

    def held_by(self) -> Mapping[str, str]:
        """Device ID -> the allocation holding it now (empty when not following releases).

        Devices held when the plugin started are known as held once the agent
        answered; the SDK also adds a ``held_by`` stat to each held instance.
        """
        tracker = runtime_of(self).tracker
        return {} if tracker is None else {k[3]: a for k, a in tracker.ledger.held().items()}

    def cleaning(self) -> Mapping[str, str]:
        """Device ID -> the allocation it is being cleaned after (while :meth:`released`
        runs, and after it failed until a retry succeeds)."""
        tracker = runtime_of(self).tracker
        return (
            {} if tracker is None else {k[3]: a for k, a in tracker.ledger.cleaning_after().items()}
        )

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

    def rescan(self, delay: float = 0.0, *, key: str | None = None) -> None:
        """Ask for a ``detect`` soon (``delay`` 0) or about ``delay`` seconds from now.

        Safe and cheap from any thread. Immediate requests made while a
        ``detect`` runs or settles (:attr:`rescan_settle`) are coalesced into
        one more ``detect``. Timed ones are kept until their time comes
        (several at once, the earliest first; requests within a millisecond
        of each other are one), also while no stream is open; each ``detect``
        that starts satisfies those already due. The regular
        :attr:`fingerprint_period` runs on regardless: this is how a plugin
        says "look again in 5 s" (a quiet period ending, a grace period
        running out) without touching the period.

        With a ``key``, the request replaces the one waiting under that key
        (``math.inf`` withdraws it): a plugin whose config sets its scan
        period says ``self.rescan(period, key="period")`` at the start of
        each ``detect()``, and scans every ``period`` after the last one,
        however many scans events caused in between.
        """
        engine = runtime_of(self).engine
        if engine is not None:
            engine.wake(delay, key)

    def rewatch(self) -> None:
        """Start :meth:`watch` again, because what it watches changed (after ``configure``).

        Safe from any thread. An ``async def watch`` is cancelled (its ``async
        with`` closes its sources) and started afresh once it has ended, so it
        reads the new settings; one that had returned starts again too. A
        plain ``def watch`` cannot be stopped: its next run starts when it
        returns. Without an open stream nothing runs; the next stream starts
        ``watch`` with what is current then.
        """
        engine = runtime_of(self).engine
        if engine is not None:
            engine.rewatch()

    def resolve_path(self, path: str) -> str:
        """A path from the config as the operator meant it: a relative one from :attr:`launch_dir`.

        :func:`serve` moves the process to ``/``, so ``open("cards.json")``
        would look there; an operator (or a test) who wrote a relative path
        meant the directory the plugin was started in, as with a Go plugin.
        """
        if path.startswith("/") or not self.launch_dir:
            return path
        return os.path.join(self.launch_dir, path)

    # -- work off the loop, timers, clean-up -------------------------------------------

    async def run_blocking(self, fn: Callable[..., T], *args: Any, pool: str = "work") -> T:
        """Run the sync ``fn(*args)`` on the plugin's own worker pool ``pool``.

        Pools are bounded (:attr:`worker_pools`, 2 threads unless sized there)
        and separate from the threads that run ``detect``, ``stats`` and
        ``reserve``, so a probe or a hardware call that hangs holds only its
        own pool. Never asyncio's default executor, which the process shares.
        Cancelling the caller abandons the wait; the thread finishes its call
        (Python cannot stop it). After the plugin closed it raises
        ``RuntimeError``.
        """
        if not isinstance(pool, str) or not pool:
            raise ValueError(f"pool must be a non-empty name, not {pool!r}")
        return await runtime_of(self).calls.call(AUTHOR_POOL + pool, fn, *args, what=f"{pool} work")

    def call_later(self, delay: float, fn: Callable[[], object]) -> Scheduled:
        """Call ``fn`` in about ``delay`` seconds; the handle's ``cancel()`` stops it.

        A coroutine function runs as a task on the plugin's loop, a plain one
        on the ``work`` pool (see :meth:`run_blocking`); an exception is
        logged. Safe from any thread, also before the plugin is served.
        Pending calls are cancelled when the plugin closes. For "detect again
        at that time", :meth:`rescan` with a delay says it directly.
        """
        return runtime_of(self).lifetime.call_later(delay, fn)

    def on_close(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` (sync or async) when the plugin stops, after :meth:`close`.

        Clean-up runs last registered first, within a short time box
        (``CLEANUP_TIMEOUT``, 0.3 s in all), also when ``close()`` itself
        overran its own. Whatever a plugin starts (child processes, threads,
        handles on hardware) it stops here or in ``close()``: the process
        leaves with ``os._exit``, and children outlive it otherwise.
        """
        runtime_of(self).lifetime.on_close(fn)

    # -- raw streams (override for full control) --------------------------------

    def fingerprint_stream(self) -> AsyncIterator[Sequence[DeviceGroup]]:
        """The Fingerprint stream: full states, each different from the last.

        Override only if ``detect`` does not fit; the engine still validates
        every message and restarts the iterator if it fails or ends.
        """
        engine = runtime_of(self).engine
        if engine is None:
            raise RuntimeError("plugin is not being served")
        return engine.stream()

    async def stats_stream(self, interval: float) -> AsyncIterator[Sequence[DeviceGroupStats]]:
        """The Stats stream: ``stats()`` every ``interval`` seconds, first at once."""
        calls = runtime_of(self).calls
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
