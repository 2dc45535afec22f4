"""A stand-in ``nvidia-smi`` for testing ``scripts/nvidia_smoke.py`` without a GPU.

Like the real one it is a client of NVML: it reads the fake library through
``pynvml``, so it answers by the same class rules as the plugin sees, and it
writes what the smoke script reads, in the shapes of real output (element
names, ``N/A`` and "Requested functionality has been deprecated" for values
NVML refuses, ``16x`` link widths, the power readings of driver 535 and of
595): ``-q -x`` and ``-L``. Anything else exits 2.

    python fake_smi.py -q -x
    python fake_smi.py -L
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any
from xml.sax.saxutils import escape

import pynvml as N

MiB = 1 << 20
#: Driver branches whose nvidia-smi writes the newer power readings (nvsmi v13).
V13 = 595


def value(fn: Callable[..., Any], *args: Any, fmt: Callable[[Any], str] = str) -> str:
    """What nvidia-smi prints for one NVML query."""
    try:
        return fmt(fn(*args))
    except N.NVMLError as exc:
        if exc.value == N.NVML_ERROR_DEPRECATED:
            return "Requested functionality has been deprecated"
        if exc.value == N.NVML_ERROR_NO_PERMISSION:
            return "Insufficient Permissions"
        return "N/A"


def enabled(mode: Any) -> str:
    return "Enabled" if int(mode) else "Disabled"


def element(tag: str, text: str | None = None, children: list[str] | None = None) -> str:
    if children is None:
        return f"<{tag}>{escape(text or '')}</{tag}>"
    return f"<{tag}>" + "".join(children) + f"</{tag}>"


def memory(tag: str, handle: Any, fn: Callable[..., Any], total: str, used: str) -> str:
    try:
        info = fn(handle)
    except N.NVMLError:
        return element(tag, children=[element("total", "N/A"), element("used", "N/A")])
    t, u = getattr(info, total) // MiB, getattr(info, used) // MiB
    return element(
        tag,
        children=[
            element("total", f"{t} MiB"),
            element("used", f"{u} MiB"),
            element("free", f"{t - u} MiB"),
        ],
    )


def mig_slots(handle: Any) -> int:
    try:
        return int(N.nvmlDeviceGetMaxMigDeviceCount(handle))
    except N.NVMLError:
        return 0


def mig_devices(handle: Any) -> str:
    found: list[str] = []
    for index in range(mig_slots(handle)):
        try:
            mig = N.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except N.NVMLError:
            continue
        found.append(
            element(
                "mig_device",
                children=[
                    element("index", str(len(found))),
                    element("gpu_instance_id", value(N.nvmlDeviceGetGpuInstanceId, mig)),
                    element("compute_instance_id", value(N.nvmlDeviceGetComputeInstanceId, mig)),
                    memory("fb_memory_usage", mig, N.nvmlDeviceGetMemoryInfo, "total", "used"),
                ],
            )
        )
    return element("mig_devices", "None") if not found else element("mig_devices", children=found)


def pending(fn: Callable[..., Any], *args: Any) -> str:
    return value(fn, *args, fmt=lambda v: "Yes" if v else "No")


def remapped_rows(handle: Any) -> str:
    try:
        _, _, is_pending, failure = N.nvmlDeviceGetRemappedRows(handle)
    except N.NVMLError:
        return element("remapped_rows", "N/A")
    return element(
        "remapped_rows",
        children=[
            element("remapped_row_pending", "Yes" if is_pending else "No"),
            element("remapped_row_failure", "Yes" if failure else "No"),
        ],
    )


def gpu(handle: Any, branch: int) -> str:
    watts = lambda mw: f"{mw / 1000:.2f} W"  # noqa: E731
    pci = N.nvmlDeviceGetPciInfo(handle)
    bus_id = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
    mig_mode = value(N.nvmlDeviceGetMigMode, handle, fmt=lambda m: enabled(m[0]))
    draw = value(N.nvmlDeviceGetPowerUsage, handle, fmt=watts)
    power = [
        *(
            [element("average_power_draw", draw), element("instant_power_draw", draw)]
            if branch >= V13
            else [element("power_draw", draw)]
        ),
        element(
            "current_power_limit", value(N.nvmlDeviceGetPowerManagementLimit, handle, fmt=watts)
        ),
    ]
    counter = lambda kind, location: value(  # noqa: E731
        N.nvmlDeviceGetMemoryErrorCounter, handle, kind, N.NVML_VOLATILE_ECC, location
    )
    children = [
        element("product_name", N.nvmlDeviceGetName(handle)),
        element("display_mode", value(N.nvmlDeviceGetDisplayMode, handle, fmt=enabled)),
        element("persistence_mode", value(N.nvmlDeviceGetPersistenceMode, handle, fmt=enabled)),
        element("mig_mode", children=[element("current_mig", mig_mode)]),
        mig_devices(handle),
        element("uuid", N.nvmlDeviceGetUUID(handle)),
        element("minor_number", value(N.nvmlDeviceGetMinorNumber, handle)),
        element(
            "pci",
            children=[
                element("pci_bus_id", bus_id),
                element(
                    "pci_gpu_link_info",
                    children=[
                        element(
                            "pcie_gen",
                            children=[
                                element(
                                    "max_link_gen",
                                    value(N.nvmlDeviceGetMaxPcieLinkGeneration, handle),
                                )
                            ],
                        ),
                        element(
                            "link_widths",
                            children=[
                                element(
                                    "max_link_width",
                                    value(
                                        N.nvmlDeviceGetMaxPcieLinkWidth,
                                        handle,
                                        fmt=lambda w: f"{w}x",
                                    ),
                                )
                            ],
                        ),
                    ],
                ),
            ],
        ),
        memory("fb_memory_usage", handle, N.nvmlDeviceGetMemoryInfo, "total", "used"),
        memory("bar1_memory_usage", handle, N.nvmlDeviceGetBAR1MemoryInfo, "bar1Total", "bar1Used"),
        element(
            "utilization",
            children=[
                element(
                    "gpu_util",
                    value(N.nvmlDeviceGetUtilizationRates, handle, fmt=lambda u: f"{u.gpu} %"),
                ),
                element(
                    "memory_util",
                    value(N.nvmlDeviceGetUtilizationRates, handle, fmt=lambda u: f"{u.memory} %"),
                ),
                element(
                    "encoder_util",
                    value(N.nvmlDeviceGetEncoderUtilization, handle, fmt=lambda u: f"{u[0]} %"),
                ),
                element(
                    "decoder_util",
                    value(N.nvmlDeviceGetDecoderUtilization, handle, fmt=lambda u: f"{u[0]} %"),
                ),
            ],
        ),
        element(
            "ecc_errors",
            children=[
                element(
                    "volatile",
                    children=[
                        element("dram_correctable", counter(0, N.NVML_MEMORY_LOCATION_DRAM)),
                        element("dram_uncorrectable", counter(1, N.NVML_MEMORY_LOCATION_DRAM)),
                    ],
                )
            ],
        ),
        element(
            "retired_pages",
            children=[
                element(
                    "pending_retirement", pending(N.nvmlDeviceGetRetiredPagesPendingStatus, handle)
                )
            ],
        ),
        remapped_rows(handle),
        element(
            "temperature",
            children=[
                element(
                    "gpu_temp", value(N.nvmlDeviceGetTemperature, handle, 0, fmt=lambda t: f"{t} C")
                )
            ],
        ),
        element("gpu_power_readings", children=power),
        element(
            "clocks",
            children=[
                element(
                    tag, value(N.nvmlDeviceGetClockInfo, handle, kind, fmt=lambda c: f"{c} MHz")
                )
                for tag, kind in (("graphics_clock", 0), ("sm_clock", 1), ("mem_clock", 2))
            ],
        ),
        element(
            "max_clocks",
            children=[
                element(
                    tag, value(N.nvmlDeviceGetMaxClockInfo, handle, kind, fmt=lambda c: f"{c} MHz")
                )
                for tag, kind in (("graphics_clock", 0), ("sm_clock", 1), ("mem_clock", 2))
            ],
        ),
    ]
    return f'<gpu id="{escape(bus_id)}">' + "".join(children) + "</gpu>"


def query_xml() -> str:
    N.nvmlInitWithFlags(N.NVML_INIT_FLAG_NO_GPUS)
    driver = N.nvmlSystemGetDriverVersion()
    branch = int(driver.split(".")[0])
    count = N.nvmlDeviceGetCount()
    gpus = [gpu(N.nvmlDeviceGetHandleByIndex(i), branch) for i in range(count)]
    dtd = "nvsmi_device_v13.dtd" if branch >= V13 else "nvsmi_device_v12.dtd"
    return (
        '<?xml version="1.0" ?>\n'
        f'<!DOCTYPE nvidia_smi_log SYSTEM "{dtd}">\n'
        "<nvidia_smi_log>"
        f"<driver_version>{escape(driver)}</driver_version>"
        f"<attached_gpus>{count}</attached_gpus>" + "".join(gpus) + "</nvidia_smi_log>\n"
    )


def listing() -> str:
    N.nvmlInitWithFlags(N.NVML_INIT_FLAG_NO_GPUS)
    lines: list[str] = []
    for i in range(N.nvmlDeviceGetCount()):
        handle = N.nvmlDeviceGetHandleByIndex(i)
        name = N.nvmlDeviceGetName(handle)
        lines.append(f"GPU {i}: {name} (UUID: {N.nvmlDeviceGetUUID(handle)})")
        shown = 0
        for slot in range(mig_slots(handle)):
            try:
                mig = N.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except N.NVMLError:
                continue
            profile = N.nvmlDeviceGetName(mig).removeprefix(f"{name} MIG ")
            lines.append(
                f"  MIG {profile:<12} Device {shown:>2}: (UUID: {N.nvmlDeviceGetUUID(mig)})"
            )
            shown += 1
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["-q", "-x"]:
        sys.stdout.write(query_xml())
    elif argv == ["-L"]:
        sys.stdout.write(listing())
    else:
        print(f"fake nvidia-smi: unsupported arguments {argv}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
