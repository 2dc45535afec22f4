"""NVML access: the only module that talks to NVIDIA's binding (``pynvml``).

It turns NVML into plain, frozen readings and never lets an NVML error escape
as anything but data: a failed query of one GPU is a *fault* on that GPU's
reading, a failed device count is a scan that says why, and a missing binding,
library or driver is an :class:`Unavailable` with an operator-readable message.
The binding is imported lazily, so the plugin starts (and says what is
missing) without it.

All calls but the event wait run under one lock: NVML itself is thread-safe,
but initialising, shutting down and the handle cache are ours to guard.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "BINDING_HINT",
    "EVENT_DOUBLE_BIT_ECC",
    "EVENT_MIG_CONFIG_CHANGE",
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
]

BINDING_HINT: Final = "pip install 'nomad-device-sdk[nvidia]'"

MiB: Final = 1 << 20

# nvml.h constants, spelled here so that this module reads without the binding.
_SUCCESS: Final = 0
_ERROR_NOT_SUPPORTED: Final = 3
_ERROR_NOT_FOUND: Final = 6
_ERROR_INVALID_ARGUMENT: Final = 2
_ERROR_DRIVER_NOT_LOADED: Final = 9
_ERROR_TIMEOUT: Final = 10
_ERROR_LIBRARY_NOT_FOUND: Final = 12
_ERROR_FUNCTION_NOT_FOUND: Final = 13
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

EVENT_DOUBLE_BIT_ECC: Final = 0x2
EVENT_XID: Final = 0x8
EVENT_MIG_CONFIG_CHANGE: Final = 0x100
_WATCHED_EVENTS: Final = EVENT_DOUBLE_BIT_ECC | EVENT_XID | EVENT_MIG_CONFIG_CHANGE

#: Calls whose NOT_SUPPORTED (or absence from an old driver) is an answer,
#: not a fault: the GPU simply lacks the feature.
_QUIET_CODES: Final = frozenset({_ERROR_NOT_SUPPORTED, _ERROR_FUNCTION_NOT_FOUND})


class NvmlError(Exception):
    """An NVML failure that is not about one GPU (the event wait, say)."""


@dataclass(frozen=True)
class Unavailable:
    """Why NVML cannot be used now.

    ``kind``: ``binding`` (nvidia-ml-py missing), ``library`` (no
    libnvidia-ml.so.1: no driver installed), ``driver`` (the kernel driver is
    not loaded) or ``error`` (anything else NVML said).
    """

    kind: Literal["binding", "library", "driver", "error"]
    message: str


@dataclass(frozen=True)
class MigReading:
    """One MIG device as NVML describes it now."""

    uuid: str
    name: str | None
    memory_mib: int | None
    gpu_instance: int | None
    compute_instance: int | None
    faults: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuReading:
    """One GPU: identity, the Go plugin's attributes, health probes and faults.

    A field is None when NVML does not support it on this GPU, or when its query
    failed; failures are listed in ``faults`` as ``call: error``.
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
    faults: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scan:
    """Everything one look at NVML found.

    ``unreachable`` names GPUs NVML counts but cannot open (``GPU 1: GPU is
    lost``); ``unavailable`` is set when NVML could not be used at all.
    """

    driver_version: str = ""
    gpus: tuple[GpuReading, ...] = ()
    unreachable: tuple[str, ...] = ()
    unavailable: Unavailable | None = None


@dataclass(frozen=True)
class StatsReading:
    """One device's statistics in nvidia-smi's units; None when not available."""

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


@dataclass(frozen=True)
class Event:
    """An NVML event: the GPU it concerns, its type and data (the XID)."""

    uuid: str | None
    type: int
    data: int
    gpu_instance: int | None
    compute_instance: int | None


def pci_bandwidth(generation: int, width: int) -> int:
    """The Go plugin's PCIe bandwidth figure in MB/s (0 below gen 3, as there)."""
    per_lane = {3: 1 << 10, 4: 2 << 10, 5: 3 << 10, 6: 4 << 10}.get(generation, 0)
    return width * per_lane


def _address(handle: Any) -> int | None:
    """The handle's pointer value: NVML hands out one stable pointer per device."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


@dataclass
class _Calls:
    """Runs NVML calls for one device, turning failures into faults."""

    nvml: Any
    faults: list[str] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)

    def __call__(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, name)(*args)
        except self.nvml.NVMLError as exc:
            if _code(exc) in _QUIET_CODES:
                self.unsupported.add(name)
            else:
                self.faults.append(f"{name}: {exc}")
            return None
        except Exception as exc:  # the binding's own bugs, a ctypes mismatch...
            self.faults.append(f"{name}: {type(exc).__name__}: {exc}")
            return None


class Subscription:
    """An NVML event set covering some GPUs; ``wait`` and ``close`` from any thread."""

    def __init__(
        self,
        nvml: Any,
        handle: Any,
        key: tuple[int, frozenset[str]],
        covered: tuple[str, ...],
        unsupported: tuple[str, ...],
        uuid_of: Callable[[Any], str | None],
    ) -> None:
        self._nvml = nvml
        self._handle = handle
        self._lock = threading.Lock()
        self._uuid_of = uuid_of
        self.key = key
        self.covered = covered
        self.unsupported = unsupported

    def wait(self, timeout_ms: int) -> Event | None:
        """The next event, or None after ``timeout_ms``; NvmlError on failure."""
        N = self._nvml
        with self._lock:
            if self._handle is None:
                raise NvmlError("the event set is closed")
            try:
                data = N.nvmlEventSetWait(self._handle, timeout_ms)
            except N.NVMLError as exc:
                if _code(exc) == _ERROR_TIMEOUT:
                    return None
                raise NvmlError(f"nvmlEventSetWait: {exc}") from None
        gi = int(data.gpuInstanceId)
        ci = int(data.computeInstanceId)
        return Event(
            uuid=self._uuid_of(data.device),
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
        self._handles: dict[str, Any] = {}
        self._uuid_at: dict[int, str] = {}

    @property
    def generation(self) -> int:
        """Changes whenever NVML is (re)initialised or shut down."""
        return self._generation

    # -- life cycle ----------------------------------------------------------------

    def _start(self) -> Unavailable | None:
        if self._ready:
            return None
        try:
            nvml = importlib.import_module(self._module)
        except ImportError:
            return Unavailable(
                "binding",
                f"NVIDIA's Python binding nvidia-ml-py is not installed ({BINDING_HINT})",
            )
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            code = _code(exc)
            if code == _ERROR_LIBRARY_NOT_FOUND:
                return Unavailable(
                    "library", "libnvidia-ml.so.1 was not found: the NVIDIA driver is not installed"
                )
            if code == _ERROR_DRIVER_NOT_LOADED:
                return Unavailable(
                    "driver", "the NVIDIA kernel driver is not loaded (NVML: " + str(exc) + ")"
                )
            return Unavailable("error", f"NVML could not start: nvmlInit: {exc}")
        except Exception as exc:
            return Unavailable("error", f"NVML could not start: {type(exc).__name__}: {exc}")
        self._nvml = nvml
        self._ready = True
        self._generation += 1
        return None

    def shutdown(self) -> None:
        """Let go of NVML; the next call initialises it afresh."""
        with self._lock:
            if self._ready:
                # Shutting down a broken NVML may fail too; it is let go of all the same.
                with contextlib.suppress(Exception):
                    self._nvml.nvmlShutdown()
            self._ready = False
            self._handles, self._uuid_at = {}, {}
            self._generation += 1

    # -- fingerprint -------------------------------------------------------------

    def scan(self) -> Scan:
        """Look at every GPU now. Never raises."""
        with self._lock:
            problem = self._start()
            if problem is not None:
                return Scan(unavailable=problem)
            N = self._nvml
            try:
                driver = str(N.nvmlSystemGetDriverVersion())
                count = int(N.nvmlDeviceGetCount())
            except Exception as exc:
                # NVML as a whole is broken (driver unloaded, reset in progress):
                # start over at the next scan.
                self.shutdown()
                return Scan(unavailable=Unavailable("error", f"NVML query failed: {exc}"))
            readings: list[GpuReading] = []
            unreachable: list[str] = []
            handles: dict[str, Any] = {}
            for index in range(count):
                try:
                    handle = N.nvmlDeviceGetHandleByIndex(index)
                    uuid = str(N.nvmlDeviceGetUUID(handle))
                except Exception as exc:
                    unreachable.append(f"GPU {index}: {exc}")
                    continue
                handles[uuid] = handle
                readings.append(self._read_gpu(index, uuid, handle, handles))
            if unreachable:
                # A GPU NVML cannot open now keeps its old handle: its stats then
                # say N/A (every query fails) rather than vanish.
                handles = {**self._handles, **handles}
            self._handles = handles
            self._uuid_at = {
                address: uuid
                for uuid, handle in handles.items()
                if (address := _address(handle)) is not None
            }
            return Scan(driver, tuple(readings), tuple(unreachable))

    def _read_gpu(self, index: int, uuid: str, handle: Any, handles: dict[str, Any]) -> GpuReading:
        call = _Calls(self._nvml)
        memory = call("nvmlDeviceGetMemoryInfo", handle)
        bar1 = call("nvmlDeviceGetBAR1MemoryInfo", handle)
        pci = call("nvmlDeviceGetPciInfo", handle)
        limit_mw = call("nvmlDeviceGetPowerManagementLimit", handle)
        width = call("nvmlDeviceGetMaxPcieLinkWidth", handle)
        generation = call("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        display = call("nvmlDeviceGetDisplayMode", handle)
        persistence = call("nvmlDeviceGetPersistenceMode", handle)
        mig_mode = call("nvmlDeviceGetMigMode", handle)
        remapped = call("nvmlDeviceGetRemappedRows", handle)
        mig_enabled = bool(mig_mode) and mig_mode[0] == _MIG_ENABLED
        name = call("nvmlDeviceGetName", handle)
        return GpuReading(
            index=index,
            uuid=uuid,
            name=None if name is None else str(name),
            minor=call("nvmlDeviceGetMinorNumber", handle),
            pci_bus_id=None if pci is None else _text(pci.busId),
            memory_mib=_memory_mib(memory, "nvmlDeviceGetMemoryInfo" in call.unsupported),
            # Like the Go plugin, a GPU without power management reports 0 W.
            power_w=(limit_mw or 0) // 1000,
            bar1_mib=None if bar1 is None else int(bar1.bar1Total) // MiB,
            pci_bandwidth=pci_bandwidth(generation or 0, width or 0),
            cores_clock=call("nvmlDeviceGetMaxClockInfo", handle, _CLOCK_GRAPHICS),
            memory_clock=call("nvmlDeviceGetMaxClockInfo", handle, _CLOCK_MEM),
            # The Go plugin formats NVML's enable state with %v: "0" or "1".
            display_state="N/A" if display is None else str(int(display)),
            persistence_mode="N/A" if persistence is None else str(int(persistence)),
            mig_enabled=mig_enabled,
            migs=self._read_migs(handle, call, handles) if mig_enabled else (),
            temperature=call("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU),
            retired_pages_pending=bool(call("nvmlDeviceGetRetiredPagesPendingStatus", handle)),
            remapped_rows_pending=bool(remapped and remapped[2]),
            remapped_rows_failure=bool(remapped and remapped[3]),
            faults=tuple(call.faults),
        )

    def _read_migs(
        self, parent: Any, call: _Calls, handles: dict[str, Any]
    ) -> tuple[MigReading, ...]:
        N = self._nvml
        slots = call("nvmlDeviceGetMaxMigDeviceCount", parent) or 0
        found: list[MigReading] = []
        for slot in range(slots):
            try:
                handle = N.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
            except N.NVMLError as exc:
                if _code(exc) not in (_ERROR_NOT_FOUND, _ERROR_INVALID_ARGUMENT):
                    call.faults.append(f"nvmlDeviceGetMigDeviceHandleByIndex({slot}): {exc}")
                continue
            own = _Calls(N)
            uuid = own("nvmlDeviceGetUUID", handle)
            if uuid is None:
                call.faults.extend(f"MIG device {slot}: {fault}" for fault in own.faults)
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
                )
            )
            handles[str(uuid)] = handle
        return tuple(found)

    # -- stats -------------------------------------------------------------------

    def read_stats(self, uuids: Iterable[str]) -> dict[str, StatsReading]:
        """Statistics of the devices the last scan found; missing ones are left out."""
        with self._lock:
            if not self._ready:
                return {}
            found: dict[str, StatsReading] = {}
            for uuid in uuids:
                handle = self._handles.get(uuid)
                if handle is not None:
                    found[uuid] = self._read_stats(handle)
            return found

    def _read_stats(self, handle: Any) -> StatsReading:
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
        total_mib = _memory_mib(memory, False)
        if "nvmlDeviceGetMemoryInfo" in call.unsupported:
            # GPUs that share system memory (GH200, GB10): report that, as the Go plugin does.
            total_mib, used_mib = _system_memory_mib()
        return StatsReading(
            gpu_utilization=None if util is None else int(util.gpu),
            memory_utilization=None if util is None else int(util.memory),
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
        )

    # -- events ------------------------------------------------------------------

    def subscribe(self, uuids: Iterable[str]) -> Subscription | Unavailable:
        """An event set for XID, double-bit ECC and MIG-change events of these GPUs."""
        targets = frozenset(uuids)
        with self._lock:
            problem = self._start()
            if problem is not None:
                return problem
            N = self._nvml
            key = (self._generation, targets)
            try:
                handle = N.nvmlEventSetCreate()
            except Exception as exc:
                return Unavailable("error", f"nvmlEventSetCreate: {exc}")
            covered: list[str] = []
            unsupported: list[str] = []
            for uuid in sorted(targets):
                device = self._handles.get(uuid)
                call = _Calls(N)
                if device is None:
                    continue
                mask = (call("nvmlDeviceGetSupportedEventTypes", device) or 0) & _WATCHED_EVENTS
                if mask:
                    call("nvmlDeviceRegisterEvents", device, mask, handle)
                if mask and not call.faults and not call.unsupported:
                    covered.append(uuid)
                else:
                    unsupported.append(f"{uuid} ({call.faults[0]})" if call.faults else uuid)
            return Subscription(N, handle, key, tuple(covered), tuple(unsupported), self._uuid_of)

    def _uuid_of(self, device: Any) -> str | None:
        address = _address(device)
        known = self._uuid_at.get(address) if address is not None else None
        if known is not None:
            return known
        try:
            return str(self._nvml.nvmlDeviceGetUUID(device))
        except Exception:
            return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _memory_mib(memory: Any, unsupported: bool) -> int | None:
    """Device memory in MiB; for GPUs that share system memory (NVML has no figure), that."""
    if memory is not None:
        return int(memory.total) // MiB
    return _system_memory_mib()[0] if unsupported else None


def _system_memory_mib() -> tuple[int | None, int | None]:
    """(total, used) system memory in MiB, as the Go plugin reports it for such GPUs."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page
        free = os.sysconf("SC_AVPHYS_PAGES") * page
    except (ValueError, OSError):
        return None, None
    return int(total) // MiB, int(total - free) // MiB
