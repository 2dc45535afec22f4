"""NVIDIA GPUs for Nomad: a drop-in for ``nomad-device-nvidia`` with health that recovers.

:class:`NvidiaPlugin` is meant to be read as the reference for GPUs on the SDK.
Its parts live in small modules: :mod:`.config` (the Go plugin's settings and
the new ones), :mod:`.nvml` (the only code that calls NVIDIA's binding),
:mod:`.health` (XIDs and when a GPU recovers), :mod:`.mig`, :mod:`.reserve`
and :mod:`.stats`. This module ties them together:

- ``detect`` queries every GPU, keeps the last known state of GPUs NVML cannot
  reach (unhealthy, saying why) and reports one group per model name (or MIG
  profile), as the Go plugin does; the SDK diffs and streams the result;
- ``watch`` waits on NVML's event set in a worker thread and wakes detection
  the moment an XID or ECC event arrives; polling is the safety net;
- ``reserve`` and ``stats`` answer from the devices Nomad was last told about.

Nothing NVML does ends a stream: every failure becomes a reason on a device,
or a log line and an empty fingerprint on a node without a driver.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from nomad_device.errors import FailedPrecondition, NotFound
from nomad_device.model import Attribute, Device, DeviceGroup, DeviceGroupStats, Reservation
from nomad_device.plugin.base import DevicePlugin
from nomad_device.plugin.engine import backoff_delay
from nomad_device.plugins.nvidia import stats as nvstats
from nomad_device.plugins.nvidia.config import CONFIG_SPEC, NvidiaConfig, Settings, settings_from
from nomad_device.plugins.nvidia.health import HealthMarks, describe_xid, verdict
from nomad_device.plugins.nvidia.mig import group_name
from nomad_device.plugins.nvidia.nvml import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_MIG_CONFIG_CHANGE,
    EVENT_XID,
    Event,
    GpuReading,
    Nvml,
    NvmlError,
    Scan,
    Subscription,
    Unavailable,
)
from nomad_device.plugins.nvidia.reserve import Target, reservation
from nomad_device.plugins.sharing import instance_ids, physical_ids
from nomad_device.wire import hclspec

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
#: How long one NVML event wait lasts; bounds how long cancelling ``watch`` takes.
EVENT_WAIT_MS: Final = 500
#: How often ``watch`` looks again while there is nothing to watch.
IDLE_PERIOD: Final = 0.5

_NOT_AVAILABLE: Final = "N/A"

#: A MIG instance as events name it: (device ID, GPU instance, compute instance).
_Child = tuple[str, int | None, int | None]


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


@dataclass(frozen=True)
class _Published:
    """What Nomad was last told: the groups and how to find each instance."""

    groups: tuple[DeviceGroup, ...] = ()
    instances: Mapping[str, _Record] = field(default_factory=dict)
    entries: tuple[tuple[str, tuple[str, ...], str], ...] = ()


def _attributes(
    gpu: GpuReading, driver_version: str, memory_mib: int | None
) -> dict[str, Attribute]:
    """The Go plugin's attributes, names and units; absent values are left out as there."""
    attrs = {
        "driver_version": Attribute(driver_version),
        "display_state": Attribute(gpu.display_state or _NOT_AVAILABLE),
        "persistence_mode": Attribute(gpu.persistence_mode or _NOT_AVAILABLE),
    }
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


def _summary(faults: Sequence[str]) -> str:
    extra = f" (and {len(faults) - 1} more)" if len(faults) > 1 else ""
    return f"NVML query failed: {faults[0]}{extra}"


def _conditions(gpu: GpuReading, settings: Settings) -> list[str]:
    """What this scan's queries say is wrong with a GPU."""
    found: list[str] = []
    if gpu.faults:
        found.append(_summary(gpu.faults))
    if gpu.retired_pages_pending:
        found.append("retired memory pages pending: reset the GPU")
    if gpu.remapped_rows_pending:
        found.append("memory row remapping pending: reset the GPU")
    if gpu.remapped_rows_failure:
        found.append("memory row remapping failed")
    limit = settings.temperature_limit
    if limit and gpu.temperature is not None and gpu.temperature >= limit:
        found.append(f"temperature {gpu.temperature} C at or above the limit of {limit} C")
    return found


class NvidiaPlugin(DevicePlugin[NvidiaConfig]):
    """NVIDIA GPUs (and MIG instances) as ``nvidia/gpu`` devices."""

    name = PLUGIN_NAME
    version = PLUGIN_VERSION
    Config = NvidiaConfig

    def __init__(self, nvml: Nvml | None = None) -> None:
        super().__init__()
        self._nvml = nvml or Nvml()
        self._lock = threading.Lock()
        self._settings = Settings()
        self.fingerprint_period = self._settings.period
        self._marks = HealthMarks()
        # Every device seen and not gone, by ID: the last known state of a GPU
        # NVML can no longer reach.
        self._known: dict[str, _Record] = {}
        self._published = _Published()
        # For events: GPU UUID -> its MIG instances' (ID, GPU instance, compute instance).
        self._children: dict[str, tuple[_Child, ...]] = {}
        self._event_gpus: frozenset[str] = frozenset()
        # What was logged, so that a lasting state is logged once.
        self._status: tuple[str, ...] = ()
        self._health: dict[str, tuple[bool, str]] = {}
        self._watch_status: tuple[str, ...] = ()

    # -- config --------------------------------------------------------------------

    def config_schema(self) -> hclspec.Spec:
        return CONFIG_SPEC

    def configure(self, config: NvidiaConfig) -> None:
        settings = settings_from(config)
        with self._lock:
            self._settings = settings
            self.fingerprint_period = settings.period
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
            },
        )
        self.rescan()

    # -- fingerprint ---------------------------------------------------------------

    def detect(self) -> list[DeviceGroup]:
        """Query every GPU, settle health, and publish the groups Nomad will see.

        Also decides when the next scan is due: sooner than the period while a
        query is failing or an event mark may clear.
        """
        settings = self._settings
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
        now = time.monotonic()
        fresh, children = self._records(scan, settings)
        with self._lock:
            if settings is not self._settings:
                return list(self._published.groups)  # reconfigured meanwhile; a rescan follows
            records = self._merge(fresh, scan, settings)
            health = {}
            for record in records.values():
                mark = self._marks.settle(record.id, record.query_ok, settings.quiet_period, now)
                health[record.id] = verdict(record.conditions, mark)
            self._marks.forget(records)
            self._known = records
            self._children = children
            self._event_gpus = frozenset(
                g.uuid for g in scan.gpus if g.uuid not in settings.ignored_gpu_ids
            )
            self._published = self._publish(records, health, settings.share)
            self.fingerprint_period = self._next_scan(records, settings, now)
            groups = self._published.groups
        self._log_scan(scan, settings, len(records))
        self._log_health(health)
        return list(groups)

    def _records(
        self, scan: Scan, settings: Settings
    ) -> tuple[dict[str, _Record], dict[str, tuple[_Child, ...]]]:
        """Records for the devices this scan read, MIG instances in place of their GPU."""
        ignored = settings.ignored_gpu_ids
        records: dict[str, _Record] = {}
        children: dict[str, tuple[_Child, ...]] = {}
        for gpu in scan.gpus:
            if gpu.uuid in ignored:
                continue  # ignoring a GPU also hides its MIG instances
            conditions = _conditions(gpu, settings)
            ok = not gpu.faults
            if not gpu.mig_enabled:
                records[gpu.uuid] = self._reuse(
                    _Record(
                        id=gpu.uuid,
                        group=gpu.name or _NOT_AVAILABLE,
                        attributes=_attributes(gpu, scan.driver_version, gpu.memory_mib),
                        pci_bus_id=gpu.pci_bus_id,
                        target=Target(gpu.uuid, gpu.minor),
                        conditions=tuple(conditions),
                        query_ok=ok,
                    )
                )
                continue
            kids: list[_Child] = []
            for mig in gpu.migs:
                if mig.uuid in ignored:
                    continue
                mig_conditions = list(conditions)
                if mig.faults:
                    mig_conditions.append(_summary(mig.faults))
                records[mig.uuid] = self._reuse(
                    _Record(
                        id=mig.uuid,
                        group=group_name(mig.name, gpu.name),
                        attributes=_attributes(gpu, scan.driver_version, mig.memory_mib),
                        pci_bus_id=gpu.pci_bus_id,
                        target=Target(
                            mig.uuid, gpu.minor, mig.gpu_instance, mig.compute_instance, True
                        ),
                        parent=gpu.uuid,
                        conditions=tuple(mig_conditions),
                        query_ok=ok and not mig.faults,
                    )
                )
                kids.append((mig.uuid, mig.gpu_instance, mig.compute_instance))
            children[gpu.uuid] = tuple(kids)
        return records, children

    def _reuse(self, record: _Record) -> _Record:
        """A device whose queries failed keeps its last known group and attributes."""
        known = self._known.get(record.id)
        if record.query_ok or known is None:
            return record
        return _Record(
            id=record.id,
            group=known.group,
            attributes=known.attributes,
            pci_bus_id=known.pci_bus_id,
            target=known.target,
            parent=known.parent,
            conditions=record.conditions,
            query_ok=False,
        )

    def _merge(
        self, fresh: dict[str, _Record], scan: Scan, settings: Settings
    ) -> dict[str, _Record]:
        """Fresh records, plus the known devices NVML could not reach this time.

        A device missing from a clean scan is gone; one missing while NVML
        reported a GPU it could not open, or could not run at all, is kept,
        unhealthy, with the reason.
        """
        if scan.unavailable is not None:
            why = scan.unavailable.message
        elif scan.unreachable:
            why = "NVML cannot open the GPU: " + "; ".join(scan.unreachable)
        else:
            return fresh
        merged = dict(fresh)
        for device_id, known in self._known.items():
            ignored = (
                device_id in settings.ignored_gpu_ids or known.parent in settings.ignored_gpu_ids
            )
            if device_id not in merged and not ignored:
                merged[device_id] = _Record(
                    id=known.id,
                    group=known.group,
                    attributes=known.attributes,
                    pci_bus_id=known.pci_bus_id,
                    target=known.target,
                    parent=known.parent,
                    conditions=(why,),
                    query_ok=False,
                )
        return merged

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

    def _next_scan(self, records: Mapping[str, _Record], settings: Settings, now: float) -> float:
        """The period, or sooner when a failed query deserves a retry or a mark may clear."""
        delay = settings.period
        if any(not record.query_ok for record in records.values()):
            delay = min(delay, RECHECK_PERIOD)
        expiry = self._marks.next_expiry(settings.quiet_period)
        if expiry is not None and expiry > now:
            delay = min(delay, expiry - now + 0.01)
        return delay

    # -- events ----------------------------------------------------------------------

    async def watch(self) -> None:
        """Wait for NVML events in a worker thread; each XID or ECC event wakes detection."""
        subscription: Subscription | None = None
        failures = 0
        try:
            while True:
                wanted = (self._nvml.generation, self._event_gpus)
                if subscription is not None and subscription.key != wanted:
                    _close_soon(subscription)
                    subscription = None
                if subscription is None:
                    if not wanted[1]:
                        await asyncio.sleep(IDLE_PERIOD)
                        continue
                    result = await asyncio.to_thread(self._nvml.subscribe, wanted[1])
                    if isinstance(result, Unavailable):
                        failures += 1
                        self._log_watch(
                            ("unavailable", result.message),
                            logging.WARNING,
                            f"cannot watch NVML events: {result.message}; polling only",
                        )
                        await asyncio.sleep(backoff_delay(failures, cap=self._settings.period))
                        continue
                    subscription = result
                    self._log_subscription(subscription)
                try:
                    event = await asyncio.to_thread(subscription.wait, EVENT_WAIT_MS)
                except NvmlError as exc:
                    failures += 1
                    self._log_watch(
                        ("failed", str(exc)),
                        logging.ERROR,
                        f"waiting for NVML events failed: {exc}; starting over",
                    )
                    _close_soon(subscription)
                    subscription = None
                    self.rescan()
                    await asyncio.sleep(backoff_delay(failures, cap=10.0))
                    continue
                failures = 0
                if event is not None:
                    self._on_event(event)
        finally:
            if subscription is not None:
                _close_soon(subscription)

    def _on_event(self, event: Event) -> None:
        settings = self._settings
        if event.type & EVENT_MIG_CONFIG_CHANGE:
            self.log.info("MIG configuration changed", extra={"gpu": event.uuid})
            self.rescan()
        if event.type & EVENT_XID:
            if event.data in settings.ignored_xids:
                self.log.info(
                    f"{describe_xid(event.data)}: ignored (an application error; see ignored_xids)",
                    extra={"gpu": event.uuid, "xid": event.data},
                )
                return
            reason = describe_xid(event.data)
        elif event.type & EVENT_DOUBLE_BIT_ECC:
            reason = "double-bit ECC error"
        else:
            return
        targets = self._event_targets(event)
        if not targets:
            self.log.info(
                f"{reason} on a GPU this plugin does not report", extra={"gpu": event.uuid}
            )
            return
        self._marks.mark(targets, reason, time.monotonic())
        self.log.warning(
            f"{reason}: marking unhealthy until {_seconds(settings.quiet_period)} pass without"
            " another event",
            extra={"gpu": event.uuid, "devices": sorted(targets)},
        )
        self.rescan()

    def _event_targets(self, event: Event) -> list[str]:
        """The devices an event concerns: the GPU, or its MIG instances."""
        with self._lock:
            known = dict(self._known)
            children = self._children.get(event.uuid or "", ())
        if event.uuid is None:
            # NVML could not say which GPU: every GPU is suspect (as NVIDIA's own plugin does).
            return sorted(known)
        if not children:
            return [event.uuid] if event.uuid in known else []
        matching = [
            device_id
            for device_id, gi, ci in children
            if event.gpu_instance is not None
            and (gi, ci) == (event.gpu_instance, event.compute_instance)
        ]
        return matching or [device_id for device_id, _, _ in children]

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

    # -- stats -------------------------------------------------------------------------

    def stats(self) -> list[DeviceGroupStats]:
        """Every reported instance's statistics; a failing query is N/A, never an error."""
        with self._lock:
            entries = self._published.entries
        if not entries:
            return []
        readings = self._nvml.read_stats(physical for _, _, physical in entries)
        return nvstats.group_stats(entries, readings, VENDOR, DEVICE_TYPE)

    # -- logging -----------------------------------------------------------------------

    def _log_status(self, key: tuple[str, ...], level: int, message: str, **extra: object) -> None:
        if key != self._status:
            self._status = key
            self.log.log(level, message, extra=extra)

    def _log_scan(self, scan: Scan, settings: Settings, devices: int) -> None:
        again = f"checking again every {settings.period_text}"
        problem = scan.unavailable
        if problem is not None:
            levels = {
                "binding": logging.WARNING,
                "library": logging.INFO,
                "driver": logging.WARNING,
            }
            self._log_status(
                ("unavailable", problem.kind, problem.message),
                levels.get(problem.kind, logging.ERROR),
                f"no NVIDIA GPUs reported: {problem.message}; {again}",
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
                message += "; NVML cannot open " + "; ".join(scan.unreachable)
            self._log_status(
                (
                    "found",
                    scan.driver_version,
                    str(len(scan.gpus)),
                    str(devices),
                    *scan.unreachable,
                ),
                logging.WARNING if scan.unreachable else logging.INFO,
                message,
                driver_version=scan.driver_version,
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
        key = ("watching", *subscription.covered)
        if key == self._watch_status:
            return
        self._watch_status = key
        self.log.info(
            f"watching NVML events (XID, double-bit ECC) on {len(subscription.covered)} GPU(s)",
            extra={"gpus": list(subscription.covered)},
        )
        if subscription.unsupported:
            self.log.warning(
                "no NVML events from some GPUs: their health comes from queries only",
                extra={"gpus": list(subscription.unsupported)},
            )


def _close_soon(subscription: Subscription) -> None:
    """Free an event set once its last wait returns, without holding up the loop."""
    threading.Thread(target=subscription.close, name="nvml-event-set-free", daemon=True).start()


def _seconds(value: float) -> str:
    return f"{value:g} s"
