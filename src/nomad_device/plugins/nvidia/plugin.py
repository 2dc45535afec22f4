"""NVIDIA GPUs for Nomad: a drop-in for ``nomad-device-nvidia`` with health that recovers.

:class:`NvidiaPlugin` is meant to be read as the reference for GPUs on the SDK.
Its parts live in small modules: :mod:`.config` (the Go plugin's settings and
the new ones), :mod:`.nvml` (the only code that calls NVIDIA's binding),
:mod:`.codes` (what an NVML return code means), :mod:`.health` (fault signals
and when a GPU recovers), :mod:`.mig`, :mod:`.reserve` and :mod:`.stats`.
This module ties them together:

- ``detect`` queries every GPU, keeps the last known state of GPUs NVML cannot
  read for now (and reports them unhealthy once that lasts), and reports one
  group per model name (or MIG profile), as the Go plugin does; the SDK diffs
  and streams the result;
- ``watch`` waits on NVML's event set in a worker thread and wakes detection
  the moment an XID, ECC or MIG event arrives; polling is the safety net;
- ``reserve`` and ``stats`` answer from the devices Nomad was last told about;
- ``released`` (with ``reset_on_release`` and a ``nomad`` block) puts back
  what a task may have changed through NVML before the next one gets the GPU.

Nothing NVML does ends a stream, and only NVML's own fault signals make a
GPU unhealthy: a query that fails is a value left out, logged once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Final, TypeVar

from nomad_device.errors import FailedPrecondition, NotFound
from nomad_device.model import Attribute, Device, DeviceGroup, DeviceGroupStats, Reservation
from nomad_device.plugin import Backoff, DevicePlugin
from nomad_device.plugins.nvidia import codes
from nomad_device.plugins.nvidia import stats as nvstats
from nomad_device.plugins.nvidia.codes import Failure
from nomad_device.plugins.nvidia.config import NvidiaConfig, Settings, settings_from
from nomad_device.plugins.nvidia.health import (
    PATIENCE,
    HealthMarks,
    conditions,
    persisting,
    verdict,
    xid_reason,
)
from nomad_device.plugins.nvidia.mig import group_name
from nomad_device.plugins.nvidia.nvml import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_GPU_RECOVERY_ACTION,
    EVENT_GPU_UNAVAILABLE,
    EVENT_MIG_CONFIG_CHANGE,
    EVENT_NAMES,
    EVENT_XID,
    Event,
    GpuReading,
    Nvml,
    NvmlError,
    Scan,
    Subscription,
    Unavailable,
    sysfs_bus_id,
)
from nomad_device.plugins.nvidia.reserve import Target, reservation
from nomad_device.plugins.sharing import instance_ids, physical_ids

__all__ = ["DEVICE_TYPE", "PLUGIN_NAME", "PLUGIN_VERSION", "VENDOR", "NvidiaPlugin"]

#: Nomad keys plugins by this name: the Go plugin's, so that one of the two
#: runs on a node, never both (see docs/plugins/nvidia.md).
PLUGIN_NAME: Final = "nvidia-gpu"
#: Above every 1.x release of the Go plugin, so that Nomad prefers this one
#: when both are installed.
PLUGIN_VERSION: Final = "2.0.0"
VENDOR: Final = "nvidia"
DEVICE_TYPE: Final = "gpu"

#: How soon a GPU whose query failed is queried again (the period if shorter).
RECHECK_PERIOD: Final = 5.0
#: How long one NVML event wait lasts; bounds how long stopping ``watch`` takes.
EVENT_WAIT_MS: Final = 500
#: The worker pool of every event-set operation: one thread, so that an event
#: set is never used from two threads at once (NVML does not promise it works).
EVENT_POOL: Final = "nvml-events"
#: Longest pause between attempts to watch events after a failed wait.
EVENT_RETRY_CAP: Final = 10.0

_NOT_AVAILABLE: Final = "N/A"

#: A MIG instance as events name it: (device ID, GPU instance, compute instance).
_Child = tuple[str, int | None, int | None]

T = TypeVar("T")


@dataclass(frozen=True)
class _Record:
    """One physical device (a GPU, or a MIG instance) as last reported."""

    id: str
    group: str
    attributes: Mapping[str, Attribute]
    pci_bus_id: str | None
    target: Target
    parent: str | None = None
    conditions: tuple[str, ...] = ()
    query_ok: bool = True

    @property
    def gpu(self) -> str:
        """The physical GPU it lives on."""
        return self.parent or self.id


@dataclass(frozen=True)
class _Published:
    """What Nomad was last told: the groups and how to find each instance."""

    groups: tuple[DeviceGroup, ...] = ()
    instances: Mapping[str, _Record] = field(default_factory=dict)
    entries: tuple[tuple[str, tuple[str, ...], str], ...] = ()


def _attributes(
    gpu: GpuReading, driver_version: str, memory_mib: int | None
) -> dict[str, Attribute]:
    """The Go plugin's attributes, names and units; what NVML does not give is left out."""
    attrs = {"driver_version": Attribute(driver_version)}
    if gpu.display_state is not None:
        attrs["display_state"] = Attribute(gpu.display_state)
    if gpu.persistence_mode is not None:
        attrs["persistence_mode"] = Attribute(gpu.persistence_mode)
    numbers = (
        ("memory", memory_mib, "MiB"),
        ("power", gpu.power_w, "W"),
        ("bar1", gpu.bar1_mib, "MiB"),
        ("cores_clock", gpu.cores_clock, "MHz"),
        ("memory_clock", gpu.memory_clock, "MHz"),
        ("pci_bandwidth", gpu.pci_bandwidth, "MB/s"),
    )
    for name, value, unit in numbers:
        if value is not None:
            attrs[name] = Attribute(int(value), unit)
    return attrs


def _locality(bus_id: str | None) -> str | None:
    return None if bus_id is None else sysfs_bus_id(bus_id)


class NvidiaPlugin(DevicePlugin[NvidiaConfig]):
    """NVIDIA GPUs (and MIG instances) as ``nvidia/gpu`` devices."""

    name = PLUGIN_NAME
    version = PLUGIN_VERSION
    Config = NvidiaConfig
    #: No fixed period: each ``detect`` asks for the next scan the config's
    #: ``fingerprint_period`` later (``rescan(..., key="period")``).
    fingerprint_period = math.inf
    worker_pools: ClassVar[Mapping[str, int]] = {EVENT_POOL: 1}

    def __init__(self, nvml: Nvml | None = None) -> None:
        super().__init__()
        self._nvml = nvml or Nvml()
        self._lock = threading.Lock()
        self._settings = Settings()
        self._marks = HealthMarks()
        # Every device seen and not gone, by ID: the last known state of a GPU
        # NVML cannot read for now.
        self._known: dict[str, _Record] = {}
        self._published = _Published()
        # For events: GPU UUID -> its MIG instances' (ID, GPU instance, compute instance).
        self._children: dict[str, tuple[_Child, ...]] = {}
        self._event_gpus: frozenset[str] = frozenset()
        # The NVML generation of the last good scan: a new one means new handles,
        # so watch() subscribes again (detect() restarts it: rewatch()).
        self._scanned_generation = -1
        # GPU UUID -> scans in a row its identity (or NVML) failed.
        self._streaks: dict[str, int] = {}
        # GPU UUID -> the volatile uncorrected ECC count of the last scan.
        self._ecc_counts: dict[str, int] = {}
        # The event set outlives a stream: events arriving between streams stay queued.
        self._subscription: Subscription | None = None
        # What was logged, so that a lasting state is logged once.
        self._status: tuple[str, ...] = ()
        self._health: dict[str, tuple[bool, str]] = {}
        self._watch_status: tuple[str, ...] = ()
        self._left_out: set[tuple[str, str, int | None]] = set()

    # -- config --------------------------------------------------------------------

    def configure(self, config: NvidiaConfig) -> None:
        settings = settings_from(config)
        with self._lock:
            self._settings = settings
        self.log.info(
            "config set",
            extra={
                "enabled": settings.enabled,
                "ignored_gpu_ids": sorted(settings.ignored_gpu_ids),
                "fingerprint_period": settings.period_text,
                "share": settings.share,
                "ignored_xids": sorted(settings.ignored_xids),
                "recovery_quiet_period": config.recovery_quiet_period,
                "temperature_limit": settings.temperature_limit,
                "dev_root": settings.dev_root,
                "proc_root": settings.proc_root,
                "reset_on_release": settings.reset_on_release,
            },
        )
        self.rescan()

    def close(self) -> None:
        """Free the event set and let go of NVML, never under a running wait.

        A wait still running in the event pool ends within ``EVENT_WAIT_MS``;
        :meth:`.Nvml.close` frees the set after it, then shuts NVML down.
        """
        self._nvml.close()

    # -- fingerprint ---------------------------------------------------------------

    def detect(self) -> list[DeviceGroup]:
        """Query every GPU, settle health, and publish the groups Nomad will see.

        Also decides when the next scan is due: sooner than the period while a
        query is failing or an event mark may clear.
        """
        settings = self._settings
        self.rescan(settings.period, key="period")  # the next scan, a period from now
        if not settings.enabled:
            self._log_status(
                ("disabled",),
                logging.INFO,
                "disabled in the config (enabled = false): reporting no GPUs",
            )
            with self._lock:
                self._known, self._published, self._event_gpus = {}, _Published(), frozenset()
            return []
        scan = self._nvml.scan()
        for note in scan.notes:
            self.log.info(note)
        now = time.monotonic()
        fresh, children, troubled = self._records(scan, settings)
        with self._lock:
            if settings is not self._settings:
                return list(self._published.groups)  # reconfigured meanwhile; a rescan follows
            records = self._merge(fresh, scan, troubled, settings)
            self._mark_ecc_rises(scan, records, now)
            health = {}
            for record in records.values():
                mark = self._marks.settle(record.id, record.query_ok, settings.quiet_period, now)
                health[record.id] = verdict(record.conditions, mark)
            self._marks.forget(records)
            self._known = records
            gpus = {record.gpu for record in records.values()}
            self._children.update(children)
            self._children = {gpu: kids for gpu, kids in self._children.items() if gpu in gpus}
            event_gpus = frozenset(
                g.uuid
                for g in scan.gpus
                if g.uuid not in settings.ignored_gpu_ids
                and not any(f.code == codes.GPU_IS_LOST for f in g.faults)
            )
            generation = self._nvml.generation
            if event_gpus != self._event_gpus or (
                scan.unavailable is None and generation != self._scanned_generation
            ):
                self._event_gpus = event_gpus
                self.rewatch()  # watch() subscribes for these GPUs, on these handles
            if scan.unavailable is None:
                self._scanned_generation = generation
            self._published = self._publish(records, health, settings.share)
            sooner = self._next_scan(records, settings, now)
            self.rescan(math.inf if sooner is None else sooner, key="recheck")
            groups = self._published.groups
        self._log_scan(scan, settings, len(records))
        self._log_left_out(scan)
        self._log_health(health)
        return list(groups)

    def _records(
        self, scan: Scan, settings: Settings
    ) -> tuple[dict[str, _Record], dict[str, tuple[_Child, ...]], dict[str, Failure]]:
        """Records for the devices this scan read, MIG instances in place of their GPU.

        Also the GPUs whose identity queries failed: their fresh records are
        not to be trusted over the last known ones.
        """
        ignored = settings.ignored_gpu_ids
        records: dict[str, _Record] = {}
        children: dict[str, tuple[_Child, ...]] = {}
        troubled: dict[str, Failure] = {}
        for gpu in scan.gpus:
            if gpu.uuid in ignored:
                continue  # ignoring a GPU also hides its MIG instances
            found = conditions(gpu, settings.temperature_limit)
            identity = [*gpu.identity, *(f for m in gpu.migs for f in m.identity)]
            if identity and not gpu.faults:
                troubled[gpu.uuid] = identity[0]
            ok = not gpu.faults and not identity
            locality = _locality(gpu.pci_bus_id)
            if not gpu.mig_enabled:
                records[gpu.uuid] = self._reuse(
                    _Record(
                        id=gpu.uuid,
                        group=gpu.name or _NOT_AVAILABLE,
                        attributes=_attributes(gpu, scan.driver_version, gpu.memory_mib),
                        pci_bus_id=locality,
                        target=Target(gpu.uuid, gpu.minor),
                        conditions=tuple(found),
                        query_ok=ok,
                    )
                )
                continue
            kids: list[_Child] = []
            for mig in gpu.migs:
                if mig.uuid in ignored:
                    continue
                mig_found = found + [failure.reason() for failure in mig.faults]
                records[mig.uuid] = self._reuse(
                    _Record(
                        id=mig.uuid,
                        group=group_name(mig.name, gpu.name),
                        attributes=_attributes(gpu, scan.driver_version, mig.memory_mib),
                        pci_bus_id=locality,
                        target=Target(
                            mig.uuid, gpu.minor, mig.gpu_instance, mig.compute_instance, True
                        ),
                        parent=gpu.uuid,
                        conditions=tuple(mig_found),
                        query_ok=ok and not mig.faults,
                    )
                )
                kids.append((mig.uuid, mig.gpu_instance, mig.compute_instance))
            children[gpu.uuid] = tuple(kids)
        return records, children, troubled

    def _reuse(self, record: _Record) -> _Record:
        """A device whose queries failed keeps its last known group and attributes."""
        known = self._known.get(record.id)
        if record.query_ok or known is None:
            return record
        return replace(known, conditions=record.conditions, query_ok=False)

    def _merge(
        self,
        fresh: dict[str, _Record],
        scan: Scan,
        troubled: dict[str, Failure],
        settings: Settings,
    ) -> dict[str, _Record]:
        """Fresh records, and the known devices this scan could not vouch for.

        A device missing from a clean scan is gone. One whose GPU NVML could
        not identify, open or reach at all keeps its last known state, and turns
        unhealthy at once on a fault code, or after :data:`PATIENCE` scans.
        Where the GPUs cannot be used by anyone (driver unloaded), every known
        device is unhealthy at once.
        """
        trouble = dict(troubled)
        seen = {gpu.uuid for gpu in scan.gpus}
        problem = scan.unavailable
        known_gpus = {record.gpu for record in self._known.values()}
        if problem is not None and problem.kind == "error":
            failure = problem.failure or Failure("nvmlInit", None, problem.message)
            trouble.update(dict.fromkeys(known_gpus, failure))
        elif problem is None and scan.unreachable:
            # NVML counts GPUs it cannot open; which ones it does not say.
            failure = scan.unreachable[0][1]
            trouble.update(dict.fromkeys(known_gpus - seen, failure))
        self._streaks = {gpu: self._streaks.get(gpu, 0) + 1 for gpu in trouble}
        merged = {
            device_id: record
            for device_id, record in fresh.items()
            if record.gpu not in trouble or record.gpu not in known_gpus
        }
        for device_id, known in self._known.items():
            ignored = known.gpu in settings.ignored_gpu_ids or device_id in settings.ignored_gpu_ids
            if ignored or device_id in merged:
                continue
            if problem is not None and problem.devices_unusable:
                merged[device_id] = replace(known, conditions=(problem.message,), query_ok=False)
                continue
            cause = trouble.get(known.gpu)
            if cause is None:
                continue  # gone
            streak = self._streaks[known.gpu]
            if cause.fault:
                found: tuple[str, ...] = (cause.reason(),)
            elif streak >= PATIENCE:
                found = (persisting(cause, streak),)
            else:
                found = known.conditions  # the last verdict stands for now
            merged[device_id] = replace(known, conditions=found, query_ok=False)
        return merged

    def _mark_ecc_rises(self, scan: Scan, records: Mapping[str, _Record], now: float) -> None:
        """A rise of the uncorrected ECC count since the last scan is an ECC error seen late.

        It reaches GPUs whose ECC events cannot be watched, and errors that
        happened while no stream was open.
        """
        for gpu in scan.gpus:
            count, before = gpu.ecc_uncorrected, self._ecc_counts.get(gpu.uuid)
            if count is None:
                continue
            self._ecc_counts[gpu.uuid] = count
            if before is None or count <= before:
                continue
            targets = [r.id for r in records.values() if r.gpu == gpu.uuid]
            if targets:
                reason = (
                    f"uncorrectable ECC errors rose from {before} to {count}"
                    " (nvmlDeviceGetTotalEccErrors); reset the GPU once drained"
                )
                self._marks.mark(targets, reason, now)
                self.log.warning(reason, extra={"gpu": gpu.uuid})
        gpus = {record.gpu for record in records.values()}
        self._ecc_counts = {uuid: n for uuid, n in self._ecc_counts.items() if uuid in gpus}

    def _publish(
        self, records: Mapping[str, _Record], health: Mapping[str, tuple[bool, str]], share: int
    ) -> _Published:
        """Groups by name, devices in UUID order, each device ``share`` times."""
        by_group: dict[str, list[_Record]] = {}
        for record in sorted(records.values(), key=lambda r: r.id):
            by_group.setdefault(record.group, []).append(record)
        groups: list[DeviceGroup] = []
        instances: dict[str, _Record] = {}
        entries: list[tuple[str, tuple[str, ...], str]] = []
        for name in sorted(by_group):
            members = by_group[name]
            devices: list[Device] = []
            for record in members:
                healthy, why = health[record.id]
                ids = instance_ids(record.id, share)
                entries.append((name, ids, record.id))
                for instance_id in ids:
                    instances[instance_id] = record
                    devices.append(Device(instance_id, healthy, why, record.pci_bus_id))
            # As in the Go plugin, the group's attributes are its first device's.
            groups.append(
                DeviceGroup(VENDOR, DEVICE_TYPE, name, tuple(devices), members[0].attributes)
            )
        return _Published(tuple(groups), instances, tuple(entries))

    def _next_scan(
        self, records: Mapping[str, _Record], settings: Settings, now: float
    ) -> float | None:
        """Seconds to a scan sooner than the period: a failed query's retry, a mark's end."""
        delays = []
        if any(not record.query_ok for record in records.values()) or self._streaks:
            delays.append(RECHECK_PERIOD)
        expiry = self._marks.next_expiry(settings.quiet_period)
        if expiry is not None:
            # At once when the quiet period is already over (shorter than a scan's delay).
            delays.append(max(0.0, expiry - now) + 0.01)
        soonest = min(delays, default=None)
        return soonest if soonest is not None and soonest < settings.period else None

    # -- events ----------------------------------------------------------------------

    async def _blocking(self, fn: Callable[..., T], *args: object) -> T:
        """Run an event-set operation on the one thread that does them all."""
        return await self.run_blocking(fn, *args, pool=EVENT_POOL)

    def _subscribe(self, gpus: frozenset[str]) -> Subscription | Unavailable | None:
        """On the event pool: a new event set, kept at once (a cancelled watch() loses none)."""
        result = self._nvml.subscribe(gpus)
        if isinstance(result, Subscription):
            self._subscription = result
        return result

    async def watch(self) -> None:
        """Wait for NVML events in a worker thread; each one that matters wakes detection.

        The event set belongs to the plugin, not to this call: when the last
        stream closes and watching stops, events keep queueing in it for the
        next stream. It is rebuilt when NVML restarts or the GPUs change.
        """
        retry = Backoff(cap=EVENT_RETRY_CAP)
        while True:
            wanted = (self._nvml.generation, self._event_gpus)
            subscription = self._subscription
            if subscription is not None and (subscription.key != wanted or subscription.closed):
                self._subscription = None
                await self._blocking(subscription.close)
                subscription = None
            if subscription is None:
                if not wanted[1]:
                    return  # nothing to watch until a scan finds GPUs (it calls rewatch())
                result = await self._blocking(self._subscribe, wanted[1])
                if result is None:
                    return  # NVML restarted: the next scan calls rewatch()
                if isinstance(result, Unavailable):
                    self._log_watch(
                        ("unavailable", result.message),
                        logging.WARNING,
                        f"cannot watch NVML events: {result.message}; polling only",
                    )
                    await asyncio.sleep(min(retry.failed(), self._settings.period))
                    continue
                subscription = result
                self._log_subscription(subscription)
            try:
                event = await self._blocking(subscription.wait, EVENT_WAIT_MS)
            except NvmlError as exc:
                if subscription.closed:
                    continue  # NVML was shut down or restarted under it: a new set follows
                self._subscription = None
                await self._blocking(subscription.close)
                self.rescan()
                lost = exc.failure.code == codes.GPU_IS_LOST
                self._log_watch(
                    ("failed", str(exc)),
                    logging.WARNING if lost else logging.ERROR,
                    f"waiting for NVML events failed: {exc}; "
                    + ("rescanning, then watching the other GPUs" if lost else "starting over"),
                )
                await asyncio.sleep(retry.failed())
                continue
            retry.succeeded()
            if event is not None:
                self._on_event(event)

    def _on_event(self, event: Event) -> None:
        settings = self._settings
        if event.type & (EVENT_MIG_CONFIG_CHANGE | EVENT_GPU_RECOVERY_ACTION):
            what = (
                "MIG configuration" if event.type & EVENT_MIG_CONFIG_CHANGE else "recovery action"
            )
            self.log.info(f"NVML event: {what} changed", extra={"gpu": event.uuid})
            self.rescan()
        if event.type & EVENT_XID:
            if event.data in settings.ignored_xids:
                self.log.info(
                    f"{xid_reason(event.data)}: ignored (an application error; see ignored_xids)",
                    extra={"gpu": event.uuid, "xid": event.data},
                )
                return
            reason = xid_reason(event.data)
        elif event.type & EVENT_DOUBLE_BIT_ECC:
            reason = "double-bit ECC error (NVML event); reset the GPU once drained"
        elif event.type & EVENT_GPU_UNAVAILABLE:
            reason = "GPU unavailable (NVML event); reset the GPU or reboot the node"
        else:
            return
        targets = self._event_targets(event)
        if not targets:
            self.log.info(
                f"{reason}: on a GPU this plugin does not report", extra={"gpu": event.uuid}
            )
            self.rescan()
            return
        self._marks.mark(targets, reason, time.monotonic())
        self.log.warning(
            f"{reason}: marking unhealthy until {_seconds(settings.quiet_period)} pass without"
            " another event",
            extra={"gpu": event.uuid, "devices": sorted(targets)},
        )
        self.rescan()

    def _event_targets(self, event: Event) -> list[str]:
        """The devices an event concerns: the GPU, or those of its MIG instances it names.

        nvml.h: an XID attributable to a GPU instance names it, and its compute
        instance if attributable to one; 0xFFFFFFFF (None here) otherwise.
        """
        with self._lock:
            known = set(self._known)
            children = self._children.get(event.uuid or "", ())
        if event.uuid is None:
            return []  # not a GPU of this set: the rescan finds out what it was
        if not children:
            return [event.uuid] if event.uuid in known else []
        if event.gpu_instance is None:
            return [device_id for device_id, _, _ in children]
        return [
            device_id
            for device_id, gi, ci in children
            if gi == event.gpu_instance
            and (event.compute_instance is None or ci == event.compute_instance)
        ]

    # -- reserve ---------------------------------------------------------------------

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        """``NVIDIA_VISIBLE_DEVICES`` plus the device nodes, each GPU once."""
        if not device_ids:
            return Reservation()  # what the Go plugin answers
        with self._lock:
            settings, instances = self._settings, self._published.instances
        if not settings.enabled:
            raise FailedPrecondition("device is not enabled")
        unknown = [device_id for device_id in device_ids if device_id not in instances]
        if unknown:
            raise NotFound(f"unknown device IDs: {','.join(unknown)}")
        by_physical = {instances[i].id: instances[i] for i in device_ids}
        targets = [by_physical[p].target for p in physical_ids(device_ids)]
        return reservation(targets, settings.dev_root, settings.proc_root)

    # -- after a release ------------------------------------------------------------------

    def released(self, device_ids: Sequence[str]) -> dict[str, str]:
        """With ``reset_on_release``: each released GPU reset where NVML allows it
        (:meth:`.Nvml.reset_after_release`); the IDs that could not be, and why."""
        with self._lock:
            settings, instances, known = self._settings, self._published.instances, self._known
            records = {i: instances.get(i) or known.get(i) for i in device_ids}
        if not settings.reset_on_release:
            return {}
        failed: dict[str, str] = {}
        for device_id, record in records.items():
            if record is None:
                failed[device_id] = "not present; it is reset when it is back"
                continue
            problem = self._nvml.reset_after_release(record.id, mig=record.parent is not None)
            if problem is not None:
                failed[device_id] = problem
            else:
                self.log.info(
                    "GPU reset after its release",
                    extra={"id": device_id, "alloc_id": self.cleaning().get(device_id, "")},
                )
        return failed

    # -- stats -------------------------------------------------------------------------

    def stats(self) -> list[DeviceGroupStats]:
        """Every reported instance's statistics; what NVML does not give is left out."""
        with self._lock:
            entries = self._published.entries
        if not entries:
            return []
        found = self._nvml.read_stats(physical for _, _, physical in entries)
        if found.stale:
            self.log.info(
                "MIG devices reconfigured: their handles name other instances now; rescanning",
                extra={"devices": list(found.stale)},
            )
            self.rescan()
        for device_id, reading in found.readings.items():
            self._left_out_once(device_id, "statistics", reading.absent)
        return nvstats.group_stats(entries, found.readings, VENDOR, DEVICE_TYPE)

    # -- logging -----------------------------------------------------------------------

    def _log_status(self, key: tuple[str, ...], level: int, message: str, **extra: object) -> None:
        if key != self._status:
            self._status = key
            self.log.log(level, message, extra=extra)

    def _log_scan(self, scan: Scan, settings: Settings, devices: int) -> None:
        again = f"checking again every {settings.period_text}"
        problem = scan.unavailable
        if problem is not None and devices:
            self._log_status(
                ("kept", problem.kind, problem.message),
                logging.ERROR if problem.devices_unusable else logging.WARNING,
                f"NVML cannot be used now: {problem.message}; reporting the {devices}"
                " device(s) last seen "
                + (
                    "as unhealthy"
                    if problem.devices_unusable
                    else f"(unhealthy if it lasts {PATIENCE} scans)"
                ),
            )
        elif problem is not None:
            levels = {
                "binding": logging.WARNING,
                "library": logging.INFO,
                "none": logging.INFO,
                "driver": logging.WARNING,
                "permission": logging.WARNING,
            }
            self._log_status(
                ("unavailable", problem.kind, problem.message),
                levels.get(problem.kind, logging.ERROR),
                f"no NVIDIA GPUs reported: {problem.message}; {again}"
                if problem.kind != "none"
                else f"{problem.message}; {again}",
            )
        elif not scan.gpus and not scan.unreachable:
            self._log_status(
                ("none", scan.driver_version),
                logging.INFO,
                f"NVML found no NVIDIA GPUs; {again}",
                driver_version=scan.driver_version,
            )
        else:
            message = f"found {len(scan.gpus)} NVIDIA GPU(s), reported as {devices} device(s)"
            if scan.unreachable:
                message += "; NVML cannot open " + "; ".join(
                    f"GPU {index}: {failure}" for index, failure in scan.unreachable
                )
            for gpu in scan.gpus:
                if gpu.mig_enabled and not gpu.migs:
                    message += f"; MIG is on for {gpu.uuid} but it has no MIG devices to offer"
            self._log_status(
                ("found", scan.driver_version, message),
                logging.WARNING if scan.unreachable else logging.INFO,
                message,
                driver_version=scan.driver_version,
            )

    def _log_left_out(self, scan: Scan) -> None:
        for gpu in scan.gpus:
            self._left_out_once(gpu.uuid, "values", gpu.absent)
            self._left_out_once(gpu.uuid, "identity queries", gpu.identity)
            for mig in gpu.migs:
                self._left_out_once(mig.uuid, "values", (*mig.absent, *mig.identity))

    def _left_out_once(self, device_id: str, what: str, failures: Iterable[Failure]) -> None:
        """Log each (device, call, code) left out once: absent at info, transient at warning."""
        new = [
            f
            for f in dict.fromkeys(failures)
            if not f.fault and (device_id, f.call, f.code) not in self._left_out
        ]
        if not new:
            return
        self._left_out.update((device_id, f.call, f.code) for f in new)
        absent = [f for f in new if f.absent]
        transient = [f for f in new if not f.absent]
        if absent:
            self.log.info(
                f"NVML does not give these {what}; they are left out: "
                + "; ".join(map(str, absent)),
                extra={"device": device_id},
            )
        if transient:
            self.log.warning(
                f"NVML queries failed; their {what} are left out while they fail: "
                + "; ".join(map(str, transient)),
                extra={"device": device_id},
            )

    def _log_health(self, health: Mapping[str, tuple[bool, str]]) -> None:
        for device_id, (healthy, why) in sorted(health.items()):
            before = self._health.get(device_id)
            if before == (healthy, why) or (before is None and healthy):
                continue
            if healthy:
                self.log.info("GPU healthy again", extra={"device": device_id})
            else:
                self.log.warning(f"GPU unhealthy: {why}", extra={"device": device_id})
        self._health = dict(health)

    def _log_watch(self, key: tuple[str, ...], level: int, message: str) -> None:
        if key != self._watch_status:
            self._watch_status = key
            self.log.log(level, message)

    def _log_subscription(self, subscription: Subscription) -> None:
        watched = [c.uuid for c in subscription.coverage if c.watched & EVENT_XID]
        # Once per NVML start and set of GPUs: after NVML restarts, say it watches again.
        key = (
            "watching",
            str(subscription.key[0]),
            *(f"{c.uuid}:{c.watched}" for c in subscription.coverage),
        )
        if key == self._watch_status:
            return
        self._watch_status = key
        self.log.info(f"watching NVML events on {len(watched)} GPU(s)", extra={"gpus": watched})
        for coverage in subscription.coverage:
            if not coverage.lacking:
                continue
            lacking = "; ".join(
                f"{EVENT_NAMES[bit]} ({why})" for bit, why in sorted(coverage.lacking.items())
            )
            no_xids = not coverage.watched & EVENT_XID
            self.log.log(
                logging.WARNING if no_xids else logging.INFO,
                f"NVML events this GPU cannot give: {lacking}; "
                + (
                    "its health comes from queries only"
                    if no_xids
                    else "what can be polled is (ECC counts, retirement, lost GPUs)"
                ),
                extra={"gpu": coverage.uuid},
            )


def _seconds(value: float) -> str:
    return f"{value:g} s"
