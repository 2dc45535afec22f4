"""nomad-device-generic: schedule ``/dev`` nodes, USB devices and PCI cards without code.

This is the reference for plugins that hand real Linux devices to tasks. The
operator describes each kind of device in a ``device "<label>" { ... }``
block (globs, USB and PCI matchers, sharing, permissions, a probe); the plugin:

1. **detects** (``detect``): a pure rescan of ``/dev`` and ``/sys``
   (:mod:`.discovery`), judged by node checks and probe results
   (:mod:`.health`), with devices that vanished after being reserved kept
   for a grace period; the SDK diffs the groups and tells Nomad only about
   changes;
2. **watches** (``watch``): the background work that makes detection prompt:
   probes on their intervals, and events from the SDK's event sources, each
   ending in ``rescan()``. The fingerprint period is only the safety net;
3. **reserves** (``reserve``, :mod:`.reservation`): device cgroup rules for
   every node, mounts for anything else, environment naming what was given;
4. **reports** (``stats``, :mod:`.stats`): per device, from the last scan;
5. **cleans** (``released``): with a ``nomad`` block, the SDK says when the
   allocation holding a device ended, and the block's ``release`` command
   runs, under the probes' rules, before the device is healthy again.

Reserve and Stats run in worker threads while detection runs in another, so
what they share is one immutable :class:`~.inventory.Snapshot`, swapped under
a lock.

**A device that vanishes after it was reserved.** Nomad never tells a plugin
that an allocation ended, so "allocated" can only mean "named by a Reserve
call since the plugin started". Such a device does not silently disappear from
the node: it stays, unhealthy, with the reason ``not present since <time>``
(a PCI function another driver took: ``bound to <driver>, not <the block's>,
since <time>``), for ``vanished_grace`` (default 5 minutes), so the operator
sees what the running task lost; if it comes back meanwhile it is simply
healthy again, and after the grace period it is dropped. A device never
reserved is dropped at once. Reserve refuses a vanished device
(FAILED_PRECONDITION), so a restarting task fails clearly instead of starting
without it.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Final

from nomad_device.errors import FailedPrecondition, InvalidArgument
from nomad_device.model import DeviceGroup, DeviceGroupStats, Reservation
from nomad_device.plugin.base import DevicePlugin
from nomad_device.plugins.generic.config import (
    GenericConfig,
    Kind,
    Settings,
    format_config_path,
    settings_from,
)
from nomad_device.plugins.generic.discovery import Found, Scanner, ScanResult, order_key
from nomad_device.plugins.generic.events import EventWatch
from nomad_device.plugins.generic.health import (
    AerMarks,
    cdi_problem,
    node_problem,
    pci_problem,
    unmatched_nodes,
)
from nomad_device.plugins.generic.inventory import Entry, Snapshot
from nomad_device.plugins.generic.pci import identity_at
from nomad_device.plugins.generic.probes import (
    MAX_CONCURRENT_PROBES,
    Prober,
    ProbeResult,
    ProbeTarget,
    probe_env,
    run_probe,
)
from nomad_device.plugins.generic.reservation import reserve, rfc3339
from nomad_device.plugins.generic.roots import Roots
from nomad_device.plugins.generic.stats import collect

if TYPE_CHECKING:
    from nomad_device.sources import UEvent

__all__ = ["PLUGIN_NAME", "PLUGIN_VERSION", "GenericDevicePlugin"]

#: The name in PluginInfo: Nomad's own log lines name the plugin by it.
PLUGIN_NAME: Final = "generic-device"
PLUGIN_VERSION: Final = "0.1.0"

#: Scans that find more changes than this log a summary instead of a line each.
_LOG_EACH: Final = 20
#: The pool release commands run on, and how many run at once.
RELEASE_POOL: Final = "release"
MAX_CONCURRENT_RELEASES: Final = 8
#: What a Reserve of a device being cleaned waits beyond its command's timeout.
RELEASE_WAIT_MARGIN: Final = 5.0

Key = tuple[str, str]


class GenericDevicePlugin(DevicePlugin[GenericConfig]):
    """``/dev`` globs, USB devices and PCI functions as Nomad devices, a group per block."""

    name = PLUGIN_NAME
    version = PLUGIN_VERSION
    Config = GenericConfig
    #: A plug-in is a burst of a few uevents within a millisecond or two (the
    #: device, its interfaces, the drivers binding), and the sources batch
    #: inotify events already: 5 ms gathers a burst without the SDK's 20 ms
    #: default showing up in how soon Nomad hears of the device.
    rescan_settle = 0.005
    #: No fixed period: each ``detect`` asks for the next scan the config's
    #: ``fingerprint_period`` later (``rescan(..., key="period")``).
    fingerprint_period = math.inf
    #: Probe runs and release commands take threads of their own pools, never
    #: detect's or reserve's, nor each other's.
    worker_pools: ClassVar[Mapping[str, int]] = {
        Prober.POOL: MAX_CONCURRENT_PROBES,
        RELEASE_POOL: MAX_CONCURRENT_RELEASES,
    }

    def __init__(self, roots: Roots | None = None) -> None:
        super().__init__()
        self.roots = roots or Roots.from_env()
        self._scanner = Scanner(self.roots)
        self._settings: Settings | None = None
        # What Reserve and Stats read; replaced whole by each scan.
        self._lock = threading.Lock()
        self._snapshot = Snapshot()
        self._reservations: dict[Key, int] = {}
        # The block of every device instance ever reported: a released device that is
        # gone now still has its block's release command waiting for it.
        self._block_of: dict[str, str] = {}
        # Why the last cleaning of a device failed, until one succeeds (for Stats).
        self._clean_failed: dict[str, str] = {}
        # Only detect() touches these (the engine runs one detect at a time).
        self._scan_lock = threading.Lock()
        self._first_kind: dict[Key, str] = {}
        self._empty: set[tuple[str, str]] = set()
        self._notes: set[str] = set()
        self._refused: dict[tuple[str, str], str] = {}
        self._usb_warned: set[str] = set()  # blocks told "no USB device matches"
        self._pci_warned: set[str] = set()  # blocks told "no PCI function matches"
        self._aer = AerMarks()
        self._prober = Prober(self, self.rescan, self.log)
        self._events = EventWatch(self.roots, self.rescan, self._pci_event)
        # Node verdicts of CDI devices within one scan (they share their spec's nodes).
        self._cdi_verdicts: dict[tuple[int, str], str | None] = {}

    # -- config ------------------------------------------------------------------

    def decode_config(self, data: bytes) -> GenericConfig:
        """Decode as the SDK does, naming the block the way operators wrote it."""
        from nomad_device.config import ConfigError

        try:
            return super().decode_config(data)
        except ConfigError as exc:
            raise InvalidArgument(f"{format_config_path(exc.path)}: {exc.problem}") from None

    def configure(self, config: GenericConfig) -> None:
        settings = settings_from(config)
        with self._scan_lock:
            self._settings = settings
            self._usb_warned.clear()
            self._pci_warned.clear()
        # A task placed on a device before Nomad heard it is being cleaned waits as long
        # as the cleaning may take.
        timeouts = [k.release.timeout for k in settings.kinds if k.release is not None]
        self.release_wait = max(timeouts, default=0.0) + RELEASE_WAIT_MARGIN
        self.rewatch()  # new patterns, new inotify watches
        if not settings.kinds:
            self.log.warning(
                'no device blocks configured: add device "<label>" { paths = [...] } blocks'
                " to the plugin's config; until then it offers nothing"
            )
        self.log.info(
            "config set",
            extra={
                "devices": ",".join(k.label for k in settings.kinds),
                "fingerprint_period": f"{settings.period:g}s",
                "vanished_grace": f"{settings.vanished_grace:g}s",
                "dev_root": self.roots.dev,
                "sys_root": self.roots.sys,
            },
        )
        self.rescan()

    # -- fingerprint ------------------------------------------------------------------

    def detect(self) -> list[DeviceGroup]:
        """Rescan everything; the SDK diffs the groups and sends only changes."""
        with self._scan_lock:
            settings = self._settings
            if settings is None:
                return []
            self.rescan(settings.period, key="period")  # the next scan, a period from now
            scan = self._scanner.scan(settings.kinds)
            previous = self._snapshot
            entries, targets = self._judge_all(settings, scan, previous)
            self._prober.track(targets)
            snapshot = Snapshot.build(settings, entries)
            with self._lock:
                self._snapshot = snapshot
                self._block_of.update((i, e.kind.label) for i, e in snapshot.by_instance.items())
            self._log_changes(previous, snapshot, scan)
            deadlines = [e.missing_deadline for e in entries if e.missing_deadline is not None]
            aer = self._aer.deadline()
            if aer is not None:
                deadlines.append(aer)
            self._arm_timer(min(deadlines, default=math.inf))
        return list(snapshot.groups)

    def _judge_all(
        self, settings: Settings, scan: ScanResult, previous: Snapshot
    ) -> tuple[list[Entry], dict[Key, ProbeTarget]]:
        now, wall = time.monotonic(), time.time()
        self._cdi_verdicts.clear()
        before = {e.key: e for e in previous.entries}
        entries: list[Entry] = []
        targets: dict[Key, ProbeTarget] = {}
        functions = [f.pci for fs in scan.found.values() for f in fs if f.pci is not None]
        self._aer.keep(functions)
        for kind in settings.kinds:
            mine: list[Entry] = []
            seen: set[Key] = set()
            for found in scan.found.get(kind.label, []):
                seen.add((kind.label, found.id))
                aer = None
                if found.pci is not None:
                    quiet, stamp = settings.recovery_quiet, rfc3339(wall)
                    aer = self._aer.judge(found.pci, quiet, now, stamp)
                mine.append(self._judge(kind, found, targets, aer))
            for key, old in before.items():
                if key[0] == kind.label and key not in seen:
                    kept = self._vanished(kind, old, settings, now, wall)
                    if kept is not None:
                        mine.append(kept)
            mine.sort(key=lambda e: order_key(e.found))
            entries.extend(mine)
        return entries, targets

    def _judge(
        self, kind: Kind, found: Found, targets: dict[Key, ProbeTarget], aer: str | None = None
    ) -> Entry:
        key = (kind.label, found.id)
        first_kind = None
        if found.source == "path":
            first = found.nodes[0].kind
            first_kind = (
                self._first_kind.setdefault(key, first)
                if first != "missing"
                else self._first_kind.get(key)
            )
        problem = None
        if not found.usb_authorized:
            problem = "the USB device is not authorized (authorized = 0; usbguard?)"
        elif found.source == "usb" and not found.nodes:
            problem = unmatched_nodes(found) or (
                "the kernel made no device node for it (is a driver bound?)"
            )
        elif found.source == "pci":
            problem = pci_problem(found, kind.require_full_link, aer)
        elif found.source == "cdi":
            skip = kind.cdi is not None and kind.cdi.skip_hooks
            problem = cdi_problem(found, skip, self.roots.canonical, self._cdi_verdicts)
        for node in found.all_nodes:
            if problem is not None or found.source == "cdi":
                break
            wanted = kind.permissions if node.is_device else "rw" if kind.writable_mounts else "r"
            problem = node_problem(node, wanted, first_kind, self.roots.canonical)
        probe = None
        if kind.probe is not None:
            if problem is None:
                targets[key] = ProbeTarget(kind.probe, probe_env(found))
            probe = self._prober.result(key)
            if problem is None:
                if probe is None:
                    problem = "waiting for the first health probe"
                elif not probe.ok:
                    problem = probe.reason
        return Entry(kind, found, problem is None, problem or "", probe=probe)

    def _vanished(
        self, kind: Kind, old: Entry, settings: Settings, now: float, wall: float
    ) -> Entry | None:
        """Keep a reserved device that is gone, unhealthy, until its grace period ends."""
        with self._lock:
            reserved = old.key in self._reservations
        if not reserved or settings.vanished_grace <= 0:
            return None
        since = wall if old.missing_since is None else old.missing_since
        deadline = now + settings.vanished_grace
        if old.missing_deadline is not None:
            deadline = old.missing_deadline
        if now >= deadline:
            return None
        return Entry(
            kind, old.found, False, self._absence(old.found, since), since, deadline, old.probe
        )

    def _absence(self, found: Found, since: float) -> str:
        """Why a device is no longer offered: it is gone, or a PCI function that is still
        there is bound to another driver than its block's (or otherwise left it)."""
        when = rfc3339(since)
        ident = identity_at(self.roots, found.pci.address) if found.pci is not None else None
        if ident is None:
            return f"not present since {when}"
        driver = ident.driver or "no driver"
        if found.expect_driver is not None and ident.driver != found.expect_driver:
            return f"bound to {driver}, not {found.expect_driver}, since {when}"
        return f"present but no longer the block's since {when} (the plugin's log says why)"

    def _arm_timer(self, deadline: float) -> None:
        """Rescan when the first vanished device's grace period ends (or an AER mark's)."""
        delay = max(0.0, deadline - time.monotonic()) + 0.01 if deadline < math.inf else math.inf
        self.rescan(delay, key="vanished")

    # -- logging what changed -----------------------------------------------------------

    def _log_changes(self, previous: Snapshot, current: Snapshot, scan: ScanResult) -> None:
        for label, pattern in sorted(scan.empty_patterns - self._empty):
            self.log.warning(
                "pattern matches nothing (yet); its devices appear when it does",
                extra={"device": label, "pattern": pattern},
            )
        self._empty = scan.empty_patterns
        for note in sorted(scan.notes - self._notes):
            self.log.warning(note)
        self._notes = scan.notes
        for (label, path), why in sorted(scan.refused.items()):
            if self._refused.get((label, path)) != why:
                self.log.warning(
                    f"{path} is not offered: {why}", extra={"device": label, "path": path}
                )
        self._refused = scan.refused
        # Once per block and config: an unplugged device says "device gone" already.
        for label in sorted(scan.usb_unmatched - self._usb_warned):
            if scan.usb_bus:
                nearest = scan.nearest.get(("usb", label), "")
                self.log.warning(
                    f"no USB device matches (yet): {nearest};"
                    " its devices appear when one is plugged in",
                    extra={"device": label},
                )
            else:
                self.log.warning(
                    "no USB device matches: this host has no USB bus"
                    f" ({self.roots.sys}/bus/usb does not exist)",
                    extra={"device": label},
                )
        self._usb_warned |= scan.usb_unmatched
        for label in sorted(scan.pci_unmatched - self._pci_warned):
            nearest = scan.nearest.get(("pci", label), "")
            self.log.warning(
                f"no PCI function matches (yet): {nearest}; its devices appear when one does",
                extra={"device": label},
            )
        self._pci_warned |= scan.pci_unmatched
        before = {e.key: e for e in previous.entries}
        after = {e.key: e for e in current.entries}
        lines: list[tuple[str, str, Entry, str]] = []
        for key, entry in after.items():
            old = before.get(key)
            if old is None:
                lines.append(("info", "device found", entry, ""))
            elif old.present and not entry.present:
                lines.append(("warn", "device gone after it was reserved", entry, entry.reason))
            elif not old.present and entry.present:
                lines.append(("info", "device back", entry, ""))
            elif old.healthy and not entry.healthy:
                lines.append(("warn", "device unhealthy", entry, entry.reason))
            elif not old.healthy and entry.healthy:
                lines.append(("info", "device healthy again", entry, ""))
            elif old.reason != entry.reason:
                lines.append(("warn", "device unhealthy", entry, entry.reason))
        for key, old in before.items():
            if key not in after:
                what = "device gone" if old.present else "vanished device dropped after its grace"
                lines.append(("info", what, old, ""))
        for level, message, entry, reason in lines[:_LOG_EACH]:
            fields = {
                "device": entry.kind.label,
                "id": entry.found.id,
                "nodes": ",".join(n.task_path for n in entry.found.all_nodes),
            }
            if reason:
                fields["reason"] = reason
            if level == "warn":
                self.log.warning(message, extra=fields)
            else:
                self.log.info(message, extra=fields)
        if len(lines) > _LOG_EACH:
            self.log.info(f"... and {len(lines) - _LOG_EACH} more device changes in this scan")

    # -- background work ----------------------------------------------------------------

    async def watch(self) -> None:
        """A rescan whenever the system says something changed (see :mod:`.events`).

        Runs while a Fingerprint stream is open. Probes are not in here: they
        are the plugin's for its whole life (:mod:`.probes`).
        """
        await self._events.run(self._watched_kinds)

    def _pci_event(self, event: UEvent) -> None:
        """The kernel's word on an error recovery, or a function added or bound anew."""
        error = event.properties.get("ERROR_EVENT", "")
        self._aer.uevent(event.action, event.devpath, error, rfc3339(time.time()))

    def _watched_kinds(self) -> Sequence[Kind]:
        settings = self._settings
        return settings.kinds if settings is not None else ()

    def close(self) -> None:
        """At exit: every probe's process tree ends (the SDK cancels our timers)."""
        self._prober.close()

    # -- reserve and stats ----------------------------------------------------------------

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        """From the snapshot Nomad was told about; see :mod:`.reservation`."""
        with self._lock:
            snapshot = self._snapshot
        reservation, entries = reserve(snapshot, device_ids)
        changed = [
            why
            for entry in entries
            for node in entry.found.all_nodes
            if node.kind != "missing"
            and (why := self._scanner.recheck(node, entry.kind.patterns)) is not None
        ]
        if changed:
            self.rescan()  # tell Nomad what is there now
            raise FailedPrecondition(
                "cannot grant what changed since the last scan: " + "; ".join(changed)
            )
        with self._lock:
            for entry in entries:
                self._reservations[entry.key] = self._reservations.get(entry.key, 0) + 1
        self.log.info(
            "reserved",
            extra={
                "ids": ",".join(device_ids),
                "nodes": ",".join(d.host_path for d in reservation.devices),
            },
        )
        return reservation

    def stats(self) -> list[DeviceGroupStats]:
        with self._lock:
            snapshot, reservations = self._snapshot, dict(self._reservations)
            failed = dict(self._clean_failed)
        # A device being cleaned is unhealthy in Stats too, as in the fingerprint: the
        # stats' summary is what `nomad node status -verbose` shows of it.
        cleaning = {
            device_id: f"cleaning after {alloc} failed: {failed[device_id]}"
            if device_id in failed
            else f"being cleaned after {alloc}"
            for device_id, alloc in self.cleaning().items()
        }
        return collect(snapshot, reservations, cleaning)

    # -- cleaning after a release ------------------------------------------------------------

    async def released(self, device_ids: Sequence[str]) -> dict[str, str]:
        """Run each device's ``release`` command; the IDs whose command failed, and why.

        Devices of blocks without one have nothing to clean. The commands run
        side by side on their own pool, under the probes' rules (small
        environment, own process tree, capped output, killed at the timeout),
        with ``GENERIC_DEVICE_ALLOC_ID`` naming the allocation that held the
        device. A device that is not present cannot be cleaned: it fails, and
        the SDK tries again (with back-off) until it is back.
        """
        with self._lock:
            snapshot, block_of = self._snapshot, dict(self._block_of)
        kinds = {k.label: k for k in self._kinds()}
        after = self.cleaning()
        failed: dict[str, str] = {}
        runs: list[tuple[str, Entry, ProbeTarget]] = []
        for device_id in device_ids:
            entry = snapshot.by_instance.get(device_id)
            if entry is None:
                kind = kinds.get(block_of.get(device_id, ""))
                if kind is not None and kind.release is not None:
                    failed[device_id] = "not present; it is cleaned when it is back"
                continue
            spec = entry.kind.release
            if spec is None:
                continue
            if not entry.present:
                failed[device_id] = "not present; it is cleaned when it is back"
                continue
            env = {**probe_env(entry.found), "GENERIC_DEVICE_ALLOC_ID": after.get(device_id, "")}
            runs.append((device_id, entry, ProbeTarget(spec, env)))
        results = await asyncio.gather(
            *(self.run_blocking(self._clean, t, pool=RELEASE_POOL) for _, _, t in runs),
            return_exceptions=True,
        )
        for (device_id, entry, _), result in zip(runs, results, strict=True):
            if isinstance(result, BaseException):
                failed[device_id] = f"release command failed to run: {result}"
                continue
            fields = {
                "device": entry.kind.label,
                "id": device_id,
                "alloc_id": after.get(device_id, ""),
                "duration": f"{result.duration:.3f}s",
            }
            if result.ok:
                self.log.info("device cleaned after its release", extra=fields)
            else:
                failed[device_id] = result.reason
        with self._lock:
            for device_id in device_ids:
                self._clean_failed.pop(device_id, None)
            self._clean_failed.update(failed)
        return failed

    def _clean(self, target: ProbeTarget) -> ProbeResult:
        return run_probe(target, self._prober.processes, what="release command")

    def _kinds(self) -> Sequence[Kind]:
        settings = self._settings
        return settings.kinds if settings is not None else ()
