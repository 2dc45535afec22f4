"""One VM for every scenario of the real-kernel tier, and the plugin hosted in it.

Every test here is marked ``kernel`` (``pytest -m kernel`` runs the tier alone,
``-m "not kernel"`` everything else). The VM boots once for the package with the
devices of all scenarios (:func:`machine`); the scenarios use disjoint devices
and one plugin configured with a block for each (:data:`AGENT`), so that the
tier pays for one boot and one plugin start, which under TCG cost as much as
the scenarios themselves. In CI (``CI=true``) a missing prerequisite fails;
elsewhere the tier is skipped with the reason. The figures each run measured
are printed at its end ("real kernel").
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kernel.kernel_vm import (
    FIGURES,
    GuestPlugin,
    Machine,
    Vm,
    VmError,
    encode_agent_text,
    find_kernel,
    missing,
    pci_addresses,
)

HERE = Path(__file__).resolve().parent

#: The AER quiet period of the hosted plugin: long enough to see a device unhealthy on
#: a loaded machine, short enough to wait for its recovery.
QUIET_SECONDS = 20

#: Bus numbers the two expander bridges (one per NUMA node) start at.
NUMA_BUSES = (0x40, 0x80)


#: The node IDs of this package's tests, whose durations are figures too.
_OURS: set[str] = set()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(HERE):
            item.add_marker(pytest.mark.kernel)
            _OURS.add(item.nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.nodeid in _OURS:
        FIGURES[report.nodeid.rsplit("::", 1)[-1]] = f"{report.duration:.1f} s ({report.outcome})"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("real kernel (tests/kernel)")
        for name, value in FIGURES.items():
            terminalreporter.write_line(f"{name}: {value}")


def machine() -> Machine:
    """q35 with an IOMMU, two NUMA nodes, and each scenario's devices behind root ports
    of their own (a chassis number each). The 9p root and the agent's port come last
    (:meth:`Vm.command`)."""
    args = ["-device", "intel-iommu,intremap=off"]
    for node in (0, 1):
        args += [
            "-object", f"memory-backend-ram,id=mem{node},size=512M",
            "-numa", f"node,nodeid={node},cpus={node},memdev=mem{node}",
        ]  # fmt: skip
    args += ["-device", "qemu-xhci,id=xhci,bus=pcie.0"]
    chassis = iter(range(1, 64))

    def port(ident: str, bus: str = "pcie.0", extra: str = "") -> None:
        args.extend(
            ["-device", f"pcie-root-port,id={ident},bus={bus},chassis={next(chassis)}{extra}"]
        )

    def disk(ident: str, bus: str, extra: str = "") -> None:
        args.extend(
            ["-blockdev", f"null-co,node-name={ident}-blk,size={64 << 20},read-zeroes=on",
             "-device", f"virtio-blk-pci,id={ident},bus={bus},drive={ident}-blk{extra}"]
        )  # fmt: skip

    def nvme(ident: str, bus: str, serial: str) -> None:
        args.extend(
            ["-blockdev", f"null-co,node-name={ident}-blk,size={64 << 20},read-zeroes=on",
             "-device", f"nvme,id={ident},bus={bus},serial={serial},drive={ident}-blk"]
        )  # fmt: skip

    # PCI and DRM: virtio-gpu cannot be hot-plugged, so it is there from the start; a
    # bochs-display is hot-plugged into a fresh port (re-plugging one port crashed QEMU
    # 7.2), with room in its prefetchable window for the framebuffer.
    port("rp-gpu")
    args += ["-device", "virtio-gpu-pci,id=gpu,bus=rp-gpu"]
    for n in (1, 2):
        port(f"rp-hot{n}", extra=",pref32-reserve=16M")
    # NVMe: a plain controller, whose namespace the kernel puts below it; and one in a
    # subsystem (so it says it may have several controllers), whose namespace native
    # multipath puts under /sys/devices/virtual/nvme-subsystem.
    port("rp-nvme")
    nvme("nvme", "rp-nvme", "NOMAD-NVME-0")
    port("rp-nvme-mp")
    args += [
        "-device", "nvme-subsys,id=nvme-subsys,nqn=nomad-nvme-subsys",
        "-device", "nvme,id=nvme-mp,bus=rp-nvme-mp,serial=NOMAD-NVME-1,subsys=nvme-subsys",
        "-blockdev", f"null-co,node-name=nvme-mp-blk,size={64 << 20},read-zeroes=on",
        "-device", "nvme-ns,bus=nvme-mp,drive=nvme-mp-blk,nsid=1",
    ]  # fmt: skip
    # AER: a non-fatal error on one endpoint, a fatal one on the other's root port.
    for n in (1, 2):
        port(f"rp-aer{n}")
        disk(f"aer{n}", f"rp-aer{n}", ",aer=on")
    # VFIO: edu and a virtio RNG as functions of one device, hence one IOMMU group.
    port("rp-vfio")
    args += [
        "-device", "edu,id=edu,bus=rp-vfio,addr=0.0,multifunction=on",
        "-device", "virtio-rng-pci,id=vfio-mate,bus=rp-vfio,addr=0.1",
    ]  # fmt: skip
    # Bind and unbind.
    port("rp-bind")
    disk("bind", "rp-bind")
    # NUMA: an expander bridge per node, a virtio disk behind each.
    for node, bus_nr in enumerate(NUMA_BUSES):
        args += ["-device", f"pxb-pcie,id=pxb{node},bus_nr={bus_nr},numa_node={node},bus=pcie.0"]
        port(f"rp-numa{node}", bus=f"pxb{node}")
        disk(f"numa{node}", f"rp-numa{node}")
    # tsc=reliable: the TSC as clock source (the kernel finds TCG's unsynchronised and
    # falls back to the HPET, whose reads are slow under emulation). iommu=pt: devices
    # behind the expander bridges, which QEMU 7.2 does not put behind its IOMMU, keep
    # working; VFIO still gets its groups.
    return Machine(args, memory_mib=1024, cpus=2, append="tsc=reliable intel_iommu=on iommu=pt")


AGENT = """\
plugin "nomad-device-generic" {{
  config {{
    fingerprint_period    = "1h"
    recovery_quiet_period = "{quiet}s"

    device "usb-serial" {{
      usb {{
        vendor_id  = "0403"
        product_id = "6001"
      }}
    }}

    device "usb-disk" {{
      usb {{
        vendor_id  = "46f4"
        product_id = "0001"
      }}
    }}

    device "virtio-gpu" {{
      type  = "gpu"
      nodes = ["card*", "renderD*"]

      pci {{
        vendor_id = "1af4"
        device_id = "1050"
      }}
    }}

    device "display" {{
      pci {{
        class  = "0380"
        driver = "bochs-drm"
      }}
    }}

    device "nvme" {{
      pci {{
        class   = "010802"
        address = "{nvme}"
      }}

      pci {{
        class   = "010802"
        address = "{nvme_mp}"
      }}
    }}

    device "aer" {{
      pci {{
        address = "{aer1}"
      }}

      pci {{
        address = "{aer2}"
      }}
    }}

    device "vfio" {{
      pci {{
        vendor_id = "1234"
        device_id = "11e8"
        driver    = "vfio-pci"
      }}
    }}

    device "bind" {{
      pci {{
        address = "{bind}"
        driver  = "virtio-pci"
      }}
    }}

    device "numa" {{
      type             = "disk"
      group_per_device = true

      pci {{
        address = "{numa0}"
      }}

      pci {{
        address = "{numa1}"
      }}
    }}
  }}
}}
"""


def agent_config(addresses: dict[str, str]) -> bytes:
    """The SetConfig bytes of :data:`AGENT` for the guest's addresses."""
    text = AGENT.format(
        quiet=QUIET_SECONDS, **{k.replace("-", "_"): v for k, v in addresses.items()}
    )
    return encode_agent_text(text)


@pytest.fixture(scope="package")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vm]:
    lacking = missing()
    if lacking:
        reason = "the real-kernel tier needs: " + "; ".join(lacking)
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (.ci/run installs all of it)")
        pytest.skip(reason)
    kernel = find_kernel()
    assert not isinstance(kernel, str)
    machine_ = Vm(kernel, tmp_path_factory.mktemp("kernel"), machine())
    try:
        machine_.start()
    except VmError as exc:
        pytest.fail(f"the VM did not boot: {exc}")
    FIGURES["kernel"] = machine_.release
    FIGURES["boot (to the agent's first answer)"] = f"{machine_.boot_seconds:.1f} s"
    FIGURES["guest CPU, slower than the host's by"] = f"{machine_.slowdown():.0f}x"
    yield machine_
    machine_.close()


@pytest.fixture(scope="package")
def addresses(vm: Vm) -> dict[str, str]:
    """The guest's PCI address of each device, by its QEMU ID."""
    return pci_addresses(vm.qmp)


@pytest.fixture(scope="package")
def plugin(vm: Vm, addresses: dict[str, str]) -> Iterator[GuestPlugin]:
    """nomad-device-generic in the guest, with every scenario's block, driven by the SDK's
    host in the guest; its first Fingerprint message has arrived."""
    started = time.monotonic()
    hosted = vm.launch(agent_config(addresses))
    hosted.current()
    FIGURES["plugin start (launch, SetConfig, first Fingerprint)"] = (
        f"{time.monotonic() - started:.1f} s"
    )
    yield hosted
    hosted.kill()
