"""PCI matching over the real wire: every preset of docs/plugins/generic.md on a fake tree.

Each test sends the config bytes a Nomad agent sends for the page's preset
(decoded from the page as an agent decodes its file) to the plugin launched as
Nomad launches it, on a fake sysfs and /dev built by pci_layouts.py, which
says for each card where its layout comes from. Changes are made in the fake
sysfs, which nothing watches, and announced by a real kernel uevent: a
``change`` written to a real PCI bridge's ``uevent`` file, so a change is seen
only if the plugin listens to the ``pci`` subsystem (the presets keep the
default 30 s period, which no test waits for).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import grpc
import pytest
from support.fake_tree import FakeTree, Link, PciHandle, require_root
from support.generic import (
    COMMAND,
    Groups,
    agent_file,
    announce,
    by_key,
    devices,
    logged,
    pci_uevent_file,
    preset_config,
    preset_config_with,
    wait_for,
)
from support.pci_layouts import (
    PCI_IDS,
    Layout,
    alveo,
    amd_rocm,
    aws_neuron,
    coral,
    habana_gaudi,
    intel_gpu,
    vfio_gpu,
)
from support.processes import Launched, Launcher

from nomad_device.host import CallError
from nomad_device.model import Attribute, DeviceGroup, DeviceSpec

pytestmark = pytest.mark.timeout(180)

ALL_PRESETS = ("amd", "intel", "gaudi", "neuron", "alveo", "edgetpu", "passthrough")


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    require_root()
    fake = FakeTree(tmp_path / "root")
    fake.pci_ids(PCI_IDS)
    return fake


def launch_preset(launch: Launcher, tree: FakeTree, *labels: str) -> Launched:
    launched = launch(COMMAND, env={**os.environ, **tree.env})
    launched.client.set_config(preset_config(*labels))
    return launched


def preset_group(launch: Launcher, tree: FakeTree, label: str) -> tuple[Launched, DeviceGroup]:
    """The preset's plugin and the one group of its first Fingerprint message."""
    launched = launch_preset(launch, tree, label)
    with launched.client.fingerprint() as stream:
        (group,) = stream.next(15)
    return launched, group


def specs(layout: Layout, tree: FakeTree, address: str) -> tuple[DeviceSpec, ...]:
    """What a reservation of one device grants: its nodes, then the companions."""
    paths = [*layout.grants[address], *layout.companions]
    return tuple(DeviceSpec(p, str(tree.dev / p.removeprefix("/dev/")), "rw") for p in paths)


def reason(groups: Groups, key: str, device: str) -> str:
    found = devices(groups, key).get(device)
    return "(absent)" if found is None else found.health_description


# ---------------------------------------------------------------------------- presets


def test_amd_gpus_with_rocm(launch: Launcher, tree: FakeTree) -> None:
    layout = amd_rocm(tree)
    launched, group = preset_group(launch, tree, "amd")
    assert group.key == "amd/gpu/instinct"
    # The switch ports are functions too (class 06); only the GPUs match.
    assert [(d.id, d.healthy, d.pci_bus_id) for d in group.devices] == [
        ("0000:03:00.0", True, "0000:03:00.0"),
        ("0000:c3:00.0", True, "0000:c3:00.0"),
    ]
    attrs = group.attributes
    assert attrs["pci_vendor_id"] == Attribute(0x1002)
    assert attrs["pci_device_id"] == Attribute(0x740F)
    assert attrs["pci_subsystem_device_id"] == Attribute(0x0C34)
    assert attrs["pci_class"] == Attribute("038000")
    assert attrs["pci_driver"] == Attribute("amdgpu")
    assert attrs["memory"] == Attribute(64 * 1024, "MiB")
    assert attrs["pci_link_speed"] == Attribute(16.0)
    assert attrs["pci_link_width_max"] == Attribute(16)
    assert attrs["pci_bandwidth"] == Attribute(16 * 2048, "MB/s")
    assert attrs["pci_vendor_name"] == Attribute("Advanced Micro Devices, Inc. [AMD/ATI]")
    assert attrs["pci_device_name"] == Attribute("Aldebaran/MI200 [Instinct MI210]")
    assert attrs["pci_subsystem_name"] == Attribute("Instinct MI210")
    assert "numa_node" not in attrs  # 0 and 1: not shared by the group's devices

    one = launched.client.reserve(["0000:c3:00.0"])
    assert one.devices == specs(layout, tree, "0000:c3:00.0")
    assert one.envs["GENERIC_AMD_IDS"] == "0000:c3:00.0"
    assert one.envs["GENERIC_AMD_PATHS"] == "/dev/dri/renderD129"
    with launched.client.stats(0.2) as stats:
        (figures,) = stats.next(15)
    details = figures.instance_stats["0000:c3:00.0"].stats
    assert details is not None
    assert details.attributes["pci_link_speed"].float_numerator == 16.0
    assert details.attributes["aer_fatal"].int_numerator == 0
    assert details.attributes["nodes"].string_value == "/dev/dri/renderD129,/dev/kfd"
    both = launched.client.reserve(["0000:03:00.0", "0000:c3:00.0"])
    assert [d.task_path for d in both.devices] == [
        "/dev/dri/renderD128",
        "/dev/kfd",
        "/dev/dri/renderD129",
    ]  # fmt: skip  (/dev/kfd once)


def test_a_driver_unbound_and_bound_again(launch: Launcher, tree: FakeTree) -> None:
    layout = amd_rocm(tree)
    trigger = pci_uevent_file()
    gpu = layout.functions["0000:c3:00.0"]
    launched = launch_preset(launch, tree, "amd")
    key = "amd/gpu/instinct"
    with launched.client.fingerprint() as stream:
        assert devices(stream.next(15), key)["0000:c3:00.0"].healthy
        # amdgpu unbinds: its DRM device (and so the nodes) go with it.
        saved = tree.sys / "saved-drm"
        shutil.move(gpu.syspath / "drm", saved)
        for node in gpu.nodes:
            node.unlink()
        tree.bind(gpu, None)
        announce(trigger)
        # Scans may see it half-way (nodes gone, driver still bound): wait for the end.
        unbound = "no driver is bound to 0000:c3:00.0 (expected amdgpu)"
        groups = wait_for(stream, lambda g: reason(g, key, "0000:c3:00.0") == unbound)
        assert devices(groups, key)["0000:03:00.0"].healthy
        shutil.move(saved, gpu.syspath / "drm")
        tree.node("dri/card2", "char", 226, 2)
        tree.node("dri/renderD129", "char", 226, 129)
        tree.bind(gpu, "amdgpu")
        announce(trigger)
        wait_for(stream, lambda g: devices(g, key)["0000:c3:00.0"].healthy)


def test_intel_gpus_bring_card_and_render_nodes_only(launch: Launcher, tree: FakeTree) -> None:
    layout = intel_gpu(tree)
    launched, group = preset_group(launch, tree, "intel")
    assert group.key == "intel/gpu/intel"
    (device,) = group.devices
    assert (device.id, device.healthy) == ("0000:83:00.0", True), device
    assert group.attributes["memory"] == Attribute(16 * 1024, "MiB")  # tile0's VRAM
    assert group.attributes["pci_driver"] == Attribute("xe")
    assert group.attributes["pci_bandwidth"] == Attribute(256, "MB/s")  # 2.5 GT/s x1
    assert group.attributes["numa_node"] == Attribute(0)
    assert group.attributes["pci_device_name"] == Attribute("DG2 [Arc A770]")
    # nodes = ["card*", "renderD*"]: the connector's i2c-3 and drm_dp_aux0, and fb0, stay out.
    assert launched.client.reserve([device.id]).devices == specs(layout, tree, device.id)


def test_habana_gaudi_with_its_control_nodes(launch: Launcher, tree: FakeTree) -> None:
    layout = habana_gaudi(tree)
    launched, group = preset_group(launch, tree, "gaudi")
    assert group.key == "habana/gaudi/gaudi"
    assert [d.id for d in group.devices] == ["0000:33:00.0", "0000:9a:00.0"]
    assert all(d.healthy for d in group.devices), group.devices
    assert group.attributes["pci_class"] == Attribute("120000")
    assert group.attributes["pci_device_name"] == Attribute("Gaudi2 AI Training Accelerator")
    assert "memory" not in group.attributes  # habanalabs publishes none
    reservation = launched.client.reserve(["0000:9a:00.0"])
    assert reservation.devices == specs(layout, tree, "0000:9a:00.0")


def test_aws_neuron_by_paths(launch: Launcher, tree: FakeTree) -> None:
    aws_neuron(tree)
    launched, group = preset_group(launch, tree, "neuron")
    assert group.key == "aws/neuron/neuron"
    assert [(d.id, d.healthy, d.pci_bus_id) for d in group.devices] == [
        ("neuron0", True, None),  # the driver's nodes belong to no function in sysfs
        ("neuron1", True, None),
    ]
    reservation = launched.client.reserve(["neuron1"])
    assert reservation.devices == (DeviceSpec("/dev/neuron1", str(tree.dev / "neuron1"), "rw"),)


def test_alveo_user_functions(launch: Launcher, tree: FakeTree) -> None:
    layout = alveo(tree)
    launched, group = preset_group(launch, tree, "alveo")
    assert group.key == "xilinx/fpga/alveo"
    (device,) = group.devices
    assert (device.id, device.healthy) == ("0000:d8:00.1", True), device
    assert group.attributes["pci_bandwidth"] == Attribute(16 * 1024, "MB/s")
    assert launched.client.reserve([device.id]).devices == specs(layout, tree, device.id)
    # The management function (xclmgmt) is not the block's, and the log says why.
    assert logged(launched, "0000:d8:00.0 would be device")


def test_coral_pcie_tpus(launch: Launcher, tree: FakeTree) -> None:
    layout = coral(tree)
    launched, group = preset_group(launch, tree, "edgetpu")
    assert group.key == "google/edgetpu/edgetpu"
    assert [d.id for d in group.devices] == ["0000:05:00.0", "0000:06:00.0"]
    assert group.attributes["pci_bandwidth"] == Attribute(512, "MB/s")  # gen 2 x1
    assert group.attributes["pci_link_speed"] == Attribute(5.0)
    for address in layout.functions:
        assert launched.client.reserve([address]).devices == specs(layout, tree, address)


def test_a_gpu_for_passthrough_needs_its_whole_iommu_group(
    launch: Launcher, tree: FakeTree
) -> None:
    layout = vfio_gpu(tree)
    trigger = pci_uevent_file()
    launched = launch_preset(launch, tree, "passthrough")
    key = "nvidia/vfio/passthrough"
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
        assert reason(groups, key, "0000:65:00.0") == (
            "IOMMU group 35 cannot be given to VFIO: 0000:65:00.1 (snd_hda_intel) must be"
            " bound to vfio-pci (or unbound) as well"
        )
        audio = PciHandle("0000:65:00.1", tree.sys / "devices" / "pci0000:00" / "0000:65:00.1")
        tree.bind(audio, "vfio-pci")
        announce(trigger)
        wait_for(stream, lambda g: devices(g, key)["0000:65:00.0"].healthy)
    # The audio function is vfio-pci's now too, but it is no display controller (class 04).
    reservation = launched.client.reserve(["0000:65:00.0"])
    assert reservation.devices == specs(layout, tree, "0000:65:00.0")
    assert reservation.envs["GENERIC_PASSTHROUGH_IDS"] == "0000:65:00.0"


def test_a_reserved_function_another_driver_took_says_so(launch: Launcher, tree: FakeTree) -> None:
    """A function bound to another driver than its block's is no longer the block's;
    reserved, it stays listed, and the reason is what happened to it, not "not present"."""
    layout = vfio_gpu(tree, audio_driver=None)
    trigger = pci_uevent_file()
    launched = launch_preset(launch, tree, "passthrough")
    key = "nvidia/vfio/passthrough"
    gpu = layout.functions["0000:65:00.0"]
    with launched.client.fingerprint() as stream:
        assert devices(stream.next(15), key)["0000:65:00.0"].healthy
        launched.client.reserve(["0000:65:00.0"])
        tree.bind(gpu, "nvidia")
        announce(trigger)
        groups = wait_for(stream, lambda g: not devices(g, key)["0000:65:00.0"].healthy)
    text = devices(groups, key)["0000:65:00.0"].health_description
    assert re.fullmatch(r"bound to nvidia, not vfio-pci, since \S+Z", text), text
    with pytest.raises(CallError) as refused:
        launched.client.reserve(["0000:65:00.0"])
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert f'"0000:65:00.0": {text}' in refused.value.details


def test_every_preset_at_once(launch: Launcher, tree: FakeTree) -> None:
    """All presets in one agent config, on one host with every card: each block keeps to
    its own cards, and the vfio GPU (class 03, vendor 10de) is only the passthrough's."""
    for build in (amd_rocm, intel_gpu, habana_gaudi, aws_neuron, alveo, coral):
        build(tree)
    vfio_gpu(tree, audio_driver="vfio-pci")
    launched = launch_preset(launch, tree, *ALL_PRESETS)
    with launched.client.fingerprint() as stream:
        groups = by_key(stream.next(15))
    counts = {key: len(group.devices) for key, group in groups.items()}
    assert counts == {
        "amd/gpu/instinct": 2,
        "intel/gpu/intel": 1,
        "habana/gaudi/gaudi": 2,
        "aws/neuron/neuron": 2,
        "xilinx/fpga/alveo": 1,
        "google/edgetpu/edgetpu": 2,
        "nvidia/vfio/passthrough": 1,
    }
    assert all(d.healthy for g in groups.values() for d in g.devices), groups


# --------------------------------------------------------------- health and hot-plug


def test_hot_plug_of_a_pci_function(launch: Launcher, tree: FakeTree) -> None:
    trigger = pci_uevent_file()
    launched = launch_preset(launch, tree, "edgetpu")
    key = "google/edgetpu/edgetpu"
    with launched.client.fingerprint() as stream:
        assert stream.next(15) == []
        assert logged(launched, "no PCI function matches (yet)")
        layout = coral(tree)
        announce(trigger)
        # A scan may catch the layout half-made (a function before its node), so wait
        # for the whole of it rather than for the first message with two devices.
        wait_for(
            stream,
            lambda g: (
                len(devices(g, key)) == 2 and all(d.healthy for d in devices(g, key).values())
            ),
        )
        tree.remove_pci(layout.functions["0000:06:00.0"])
        announce(trigger)
        wait_for(stream, lambda g: list(devices(g, key)) == ["0000:05:00.0"])
    assert logged(launched, "device gone")


def test_aer_errors_make_a_device_unhealthy_until_quiet(launch: Launcher, tree: FakeTree) -> None:
    """A rise of the fatal or non-fatal total marks it; quiet for recovery_quiet_period
    (here 1 s) heals it, by a rescan the plugin schedules itself."""
    layout = amd_rocm(tree)
    trigger = pci_uevent_file()
    gpu = layout.functions["0000:03:00.0"]
    tree.aer(gpu.syspath, 2, 7)  # old errors, from before the plugin started: history
    launched = launch(COMMAND, env={**os.environ, **tree.env})
    launched.client.set_config(
        preset_config_with("amd", 'recovery_quiet_period = "1s"\n    fingerprint_period = "1h"')
    )
    key = "amd/gpu/instinct"
    with launched.client.fingerprint() as stream:
        assert devices(stream.next(15), key)["0000:03:00.0"].healthy
        tree.aer(gpu.syspath, 2, 9)  # one file changes, so no scan sees half of it
        announce(trigger)
        groups = wait_for(stream, lambda g: not devices(g, key)["0000:03:00.0"].healthy)
        text = reason(groups, key, "0000:03:00.0")
        assert text.startswith("PCIe AER reported 2 non-fatal errors at "), text
        assert devices(groups, key)["0000:c3:00.0"].healthy
        # No uevent, no period (1 h): only the plugin's own timer can heal it.
        wait_for(stream, lambda g: devices(g, key)["0000:03:00.0"].healthy)
        tree.aer(gpu.syspath, 3, 9)
        announce(trigger)
        groups = wait_for(stream, lambda g: not devices(g, key)["0000:03:00.0"].healthy)
        assert reason(groups, key, "0000:03:00.0").startswith("PCIe AER reported 1 fatal error")
        wait_for(stream, lambda g: devices(g, key)["0000:03:00.0"].healthy)


def test_an_aer_error_on_a_port_above_makes_the_devices_below_unhealthy(
    launch: Launcher, tree: FakeTree
) -> None:
    """A real kernel counts an error a root port detects on its link on the port alone,
    resets the link and fails the recovery of the device below, whose own counts stay
    at zero (tests/kernel/test_kernel_aer.py): the GPU below that port turns unhealthy,
    the GPU on the other socket does not."""
    layout = amd_rocm(tree)
    trigger = pci_uevent_file()
    port = tree.sys / "devices" / "pci0000:00" / "0000:00:01.1"
    launched = launch(COMMAND, env={**os.environ, **tree.env})
    launched.client.set_config(
        preset_config_with("amd", 'recovery_quiet_period = "1s"\n    fingerprint_period = "1h"')
    )
    key = "amd/gpu/instinct"
    with launched.client.fingerprint() as stream:
        assert all(d.healthy for d in devices(stream.next(15), key).values())
        tree.aer(port, 1, 0)
        announce(trigger)
        groups = wait_for(stream, lambda g: not devices(g, key)["0000:03:00.0"].healthy)
        assert reason(groups, key, "0000:03:00.0").startswith(
            "PCIe AER reported 1 fatal error on 0000:00:01.1 (the port above it) at "
        )
        assert devices(groups, key)["0000:c3:00.0"].healthy
        assert layout.functions["0000:03:00.0"].syspath.is_relative_to(port)
        wait_for(stream, lambda g: devices(g, key)["0000:03:00.0"].healthy)


def test_a_degraded_link_when_the_block_asks(launch: Launcher, tree: FakeTree) -> None:
    handle = tree.pci(
        "0000:41:00.0", 0x1AC1, 0x089A, 0x088000, driver="apex",
        link=Link("2.5 GT/s PCIe", 1, "5.0 GT/s PCIe", 1),
    )  # fmt: skip
    tree.pci_node(handle, "apex/apex_0", "apex_0", 120, 0, subsystem="apex")
    trigger = pci_uevent_file()
    launched = launch(COMMAND, env={**os.environ, **tree.env})
    launched.client.set_config(preset_config_with("edgetpu", "", "require_full_link = true"))
    key = "google/edgetpu/edgetpu"
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
        assert reason(groups, key, "0000:41:00.0") == (
            "the PCIe link runs at 2.5 GT/s x1, below its maximum 5 GT/s x1"
        )
        tree.set_attr(handle, "current_link_speed", "5.0 GT/s PCIe")
        announce(trigger)
        wait_for(stream, lambda g: devices(g, key)["0000:41:00.0"].healthy)


def test_a_disabled_function_and_one_without_nodes(launch: Launcher, tree: FakeTree) -> None:
    layout = coral(tree)
    (layout.functions["0000:05:00.0"].syspath / "enable").write_text("0\n")
    launched = launch(COMMAND, env={**os.environ, **tree.env})
    launched.client.set_config(preset_config_with("edgetpu", "", 'nodes = ["apex_1"]'))
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
    key = "google/edgetpu/edgetpu"
    assert reason(groups, key, "0000:05:00.0") == (
        "0000:05:00.0 is bound to apex but not enabled (enable = 0)"
    )
    assert reason(groups, key, "0000:06:00.0") == ""
    tree.set_attr(layout.functions["0000:05:00.0"], "enable", "1")
    launched.client.set_config(preset_config_with("edgetpu", "", 'nodes = ["apex_1"]'))
    with launched.client.fingerprint() as stream:
        groups = wait_for(stream, lambda g: "none of" in reason(g, key, "0000:05:00.0"))
    assert reason(groups, key, "0000:05:00.0") == (
        "none of its device nodes (/dev/apex_0) is one the block's nodes names"
    )


def test_a_bridge_never_brings_the_nodes_of_the_cards_behind_it(
    launch: Launcher, tree: FakeTree
) -> None:
    amd_rocm(tree)
    launched = launch(COMMAND, env={**os.environ, **tree.env})
    launched.client.set_config(
        preset_config_with("amd", "", "", pci='class = "0604"\n        address = "0000:c*"')
    )
    with launched.client.fingerprint() as stream:
        (group,) = stream.next(15)
    assert [(d.id, d.health_description) for d in group.devices] == [
        (address, f"{address} has no device node of its own (bound to pcieport)")
        for address in ("0000:c0:01.1", "0000:c1:00.0", "0000:c2:00.0")
    ]


def test_the_presets_pass_the_conformance_suite(tree: FakeTree, tmp_path: Path) -> None:
    from nomad_device.testing.conformance import SuiteOptions, run_conformance

    for build in (amd_rocm, intel_gpu, habana_gaudi, aws_neuron, alveo, coral):
        build(tree)
    vfio_gpu(tree, audio_driver="vfio-pci")
    agent = tmp_path / "agent.hcl"
    agent.write_text(agent_file(*ALL_PRESETS))
    options = SuiteOptions(
        config_file=agent, env={**os.environ, **tree.env}, plugin_name="nomad-device-generic"
    )
    report = run_conformance(COMMAND, options)
    report.assert_ok(allow_warnings=False)
    assert "11 device(s)" in report.result("device-groups-valid").summary
    assert "the same 11 device ID(s) after a restart" in report.result("stable-ids").summary


# ----------------------------------------------------------------------------- safety


def test_a_companion_others_can_write_is_never_offered(launch: Launcher, tree: FakeTree) -> None:
    """A companion goes through the same rules as every other path (docs/security.md):
    in a directory every user may write, it could be swapped for a link to a disk."""
    amd_rocm(tree)
    shm = tree.dev / "shm"
    shm.mkdir()
    shm.chmod(0o1777)
    tree.node("shm/kfd", "char", 234, 0)
    launched = launch(COMMAND, env={**os.environ, **tree.env})
    launched.client.set_config(preset_config_with("amd", "", 'companions = ["/dev/shm/kfd"]'))
    with launched.client.fingerprint() as stream:
        assert stream.next(15) == []  # a companion it may not have: no device of the block
    (line,) = logged(launched, "/dev/shm/kfd is not offered")
    assert "/dev/shm is writable by every user (mode 1777)" in line


def test_reserve_refuses_a_pci_node_that_changed(launch: Launcher, tree: FakeTree) -> None:
    """No event source and the preset's 30 s period: the snapshot is the one scan. A node
    swapped for a link to another node since then is refused, not granted."""
    from nomad_device.sources import DISABLE_ENV

    layout = amd_rocm(tree)
    launched = launch(COMMAND, env={**os.environ, **tree.env, DISABLE_ENV: "all"})
    launched.client.set_config(preset_config("amd"))
    with launched.client.fingerprint() as stream:
        assert len(devices(stream.next(15), "amd/gpu/instinct")) == 2
    copy = tree.node("copy-of-a-disk", "block", 8, 0)
    render = layout.functions["0000:03:00.0"].nodes[1]
    render.unlink()
    render.symlink_to(os.path.relpath(copy, render.parent))
    with pytest.raises(CallError) as refused:
        launched.client.reserve(["0000:03:00.0"])
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "cannot grant what changed since the last scan: /dev/dri/renderD128" in str(
        refused.value
    )
    assert launched.client.reserve(["0000:c3:00.0"]).devices  # the other one is untouched


def test_a_pci_ids_others_can_write_is_not_read(launch: Launcher, tree: FakeTree) -> None:
    amd_rocm(tree)
    assert tree.ids_file is not None
    tree.ids_file.chmod(0o666)
    launched, group = preset_group(launch, tree, "amd")
    assert "pci_device_name" not in group.attributes
    assert group.attributes["pci_device_id"] == Attribute(0x740F)
    (line,) = logged(launched, "is not read for PCI product names")
    assert "writable by every user (mode 0666)" in line
