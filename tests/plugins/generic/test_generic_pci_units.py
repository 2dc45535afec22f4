"""The PCI parts of nomad-device-generic on their own: config, sysfs reading, pci.ids, AER.

The sysfs files here are plain files in a temp dir, written in the formats the
kernel's ``Documentation/ABI/testing/sysfs-bus-pci*`` gives (no device nodes,
so no root needed).
"""

from __future__ import annotations

import gzip
import os
from datetime import timedelta
from pathlib import Path

import pytest
from support.fake_tree import FakeTree, aer_text
from support.generic import encode_agent_text

from nomad_device.errors import InvalidArgument
from nomad_device.plugins.generic.config import (
    DeviceBlock,
    GenericConfig,
    PciBlock,
    PciMatcher,
    settings_from,
)
from nomad_device.plugins.generic.discovery import Found
from nomad_device.plugins.generic.health import AerMarks, pci_problem
from nomad_device.plugins.generic.pci import (
    PciFunction,
    PciIdentity,
    PciLink,
    matches_nodes,
    pci_bandwidth,
    pci_functions,
    read_function,
)
from nomad_device.plugins.generic.pciids import PciIds, PciNames
from nomad_device.plugins.generic.roots import Roots
from nomad_device.plugins.generic.sysfs import dev_relative

# ---------------------------------------------------------------------------- config


def matcher(**fields: str) -> PciMatcher:
    block = DeviceBlock(pci=[PciBlock(**fields)])
    (kind,) = settings_from(GenericConfig(device={"x": block})).kinds
    (found,) = kind.pci
    return found


@pytest.mark.parametrize(
    ("text", "value", "mask"),
    [
        ("03", 0x030000, 0xFF0000),
        ("0302", 0x030200, 0xFFFF00),
        ("0x12", 0x120000, 0xFF0000),
        ("030000", 0x030000, 0xFFFFFF),
        ("038000/ff8000", 0x038000, 0xFF8000),
        ("0x0380ff/0xff8000", 0x038000, 0xFF8000),
    ],
)
def test_class_is_a_prefix_or_a_mask(text: str, value: int, mask: int) -> None:
    found = matcher(class_code=text)
    assert (found.class_value, found.class_mask) == (value, mask)
    assert found.identity_matches("0000:03:00.0", (1, 2, None, None), value | (~mask & 0xFFFFFF))
    assert not found.identity_matches("0000:03:00.0", (1, 2, None, None), value ^ 0x800000)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (PciBlock(), 'device "x": pci[0]: set at least one of vendor_id, device_id, class'),
        (PciBlock(vendor_id="zz"), 'device "x": pci[0].vendor_id: "zz" is not a PCI ID in hex'),
        (PciBlock(device_id="12345"), 'device "x": pci[0].device_id: "12345" is not a PCI ID'),
        (PciBlock(class_code="3"), 'device "x": pci[0].class: "3" is not a PCI class'),
        (PciBlock(class_code="03/"), 'device "x": pci[0].class: "03/" is not a PCI class'),
        (PciBlock(subsystem_vendor_id="x1"), 'device "x": pci[0].subsystem_vendor_id: "x1"'),
    ],
)
def test_pci_problems_name_the_block_and_field(block: PciBlock, message: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        settings_from(GenericConfig(device={"x": DeviceBlock(pci=[block])}))
    assert str(refused.value).startswith(message), refused.value


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (DeviceBlock(pci=[PciBlock(driver="amdgpu")], nodes=[""]), 'nodes[0]: "" is not a node'),
        (DeviceBlock(paths=["/dev/kvm"], nodes=["kvm"]), "nodes: filters the nodes of pci"),
        (DeviceBlock(paths=["/dev/kvm"], companions=["kfd"]), 'companions[0]: "kfd" is not an'),
    ],
)
def test_nodes_and_companions_are_checked(block: DeviceBlock, message: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        settings_from(GenericConfig(device={"x": block}))
    assert message in str(refused.value)


def test_recovery_quiet_period_must_not_be_negative() -> None:
    config = GenericConfig(recovery_quiet_period=timedelta(seconds=-1))
    with pytest.raises(InvalidArgument, match="recovery_quiet_period: must not be negative"):
        settings_from(config)


def test_the_driver_and_address_of_a_matcher() -> None:
    found = matcher(vendor_id="1002", driver="amdgpu", address="0000:C3:*")
    assert found.address == "0000:c3:*"  # sysfs writes addresses in lower case
    assert found.identity_matches("0000:c3:00.0", (0x1002, 1, None, None), 0)
    assert not found.identity_matches("0000:03:00.0", (0x1002, 1, None, None), 0)
    # Unbound is ours (and unhealthy); another driver is not.
    assert found.driver_matches("amdgpu") and found.driver_matches(None)
    assert not found.driver_matches("vfio-pci")
    assert matcher(vendor_id="1002").driver_matches("vfio-pci")


def test_a_map_of_device_blocks_with_and_without_lists_decodes_as_an_agent_does() -> None:
    """An absent list attribute must not come out as an empty tuple beside another
    block's list: the agent's map of blocks would then hold two types, and go-cty
    panics (docs/nomad-device-protocol.md §8). On main before this change the
    ``paths`` default was such a literal, and this config could not be encoded."""
    text = """plugin "nomad-device-generic" {
  config {
    device "a" {
      usb {
        vendor_id = "1a86"
      }
    }
    device "b" {
      paths      = ["/dev/kvm"]
      companions = ["/dev/kfd"]
    }
    device "c" {
      nodes = ["renderD*"]
      pci {
        driver = "amdgpu"
      }
    }
  }
}
"""
    config = GenericDevicePluginDecode(encode_agent_text(text))
    kinds = {k.label: k for k in settings_from(config).kinds}
    assert kinds["a"].paths == () and kinds["a"].companions == ()
    assert kinds["b"].paths == ("/dev/kvm",) and kinds["b"].companions == ("/dev/kfd",)
    assert kinds["c"].nodes == ("renderD*",)


def GenericDevicePluginDecode(data: bytes) -> GenericConfig:
    from nomad_device.plugins.generic.plugin import GenericDevicePlugin

    return GenericDevicePlugin().decode_config(data)


# ----------------------------------------------------------------------------- sysfs


def function_dir(base: Path, address: str, files: dict[str, str]) -> Path:
    """A function's directory and its /sys/bus/pci/devices entry, files as the kernel
    writes them (text and a newline)."""
    path = base / "devices" / "pci0000:00" / address
    path.mkdir(parents=True)
    for name, text in {
        "vendor": "0x1002",
        "device": "0x740f",
        "class": "0x038000",
        **files,
    }.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text + ("" if text.endswith("\n") else "\n"))
    listing = base / "bus" / "pci" / "devices"
    listing.mkdir(parents=True, exist_ok=True)
    (listing / address).symlink_to(os.path.relpath(path, listing))
    return path


@pytest.mark.parametrize(
    ("speed", "expected"),
    [
        ("16.0 GT/s PCIe", 16.0),
        ("8 GT/s", 8.0),  # kernels before 5.x
        ("2.5 GT/s PCIe", 2.5),
        ("Unknown", None),
        ("", None),
    ],
)
def test_link_speed_as_kernels_print_it(tmp_path: Path, speed: str, expected: float | None) -> None:
    function_dir(tmp_path, "0000:03:00.0", {"current_link_speed": speed, "current_link_width": "0"})
    (ident,) = pci_functions(Roots("/dev", str(tmp_path)))
    link = read_function(Roots("/dev", str(tmp_path)), ident).link
    assert link.speed == expected
    assert link.width is None  # 0: the link is down


def test_a_function_read_from_sysfs(tmp_path: Path) -> None:
    path = function_dir(
        tmp_path,
        "0000:C3:00.0",  # an odd case: the address is reported as sysfs's lower case
        {
            "subsystem_vendor": "0x1002",
            "subsystem_device": "0x0c34",
            "numa_node": "1",
            "enable": "1",
            "max_link_speed": "32.0 GT/s PCIe",
            "max_link_width": "16",
            "current_link_speed": "16.0 GT/s PCIe",
            "current_link_width": "8",
            "aer_dev_fatal": aer_text(3, "fatal"),
            "aer_dev_nonfatal": aer_text(5, "nonfatal"),
            "mem_info_vram_total": str(64 << 30),
        },
    )
    child = path / "drm" / "renderD128"
    child.mkdir(parents=True)
    (child / "dev").write_text("226:128\n")
    (child / "uevent").write_text("MAJOR=226\nMINOR=128\nDEVNAME=dri/renderD128\n")
    bridged = path / "0000:c4:00.0" / "drm" / "card9"  # a function below: not descended
    bridged.mkdir(parents=True)
    (bridged / "dev").write_text("226:9\n")
    bad = path / "evil"
    bad.mkdir()
    (bad / "dev").write_text("1:1\n")
    (bad / "uevent").write_text("DEVNAME=../etc/passwd\n")  # never a path outside /dev
    roots = Roots("/dev", str(tmp_path))
    (ident,) = pci_functions(roots)
    assert ident.address == "0000:c3:00.0"
    assert (ident.vendor_id, ident.device_id, ident.class_code) == (0x1002, 0x740F, 0x038000)
    assert (ident.subsystem_vendor_id, ident.subsystem_device_id) == (0x1002, 0x0C34)
    assert ident.driver is None
    function = read_function(roots, ident)
    assert function.numa_node == 1 and function.enabled is True
    assert function.link == PciLink(16.0, 8, 32.0, 16) and function.link.degraded
    assert (function.aer_fatal, function.aer_nonfatal) == (3, 5)
    assert (function.memory_bytes, function.memory_source) == (64 << 30, "mem_info_vram_total")
    assert [(n.devname, n.major, n.minor) for n in function.nodes] == [("dri/renderD128", 226, 128)]


def _node(path: Path, devname: str, numbers: str, subsystem: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "dev").write_text(numbers + "\n")
    (path / "uevent").write_text(f"DEVNAME={devname}\n")
    (path / "subsystem").symlink_to(f"/sys/class/{subsystem}")


def test_nvme_namespaces_multipath_puts_under_the_subsystem(tmp_path: Path) -> None:
    """As a real kernel lays out a controller in a subsystem (tests/kernel): the
    controller below the function, its hidden path device (no node) too, the namespace's
    block and generic nodes under /sys/devices/virtual/nvme-subsystem."""
    roots = Roots("/dev", str(tmp_path))
    path = function_dir(tmp_path, "0000:05:00.0", {"vendor": "0x1b36", "device": "0x0010"})
    controller = path / "nvme" / "nvme1"
    _node(controller, "nvme1", "246:1", "nvme")
    (controller / "nvme1c1n1").mkdir()  # the path device: no dev file
    subsystem = tmp_path / "devices" / "virtual" / "nvme-subsystem" / "nvme-subsys1"
    _node(subsystem / "nvme1n1", "nvme1n1", "259:1", "block")
    _node(subsystem / "nvme1n1" / "nvme1n1p1", "nvme1n1p1", "259:2", "block")
    _node(subsystem / "ng1n1", "ng1n1", "245:1", "nvme-generic")
    (subsystem / "nvme1").symlink_to(os.path.relpath(controller, subsystem))
    listing = tmp_path / "class" / "nvme-subsystem"
    listing.mkdir(parents=True)
    (listing / "nvme-subsys1").symlink_to(os.path.relpath(subsystem, listing))

    (ident,) = pci_functions(roots)
    nodes = [(n.devname, n.kind) for n in read_function(roots, ident).nodes]
    assert nodes == [
        ("nvme1", "char"),
        ("ng1n1", "char"),
        ("nvme1n1", "block"),
        ("nvme1n1p1", "block"),
    ]

    # A second controller in the subsystem (true multipath): the namespace is no one
    # function's, and the controller brings its own node alone.
    (subsystem / "nvme2").symlink_to(os.path.relpath(controller, subsystem))
    assert [n.devname for n in read_function(roots, ident).nodes] == ["nvme1"]


def test_vram_of_xe_and_of_intels_i915(tmp_path: Path) -> None:
    roots = Roots("/dev", str(tmp_path))
    function_dir(tmp_path, "0000:03:00.0", {
        "tile0/physical_vram_size_bytes": str(8 << 30),
        "tile1/physical_vram_size_bytes": str(8 << 30),
    })  # fmt: skip
    function_dir(tmp_path, "0000:04:00.0", {
        "drm/card1/lmem_total_bytes": str(4 << 30),
        "drm/card1/gt/gt0/id": "0",
        "drm/card1/gt/gt1/id": "1",
    })  # fmt: skip
    xe, i915 = (read_function(roots, i) for i in pci_functions(roots))
    assert (xe.memory_bytes, xe.memory_source) == (16 << 30, "tile*/physical_vram_size_bytes")
    assert (i915.memory_bytes, i915.memory_source) == (8 << 30, "drm/card*/lmem_total_bytes")


def test_bandwidth_as_nomads_nvidia_plugin_counts_it() -> None:
    assert pci_bandwidth(16.0, 16) == 32768  # gen 4: 2,048 MB/s a lane
    assert pci_bandwidth(32.0, 16) == 3 * 1024 * 16  # gen 5, as the Go plugin has it
    assert pci_bandwidth(8.0, 4) == 4096
    assert pci_bandwidth(5.0, 1) == 512 and pci_bandwidth(2.5, 1) == 256
    assert pci_bandwidth(None, 16) is None and pci_bandwidth(16.0, None) is None
    assert pci_bandwidth(20.0, 1) is None  # no such generation


def test_nodes_patterns() -> None:
    assert matches_nodes([], "dri/card0")
    assert matches_nodes(["renderD*"], "dri/renderD128")
    assert not matches_nodes(["renderD*"], "dri/card0")
    assert matches_nodes(["dri/*"], "dri/card0") and not matches_nodes(["dri/*"], "kfd")
    assert matches_nodes(["/dev/accel/accel*"], "accel/accel0")
    assert not matches_nodes(["accel*"], "accel_x/other")


def test_dev_relative() -> None:
    assert dev_relative("dri/renderD128") == "dri/renderD128"
    for bad in ("", "/etc/passwd", "../x", "a/../b", "a//b", "./x"):
        assert dev_relative(bad) is None, bad


# --------------------------------------------------------------------------- pci.ids

IDS = """\
# comment
1002  Advanced Micro Devices, Inc. [AMD/ATI]
\t740f  Aldebaran/MI200 [Instinct MI210]
\t\t1002 0c34  Instinct MI210
\t7410  Other
10de  NVIDIA Corporation
C 03  Display controller
\t00  VGA compatible controller
"""


def ids_db(path: Path, refusal: str | None = None) -> PciIds:
    return PciIds([str(path.with_suffix(".missing")), str(path)], lambda _p: refusal)


def test_pci_ids_names(tmp_path: Path) -> None:
    path = tmp_path / "pci.ids"
    path.write_text(IDS)
    db = ids_db(path)
    mi210 = (0x1002, 0x740F, 0x1002, 0x0C34)
    other = (0x1002, 0x7410, 0x1002, 0x0001)
    unknown = (0x10DE, 0x0300, None, None)
    names = db.names([mi210, other, unknown])
    assert names[mi210] == PciNames(
        "Advanced Micro Devices, Inc. [AMD/ATI]", "Aldebaran/MI200 [Instinct MI210]",
        "Instinct MI210",
    )  # fmt: skip
    assert names[other] == PciNames("Advanced Micro Devices, Inc. [AMD/ATI]", "Other", "")
    assert names[unknown] == PciNames("NVIDIA Corporation", "", "")
    # Read again only when it changes.
    path.write_text(IDS.replace("Instinct MI210\n", "Instinct MI210 64GB\n"))
    os.utime(path, ns=(1, 1))
    assert db.names([mi210])[mi210].subsystem == "Instinct MI210 64GB"


def test_compressed_pci_ids(tmp_path: Path) -> None:
    path = tmp_path / "pci.ids.gz"
    with gzip.open(path, "wt") as f:
        f.write(IDS)
    key = (0x1002, 0x740F, None, None)
    assert ids_db(path).names([key])[key].device == "Aldebaran/MI200 [Instinct MI210]"
    path.write_bytes(b"not gzip")
    broken = ids_db(path)
    assert broken.names([key])[key] == PciNames()
    assert "could not be read for PCI product names" in broken.note


def test_a_refused_pci_ids_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "pci.ids"
    path.write_text(IDS)
    db = ids_db(path, refusal="writable by every user (mode 0666)")
    key = (0x1002, 0x740F, None, None)
    assert db.names([key])[key] == PciNames()
    assert (
        db.note == f"{path} is not read for PCI product names: writable by every user (mode 0666)"
    )


# ------------------------------------------------------------------------------ AER


def aer_function(fatal: int | None, nonfatal: int | None) -> PciFunction:
    ident = PciIdentity("0000:03:00.0", "/x", 1, 2, 0x038000, None, None, "amdgpu")
    return PciFunction(ident, aer_fatal=fatal, aer_nonfatal=nonfatal)


def test_aer_marks() -> None:
    marks = AerMarks()
    at = "T"
    assert marks.judge(aer_function(4, 1), 60, 0.0, at) is None  # the baseline
    assert marks.judge(aer_function(4, 1), 60, 1.0, at) is None
    assert marks.judge(aer_function(5, 1), 60, 2.0, at) == "PCIe AER reported 1 fatal error at T"
    assert marks.deadline() == 62.0
    assert marks.judge(aer_function(5, 1), 60, 30.0, "U") == "PCIe AER reported 1 fatal error at T"
    assert marks.judge(aer_function(5, 4), 60, 40.0, "U") == (
        "PCIe AER reported 3 non-fatal errors at U"
    )
    late = "PCIe AER reported 3 non-fatal errors at U"
    assert marks.judge(aer_function(5, 4), 60, 99.0, at) == late  # 59 s quiet: not yet
    assert marks.judge(aer_function(5, 4), 60, 100.0, at) is None
    assert marks.deadline() is None
    # Fewer than before (removed and back): a new baseline, not a rise.
    assert marks.judge(aer_function(0, 0), 60, 101.0, at) is None
    # A count that cannot be read keeps the last: no rise out of a read that failed.
    assert marks.judge(aer_function(None, None), 60, 102.0, at) is None
    assert marks.judge(aer_function(0, 0), 60, 102.5, at) is None
    marks.judge(aer_function(1, 0), 60, 103.0, at)
    marks.keep([])
    assert marks.deadline() is None
    assert marks.judge(aer_function(9, 9), 60, 104.0, at) is None  # forgotten: a baseline


def test_aer_marks_count_the_ports_above() -> None:
    """A real kernel (tests/kernel/test_kernel_aer.py) counts an error a root port detects
    on the port alone, while it resets the link below: the device below is affected."""
    ident = PciIdentity("0000:03:00.0", "/x", 1, 2, 0x038000, None, None, "amdgpu")

    def below(own: int, root: tuple[int, int], switch: tuple[int, int] = (0, 0)) -> PciFunction:
        ports = (("0000:02:00.0", *switch), ("0000:00:01.1", *root))
        return PciFunction(ident, aer_fatal=own, aer_nonfatal=0, upstream_aer=ports)

    marks = AerMarks()
    assert marks.judge(below(0, (2, 0)), 60, 0.0, "T") is None  # the baseline, ports too
    assert marks.judge(below(0, (3, 0)), 60, 1.0, "T") == (
        "PCIe AER reported 1 fatal error on 0000:00:01.1 (the port above it) at T"
    )
    assert marks.judge(below(1, (3, 2), (0, 1)), 60, 2.0, "U") == (
        "PCIe AER reported 1 fatal error"
        " and 1 non-fatal error on 0000:02:00.0 (the port above it)"
        " and 2 non-fatal errors on 0000:00:01.1 (the port above it) at U"
    )
    assert marks.judge(below(1, (3, 2), (0, 1)), 60, 62.0, "V") is None
    marks.keep([])
    assert marks.judge(below(5, (9, 9)), 60, 63.0, "W") is None  # forgotten: baselines


ROOT = "/devices/pci0000:00"
PORT = f"{ROOT}/0000:00:01.1"
FAILED = "the kernel's PCIe error recovery failed"
UNTIL = "; unhealthy until the function is removed and rescanned, bound again, or recovered"


def function_at(address: str, devpath: str, fatal: int = 0) -> PciFunction:
    ident = PciIdentity(address, "/x", 1, 2, 0x038000, None, None, "amdgpu")
    return PciFunction(ident, aer_fatal=fatal, aer_nonfatal=0, devpath=devpath)


def test_a_failed_recovery_holds_until_the_function_is_made_anew() -> None:
    """The kernel's FAILED_RECOVERY for a port marks every function below it, however
    quiet it stays; only a sign of the function made anew (added, bound, recovered)
    lifts it, for that function alone."""
    gpu, other = (
        function_at("0000:03:00.0", f"{PORT}/0000:03:00.0"),
        function_at("0000:04:00.0", f"{PORT}/0000:04:00.0"),
    )
    elsewhere = function_at("0000:c3:00.0", f"{ROOT}/0000:00:02.1/0000:c3:00.0")
    marks = AerMarks()
    marks.keep([gpu, other, elsewhere])
    for f in (gpu, other, elsewhere):
        assert marks.judge(f, 60, 0.0, "T") is None
    marks.uevent("change", PORT, "BEGIN_RECOVERY", "S")  # the start says nothing yet
    marks.uevent("change", "/devices/virtual/mem/null", "", "S")
    assert marks.judge(gpu, 60, 1.0, "T") is None
    marks.uevent("change", PORT, "FAILED_RECOVERY", "F")
    sick = f"{FAILED} on 0000:00:01.1 (the port above it) at F{UNTIL}"
    assert marks.judge(gpu, 60, 2.0, "T") == sick
    assert marks.judge(other, 60, 2.0, "T") == sick
    assert marks.judge(elsewhere, 60, 2.0, "T") is None
    assert marks.deadline() is None  # no timer: it does not wear off
    assert marks.judge(gpu, 60, 1e6, "T") == sick
    # An AER rise meanwhile comes first, while its quiet period lasts.
    assert marks.judge(function_at(gpu.address, gpu.devpath, 1), 60, 1e6, "U") == (
        f"PCIe AER reported 1 fatal error at U; {sick}"
    )
    assert marks.judge(function_at(gpu.address, gpu.devpath, 1), 60, 2e6, "U") == sick
    # A recovery of another function, or a driver bound to the port, lifts nothing.
    marks.uevent("change", f"{PORT}/0000:05:00.0", "SUCCESSFUL_RECOVERY", "R")
    marks.uevent("bind", PORT, "", "R")
    assert marks.judge(gpu, 60, 2e6, "T") == sick
    # The GPU is removed and rescanned (a new device); its neighbour is bound again.
    marks.uevent("remove", gpu.devpath, "", "R")
    marks.uevent("add", gpu.devpath, "", "R")
    marks.uevent("bind", other.devpath, "", "R")
    assert marks.judge(gpu, 60, 2e6, "T") is None
    assert marks.judge(other, 60, 2e6, "T") is None
    # A second failure marks them again; SUCCESSFUL_RECOVERY of the function lifts it.
    marks.uevent("change", gpu.devpath, "FAILED_RECOVERY", "G")
    assert marks.judge(gpu, 60, 2e6, "T") == f"{FAILED} at G{UNTIL}"
    assert marks.judge(other, 60, 2e6, "T") is None
    marks.uevent("change", gpu.devpath, "SUCCESSFUL_RECOVERY", "R")
    assert marks.judge(gpu, 60, 2e6, "T") is None


def test_a_function_seen_gone_is_new_when_it_comes_back() -> None:
    """Without the uevents (a buffer overflow), a scan that finds the function gone is
    the sign: what comes back at that place is a new device. Failures above nothing
    offered are forgotten."""
    gpu, other = (
        function_at("0000:03:00.0", f"{PORT}/0000:03:00.0"),
        function_at("0000:04:00.0", f"{PORT}/0000:04:00.0"),
    )
    marks = AerMarks()
    marks.keep([gpu, other])
    marks.uevent("change", PORT, "FAILED_RECOVERY", "F")
    assert marks.judge(gpu, 60, 0.0, "T") is not None
    marks.keep([other])  # the GPU was removed
    marks.keep([gpu, other])  # ... and rescanned
    assert marks.judge(gpu, 60, 1.0, "T") is None
    assert marks.judge(other, 60, 1.0, "T") is not None
    marks.keep([])  # nothing below the port any more: the failure goes
    marks.keep([gpu, other])
    assert marks.judge(other, 60, 2.0, "T") is None


def test_the_ports_above_a_function_and_their_aer_totals(tmp_path: Path) -> None:
    roots = Roots("/dev", str(tmp_path))
    port = tmp_path / "devices" / "pci0000:00" / "0000:00:01.1"
    port.mkdir(parents=True)
    (port / "aer_dev_fatal").write_text(aer_text(4, "fatal"))
    (port / "aer_dev_nonfatal").write_text(aer_text(6, "nonfatal"))
    switch = port / "0000:01:00.0"  # a port without AER: skipped
    switch.mkdir()
    function = switch / "0000:02:00.0"
    function.mkdir()
    for name, text in (("vendor", "0x1002"), ("device", "0x740f"), ("class", "0x038000")):
        (function / name).write_text(text + "\n")
    listing = tmp_path / "bus" / "pci" / "devices"
    listing.mkdir(parents=True)
    (listing / "0000:02:00.0").symlink_to(os.path.relpath(function, listing))
    (ident,) = pci_functions(roots)
    function = read_function(roots, ident)
    assert function.upstream_aer == (("0000:00:01.1", 4, 6),)
    # As a uevent's DEVPATH names it: where the kernel's recovery outcome is sent.
    assert function.devpath == "/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0"


def test_what_config_space_says_of_a_function_its_driver_enabled(tmp_path: Path) -> None:
    """The Command register of a function its driver enabled has memory decoding on;
    a reset nothing restored (a failed recovery) clears it, a dead link reads all ones.
    Functions VFIO has, that no driver enabled, or that sleep are not read."""
    tree = FakeTree(tmp_path)
    roots = Roots(str(tree.dev), str(tree.sys))
    gpu = tree.pci("0000:03:00.0", 0x1002, 0x740F, 0x038000, driver="amdgpu")
    vfio = tree.pci("0000:65:00.0", 0x10DE, 0x2230, 0x030000, driver="vfio-pci")
    idle = tree.pci("0000:66:00.0", 0x10DE, 0x2230, 0x030000)

    def read(address: str) -> PciFunction:
        (ident,) = [i for i in pci_functions(roots) if i.address == address]
        return read_function(roots, ident)

    def verdict(address: str) -> str | None:
        function = read(address)
        return pci_problem(Found("x", address, "pci", (), pci=function), False, None)

    assert (read(gpu.address).answers, read(gpu.address).decodes) == (True, True)
    tree.config(gpu, command=0)
    assert (read(gpu.address).answers, read(gpu.address).decodes) == (True, False)
    assert verdict(gpu.address) == (
        "0000:03:00.0 lost its configuration: amdgpu enabled it, yet it decodes neither"
        " memory nor I/O (as a reset leaves it: a failed error recovery?)"
    )
    # Asleep (runtime suspended): a read could wake it from D3cold, so none is made.
    (gpu.syspath / "power").mkdir()
    (gpu.syspath / "power" / "runtime_status").write_text("suspended\n")
    assert (read(gpu.address).answers, read(gpu.address).decodes) == (None, None)
    (gpu.syspath / "power" / "runtime_status").write_text("active\n")
    assert read(gpu.address).decodes is False
    # No BAR with a range: nothing to decode, nothing to say.
    (gpu.syspath / "resource").write_text(f"0x{0:016x} 0x{0:016x} 0x{0:016x}\n" * 17)
    assert read(gpu.address).decodes is None
    tree.config(gpu, dead=True)
    assert read(gpu.address).answers is False
    assert verdict(gpu.address) == "0000:03:00.0 does not answer: its config space reads all ones"
    tree.config(gpu)  # removed and rescanned: configured anew (it has no node here)
    assert verdict(gpu.address) == "0000:03:00.0 has no device node of its own (bound to amdgpu)"
    # VFIO's user owns the Command register; an idle function was enabled by no driver.
    for handle in (vfio, idle):
        tree.config(handle, command=0)
        assert (read(handle.address).answers, read(handle.address).decodes) == (None, None)


def test_an_idle_vfio_function_reads_disabled_and_is_fine() -> None:
    ident = PciIdentity("0000:65:00.0", "/x", 0x10DE, 0x2230, 0x030000, None, None, "vfio-pci")
    function = PciFunction(ident, enabled=False, iommu_group="35")
    found = Found("x", ident.address, "pci", (), pci=function, unfiltered=())
    assert pci_problem(found, False, None) == (
        "0000:65:00.0 has no device node of its own (bound to vfio-pci)"
    )
    amd = PciIdentity("0000:03:00.0", "/x", 0x1002, 0x740F, 0x038000, None, None, "amdgpu")
    disabled = Found("x", amd.address, "pci", (), pci=PciFunction(amd, enabled=False))
    assert pci_problem(disabled, False, None) == (
        "0000:03:00.0 is bound to amdgpu but not enabled (enable = 0)"
    )
