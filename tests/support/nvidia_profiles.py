"""One fake node per class of GPU, as NVML describes that class.

Each :class:`Profile` is a scenario for ``fake_nvml.c`` plus what a test needs
to know about it: which devices the plugin must report, which fault signals
that class of GPU can give at all (a GeForce card has no ECC, so no ECC event
can make it unhealthy), and what is left out of its attributes and stats. The
rules that turn the class facts into NVML answers live in the fake, each with
its source; the readings below are typical figures for that model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from support.fakenvml import MiB, gpu, gpu_uuid, mig, mig_uuid

#: The fault signals a test can raise on a profile's first GPU.
XID = "xid"  # a critical XID event
DBE = "dbe"  # a double-bit ECC event
ECC_COUNT = "ecc-count"  # the volatile uncorrected ECC count rises (what polling sees)
RETIRED_PAGES = "retired-pages"  # retirement pending (before Ampere)
REMAPPED_ROWS = "remapped-rows"  # row remapping pending (Ampere and newer, MIG off)
LOST = "lost"  # every query answers GPU_IS_LOST
IDENTITY = "identity"  # the name query fails scan after scan
TEMPERATURE = "temperature"  # the operator's temperature_limit is reached
UNAVAILABLE = "unavailable"  # the GPU-unavailable event (driver 575 and newer)
RECOVERY = "recovery"  # NVML asks for a GPU reset (driver 575 and newer)


@dataclass(frozen=True)
class Profile:
    """A fake node: the scenario, the devices it must show, the faults it can raise."""

    name: str
    scenario: Mapping[str, Any]
    devices: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    faults: frozenset[str] = frozenset()
    #: Attributes and statistics NVML cannot give on this class (left out).
    absent_attributes: frozenset[str] = frozenset()
    absent_stats: frozenset[str] = frozenset()
    #: What the plugin logs for a node with nothing to report (no devices).
    empty_reason: str = ""
    notes: Mapping[str, str] = field(default_factory=dict)


COMMON = frozenset({XID, LOST, IDENTITY, TEMPERATURE})
#: Statistics NVML gives through a MIG device handle: its memory, nothing per GPU.
MIG_STATS_ABSENT = frozenset(
    {
        "GPU utilization",
        "Memory utilization",
        "Encoder utilization",
        "Decoder utilization",
        "BAR1 buffer state",
        "Temperature",
        "Power usage",
        "ECC L1 errors",
        "ECC L2 errors",
        "ECC memory errors",
        "ECC uncorrected errors",
        "SM clock",
        "Memory clock",
    }
)

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
T4 = "Tesla T4"
L4 = "NVIDIA L4"
RTX = "NVIDIA GeForce RTX 4090"
ORIN = "Orin (nvgpu)"


def _hopper(index: int, name: str, memory_mib: int, bus: str, **extra: Any) -> dict[str, Any]:
    return gpu(
        index,
        arch=90,
        name=name,
        pci_bus_id=bus,
        pci_device_id="0x233010DE",
        memory_total=memory_mib * MiB,
        bar1_total=131072 * MiB,
        pcie_gen=5,
        max_clock_graphics=1980,
        max_clock_sm=1980,
        max_clock_mem=2619,
        clock_mem=2619,
        power_limit=700000,
        **extra,
    )


def h200() -> Profile:
    """Two H200s, MIG off, on a driver with the GPU-unavailable and recovery events."""
    gpus = [
        _hopper(0, H200, 143771, "00000000:1b:00.0", recovery_action=0),
        _hopper(1, H200, 143771, "00000000:9a:00.0", recovery_action=0),
    ]
    return Profile(
        "h200",
        {"driver": "580.65.06", "gpus": gpus},
        devices=(gpu_uuid(0), gpu_uuid(1)),
        groups=(H200,),
        faults=COMMON | {DBE, ECC_COUNT, REMAPPED_ROWS, UNAVAILABLE, RECOVERY},
        absent_stats=frozenset({"ECC L1 errors", "ECC L2 errors"}),
    )


def h100_mig(root: bool = True) -> Profile:
    """One H100 with MIG on: two 1g.10gb instances and a 3g.40gb."""
    instances = [
        mig(0, 9, 0, "1g.10gb", 9856, parent=H100),
        mig(0, 10, 0, "1g.10gb", 9856, parent=H100),
        mig(0, 2, 0, "3g.40gb", 40192, parent=H100),
    ]
    parent = _hopper(0, H100, 81559, "00000000:4e:00.0", mig_mode=1, mig=instances)
    ids = (mig_uuid(0, 2, 0), mig_uuid(0, 9, 0), mig_uuid(0, 10, 0))
    return Profile(
        "h100-mig" if root else "non-root",
        {"driver": "550.127.05", "root": 1 if root else 0, "gpus": [parent]},
        devices=ids,
        groups=(f"{H100} MIG 1g.10gb", f"{H100} MIG 3g.40gb"),
        # No remapped rows with MIG on; no volatile ECC counts through the parent.
        faults=COMMON | {DBE},
        # Unprivileged, NVML refuses the parent's aggregate memory and BAR1 figures.
        absent_attributes=frozenset() if root else frozenset({"bar1"}),
        absent_stats=MIG_STATS_ABSENT,
        notes={"non-root": "aggregate memory of the parent and per-instance XIDs need root"}
        if not root
        else {},
    )


def a100() -> Profile:
    return Profile(
        "a100",
        {"driver": "535.183.06", "gpus": [gpu(0, pci_bus_id="00000000:b7:00.0")]},
        devices=(gpu_uuid(0),),
        groups=("NVIDIA A100-SXM4-40GB",),
        faults=COMMON | {DBE, ECC_COUNT, REMAPPED_ROWS},
        absent_stats=frozenset({"ECC L1 errors", "ECC L2 errors"}),
    )


def t4() -> Profile:
    """Turing: ECC with page retirement, no row remapping, no MIG."""
    card = gpu(
        0,
        arch=75,
        mig_capable=0,
        name=T4,
        pci_bus_id="00000000:00:1e.0",
        pci_device_id="0x1EB810DE",
        memory_total=15360 * MiB,
        bar1_total=256 * MiB,
        pcie_gen=3,
        max_clock_graphics=1590,
        max_clock_sm=1590,
        max_clock_mem=5001,
        clock_mem=5001,
        power_limit=70000,
    )
    return Profile(
        "t4",
        {"driver": "535.183.06", "gpus": [card]},
        devices=(gpu_uuid(0),),
        groups=(T4,),
        faults=COMMON | {DBE, ECC_COUNT, RETIRED_PAGES},
    )


def l4() -> Profile:
    """Ada data-centre card: ECC and row remapping, no MIG."""
    card = gpu(
        0,
        arch=89,
        mig_capable=0,
        name=L4,
        pci_bus_id="00000000:ca:00.0",
        pci_device_id="0x27B810DE",
        memory_total=23034 * MiB,
        bar1_total=32768 * MiB,
        max_clock_graphics=2040,
        max_clock_sm=2040,
        max_clock_mem=6251,
        clock_mem=6251,
        power_limit=72000,
    )
    return Profile(
        "l4",
        {"driver": "550.90.07", "gpus": [card]},
        devices=(gpu_uuid(0),),
        groups=(L4,),
        faults=COMMON | {DBE, ECC_COUNT, REMAPPED_ROWS},
        absent_stats=frozenset({"ECC L1 errors", "ECC L2 errors"}),
    )


def geforce() -> Profile:
    """A consumer card on driver 595: no ECC at all, display mode deprecated."""
    card = gpu(
        0,
        arch=89,
        ecc_capable=0,
        ecc_mode=0,
        mig_capable=0,
        name=RTX,
        pci_bus_id="00000000:0c:00.0",
        pci_device_id="0x268410DE",
        memory_total=24564 * MiB,
        bar1_total=256 * MiB,
        max_clock_graphics=3105,
        max_clock_sm=3105,
        max_clock_mem=10501,
        clock_mem=10501,
        power_limit=450000,
        display_mode=1,
    )
    return Profile(
        "geforce",
        {"driver": "595.58.03", "gpus": [card]},
        devices=(gpu_uuid(0),),
        groups=(RTX,),
        faults=COMMON | {UNAVAILABLE},
        absent_attributes=frozenset({"display_state"}),
        absent_stats=frozenset(
            {"ECC L1 errors", "ECC L2 errors", "ECC memory errors", "ECC uncorrected errors"}
        ),
    )


def integrated() -> Profile:
    """A Jetson-class integrated GPU: no memory of its own, no BAR1, no PCIe link."""
    card = gpu(
        0,
        arch=87,
        integrated=1,
        ecc_capable=0,
        ecc_mode=0,
        mig_capable=0,
        name=ORIN,
        pci_bus_id="00000000:00:00.0",
        util_memory=0,
        max_clock_graphics=1300,
        max_clock_sm=1300,
        max_clock_mem=3199,
        clock_mem=3199,
        display_mode=0,
    )
    for key in (
        "bar1_total",
        "bar1_used",
        "pcie_gen",
        "pcie_width",
        "power_limit",
        "util_encoder",
        "util_decoder",
    ):
        card.pop(key)
    return Profile(
        "integrated",
        {"driver": "540.4.0", "gpus": [card]},
        devices=(gpu_uuid(0),),
        groups=(ORIN,),
        faults=COMMON,
        absent_attributes=frozenset({"bar1"}),
        absent_stats=frozenset(
            {
                "BAR1 buffer state",
                "Encoder utilization",
                "Decoder utilization",
                "ECC L1 errors",
                "ECC L2 errors",
                "ECC memory errors",
                "ECC uncorrected errors",
            }
        ),
    )


def no_gpu() -> Profile:
    """The driver is loaded, the node has no GPU: plain nvmlInit fails with 28."""
    return Profile(
        "no-gpu",
        {"driver": "550.54.15", "gpus": []},
        empty_reason="NVML found no NVIDIA GPUs",
    )


def mismatch() -> Profile:
    """A driver upgraded without a reboot: the library on disk is newer than the module."""
    return Profile(
        "mismatch",
        {"driver": "560.35.03", "kernel": "550.54.15", "gpus": [gpu(0)]},
        empty_reason="driver library and kernel module versions differ",
    )


PROFILES: Mapping[str, Callable[[], Profile]] = {
    "h200": h200,
    "h100-mig": h100_mig,
    "a100": a100,
    "t4": t4,
    "l4": l4,
    "geforce": geforce,
    "integrated": integrated,
    "no-gpu": no_gpu,
    "mismatch": mismatch,
    "non-root": lambda: h100_mig(root=False),
}
