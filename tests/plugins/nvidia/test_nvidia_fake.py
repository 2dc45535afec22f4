"""The fake NVML answers through the real nvidia-ml-py binding, struct for struct and rule for rule.

Each probe runs in a subprocess: pynvml keeps the library it loaded for the
life of a process, and the test process must not load one at all. The rules
checked here are the ones ``fake_nvml.c`` documents with their sources; the
plugin's tests rely on them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import pytest
from support.fakenvml import (
    A100,
    DOUBLE_BIT_ECC,
    ERROR_DEPRECATED,
    ERROR_GPU_IS_LOST,
    ERROR_GPU_NOT_FOUND,
    ERROR_LIB_RM_VERSION_MISMATCH,
    ERROR_NO_PERMISSION,
    ERROR_NOT_SUPPORTED,
    ERROR_UNKNOWN,
    XID,
    MiB,
    Scenario,
    gpu,
    gpu_uuid,
    mig,
)
from support.nvidia import Scenarios
from support.nvidia_profiles import PROFILES

pytest.importorskip("pynvml")


#: ``code(fn, *args)`` in a probe: the NVML return code of a call (0 on success).
CODE = """
def code(fn, *args):
    try:
        fn(*args)
    except N.NVMLError as exc:
        return exc.value
    return 0
"""


def run_probe(env: dict[str, str], body: str) -> subprocess.CompletedProcess[str]:
    script = "import json, pynvml as N\nout = {}\n" + CODE + textwrap.dedent(body)
    script += "\nprint(json.dumps(out))\n"
    return subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def probe(env: dict[str, str], body: str) -> Any:
    """Run ``body`` (pynvml imported as ``N``, result in ``out``); its ``out`` as JSON."""
    result = run_probe(env, body)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


HANDSHAKE = """
import os, time
def handshake():
    open(os.environ["PROBE_READY"], "w").close()
    while not os.path.exists(os.environ["PROBE_GO"]):
        time.sleep(0.01)
"""


def probe_around(live: Scenario, body: str, act: Callable[[], object]) -> Any:
    """Run a probe in the background; when it calls ``handshake()``, run ``act()``; its ``out``.

    For what must happen while the probe holds NVML: events after its set
    exists, a driver upgrade under its loaded library.
    """
    ready, go = live.path.parent / "probe-ready", live.path.parent / "probe-go"
    for flag in (ready, go):
        flag.unlink(missing_ok=True)
    script = "import json, pynvml as N\nout = {}\n" + CODE + HANDSHAKE + textwrap.dedent(body)
    proc = subprocess.Popen(
        [sys.executable, "-c", script + "\nprint(json.dumps(out))\n"],
        env=live.env(PROBE_READY=str(ready), PROBE_GO=str(go)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(ready)
        act()
        go.touch()
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    return json.loads(stdout.splitlines()[-1])


def test_struct_sizes_are_the_bindings(scenario: Scenarios) -> None:
    out = probe(
        scenario({"gpus": [gpu(0)]}).env(),
        """
        import ctypes
        N.nvmlInit()
        lib = N.nvmlLib
        lib.fakeNvmlSizeof.restype = ctypes.c_uint
        pairs = {"nvmlMemory_t": N.c_nvmlMemory_t, "nvmlBAR1Memory_t": N.c_nvmlBAR1Memory_t,
                 "nvmlUtilization_t": N.c_nvmlUtilization_t, "nvmlPciInfo_t": N.nvmlPciInfo_t,
                 "nvmlEventData_t": N.c_nvmlEventData_t,
                 "nvmlFieldValue_t": N.c_nvmlFieldValue_t, "nvmlValue_t": N.c_nvmlValue_t}
        for name, struct in pairs.items():
            out[name] = [lib.fakeNvmlSizeof(name.encode()), ctypes.sizeof(struct)]
        """,
    )
    assert len(out) == 7
    for name, (ours, theirs) in out.items():
        assert ours == theirs, name


def test_structs_match_the_bindings_layouts(scenario: Scenarios) -> None:
    live = scenario(
        {
            "driver": "550.54.15",
            "gpus": [gpu(0), gpu(1, temperature=77, pci_bus_id="00000000:9a:00.0")],
        }
    )
    out = probe(
        live.env(),
        """
        N.nvmlInit()
        out["driver"] = N.nvmlSystemGetDriverVersion()
        out["count"] = N.nvmlDeviceGetCount()
        h = N.nvmlDeviceGetHandleByIndex(1)
        out["uuid"] = N.nvmlDeviceGetUUID(h)
        out["name"] = N.nvmlDeviceGetName(h)
        out["minor"] = N.nvmlDeviceGetMinorNumber(h)
        m = N.nvmlDeviceGetMemoryInfo(h)
        out["memory"] = [m.total, m.free, m.used]
        p = N.nvmlDeviceGetPciInfo(h)
        out["pci"] = [p.busId, p.busIdLegacy, p.domain, p.bus, p.device, p.pciDeviceId]
        b = N.nvmlDeviceGetBAR1MemoryInfo(h)
        out["bar1"] = [b.bar1Total, b.bar1Free, b.bar1Used]
        u = N.nvmlDeviceGetUtilizationRates(h)
        out["util"] = [u.gpu, u.memory]
        out["encoder"] = N.nvmlDeviceGetEncoderUtilization(h)
        out["temperature"] = N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU)
        out["max_sm"] = N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_SM)
        out["mem_clock"] = N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM)
        out["power"] = [N.nvmlDeviceGetPowerUsage(h), N.nvmlDeviceGetPowerManagementLimit(h)]
        out["ecc_dram"] = N.nvmlDeviceGetMemoryErrorCounter(
            h, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC,
            N.NVML_MEMORY_LOCATION_DEVICE_MEMORY)
        out["remapped"] = list(N.nvmlDeviceGetRemappedRows(h))
        out["by_uuid"] = N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByUUID(out["uuid"]))
        out["mig"] = list(N.nvmlDeviceGetMigMode(h))
        out["mig_slots"] = N.nvmlDeviceGetMaxMigDeviceCount(h)
        (f,) = N.nvmlDeviceGetFieldValues(h, [N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
        out["recovery"] = f.nvmlReturn
        N.nvmlShutdown()
        """,
    )
    assert out["driver"] == "550.54.15"
    assert out["count"] == 2
    assert out["uuid"] == out["by_uuid"] == gpu_uuid(1)
    assert out["name"] == A100
    assert out["minor"] == 1
    assert out["memory"] == [40960 * MiB, 39936 * MiB, 1024 * MiB]
    # NVML_DEVICE_PCI_BUS_ID_FMT is upper case ("%08X:%02X:%02X.0").
    assert out["pci"] == ["00000000:9A:00.0", "0000:9A:00.0", 0, 0x9A, 0, 0x20B010DE]
    assert out["bar1"] == [65536 * MiB, 65532 * MiB, 4 * MiB]
    assert out["util"] == [17, 4]
    assert out["encoder"] == [0, 167000]
    assert out["temperature"] == 77
    assert out["max_sm"] == 1410
    assert out["mem_clock"] == 1215
    assert out["power"] == [56789, 400000]
    assert out["ecc_dram"] == 3
    assert out["remapped"] == [0, 0, 0, 0]
    assert out["mig"] == [0, 0]
    assert out["mig_slots"] == 0  # nvml.h: zero, and success, where MIG is off
    assert out["recovery"] == ERROR_NOT_SUPPORTED  # the field arrived with driver 575


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        # GeForce: no ECC, no row remapping, no page retirement, no MIG; display
        # mode deprecated on driver 595.
        (
            "geforce",
            {
                "ecc": ERROR_NOT_SUPPORTED,
                "l1": ERROR_NOT_SUPPORTED,
                "remapped": ERROR_NOT_SUPPORTED,
                "retired": ERROR_NOT_SUPPORTED,
                "mig": ERROR_NOT_SUPPORTED,
                "display": ERROR_DEPRECATED,
                "memory": 0,
                "events": XID | 0x4 | 0x4000 | 0x8000,
            },
        ),
        # Turing: page retirement and L1/L2 locations, no row remapping.
        (
            "t4",
            {
                "ecc": 0,
                "l1": 0,
                "remapped": ERROR_NOT_SUPPORTED,
                "retired": 0,
                "mig": ERROR_NOT_SUPPORTED,
                "display": 0,
                "memory": 0,
                "events": XID | 0x4 | 0x3,
            },
        ),
        # Hopper: no L1/L2 locations, row remapping instead of page retirement.
        (
            "h200",
            {
                "ecc": 0,
                "l1": ERROR_NOT_SUPPORTED,
                "remapped": 0,
                "retired": ERROR_NOT_SUPPORTED,
                "mig": 0,
                "display": 0,
                "memory": 0,
                "events": XID | 0x4 | 0x3 | 0x100 | 0x4000 | 0x8000,
            },
        ),
        # Integrated: no memory of its own.
        (
            "integrated",
            {
                "ecc": ERROR_NOT_SUPPORTED,
                "l1": ERROR_NOT_SUPPORTED,
                "remapped": ERROR_NOT_SUPPORTED,
                "retired": ERROR_NOT_SUPPORTED,
                "mig": ERROR_NOT_SUPPORTED,
                "display": 0,
                "memory": ERROR_NOT_SUPPORTED,
                "events": XID | 0x4,
            },
        ),
    ],
)
def test_each_class_answers_as_nvml_documents(
    scenario: Scenarios, profile: str, expected: dict[str, int]
) -> None:
    out = probe(
        scenario(PROFILES[profile]().scenario).env(),
        """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        out["ecc"] = code(N.nvmlDeviceGetTotalEccErrors, h, 1, 0)
        out["l1"] = code(N.nvmlDeviceGetMemoryErrorCounter, h, 0, 0, 0)
        out["remapped"] = code(N.nvmlDeviceGetRemappedRows, h)
        out["retired"] = code(N.nvmlDeviceGetRetiredPagesPendingStatus, h)
        out["mig"] = code(N.nvmlDeviceGetMigMode, h)
        out["display"] = code(N.nvmlDeviceGetDisplayMode, h)
        out["memory"] = code(N.nvmlDeviceGetMemoryInfo, h)
        out["events"] = N.nvmlDeviceGetSupportedEventTypes(h)
        """,
    )
    assert out == expected


def test_mig_mode_restricts_the_parent_and_privilege_matters(scenario: Scenarios) -> None:
    body = """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
        out["parent"] = {
            "memory": code(N.nvmlDeviceGetMemoryInfo, h),
            "bar1": code(N.nvmlDeviceGetBAR1MemoryInfo, h),
            "util": code(N.nvmlDeviceGetUtilizationRates, h),
            "encoder": code(N.nvmlDeviceGetEncoderUtilization, h),
            "remapped": code(N.nvmlDeviceGetRemappedRows, h),
            "volatile_ecc": code(N.nvmlDeviceGetTotalEccErrors, h, 1, 0),
            "aggregate_ecc": code(N.nvmlDeviceGetTotalEccErrors, h, 1, 1),
            "slots": N.nvmlDeviceGetMaxMigDeviceCount(h),
        }
        out["instance"] = {
            "memory": code(N.nvmlDeviceGetMemoryInfo, m),
            "util": code(N.nvmlDeviceGetUtilizationRates, m),
            "temperature": code(N.nvmlDeviceGetTemperature, m, 0),
        }
        """
    root = probe(scenario(PROFILES["h100-mig"]().scenario).env(), body)
    assert root["parent"] == {
        "memory": 0,
        "bar1": 0,
        "util": ERROR_NOT_SUPPORTED,
        "encoder": ERROR_NOT_SUPPORTED,
        "remapped": ERROR_NOT_SUPPORTED,
        "volatile_ecc": ERROR_NOT_SUPPORTED,
        "aggregate_ecc": 0,
        "slots": 7,
    }
    assert root["instance"] == {
        "memory": 0,
        "util": ERROR_NOT_SUPPORTED,
        "temperature": ERROR_NOT_SUPPORTED,
    }
    unprivileged = probe(scenario(PROFILES["non-root"]().scenario).env(), body)
    assert unprivileged["parent"]["memory"] == ERROR_NO_PERMISSION
    assert unprivileged["parent"]["bar1"] == ERROR_NO_PERMISSION
    assert unprivileged["instance"]["memory"] == 0


def test_init_without_gpus_and_after_a_driver_upgrade(scenario: Scenarios) -> None:
    out = probe(
        scenario({"gpus": []}).env(),
        """
        out["plain"] = code(N.nvmlInit)
        out["no_gpus_flag"] = code(N.nvmlInitWithFlags, N.NVML_INIT_FLAG_NO_GPUS)
        out["count"] = N.nvmlDeviceGetCount()
        """,
    )
    assert out == {"plain": ERROR_GPU_NOT_FOUND, "no_gpus_flag": 0, "count": 0}

    # The library a process loaded stays the version it was: after the kernel
    # module is upgraded, every call fails until the process loads it afresh.
    live = scenario({"driver": "550.54.15", "gpus": [gpu(0)]})
    out = probe_around(
        live,
        """
        out["before"] = code(N.nvmlInit)
        handshake()
        out["after"] = code(N.nvmlDeviceGetCount)
        out["reinit"] = code(N.nvmlInit)
        """,
        lambda: live.update(driver="560.35.03"),
    )
    assert out == {
        "before": 0,
        "after": ERROR_LIB_RM_VERSION_MISMATCH,
        "reinit": ERROR_LIB_RM_VERSION_MISMATCH,
    }


def test_registration_is_all_or_nothing_and_needs_ecc_on(scenario: Scenarios) -> None:
    ecc_off = gpu(0, ecc_mode=0)
    out = probe(
        scenario({"gpus": [ecc_off]}).env(),
        """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        s = N.nvmlEventSetCreate()
        out["mask"] = N.nvmlDeviceGetSupportedEventTypes(h)
        out["both"] = code(N.nvmlDeviceRegisterEvents, h, 0x8 | 0x2, s)
        try:
            N.nvmlEventSetWait(s, 10)
        except N.NVMLError as exc:
            out["nothing_registered"] = exc.value
        out["xid_alone"] = code(N.nvmlDeviceRegisterEvents, h, 0x8, s)
        N.nvmlEventSetFree(s)
        """,
    )
    # The mask says what the GPU can do; registration checks that ECC is on.
    assert out["mask"] & DOUBLE_BIT_ECC
    assert out["both"] == ERROR_NOT_SUPPORTED
    assert out["nothing_registered"] == 10  # a wait that times out: no XID registered either
    assert out["xid_alone"] == 0


def test_mig_handles_and_events(scenario: Scenarios) -> None:
    parent = gpu(0, mig_mode=1, mig=[mig(0, 1, 0, "1g.5gb", 4864), mig(0, 2, 0, "3g.20gb", 19968)])
    live = scenario({"gpus": [parent]})
    # Events must arrive after the set exists: fire them once the probe has it.
    out = probe_around(
        live,
        EVENTS_PROBE,
        lambda: (live.fire(0, XID, 79, gi=2, ci=0), live.fire(0, DOUBLE_BIT_ECC)),
    )
    assert out["mode"] == [1, 1]
    uuid = gpu_uuid(0)
    assert out["migs"] == [
        [f"{A100} MIG 1g.5gb", 4864 * MiB, 1, 0, uuid],
        [f"{A100} MIG 3g.20gb", 19968 * MiB, 2, 0, uuid],
    ]
    assert out["timeout"] is True
    assert out["event"] == [uuid, XID, 79, 2, 0]
    assert out["second"] == [DOUBLE_BIT_ECC, 0]


EVENTS_PROBE = """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
out["mode"] = N.nvmlDeviceGetMigMode(h)
migs = []
for i in range(N.nvmlDeviceGetMaxMigDeviceCount(h)):
    try:
        m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
    except N.NVMLError_NotFound:
        continue
    parent = N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
    migs.append([N.nvmlDeviceGetName(m), N.nvmlDeviceGetMemoryInfo(m).total,
                 N.nvmlDeviceGetGpuInstanceId(m), N.nvmlDeviceGetComputeInstanceId(m),
                 N.nvmlDeviceGetUUID(parent)])
out["migs"] = migs
s = N.nvmlEventSetCreate()
wanted = N.nvmlEventTypeXidCriticalError | N.nvmlEventTypeDoubleBitEccError
N.nvmlDeviceRegisterEvents(h, N.nvmlDeviceGetSupportedEventTypes(h) & wanted, s)
try:
    N.nvmlEventSetWait(s, 50)
except N.NVMLError_Timeout:
    out["timeout"] = True
handshake()
e = N.nvmlEventSetWait(s, 20000)
out["event"] = [N.nvmlDeviceGetUUID(e.device), e.eventType, e.eventData,
                e.gpuInstanceId, e.computeInstanceId]
e = N.nvmlEventSetWait(s, 20000)
out["second"] = [e.eventType, e.eventData]
N.nvmlEventSetFree(s)
"""


def test_waits_end_early_lost_gpus_and_unprivileged_instance_xids(scenario: Scenarios) -> None:
    profile = PROFILES["non-root"]()
    live = scenario({**profile.scenario, "interrupts": 1})
    live.fire(0, XID, 94, gi=9, ci=0)  # before the set exists: never delivered
    out = probe(
        live.env(),
        """
        import time
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        s = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, s)
        started = time.monotonic()
        try:
            N.nvmlEventSetWait(s, 60000)
        except N.NVMLError as exc:  # early: long before the minute it would wait
            out["interrupted"] = [exc.value, time.monotonic() - started < 30]
        """,
    )
    assert out == {"interrupted": [10, True]}

    # Unprivileged, an XID of one instance is not delivered; one of the whole GPU is.
    live.update(interrupts=0)
    out = probe_around(
        live,
        """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        s = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, s)
        handshake()
        e = N.nvmlEventSetWait(s, 20000)
        out["event"] = [e.eventData, e.gpuInstanceId]
        """,
        lambda: (live.fire(0, XID, 94, gi=9, ci=0), live.fire(0, XID, 79)),
    )
    assert out == {"event": [79, 0xFFFFFFFF]}

    # A GPU of the set that falls off the bus ends every wait with GPU_IS_LOST.
    out = probe(
        live.env(),
        """
        import os
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        s = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, s)
        path = os.environ["FAKE_NVML_SCENARIO"]
        with open(path + ".lost", "w") as f:
            f.write(open(path).read() + "dev\\tgpu0\\tlost\\t1\\n")
        os.replace(path + ".lost", path)
        out["wait"] = code(N.nvmlEventSetWait, s, 100)
        """,
    )
    assert out == {"wait": ERROR_GPU_IS_LOST}


def test_undefined_uses_of_event_sets_crash_loudly(scenario: Scenarios) -> None:
    live = scenario({"gpus": [gpu(0)]})
    result = run_probe(
        live.env(),
        """
        import threading, time
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        s = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, s)
        waiting = threading.Thread(target=lambda: N.nvmlEventSetWait(s, 60000))
        waiting.start()
        # Inside the wait: the fake's wait naps in nanosleep, which nothing before it does.
        while "nanosleep" not in open(f"/proc/self/task/{waiting.native_id}/wchan").read():
            time.sleep(0.01)
        N.nvmlShutdown()
        """,
    )
    assert result.returncode < 0  # SIGABRT
    assert "nvmlShutdown while nvmlEventSetWait runs in another thread" in result.stderr

    result = run_probe(
        live.env(),
        """
        import threading, time
        N.nvmlInit()
        s = N.nvmlEventSetCreate()
        waiting = threading.Thread(target=lambda: N.nvmlEventSetWait(s, 60000))
        waiting.start()
        # Inside the wait: the fake's wait naps in nanosleep, which nothing before it does.
        while "nanosleep" not in open(f"/proc/self/task/{waiting.native_id}/wchan").read():
            time.sleep(0.01)
        N.nvmlEventSetFree(s)
        """,
    )
    assert result.returncode < 0
    assert "nvmlEventSetFree while another thread uses the same event set" in result.stderr


def _wait_for(path: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_failures_lost_gpus_and_a_missing_driver(scenario: Scenarios) -> None:
    live = scenario(
        {
            "gpus": [gpu(0), gpu(1, lost=True)],
            "errors": [
                {
                    "call": "nvmlDeviceGetTemperature",
                    "target": "gpu0",
                    "code": ERROR_UNKNOWN,
                    "times": 1,
                }
            ],
        }
    )
    out = probe(
        live.env(),
        """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        try:
            N.nvmlDeviceGetTemperature(h, 0)
        except N.NVMLError as exc:
            out["first"] = exc.value
        out["second"] = N.nvmlDeviceGetTemperature(h, 0)
        try:
            N.nvmlDeviceGetHandleByIndex(1)
        except N.NVMLError as exc:
            out["lost"] = [exc.value, str(exc)]
        """,
    )
    assert out == {"first": ERROR_UNKNOWN, "second": 31, "lost": [ERROR_GPU_IS_LOST, "GPU is lost"]}

    live.update(init=9)
    out = probe(
        live.env(),
        """
        try:
            N.nvmlInit()
        except N.NVMLError as exc:
            out["init"] = [exc.value, str(exc)]
        """,
    )
    assert out == {"init": [9, "Driver Not Loaded"]}
