"""NVML access: the only module that talks to NVIDIA's binding (``pynvml``).

It turns NVML into plain, frozen readings and never lets an NVML error escape
as anything but data. Every failed call becomes a :class:`~.codes.Failure`
sorted by what it means (:mod:`.codes`): a *fault* of the GPU, a failed
*identity* query (what the device is called and where it sits), or a value
left out (*absent*). A missing binding, library or driver, or an NVML that
cannot start, is an :class:`Unavailable` with an operator-readable message.
The binding is imported lazily, so the plugin starts (and says what is
missing) without it.

Locking: all calls but event waits run under one lock; each event set has its
own, held for the whole of a wait, and :meth:`Nvml.shutdown` frees every set
(waiting for its current wait to end) before calling ``nvmlShutdown``. NVML
does not promise that an event set survives concurrent use or a shutdown
under a wait, so neither ever happens.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from nomad_device.plugins.nvidia import codes
from nomad_device.plugins.nvidia.codes import Failure

__all__ = [
    "BINDING_HINT",
    "EVENT_DOUBLE_BIT_ECC",
    "EVENT_GPU_RECOVERY_ACTION",
    "EVENT_GPU_UNAVAILABLE",
    "EVENT_MIG_CONFIG_CHANGE",
    "EVENT_NAMES",
    "EVENT_XID",
    "Event",
    "GpuReading",
    "MigReading",
    "Nvml",
    "NvmlError",
    "Scan",
    "StatsReading",
    "Subscription",
    "Unavailable",
    "pci_bandwidth",
    "sysfs_bus_id",
]

BINDING_HINT: Final = "pip install 'nomad-device-sdk[nvidia]'"

MiB: Final = 1 << 20

# nvml.h constants, spelled here so that this module reads without the binding.
_INIT_FLAG_NO_GPUS: Final = 1
_CLOCK_GRAPHICS: Final = 0
_CLOCK_SM: Final = 1
_CLOCK_MEM: Final = 2
_TEMPERATURE_GPU: Final = 0
_CORRECTED: Final = 0
_UNCORRECTED: Final = 1
_VOLATILE: Final = 0
_L1_CACHE: Final = 0
_L2_CACHE: Final = 1
_DEVICE_MEMORY: Final = 2
_MIG_ENABLED: Final = 1
_NO_INSTANCE: Final = 0xFFFFFFFF
#: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvml.h of CUDA 12.9, driver 575).
_FIELD_RECOVERY_ACTION: Final = 230

EVENT_DOUBLE_BIT_ECC: Final = 0x2
EVENT_XID: Final = 0x8
EVENT_MIG_CONFIG_CHANGE: Final = 0x100
EVENT_GPU_UNAVAILABLE: Final = 0x4000
EVENT_GPU_RECOVERY_ACTION: Final = 0x8000

#: The event types watched, each registered on its own (see :meth:`Nvml.subscribe`).
EVENT_NAMES: Final[Mapping[int, str]] = {
    EVENT_XID: "XID",
    EVENT_DOUBLE_BIT_ECC: "double-bit ECC",
    EVENT_MIG_CONFIG_CHANGE: "MIG change",
    EVENT_GPU_UNAVAILABLE: "GPU unavailable",
    EVENT_GPU_RECOVERY_ACTION: "recovery action",
}

#: Calls whose failure means NVML cannot say what or where the device is.
IDENTITY_CALLS: Final = frozenset(
    {
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
    }
)


class NvmlError(Exception):
    """An event wait that failed; ``failure`` says how."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(str(failure))
        self.failure = failure


@dataclass(frozen=True)
class Unavailable:
    """Why NVML cannot be used now.

    ``kind``: ``binding`` (nvidia-ml-py missing), ``library`` (no
    libnvidia-ml.so.1: no driver installed), ``driver`` (the kernel driver is
    not loaded), ``none`` (NVML found no GPU), ``permission`` (this process may
    not talk to the driver), ``mismatch`` (driver library and kernel module
    differ even in a freshly loaded copy) or ``error`` (anything else, which may
    pass). ``failure`` is the NVML call behind it, when there is one.
    """

    kind: Literal["binding", "library", "driver", "none", "permission", "mismatch", "error"]
    message: str
    failure: Failure | None = None

    @property
    def devices_unusable(self) -> bool:
        """Whether GPUs seen before cannot be used by tasks now (not just by this process)."""
        return self.kind in ("library", "driver", "mismatch", "permission")


@dataclass(frozen=True)
class MigReading:
    """One MIG device as NVML describes it now."""

    uuid: str
    name: str | None
    memory_mib: int | None
    gpu_instance: int | None
    compute_instance: int | None
    faults: tuple[Failure, ...] = ()
    identity: tuple[Failure, ...] = ()
    absent: tuple[Failure, ...] = ()


@dataclass(frozen=True)
class GpuReading:
    """One GPU: identity, the Go plugin's attributes, health probes and failures.

    A field is None when NVML does not give it. ``faults`` are failures that
    make the GPU unhealthy (:data:`.codes.FAULTS`), ``identity`` failed
    identity queries of another kind, ``absent`` the values left out.
    """

    index: int
    uuid: str
    name: str | None = None
    minor: int | None = None
    pci_bus_id: str | None = None
    memory_mib: int | None = None
    power_w: int | None = None
    bar1_mib: int | None = None
    pci_bandwidth: int | None = None
    cores_clock: int | None = None
    memory_clock: int | None = None
    display_state: str | None = None
    persistence_mode: str | None = None
    mig_enabled: bool = False
    migs: tuple[MigReading, ...] = ()
    temperature: int | None = None
    retired_pages_pending: bool = False
    remapped_rows_pending: bool = False
    remapped_rows_failure: bool = False
    ecc_uncorrected: int | None = None
    recovery_action: int | None = None
    faults: tuple[Failure, ...] = ()
    identity: tuple[Failure, ...] = ()
    absent: tuple[Failure, ...] = ()


@dataclass(frozen=True)
class Scan:
    """Everything one look at NVML found.

    ``unreachable`` holds the GPUs NVML counts but cannot open, by index;
    ``unavailable`` is set when NVML could not be used at all; ``notes`` are
    things worth one log line (a library reloaded).
    """

    driver_version: str = ""
    gpus: tuple[GpuReading, ...] = ()
    unreachable: tuple[tuple[int, Failure], ...] = ()
    unavailable: Unavailable | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class StatsReading:
    """One device's statistics in nvidia-smi's units; None when NVML does not give them."""

    gpu_utilization: int | None = None
    memory_utilization: int | None = None
    encoder_utilization: int | None = None
    decoder_utilization: int | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    bar1_used_mib: int | None = None
    bar1_total_mib: int | None = None
    temperature: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    ecc_l1: int | None = None
    ecc_l2: int | None = None
    ecc_memory: int | None = None
    ecc_uncorrected: int | None = None
    sm_clock: int | None = None
    memory_clock: int | None = None
    absent: tuple[Failure, ...] = ()


@dataclass(frozen=True)
class Stats:
    """Statistics of the devices asked for, and the MIG devices whose handle went stale."""

    readings: Mapping[str, StatsReading] = field(default_factory=dict)
    stale: tuple[str, ...] = ()


@dataclass(frozen=True)
class Event:
    """An NVML event: the GPU it concerns (None: not one this set knows), type, data."""

    uuid: str | None
    type: int
    data: int
    gpu_instance: int | None
    compute_instance: int | None


@dataclass(frozen=True)
class Coverage:
    """What an event set watches on one GPU, and what it cannot, with why."""

    uuid: str
    watched: int
    lacking: Mapping[int, str]


def pci_bandwidth(generation: int, width: int) -> int:
    """The Go plugin's PCIe bandwidth figure in MB/s (0 below gen 3, as there)."""
    per_lane = {3: 1 << 10, 4: 2 << 10, 5: 3 << 10, 6: 4 << 10}.get(generation, 0)
    return width * per_lane


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:9A:00.0`` as sysfs names the device: ``0000:9a:00.0``.

    Nomad matches a device's locality with the node's NUMA topology, read from
    ``/sys/bus/pci/devices``, by ``equalBusID``: leading zeros trimmed, then an
    exact, case-sensitive compare. NVML's upper-case hex never matches there;
    sysfs's own form matches both that compare and a plain one. Text that is not
    a bus ID is returned lower-cased.
    """
    text = nvml_bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    try:
        number = int(domain, 16)
    except ValueError:
        return text
    return f"{number:04x}{sep}{rest}" if sep else text


def _address(handle: Any) -> int | None:
    """The handle's pointer value: NVML hands out one stable pointer per device."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _call_name(name: str) -> str:
    return name.removesuffix("_v2").removesuffix("_v3")


@dataclass
class _Calls:
    """Runs NVML calls for one device, sorting failures by what they mean."""

    nvml: Any
    faults: list[Failure] = field(default_factory=list)
    identity: list[Failure] = field(default_factory=list)
    absent: list[Failure] = field(default_factory=list)

    def __call__(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as exc:
            failure = Failure(_call_name(name), _code(exc), str(exc))
        except Exception as exc:  # the binding's own bugs, a ctypes mismatch...
            failure = Failure(_call_name(name), None, f"{type(exc).__name__}: {exc}")
        self.failed(failure)
        return None

    def failed(self, failure: Failure) -> None:
        if failure.fault:
            self.faults.append(failure)
        elif failure.call in IDENTITY_CALLS and not failure.absent:
            self.identity.append(failure)
        else:
            self.absent.append(failure)

    def absent_code(self, call: str) -> int | None:
        """The code a call was left out with, if it was."""
        for failure in self.absent:
            if failure.call == _call_name(call):
                return failure.code
        return None


class Subscription:
    """An NVML event set covering some GPUs; ``wait`` and ``close`` from any thread."""

    def __init__(
        self,
        nvml: Any,
        handle: Any,
        key: tuple[int, frozenset[str]],
        coverage: tuple[Coverage, ...],
        uuid_at: Mapping[int, str],
    ) -> None:
        self._nvml = nvml
        self._handle = handle
        self._lock = threading.Lock()
        self._uuid_at = dict(uuid_at)
        self.key = key
        self.coverage = coverage

    @property
    def closed(self) -> bool:
        return self._handle is None

    def wait(self, timeout_ms: int) -> Event | None:
        """The next event, or None after ``timeout_ms`` (or sooner); NvmlError on failure."""
        N = self._nvml
        with self._lock:
            if self._handle is None:
                raise NvmlError(Failure("nvmlEventSetWait", None, "the event set is closed"))
            try:
                data = N.nvmlEventSetWait(self._handle, timeout_ms)
            except N.NVMLError as exc:
                if _code(exc) == codes.TIMEOUT:
                    return None  # the time passed, or a signal ended the wait early
                raise NvmlError(Failure("nvmlEventSetWait", _code(exc), str(exc))) from None
            address = _address(data.device)
        gi = int(data.gpuInstanceId)
        ci = int(data.computeInstanceId)
        return Event(
            uuid=self._uuid_at.get(address) if address is not None else None,
            type=int(data.eventType),
            data=int(data.eventData),
            gpu_instance=None if gi == _NO_INSTANCE else gi,
            compute_instance=None if ci == _NO_INSTANCE else ci,
        )

    def close(self) -> None:
        """Free the set once no wait is running (waits are short)."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                # Nothing to be done about a set NVML will not free.
                with contextlib.suppress(Exception):
                    self._nvml.nvmlEventSetFree(handle)


class Nvml:
    """NVML for one plugin process: initialised on first use, re-initialised after failures."""

    def __init__(self, module: str = "pynvml") -> None:
        self._module = module
        self._lock = threading.RLock()
        self._nvml: Any = None
        self._ready = False
        self._generation = 0
        # The generation whose scan filled ``_handles``: events are registered on
        # those handles, so not before a scan since the last (re)start.
        self._scanned = -1
        self._handles: dict[str, Any] = {}
        self._mig_uuids: set[str] = set()
        self._uuid_at: dict[int, str] = {}
        self._subscriptions: list[Subscription] = []
        self._closed = False

    @property
    def generation(self) -> int:
        """Changes whenever NVML is (re)initialised or shut down."""
        return self._generation

    # -- life cycle ----------------------------------------------------------------

    def _start(self, notes: list[str]) -> Unavailable | None:
        if self._ready:
            return None
        if self._closed:
            return Unavailable("error", "NVML was let go of: the plugin is stopping")
        try:
            nvml = importlib.import_module(self._module)
        except ImportError:
            return Unavailable(
                "binding",
                f"NVIDIA's Python binding nvidia-ml-py is not installed ({BINDING_HINT})",
            )
        problem = _initialise(nvml)
        if problem is not None and problem.kind == "mismatch":
            # The driver changed under this process: its mapped library is the old
            # one. A fresh copy of the library file on disk may match again.
            reloaded = _load_fresh_library(nvml)
            notes.append(
                "NVML reported a driver/library version mismatch; "
                + (f"loaded a fresh copy of {reloaded}" if reloaded else "could not reload it")
            )
            if reloaded:
                problem = _initialise(nvml)
        if problem is not None:
            return problem
        self._nvml = nvml
        self._ready = True
        self._generation += 1
        return None

    def close(self) -> None:
        """Shut down for good: the plugin is stopping."""
        with self._lock:
            self._closed = True
            self.shutdown()

    def shutdown(self) -> None:
        """Let go of NVML (event sets first); the next call initialises it afresh."""
        with self._lock:
            subscriptions, self._subscriptions = self._subscriptions, []
            for subscription in subscriptions:
                subscription.close()  # waits for a running wait to end
            if self._ready:
                # Shutting down a broken NVML may fail too; it is let go of all the same.
                with contextlib.suppress(Exception):
                    self._nvml.nvmlShutdown()
            self._ready = False
            self._handles, self._uuid_at, self._mig_uuids = {}, {}, set()
            self._generation += 1

    # -- fingerprint -------------------------------------------------------------

    def scan(self) -> Scan:
        """Look at every GPU now. Never raises."""
        with self._lock:
            return self._scan(retry=True)

    def _scan(self, retry: bool) -> Scan:
        with self._lock:
            notes: list[str] = []
            problem = self._start(notes)
            if problem is not None:
                return Scan(unavailable=problem, notes=tuple(notes))
            N = self._nvml
            system = _Calls(N)
            driver = system("nvmlSystemGetDriverVersion")
            count = system("nvmlDeviceGetCount") if driver is not None else None
            if driver is None or count is None:
                failure = (system.faults + system.identity + system.absent)[0]
                # NVML as a whole is broken (driver unloaded or upgraded, reset in
                # progress): start over, at once after an upgrade, else next time.
                self.shutdown()
                if retry and failure.code == codes.LIB_RM_VERSION_MISMATCH:
                    again = self._scan(retry=False)
                    return dataclasses.replace(again, notes=(*notes, *again.notes))
                return Scan(unavailable=_system_failure(failure), notes=tuple(notes))
            readings: list[GpuReading] = []
            unreachable: list[tuple[int, Failure]] = []
            handles: dict[str, Any] = {}
            migs: set[str] = set()
            for index in range(int(count)):
                call = _Calls(N)
                handle = call("nvmlDeviceGetHandleByIndex", index)
                uuid = None if handle is None else call("nvmlDeviceGetUUID", handle)
                if handle is None or uuid is None:
                    failures = call.faults + call.identity + call.absent
                    unreachable.append((index, failures[0]))
                    continue
                handles[str(uuid)] = handle
                readings.append(self._read_gpu(index, str(uuid), handle, call, handles, migs))
            if unreachable:
                # A GPU NVML cannot open now keeps its old handle: its stats then
                # say what fails rather than vanish.
                handles = {**self._handles, **handles}
            self._handles, self._mig_uuids = handles, migs
            self._scanned = self._generation
            self._uuid_at = {
                address: uuid
                for uuid, handle in handles.items()
                if uuid not in migs and (address := _address(handle)) is not None
            }
            return Scan(str(driver), tuple(readings), tuple(unreachable), notes=tuple(notes))

    def _read_gpu(
        self,
        index: int,
        uuid: str,
        handle: Any,
        call: _Calls,
        handles: dict[str, Any],
        migs: set[str],
    ) -> GpuReading:
        name = call("nvmlDeviceGetName", handle)
        minor = call("nvmlDeviceGetMinorNumber", handle)
        pci = call("nvmlDeviceGetPciInfo", handle)
        mig_mode = call("nvmlDeviceGetMigMode", handle)
        memory = call("nvmlDeviceGetMemoryInfo", handle)
        bar1 = call("nvmlDeviceGetBAR1MemoryInfo", handle)
        limit_mw = call("nvmlDeviceGetPowerManagementLimit", handle)
        width = call("nvmlDeviceGetMaxPcieLinkWidth", handle)
        generation = call("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        display = call("nvmlDeviceGetDisplayMode", handle)
        persistence = call("nvmlDeviceGetPersistenceMode", handle)
        remapped = call("nvmlDeviceGetRemappedRows", handle)
        uncorrected = call("nvmlDeviceGetTotalEccErrors", handle, _UNCORRECTED, _VOLATILE)
        mig_enabled = bool(mig_mode) and mig_mode[0] == _MIG_ENABLED
        # NOT_SUPPORTED, and only that, means the GPU has no memory of its own
        # (nvml.h: integrated GPUs); FUNCTION_NOT_FOUND is an old driver, and a
        # MIG parent's NO_PERMISSION an unprivileged process.
        memory_mib = None if memory is None else int(memory.total) // MiB
        if memory is None and call.absent_code("nvmlDeviceGetMemoryInfo") == codes.NOT_SUPPORTED:
            memory_mib = None if mig_enabled else _system_memory_mib()[0]
        return GpuReading(
            index=index,
            uuid=uuid,
            name=None if name is None else str(name),
            minor=minor,
            pci_bus_id=None if pci is None else _text(pci.busId),
            memory_mib=memory_mib,
            # Like the Go plugin, a GPU without power management reports 0 W.
            power_w=(limit_mw or 0) // 1000,
            bar1_mib=None if bar1 is None else int(bar1.bar1Total) // MiB,
            pci_bandwidth=pci_bandwidth(generation or 0, width or 0),
            cores_clock=call("nvmlDeviceGetMaxClockInfo", handle, _CLOCK_GRAPHICS),
            memory_clock=call("nvmlDeviceGetMaxClockInfo", handle, _CLOCK_MEM),
            # The Go plugin formats NVML's enable state with %v: "0" or "1".
            display_state=None if display is None else str(int(display)),
            persistence_mode=None if persistence is None else str(int(persistence)),
            mig_enabled=mig_enabled,
            migs=self._read_migs(handle, call, handles, migs) if mig_enabled else (),
            temperature=call("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU),
            retired_pages_pending=bool(call("nvmlDeviceGetRetiredPagesPendingStatus", handle)),
            remapped_rows_pending=bool(remapped and remapped[2]),
            remapped_rows_failure=bool(remapped and remapped[3]),
            ecc_uncorrected=None if uncorrected is None else int(uncorrected),
            recovery_action=_recovery_action(call, handle),
            faults=tuple(call.faults),
            identity=tuple(call.identity),
            absent=tuple(call.absent),
        )

    def _read_migs(
        self, parent: Any, call: _Calls, handles: dict[str, Any], migs: set[str]
    ) -> tuple[MigReading, ...]:
        N = self._nvml
        # nvml.h: zero where MIG is off or absent, and that is a success.
        slots = call("nvmlDeviceGetMaxMigDeviceCount", parent) or 0
        found: list[MigReading] = []
        for slot in range(slots):
            try:
                handle = N.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
            except N.NVMLError as exc:
                if _code(exc) not in (codes.NOT_FOUND, codes.INVALID_ARGUMENT):
                    failure = Failure("nvmlDeviceGetMigDeviceHandleByIndex", _code(exc), str(exc))
                    call.failed(failure)
                continue
            own = _Calls(N)
            uuid = own("nvmlDeviceGetUUID", handle)
            if uuid is None:
                for failure in own.faults + own.identity + own.absent:
                    call.failed(failure)
                continue
            name = own("nvmlDeviceGetName", handle)
            memory = own("nvmlDeviceGetMemoryInfo", handle)
            found.append(
                MigReading(
                    uuid=str(uuid),
                    name=None if name is None else str(name),
                    memory_mib=None if memory is None else int(memory.total) // MiB,
                    gpu_instance=own("nvmlDeviceGetGpuInstanceId", handle),
                    compute_instance=own("nvmlDeviceGetComputeInstanceId", handle),
                    faults=tuple(own.faults),
                    identity=tuple(own.identity),
                    absent=tuple(own.absent),
                )
            )
            handles[str(uuid)] = handle
            migs.add(str(uuid))
        return tuple(found)

    # -- stats -------------------------------------------------------------------

    def read_stats(self, uuids: Iterable[str]) -> Stats:
        """Statistics of the devices the last scan found; missing ones are left out.

        NVML reuses MIG handles after a reconfiguration (nvml.h), so a MIG
        device's handle is checked to still name it; one that does not is
        ``stale``, its statistics left out until the next scan.
        """
        with self._lock:
            if not self._ready:
                return Stats()
            found: dict[str, StatsReading] = {}
            stale: list[str] = []
            for uuid in uuids:
                handle = self._handles.get(uuid)
                if handle is None:
                    continue
                if uuid in self._mig_uuids and not self._still(handle, uuid):
                    del self._handles[uuid]
                    self._mig_uuids.discard(uuid)
                    stale.append(uuid)
                    continue
                found[uuid] = self._read_stats(handle, mig=uuid in self._mig_uuids)
            return Stats(found, tuple(stale))

    def _still(self, handle: Any, uuid: str) -> bool:
        try:
            return str(self._nvml.nvmlDeviceGetUUID(handle)) == uuid
        except Exception:
            return False

    def _read_stats(self, handle: Any, mig: bool) -> StatsReading:
        call = _Calls(self._nvml)
        util = call("nvmlDeviceGetUtilizationRates", handle)
        encoder = call("nvmlDeviceGetEncoderUtilization", handle)
        decoder = call("nvmlDeviceGetDecoderUtilization", handle)
        memory = call("nvmlDeviceGetMemoryInfo", handle)
        bar1 = call("nvmlDeviceGetBAR1MemoryInfo", handle)
        usage_mw = call("nvmlDeviceGetPowerUsage", handle)
        limit_mw = call("nvmlDeviceGetPowerManagementLimit", handle)

        def ecc(kind: int, location: int | None) -> int | None:
            if location is None:
                count = call("nvmlDeviceGetTotalEccErrors", handle, kind, _VOLATILE)
            else:
                count = call("nvmlDeviceGetMemoryErrorCounter", handle, kind, _VOLATILE, location)
            return None if count is None else int(count)

        used_mib = None if memory is None else int(memory.used) // MiB
        total_mib = None if memory is None else int(memory.total) // MiB
        memory_utilization = None if util is None else int(util.memory)
        if (
            memory is None
            and not mig
            and call.absent_code("nvmlDeviceGetMemoryInfo") == codes.NOT_SUPPORTED
        ):
            # GPUs that share system memory (Jetson, GH200, GB10): report that, and
            # derive memory utilization from it, as the Go plugin does.
            total_mib, used_mib = _system_memory_mib()
            if total_mib and used_mib is not None and util is not None:
                memory_utilization = used_mib * 100 // total_mib
        return StatsReading(
            gpu_utilization=None if util is None else int(util.gpu),
            memory_utilization=memory_utilization,
            encoder_utilization=None if encoder is None else int(encoder[0]),
            decoder_utilization=None if decoder is None else int(decoder[0]),
            memory_used_mib=used_mib,
            memory_total_mib=total_mib,
            bar1_used_mib=None if bar1 is None else int(bar1.bar1Used) // MiB,
            bar1_total_mib=None if bar1 is None else int(bar1.bar1Total) // MiB,
            temperature=call("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU),
            power_w=None if usage_mw is None else usage_mw / 1000,
            power_limit_w=None if limit_mw is None else limit_mw / 1000,
            ecc_l1=ecc(_CORRECTED, _L1_CACHE),
            ecc_l2=ecc(_CORRECTED, _L2_CACHE),
            ecc_memory=ecc(_CORRECTED, _DEVICE_MEMORY),
            ecc_uncorrected=ecc(_UNCORRECTED, None),
            sm_clock=call("nvmlDeviceGetClockInfo", handle, _CLOCK_SM),
            memory_clock=call("nvmlDeviceGetClockInfo", handle, _CLOCK_MEM),
            absent=tuple(call.absent + call.identity + call.faults),
        )

    # -- after a release -----------------------------------------------------------

    #: What a task may have changed through NVML, put back after its release,
    #: each where the GPU has it (nvml.h, Device Commands).
    RESETS: Final = (
        "nvmlDeviceResetGpuLockedClocks",
        "nvmlDeviceResetMemoryLockedClocks",
        "nvmlDeviceResetApplicationsClocks",
    )

    def reset_after_release(self, uuid: str, mig: bool = False) -> str | None:
        """Make a released device ready for its next task; None when done, else why not.

        No process may still run on it (a task's process that outlived it).
        On a whole GPU, the locked and application clocks go back to their
        defaults; a call the GPU or driver does not have is skipped (that is
        "where NVML allows it"), any other failure is the reason. A MIG
        instance shares its clocks with its neighbours: only the process
        check applies. NVML has no call for a full reset (``nvidia-smi -r``).
        """
        with self._lock:
            notes: list[str] = []
            problem = self._start(notes)
            if problem is not None:
                return f"NVML cannot be used: {problem.message}"
            handle = self._handles.get(uuid)
            if handle is None:
                return "NVML does not know the device now"
            call = _Calls(self._nvml)
            running = call("nvmlDeviceGetComputeRunningProcesses", handle)
            if running:
                pids = ", ".join(str(getattr(p, "pid", "?")) for p in list(running)[:5])
                return f"{len(running)} process(es) still use it (pid {pids})"
            if mig:
                return _first_failure(call)
            for name in self.RESETS:
                call(name, handle)
            return _first_failure(call)

    # -- events ------------------------------------------------------------------
    # -- events ------------------------------------------------------------------

    def subscribe(self, uuids: Iterable[str]) -> Subscription | Unavailable | None:
        """An event set for :data:`EVENT_NAMES` on these GPUs, each type registered alone.

        nvml.h: registering a mask with one unsupported type registers none of
        it, so one type at a time; a type a GPU lacks is named in the coverage
        (and polled where it can be: see the plugin). None when NVML has not
        been scanned since it last (re)started: there are no handles to
        register yet, and a set made now would watch no GPU while looking
        current; wait for the next scan.
        """
        targets = frozenset(uuids)
        with self._lock:
            if not self._ready or self._scanned != self._generation:
                return None
            N = self._nvml
            key = (self._generation, targets)
            try:
                handle = N.nvmlEventSetCreate()
            except Exception as exc:
                return Unavailable("error", f"nvmlEventSetCreate: {exc}")
            if (no_wait := _cannot_wait(N, handle)) is not None:
                return no_wait
            coverage: list[Coverage] = []
            uuid_at: dict[int, str] = {}
            for uuid in sorted(targets):
                device = self._handles.get(uuid)
                if device is None:
                    continue
                covered = _register(N, device, handle, uuid)
                if covered is None:
                    # nvml.h: after UNKNOWN "event set is in undefined state and should be freed".
                    with contextlib.suppress(Exception):
                        N.nvmlEventSetFree(handle)
                    return Unavailable("error", "nvmlDeviceRegisterEvents failed: unknown error")
                coverage.append(covered)
                if covered.watched and (address := _address(device)) is not None:
                    uuid_at[address] = uuid
            subscription = Subscription(N, handle, key, tuple(coverage), uuid_at)
            self._subscriptions.append(subscription)
            return subscription


def _cannot_wait(N: Any, event_set: Any) -> Unavailable | None:
    """Why this driver can never wait for events, found before any GPU is registered.

    The binding's wait calls ``nvmlEventSetWait_v2``, which drivers before R450
    lack: it answers FUNCTION_NOT_FOUND every time. A fact about the node, not
    a failure, so it is found here (a zero wait on the still empty set, which
    can consume no event) and the set is freed; the plugin says so once and
    polls. Any other answer is left to the real waits.
    """
    try:
        N.nvmlEventSetWait(event_set, 0)
    except N.NVMLError as exc:
        if _code(exc) != codes.FUNCTION_NOT_FOUND:
            return None
        with contextlib.suppress(Exception):
            N.nvmlEventSetFree(event_set)
        failure = Failure("nvmlEventSetWait", _code(exc), str(exc))
        return Unavailable(
            "error",
            f"{failure}: this driver has no nvmlEventSetWait_v2 (it came with R450)",
            failure,
        )
    return None


def _register(N: Any, device: Any, event_set: Any, uuid: str) -> Coverage | None:
    """Register each watched type alone; None when the set must be thrown away."""
    call = _Calls(N)
    supported = call("nvmlDeviceGetSupportedEventTypes", device)
    watched = 0
    lacking: dict[int, str] = {}
    for bit in EVENT_NAMES:
        if supported is not None and not int(supported) & bit:
            lacking[bit] = "not supported by this GPU"
            continue
        try:
            N.nvmlDeviceRegisterEvents(device, bit, event_set)
        except N.NVMLError as exc:
            if _code(exc) == codes.UNKNOWN:
                return None
            lacking[bit] = str(Failure("nvmlDeviceRegisterEvents", _code(exc), str(exc)))
            continue
        watched |= bit
    return Coverage(uuid, watched, lacking)


def _initialise(nvml: Any) -> Unavailable | None:
    """``nvmlInit`` as this plugin needs it, or why it cannot start."""
    try:
        # nvml.h: without NO_GPUS, a node with the driver but no GPU fails with
        # GPU_NOT_FOUND; with it NVML starts and counts none.
        nvml.nvmlInitWithFlags(_INIT_FLAG_NO_GPUS)
    except nvml.NVMLError as exc:
        return _init_failure(Failure("nvmlInit", _code(exc), str(exc)))
    except Exception as exc:
        return Unavailable("error", f"NVML could not start: {type(exc).__name__}: {exc}")
    return None


def _init_failure(failure: Failure) -> Unavailable:
    code = failure.code
    if code == codes.LIBRARY_NOT_FOUND:
        return Unavailable(
            "library",
            "libnvidia-ml.so.1 was not found (NVML_ERROR_LIBRARY_NOT_FOUND): the NVIDIA driver"
            " is not installed",
            failure,
        )
    if code == codes.DRIVER_NOT_LOADED:
        return Unavailable(
            "driver",
            f"the NVIDIA kernel driver is not loaded ({failure}); load it (modprobe nvidia)",
            failure,
        )
    if code == codes.GPU_NOT_FOUND:
        return Unavailable("none", "NVML found no NVIDIA GPUs", failure)
    if code == codes.NO_PERMISSION:
        return Unavailable(
            "permission",
            f"NVML may not talk to the driver ({failure}): the agent's user cannot open"
            " /dev/nvidiactl; run the Nomad agent as root",
            failure,
        )
    if code == codes.LIB_RM_VERSION_MISMATCH:
        return Unavailable(
            "mismatch",
            f"the NVIDIA driver library and kernel module versions differ ({failure}),"
            " even in a freshly loaded library: a driver upgrade needs a reboot (or a reload"
            " of the nvidia kernel modules)",
            failure,
        )
    return Unavailable("error", f"NVML could not start: {failure}", failure)


def _system_failure(failure: Failure) -> Unavailable:
    if failure.code == codes.LIB_RM_VERSION_MISMATCH:
        return Unavailable("error", f"NVML query failed: {failure}; reloading NVML", failure)
    if failure.code == codes.DRIVER_NOT_LOADED:
        return _init_failure(failure)
    return Unavailable("error", f"NVML query failed: {failure}", failure)


def _recovery_action(call: _Calls, handle: Any) -> int | None:
    """NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, when the driver gives it (575 and newer)."""
    values = call("nvmlDeviceGetFieldValues", handle, [_FIELD_RECOVERY_ACTION])
    if values is None:
        return None
    value = values[0]
    code = int(value.nvmlReturn)
    if code != codes.SUCCESS:
        call.failed(Failure("nvmlDeviceGetFieldValues(GPU_RECOVERY_ACTION)", code))
        return None
    return int(value.value.uiVal)


def _mapped_library(name: str = "libnvidia-ml.so") -> str | None:
    """The file this process mapped NVML from (``/proc/self/maps``), as on disk now."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").partition("/")[2]
                if name in path.rsplit("/", 1)[-1]:
                    return "/" + path.removesuffix(" (deleted)")
    except OSError:
        return None
    return None


def _load_fresh_library(nvml: Any) -> str | None:
    """Load a fresh copy of the NVML library file into the binding; the file's path.

    A process cannot load the same file twice (the loader hands back the copy
    it has), and unloading a library whose code may still run is unsafe; so
    the file is copied and the copy loaded, and the binding told to use it.
    The binding has no API for that: its module-level library and its cache of
    function pointers are replaced, under its own lock.
    """
    path = _mapped_library()
    if path is None or not os.path.exists(path) or not hasattr(nvml, "libLoadLock"):
        return None
    for parent in (None, "/dev/shm", "/var/tmp"):
        try:
            directory = tempfile.mkdtemp(prefix="nomad-device-nvml-", dir=parent)
        except OSError:
            continue
        try:
            copy = os.path.join(directory, os.path.basename(path))
            shutil.copyfile(path, copy)
            library = ctypes.CDLL(copy)
        except OSError:
            continue  # a noexec mount: try the next place
        finally:
            shutil.rmtree(directory, ignore_errors=True)  # the mapping stays
        with nvml.libLoadLock:
            nvml.nvmlLib = library
            cache = getattr(nvml, "_nvmlGetFunctionPointer_cache", None)
            if isinstance(cache, dict):
                cache.clear()
        return path
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _first_failure(call: _Calls) -> str | None:
    """A release's calls: the first that failed for another reason than a missing feature."""
    for failure in call.faults + call.identity + call.absent:
        if failure.code in (codes.NOT_SUPPORTED, codes.FUNCTION_NOT_FOUND, codes.DEPRECATED):
            continue
        return f"{failure.call} failed: {codes.code_name(failure.code)}"
    return None


def _system_memory_mib() -> tuple[int | None, int | None]:
    """(total, used) system memory in MiB, as the Go plugin reports it for such GPUs."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page
        free = os.sysconf("SC_AVPHYS_PAGES") * page
    except (ValueError, OSError):
        return None, None
    return int(total) // MiB, int(total - free) // MiB
