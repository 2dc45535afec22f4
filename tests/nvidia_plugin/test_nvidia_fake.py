"""The fake NVML answers through the real nvidia-ml-py binding, struct for struct.

Each probe runs in a subprocess: pynvml keeps the library it loaded for the
life of a process, and the test process must not load one at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from .fakenvml import (
    A100,
    DOUBLE_BIT_ECC,
    ERROR_GPU_IS_LOST,
    ERROR_UNKNOWN,
    XID,
    MiB,
    gpu,
    gpu_uuid,
    mig,
)
from .nvidia_support import Scenarios

pytest.importorskip("pynvml")


def probe(env: dict[str, str], body: str) -> Any:
    """Run ``body`` (pynvml imported as ``N``, result in ``out``); its ``out`` as JSON."""
    script = "import json, pynvml as N\nout = {}\n" + textwrap.dedent(body)
    script += "\nprint(json.dumps(out))\n"
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_struct_sizes_are_the_bindings(scenario: Scenarios) -> None:
    out = probe(
        scenario({"gpus": []}).env(),
        """
        import ctypes
        N.nvmlInit()
        lib = N.nvmlLib
        lib.fakeNvmlSizeof.restype = ctypes.c_uint
        pairs = {"nvmlMemory_t": N.c_nvmlMemory_t, "nvmlBAR1Memory_t": N.c_nvmlBAR1Memory_t,
                 "nvmlUtilization_t": N.c_nvmlUtilization_t, "nvmlPciInfo_t": N.nvmlPciInfo_t,
                 "nvmlEventData_t": N.c_nvmlEventData_t}
        for name, struct in pairs.items():
            out[name] = [lib.fakeNvmlSizeof(name.encode()), ctypes.sizeof(struct)]
        """,
    )
    assert len(out) == 5
    for name, (ours, theirs) in out.items():
        assert ours == theirs, name


def test_structs_match_the_bindings_layouts(scenario: Scenarios) -> None:
    live = scenario({"driver": "550.54.15", "gpus": [gpu(0), gpu(1, temperature=77)]})
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
        out["ecc_l2"] = N.nvmlDeviceGetMemoryErrorCounter(
            h, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC,
            N.NVML_MEMORY_LOCATION_L2_CACHE)
        out["remapped"] = list(N.nvmlDeviceGetRemappedRows(h))
        out["by_uuid"] = N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByUUID(out["uuid"]))
        try:
            N.nvmlDeviceGetMigMode(h)
        except N.NVMLError_NotSupported as exc:
            out["mig"] = str(exc)
        N.nvmlShutdown()
        """,
    )
    assert out["driver"] == "550.54.15"
    assert out["count"] == 2
    assert out["uuid"] == out["by_uuid"] == gpu_uuid(1)
    assert out["name"] == A100
    assert out["minor"] == 1
    assert out["memory"] == [40960 * MiB, 39936 * MiB, 1024 * MiB]
    assert out["pci"] == ["00000000:17:00.0", "0000:17:00.0", 0, 0x17, 0, 0x20B010DE]
    assert out["bar1"] == [65536 * MiB, 65532 * MiB, 4 * MiB]
    assert out["util"] == [17, 4]
    assert out["encoder"] == [0, 167000]
    assert out["temperature"] == 77
    assert out["max_sm"] == 1410
    assert out["mem_clock"] == 1215
    assert out["power"] == [56789, 400000]
    assert out["ecc_l2"] == 1
    assert out["remapped"] == [0, 0, 0, 0]
    assert out["mig"] == "Not Supported"


def test_mig_handles_and_events(scenario: Scenarios) -> None:
    parent = gpu(0, mig_mode=1, mig=[mig(0, 1, 0, "1g.5gb", 4864), mig(0, 2, 0, "3g.20gb", 19968)])
    live = scenario({"gpus": [parent]})
    # Events must arrive after the set exists: run the probe in the background,
    # wait until it has created its set, then fire.
    ready = live.path.parent / "ready"
    script = _events_script()
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=live.env(READY=str(ready)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(ready)
        live.fire(0, XID, 79, gi=2, ci=0)
        live.fire(0, DOUBLE_BIT_ECC)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    out = json.loads(stdout.splitlines()[-1])
    assert out["mode"] == [1, 1]
    uuid = gpu_uuid(0)
    assert out["migs"] == [
        [f"{A100} MIG 1g.5gb", 4864 * MiB, 1, 0, uuid],
        [f"{A100} MIG 3g.20gb", 19968 * MiB, 2, 0, uuid],
    ]
    assert out["timeout"] is True
    assert out["event"] == [uuid, XID, 79, 2, 0]
    assert out["second"] == [DOUBLE_BIT_ECC, 0]


def _events_script() -> str:
    return textwrap.dedent(
        """
        import json, os, pynvml as N
        out = {}
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
        open(os.environ["READY"], "w").close()
        e = N.nvmlEventSetWait(s, 20000)
        out["event"] = [N.nvmlDeviceGetUUID(e.device), e.eventType, e.eventData,
                        e.gpuInstanceId, e.computeInstanceId]
        e = N.nvmlEventSetWait(s, 20000)
        out["second"] = [e.eventType, e.eventData]
        N.nvmlEventSetFree(s)
        print(json.dumps(out))
        """
    )


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
