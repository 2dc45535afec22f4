"""The nvidia plugin over the real wire, on the fake NVML through the real binding.

Each test launches ``python -m nomad_device.plugins.nvidia`` as Nomad does
(handshake, unix socket, hclog on stderr) with ``LD_LIBRARY_PATH`` pointing
at the fake ``libnvidia-ml.so.1``, and changes the scenario under the live
streams: a GPU falls off the bus, an XID fires, a query starts failing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.fakenvml import (
    A100,
    DOUBLE_BIT_ECC,
    ERROR_GPU_IS_LOST,
    ERROR_UNKNOWN,
    XID,
    gpu,
    gpu_uuid,
    mig,
    mig_uuid,
)
from support.nvidia import (
    Scenarios,
    devices,
    encode,
    fake_tree,
    healthy,
    unhealthy,
    until,
    watching,
)

from nomad_device.host import CallError
from nomad_device.model import Attribute, DeviceSpec

pytest.importorskip("pynvml")

G0, G1 = gpu_uuid(0), gpu_uuid(1)

Start = Any


# --------------------------------------------------------------------- identity


def test_identity_attributes_and_locality_match_the_go_plugin(
    scenario: Scenarios, nvidia: Start
) -> None:
    live = scenario({"driver": "550.54.15", "gpus": [gpu(1), gpu(0), gpu(2, name="Tesla T4")]})
    plugin = nvidia(live.env())
    info = plugin.client.info()
    assert (info.name, info.version) == ("nvidia-gpu", "2.0.0")
    with plugin.client.fingerprint() as stream:
        groups = stream.next(timeout=20)
    assert [g.key for g in groups] == [f"nvidia/gpu/{A100}", "nvidia/gpu/Tesla T4"]
    a100 = groups[0]
    assert [d.id for d in a100.devices] == sorted([gpu_uuid(0), gpu_uuid(1)])
    assert all(d.healthy and d.health_description == "" for d in a100.devices)
    # NVML lists gpu(1) first; each device keeps its own bus ID (gpu(i): bus 0x07 + 0x10 * i),
    # in the form sysfs (and so Nomad's NUMA topology) names it.
    assert {d.id: d.pci_bus_id for d in a100.devices} == {
        gpu_uuid(0): "0000:07:00.0",
        gpu_uuid(1): "0000:17:00.0",
    }
    assert dict(a100.attributes) == {
        "memory": Attribute(40960, "MiB"),
        "power": Attribute(400, "W"),
        "bar1": Attribute(65536, "MiB"),
        "cores_clock": Attribute(1410, "MHz"),
        "memory_clock": Attribute(1215, "MHz"),
        "pci_bandwidth": Attribute(16 * 2048, "MB/s"),
        "driver_version": Attribute("550.54.15"),
        "display_state": Attribute("0"),
        "persistence_mode": Attribute("1"),
    }


def test_unsupported_attributes_are_left_out_as_in_go(scenario: Scenarios, nvidia: Start) -> None:
    bare = gpu(0)
    for key in ("bar1_total", "max_clock_mem", "pcie_gen"):
        bare.pop(key)
    plugin = nvidia(scenario({"gpus": [bare]}).env())
    with plugin.client.fingerprint() as stream:
        (group,) = stream.next(timeout=20)
    assert "bar1" not in group.attributes and "memory_clock" not in group.attributes
    assert group.attributes["pci_bandwidth"] == Attribute(0, "MB/s")  # as Go: no generation, 0
    assert group.devices[0].healthy


def test_ignored_gpu_ids(scenario: Scenarios, nvidia: Start) -> None:
    plugin = nvidia(scenario({"gpus": [gpu(0), gpu(1)]}).env(), ignored_gpu_ids=[G0])
    with plugin.client.fingerprint() as stream:
        assert list(devices(stream.next(timeout=20))) == [G1]
    with pytest.raises(CallError) as refused:
        plugin.client.reserve([G0])
    assert refused.value.code == grpc.StatusCode.NOT_FOUND
    assert f"unknown device IDs: {G0}" in str(refused.value)


def test_disabled_reports_nothing_and_refuses_reservations(
    scenario: Scenarios, nvidia: Start
) -> None:
    plugin = nvidia(scenario({"gpus": [gpu(0)]}).env(), enabled=False)
    with plugin.client.fingerprint() as stream:
        assert stream.next(timeout=20) == []
    with pytest.raises(CallError, match="device is not enabled"):
        plugin.client.reserve([G0])
    assert plugin.wait_for_log(lambda e: "enabled = false" in e.message)


# -------------------------------------------------------------------------- MIG


def test_mig_instances_are_devices_grouped_by_profile(scenario: Scenarios, nvidia: Start) -> None:
    parent = gpu(
        1,
        mig_mode=1,
        mig=[
            mig(1, 1, 0, "1g.5gb", 4864),
            mig(1, 2, 0, "1g.5gb", 4864),
            mig(1, 3, 0, "3g.20gb", 19968),
        ],
    )
    plugin = nvidia(scenario({"gpus": [gpu(0), parent]}).env())
    with plugin.client.fingerprint() as stream:
        groups = {g.name: g for g in stream.next(timeout=20)}
    assert sorted(groups) == [A100, f"{A100} MIG 1g.5gb", f"{A100} MIG 3g.20gb"]
    assert [d.id for d in groups[A100].devices] == [G0]  # the MIG parent is not a device
    small = groups[f"{A100} MIG 1g.5gb"]
    assert [d.id for d in small.devices] == [mig_uuid(1, 1, 0), mig_uuid(1, 2, 0)]
    assert small.attributes["memory"] == Attribute(4864, "MiB")
    assert groups[f"{A100} MIG 3g.20gb"].attributes["memory"] == Attribute(19968, "MiB")
    # The rest comes from the parent GPU, as in the Go plugin.
    assert small.attributes["power"] == Attribute(400, "W")
    assert {d.pci_bus_id for d in small.devices} == {"0000:17:00.0"}


# ----------------------------------------------------------------------- health


def test_an_xid_marks_the_gpu_and_it_recovers_after_the_quiet_period(
    scenario: Scenarios, nvidia: Start
) -> None:
    live = scenario({"gpus": [gpu(0), gpu(1)]})
    # A long poll period: only the event can make detection run in time.
    plugin = nvidia(live.env(), fingerprint_period="1h", recovery_quiet_period="2s")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G1))
        watching(plugin)
        live.fire(1, XID, 48)
        sick = until(stream, unhealthy(G1))
        assert devices(sick)[G1].health_description == (
            "XID 48: double-bit ECC error (NVML XID event); reset the GPU once drained"
        )
        assert devices(sick)[G0].healthy
        recovered = until(stream, healthy(G1))
    assert devices(recovered)[G1].health_description == ""
    assert plugin.wait_for_log(lambda e: e.message == "GPU healthy again")


def test_application_xids_are_skipped_and_the_list_is_configurable(
    scenario: Scenarios, nvidia: Start
) -> None:
    live = scenario({"gpus": [gpu(0), gpu(1)]})
    plugin = nvidia(live.env(), fingerprint_period="1h", recovery_quiet_period="1h")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        watching(plugin)
        live.fire(0, XID, 13)  # graphics engine exception: the application's fault
        live.fire(1, XID, 79)
        sick = until(stream, unhealthy(G1))
    # Events arrive in order, so XID 13 was seen (and skipped) before XID 79.
    assert devices(sick)[G0].healthy
    assert devices(sick)[G1].health_description == (
        "XID 79: GPU has fallen off the bus (NVML XID event); reset the GPU or reboot the node"
    )
    assert plugin.wait_for_log(lambda e: e.message.startswith("XID 13: graphics engine exception"))

    live2 = scenario({"gpus": [gpu(0)]})
    strict = nvidia(live2.env(), ignored_xids=[], fingerprint_period="1h")
    with strict.client.fingerprint() as stream:
        until(stream, healthy(G0))
        watching(strict)
        live2.fire(0, XID, 13)
        sick = until(stream, unhealthy(G0))
    assert devices(sick)[G0].health_description.startswith("XID 13: graphics engine exception")


def test_a_double_bit_ecc_event_marks_the_gpu(scenario: Scenarios, nvidia: Start) -> None:
    live = scenario({"gpus": [gpu(0)]})
    plugin = nvidia(live.env(), fingerprint_period="1h", recovery_quiet_period="1h")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        watching(plugin)
        live.fire(0, DOUBLE_BIT_ECC)
        sick = until(stream, unhealthy(G0))
    assert devices(sick)[G0].health_description == (
        "double-bit ECC error (NVML event); reset the GPU once drained"
    )


def test_an_xid_on_a_mig_instance_marks_that_instance_only(
    scenario: Scenarios, nvidia: Start
) -> None:
    parent = gpu(0, mig_mode=1, mig=[mig(0, 1, 0, "1g.5gb", 4864), mig(0, 2, 0, "1g.5gb", 4864)])
    live = scenario({"gpus": [parent]})
    plugin = nvidia(live.env(), fingerprint_period="1h", recovery_quiet_period="1h")
    first, second = mig_uuid(0, 1, 0), mig_uuid(0, 2, 0)
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(second))
        watching(plugin)
        live.fire(0, XID, 94, gi=2, ci=0)
        sick = until(stream, unhealthy(second))
        assert devices(sick)[first].healthy
        assert devices(sick)[second].health_description.startswith("XID 94: contained ECC error")
        live.fire(0, XID, 62)  # no instance given: the whole GPU
        sick = until(stream, unhealthy(first))
    assert devices(sick)[first].health_description.startswith("XID 62")


def test_a_gpu_that_falls_off_the_bus_stays_listed_unhealthy_and_comes_back(
    scenario: Scenarios, nvidia: Start
) -> None:
    live = scenario({"gpus": [gpu(0), gpu(1)]})
    plugin = nvidia(live.env())
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G1))
        live.set(1, lost=True)
        sick = until(stream, unhealthy(G1))
        assert devices(sick)[G1].health_description == (
            "GPU is lost: nvmlDeviceGetHandleByIndex answered NVML_ERROR_GPU_IS_LOST (15);"
            " check the kernel log for XID 79, then reset the GPU or reboot the node"
        )
        assert devices(sick)[G0].healthy
        # Its group and attributes stay what they were.
        assert sick[0].attributes["memory"] == Attribute(40960, "MiB")
        warned = plugin.wait_for_log(
            lambda e: (
                "NVML cannot open GPU 1: nvmlDeviceGetHandleByIndex answered"
                " NVML_ERROR_GPU_IS_LOST (15)" in e.message
            )
        )
        assert warned and warned[0].level == "warn"
        live.set(1, lost=None)
        back = until(stream, healthy(G1))
    assert devices(back)[G1].health_description == ""


def test_a_failing_query_makes_one_gpu_unhealthy_until_a_fresh_query_succeeds(
    scenario: Scenarios, nvidia: Start
) -> None:
    live = scenario({"gpus": [gpu(0), gpu(1)]})
    plugin = nvidia(live.env())
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        error = {"call": "nvmlDeviceGetTemperature", "target": "gpu0", "code": ERROR_GPU_IS_LOST}
        live.update(errors=[error])
        sick = until(stream, unhealthy(G0))
        # GPU_IS_LOST is NVML's own word that the GPU is gone, whichever query says it.
        assert devices(sick)[G0].health_description.startswith(
            "GPU is lost: nvmlDeviceGetTemperature answered NVML_ERROR_GPU_IS_LOST (15);"
        )
        assert devices(sick)[G1].healthy
        live.update(errors=[])
        until(stream, healthy(G0))


def test_nvml_errors_never_end_the_streams(scenario: Scenarios, nvidia: Start) -> None:
    live = scenario({"gpus": [gpu(0)]})
    plugin = nvidia(live.env(), fingerprint_period="100ms")
    everything = [
        {"call": "nvmlDeviceGetCount_v2", "target": "system", "code": ERROR_UNKNOWN},
        {"call": "nvmlEventSetWait_v2", "target": "system", "code": ERROR_UNKNOWN},
        {"call": "nvmlDeviceGetUtilizationRates", "target": "*", "code": ERROR_UNKNOWN},
    ]
    with plugin.client.fingerprint() as stream, plugin.client.stats(interval=0.1) as stats:
        until(stream, healthy(G0))
        watching(plugin)
        stats.next(timeout=20)
        # The event wait failing first, alone: once NVML fails as a whole, the
        # plugin drops its event set before another wait could report it.
        live.update(errors=everything[1:2])
        assert plugin.wait_for_log(lambda e: e.message.startswith("waiting for NVML events failed"))
        live.update(errors=everything)
        sick = until(stream, unhealthy(G0))
        # NVML failing as a whole: unhealthy once it lasts, not at the first failure.
        assert devices(sick)[G0].health_description.startswith(
            "nvmlDeviceGetCount answered NVML_ERROR_UNKNOWN (999) in 3 scans in a row;"
        )
        live.update(errors=[])
        until(stream, healthy(G0))
        # Both streams are still open and answering.
        (group_stats,) = stats.next(timeout=20)
    assert G0 in group_stats.instance_stats
    assert plugin.client.health() == "SERVING"


def test_pending_page_retirement_and_row_remapping(scenario: Scenarios, nvidia: Start) -> None:
    # Page retirement before Ampere (a Volta here), row remapping from Ampere on.
    live = scenario({"gpus": [gpu(0, arch=70, mig_capable=0), gpu(1)]})
    plugin = nvidia(live.env())
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G1))
        live.set(0, retired_pages_pending=1)
        sick = until(stream, unhealthy(G0))
        assert devices(sick)[G0].health_description == (
            "retired memory pages pending (nvmlDeviceGetRetiredPagesPendingStatus);"
            " reset the GPU once drained"
        )
        live.set(0, retired_pages_pending=0)
        live.set(1, remapped_rows_pending=1)
        sick = until(stream, lambda gs: healthy(G0)(gs) and unhealthy(G1)(gs))
        assert devices(sick)[G1].health_description == (
            "memory row remapping pending (nvmlDeviceGetRemappedRows); reset the GPU once drained"
        )
        live.set(1, remapped_rows_pending=0, remapped_rows_failure=1)
        sick = until(stream, lambda gs: "remapping failed" in devices(gs)[G1].health_description)
        live.set(1, remapped_rows_failure=0)
        until(stream, healthy(G1))


def test_temperature_limit(scenario: Scenarios, nvidia: Start) -> None:
    live = scenario({"gpus": [gpu(0, temperature=70)]})
    plugin = nvidia(live.env(), temperature_limit=85)
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        live.set(0, temperature=91)
        sick = until(stream, unhealthy(G0))
        assert devices(sick)[G0].health_description == (
            "temperature 91 C at or above the limit of 85 C"
            " (nvmlDeviceGetTemperature, temperature_limit); check the cooling"
        )
        live.set(0, temperature=84)
        until(stream, healthy(G0))


# ------------------------------------------------------------ no driver, later


def test_no_driver_library_then_one_installed(
    fake_nvml_lib: Path, tmp_path: Path, scenario: Scenarios, nvidia: Start
) -> None:
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    live = scenario({"gpus": [gpu(0)]}, lib_dir=lib_dir)
    plugin = nvidia(live.env())
    with plugin.client.fingerprint() as stream:
        assert stream.next(timeout=10) == []  # at once, and empty
        line = plugin.wait_for_log(lambda e: e.message.startswith("no NVIDIA GPUs reported"))
        assert "libnvidia-ml.so.1 was not found" in line[0].message
        (lib_dir / "libnvidia-ml.so.1").symlink_to(fake_nvml_lib / "libnvidia-ml.so.1")
        until(stream, healthy(G0))
    reported = [e for e in plugin.logs if e.message.startswith("no NVIDIA GPUs reported")]
    assert len(reported) == 1  # one clear line, not one per scan


def test_driver_not_loaded_then_loaded(scenario: Scenarios, nvidia: Start) -> None:
    live = scenario({"init": 9, "gpus": [gpu(0)]})
    plugin = nvidia(live.env())
    with plugin.client.fingerprint() as stream:
        assert stream.next(timeout=10) == []
        line = plugin.wait_for_log(lambda e: e.message.startswith("no NVIDIA GPUs reported"))
        assert "kernel driver is not loaded" in line[0].message
        assert line[0].level == "warn"
        live.update(init=0)
        until(stream, healthy(G0))


def test_a_node_without_gpus(scenario: Scenarios, nvidia: Start) -> None:
    plugin = nvidia(scenario({"gpus": []}).env())
    with plugin.client.fingerprint() as stream:
        assert stream.next(timeout=10) == []
    assert plugin.wait_for_log(lambda e: e.message.startswith("NVML found no NVIDIA GPUs"))


def test_the_plugin_starts_without_the_binding(scenario: Scenarios, launch: Any) -> None:
    hidden = "import sys; sys.modules['pynvml'] = None\n"
    run = "from nomad_device.plugins.nvidia.__main__ import main; main()"
    plugin = launch([sys.executable, "-c", hidden + run], env=scenario({"gpus": [gpu(0)]}).env())
    plugin.client.set_config(encode({}))
    with plugin.client.fingerprint() as stream:
        assert stream.next(timeout=10) == []
    (line,) = plugin.wait_for_log(lambda e: e.message.startswith("no NVIDIA GPUs reported"))
    assert "pip install 'nomad-device-sdk[nvidia]'" in line.message
    assert line.level == "warn"


# ---------------------------------------------------------------------- reserve


def test_reserve_gives_visible_devices_and_device_nodes(
    scenario: Scenarios, nvidia: Start, tmp_path: Path
) -> None:
    dev, proc = fake_tree(tmp_path)
    parent = gpu(1, mig_mode=1, mig=[mig(1, 1, 0, "1g.5gb", 4864), mig(1, 2, 0, "1g.5gb", 4864)])
    plugin = nvidia(
        scenario({"gpus": [gpu(0), parent]}).env(), dev_root=str(dev), proc_root=str(proc)
    )
    with plugin.client.fingerprint() as stream:
        stream.next(timeout=20)

    whole = plugin.client.reserve([G0])
    assert dict(whole.envs) == {"NVIDIA_VISIBLE_DEVICES": G0}
    assert whole.devices == (
        DeviceSpec("/dev/nvidia0", str(dev / "nvidia0"), "rw"),
        DeviceSpec("/dev/nvidiactl", str(dev / "nvidiactl"), "rw"),
        DeviceSpec("/dev/nvidia-uvm", str(dev / "nvidia-uvm"), "rw"),
    )  # no /dev/nvidia-uvm-tools on this host, so none for the task
    assert whole.mounts == ()

    first, second = mig_uuid(1, 1, 0), mig_uuid(1, 2, 0)
    instances = plugin.client.reserve([second, first])
    assert dict(instances.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{second},{first}"}
    assert [spec.task_path for spec in instances.devices] == [
        "/dev/nvidia1",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
        "/dev/nvidia-caps/nvidia-cap12",
        "/dev/nvidia-caps/nvidia-cap13",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
    ]
    assert instances.devices[1].host_path == str(dev / "nvidia-caps" / "nvidia-cap21")

    assert plugin.client.reserve([]).envs == {}  # what the Go plugin answers
    with pytest.raises(CallError) as refused:
        plugin.client.reserve([G0, "GPU-nope"])
    assert refused.value.code == grpc.StatusCode.NOT_FOUND
    assert "unknown device IDs: GPU-nope" in str(refused.value)


def test_a_mig_instance_without_capability_minors_is_refused_clearly(
    scenario: Scenarios, nvidia: Start, tmp_path: Path
) -> None:
    dev, proc = fake_tree(tmp_path)
    parent = gpu(0, mig_mode=1, mig=[mig(0, 5, 0, "1g.5gb", 4864)])
    plugin = nvidia(scenario({"gpus": [parent]}).env(), dev_root=str(dev), proc_root=str(proc))
    with plugin.client.fingerprint() as stream:
        stream.next(timeout=20)
    with pytest.raises(CallError) as refused:
        plugin.client.reserve([mig_uuid(0, 5, 0)])
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "gpu0/gi5/access is not listed in driver/nvidia-caps/mig-minors" in str(refused.value)
    assert plugin.client.info().name == "nvidia-gpu"  # still serving


# ---------------------------------------------------------------------- sharing


def test_share_offers_each_gpu_n_times_and_reserves_it_once(
    scenario: Scenarios, nvidia: Start, tmp_path: Path
) -> None:
    dev, proc = fake_tree(tmp_path, uvm_tools=True)
    live = scenario({"gpus": [gpu(0), gpu(1)]})
    plugin = nvidia(live.env(), share=3, dev_root=str(dev), proc_root=str(proc))
    with plugin.client.fingerprint() as stream:
        (group,) = stream.next(timeout=20)
        assert [d.id for d in group.devices] == [
            *(f"{G0}::{slot}" for slot in range(3)),
            *(f"{G1}::{slot}" for slot in range(3)),
        ]
        # Every slot carries its GPU's health.
        live.set(1, remapped_rows_pending=1)
        sick = until(stream, unhealthy(f"{G1}::2"))
    assert [d.healthy for d in sick[0].devices] == [True] * 3 + [False] * 3
    both = plugin.client.reserve([f"{G0}::0", f"{G0}::2", f"{G1}::1"])
    assert dict(both.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{G0},{G1}"}
    assert [spec.task_path for spec in both.devices] == [
        "/dev/nvidia0",
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    with pytest.raises(CallError):
        plugin.client.reserve([G0])  # with share = 3 the bare UUID is not an instance


# ------------------------------------------------------------------------ stats


def test_stats_per_gpu_and_mig_instance_in_nvidia_smi_units(
    scenario: Scenarios, nvidia: Start
) -> None:
    parent = gpu(1, mig_mode=1, mig=[mig(1, 1, 0, "1g.5gb", 4864)])
    live = scenario({"gpus": [gpu(0, temperature=44), parent]})
    plugin = nvidia(live.env(), share=2)
    with plugin.client.fingerprint() as stream:
        stream.next(timeout=20)
    with plugin.client.stats(interval=0.2) as stats:
        groups = {g.name: g for g in stats.next(timeout=20)}
    assert sorted(groups) == [A100, f"{A100} MIG 1g.5gb"]
    whole = groups[A100].instance_stats
    assert sorted(whole) == [f"{G0}::0", f"{G0}::1"]
    values = dict(whole[f"{G0}::0"].stats.attributes)

    def shown(name: str) -> tuple[Any, ...]:
        v = values[name]
        number = v.int_numerator if v.int_numerator is not None else v.float_numerator
        denominator = v.int_denominator if v.int_denominator is not None else v.float_denominator
        return (number, denominator, v.unit)

    assert shown("GPU utilization") == (17, None, "%")
    assert shown("Memory utilization") == (4, None, "%")
    assert shown("Encoder utilization") == (0, None, "%")
    assert shown("Decoder utilization") == (2, None, "%")
    assert shown("Memory state") == (1024, 40960, "MiB")
    assert shown("BAR1 buffer state") == (4, 65536, "MiB")
    assert shown("Temperature") == (44, None, "C")
    assert shown("Power usage") == (pytest.approx(56.789), 400.0, "W")
    # Ampere reports no L1/L2 cache locations: left out, not "N/A" (nor 0, as Go shows).
    assert "ECC L1 errors" not in values and "ECC L2 errors" not in values
    assert shown("ECC memory errors") == (3, None, "#")
    assert shown("ECC uncorrected errors") == (0, None, "#")
    assert shown("SM clock") == (210, None, "MHz")
    assert shown("Memory clock") == (1215, None, "MHz")
    assert whole[f"{G0}::0"].summary == values["Memory state"]

    instance = groups[f"{A100} MIG 1g.5gb"].instance_stats[f"{mig_uuid(1, 1, 0)}::1"]
    assert instance.summary.int_numerator == 13 and instance.summary.int_denominator == 4864
    # A MIG device handle gives its memory and nothing per GPU.
    assert sorted(instance.stats.attributes) == ["Memory state"]


def test_stats_keep_flowing_when_a_gpu_is_lost(scenario: Scenarios, nvidia: Start) -> None:
    live = scenario({"gpus": [gpu(0), gpu(1)]})
    plugin = nvidia(live.env())

    def temperature(groups: list[Any], device_id: str) -> Any:
        return groups[0].instance_stats[device_id].stats.attributes["Temperature"]

    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G1))
        with plugin.client.stats(interval=0.1) as stats:
            assert temperature(stats.next(timeout=20), G1).int_numerator == 31
            live.set(1, lost=True)
            until(stream, unhealthy(G1))
            for _ in range(200):  # messages collected before the loss may still be queued
                groups = stats.next(timeout=20)
                if G1 not in groups[0].instance_stats:
                    break
            else:
                pytest.fail("the lost GPU's stats never went away")
    assert temperature(groups, G0).int_numerator == 31
