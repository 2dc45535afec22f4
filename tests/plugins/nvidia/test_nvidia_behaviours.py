"""What real NVML does that a naive plugin gets wrong, one test each, over the real wire.

Each test names the behaviour of real NVML (or of the Go plugin's users'
expectations) it pins down; ``fake_nvml.c`` models the behaviour with its
source. Every test here failed against the plugin as it was before issue 19.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from support import nvidia_profiles as profiles
from support.fakenvml import (
    ERROR_DEPRECATED,
    ERROR_FUNCTION_NOT_FOUND,
    ERROR_NO_PERMISSION,
    ERROR_NOT_READY,
    ERROR_RESET_REQUIRED,
    ERROR_UNKNOWN,
    GPU_RECOVERY_ACTION,
    GPU_UNAVAILABLE,
    MIG_CONFIG_CHANGE,
    XID,
    gpu,
    gpu_uuid,
    mig,
    mig_uuid,
)
from support.nvidia import (
    PLUGIN,
    Scenarios,
    devices,
    fake_tree,
    healthy,
    unhealthy,
    until,
    watching,
)

from nomad_device.host import CallError
from nomad_device.model import Attribute

pytest.importorskip("pynvml")

G0, G1 = gpu_uuid(0), gpu_uuid(1)
Start = Any


def never_unhealthy(stream: Any, seconds: float) -> list[Any]:
    """Every message for ``seconds`` has every device healthy; the last one (stream closed)."""
    import time

    groups = list(stream.next(timeout=20))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        assert all(d.healthy for g in groups for d in g.devices), groups
        try:
            groups = list(stream.next(timeout=left))
        except TimeoutError:
            break
    assert all(d.healthy for g in groups for d in g.devices), groups
    return groups


def errors_logged(plugin: Any) -> list[str]:
    return [e.message for e in plugin.logs if e.level == "error"]


# ------------------------------------------------------------------ starting up


def test_a_node_without_gpus_is_found_empty_not_an_error(
    scenario: Scenarios, nvidia: Start
) -> None:
    """nvmlInit without NVML_INIT_FLAG_NO_GPUS fails with GPU_NOT_FOUND (28) there."""
    plugin = nvidia(scenario(profiles.no_gpu().scenario).env())
    with plugin.client.fingerprint() as stream:
        assert stream.next(timeout=10) == []
    (line,) = plugin.wait_for_log(lambda e: e.message.startswith("NVML found no NVIDIA GPUs"))
    assert line.level == "info"
    assert not errors_logged(plugin)


def test_a_driver_upgrade_under_the_plugin_is_survived(scenario: Scenarios, nvidia: Start) -> None:
    """LIB_RM_VERSION_MISMATCH persists until the library is loaded afresh."""
    live = scenario({"driver": "550.54.15", "gpus": [gpu(0)]})
    plugin = nvidia(live.env())
    with plugin.client.fingerprint() as stream:
        first = until(stream, healthy(G0))
        assert first[0].attributes["driver_version"] == Attribute("550.54.15")
        live.update(driver="560.35.03")  # the new library on disk, the new module loaded
        upgraded = until(
            stream, lambda gs: gs[0].attributes["driver_version"] == Attribute("560.35.03")
        )
    assert devices(upgraded)[G0].healthy
    assert plugin.wait_for_log(lambda e: "loaded a fresh copy of" in e.message)


def test_a_driver_upgraded_without_a_reboot_says_what_to_do(
    scenario: Scenarios, nvidia: Start
) -> None:
    plugin = nvidia(scenario(profiles.mismatch().scenario).env())
    with plugin.client.fingerprint() as stream:
        assert stream.next(timeout=10) == []
    (line,) = plugin.wait_for_log(lambda e: "versions differ" in e.message)
    assert "NVML_ERROR_LIB_RM_VERSION_MISMATCH (18)" in line.message
    assert "a driver upgrade needs a reboot" in line.message


# ------------------------------------------------------------------ never cry wolf


def test_an_unprivileged_plugin_keeps_mig_instances_healthy(
    scenario: Scenarios, nvidia: Start
) -> None:
    """NO_PERMISSION: a MIG parent's memory totals need privilege."""
    profile = profiles.h100_mig(root=False)
    plugin = nvidia(scenario(profile.scenario).env())
    with plugin.client.fingerprint() as stream:
        groups = never_unhealthy(stream, 1.5)
    assert set(devices(groups)) == set(profile.devices)
    (line,) = plugin.wait_for_log(
        lambda e: "nvmlDeviceGetMemoryInfo answered NVML_ERROR_NO_PERMISSION (4)" in e.message
    )
    assert line.level == "info" and "left out" in line.message


def test_optional_queries_that_fail_leave_values_out_and_are_logged_once(
    scenario: Scenarios, nvidia: Start
) -> None:
    refusals = [
        ("nvmlDeviceGetTemperature", ERROR_NOT_READY),
        ("nvmlDeviceGetDisplayMode", ERROR_DEPRECATED),
        ("nvmlDeviceGetBAR1MemoryInfo", ERROR_UNKNOWN),
        ("nvmlDeviceGetPowerManagementLimit", ERROR_FUNCTION_NOT_FOUND),
        ("nvmlDeviceGetRemappedRows", ERROR_NO_PERMISSION),
    ]
    errors = [{"call": call, "target": "gpu0", "code": code} for call, code in refusals]
    plugin = nvidia(scenario({"gpus": [gpu(0)], "errors": errors}).env(), temperature_limit=80)
    with plugin.client.fingerprint() as stream:
        groups = never_unhealthy(stream, 1.5)  # seven scans at least
    attributes = groups[0].attributes
    assert "bar1" not in attributes and "display_state" not in attributes
    assert attributes["power"] == Attribute(0, "W")  # as the Go plugin: no limit, 0 W
    assert attributes["memory"] == Attribute(40960, "MiB")
    lines = [e for e in plugin.logs if "left out" in e.message]
    assert len(lines) == 2, [e.message for e in lines]  # one for the absent, one for the others
    absent = next(e for e in lines if e.level == "info")
    assert "nvmlDeviceGetDisplayMode answered NVML_ERROR_DEPRECATED (26)" in absent.message
    transient = next(e for e in lines if e.level == "warn")
    assert "nvmlDeviceGetTemperature answered NVML_ERROR_NOT_READY (27)" in transient.message
    assert "nvmlDeviceGetBAR1MemoryInfo answered NVML_ERROR_UNKNOWN (999)" in transient.message


def test_reset_required_is_a_fault_that_says_what_to_do(scenario: Scenarios, nvidia: Start) -> None:
    live = scenario({"gpus": [gpu(0)]})
    plugin = nvidia(live.env())
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        error = {
            "call": "nvmlDeviceGetRemappedRows",
            "target": "gpu0",
            "code": ERROR_RESET_REQUIRED,
        }
        live.update(errors=[error])
        sick = until(stream, unhealthy(G0))
    assert devices(sick)[G0].health_description == (
        "GPU needs a reset: nvmlDeviceGetRemappedRows answered NVML_ERROR_RESET_REQUIRED (16);"
        " reset it (nvidia-smi -r) once no task uses it"
    )


def test_only_not_supported_memory_means_an_integrated_gpu(
    scenario: Scenarios, nvidia: Start
) -> None:
    """FUNCTION_NOT_FOUND (an older driver) is not the iGPU's NOT_SUPPORTED."""
    old_driver = {"call": "nvmlDeviceGetMemoryInfo", "target": "gpu1", "code": 13}
    igpu = profiles.integrated().scenario["gpus"][0]
    live = scenario({"gpus": [igpu, gpu(1)], "errors": [old_driver]})
    plugin = nvidia(live.env())
    with plugin.client.fingerprint() as stream:
        groups = {g.name: g for g in until(stream, healthy(G1))}
    system_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
    assert groups[profiles.ORIN].attributes["memory"] == Attribute(system_mib, "MiB")
    assert "memory" not in groups["NVIDIA A100-SXM4-40GB"].attributes


def test_identity_queries_make_a_gpu_unhealthy_only_when_failing_persists(
    scenario: Scenarios, nvidia: Start
) -> None:
    hiccup = {"call": "nvmlDeviceGetName", "target": "gpu0", "code": ERROR_UNKNOWN, "times": 2}
    live = scenario({"gpus": [gpu(0)], "errors": [hiccup]})
    plugin = nvidia(live.env())
    with plugin.client.fingerprint() as stream:
        groups = never_unhealthy(stream, 1.5)
    assert groups[0].name == "NVIDIA A100-SXM4-40GB"
    live.update(errors=[{**hiccup, "times": 0}])
    with plugin.client.fingerprint() as stream:
        sick = until(stream, unhealthy(G0))
        assert devices(sick)[G0].health_description.startswith(
            "nvmlDeviceGetName answered NVML_ERROR_UNKNOWN (999) in 3 scans in a row;"
        )
        assert sick[0].name == "NVIDIA A100-SXM4-40GB"  # its last known group meanwhile
        live.update(errors=[])
        until(stream, healthy(G0))


# ------------------------------------------------------------------------ events


def test_event_types_are_registered_one_by_one(scenario: Scenarios, nvidia: Start) -> None:
    """nvmlDeviceRegisterEvents is all or nothing: with ECC off, ECC bits would sink XIDs."""
    live = scenario({"gpus": [gpu(0, ecc_mode=0)]})
    plugin = nvidia(live.env(), fingerprint_period="1h", recovery_quiet_period="1h")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        watching(plugin)
        live.fire(0, XID, 48)
        sick = until(stream, unhealthy(G0))
    assert devices(sick)[G0].health_description.startswith("XID 48: double-bit ECC error")
    (line,) = plugin.wait_for_log(lambda e: e.message.startswith("NVML events this GPU cannot"))
    assert (
        "double-bit ECC (nvmlDeviceRegisterEvents answered NVML_ERROR_NOT_SUPPORTED (3))"
        in line.message
    )


def test_ecc_errors_are_polled_where_their_events_cannot_be_watched(
    scenario: Scenarios, nvidia: Start
) -> None:
    no_ecc_events = gpu(0, supported_events=XID)
    live = scenario({"gpus": [no_ecc_events]})
    plugin = nvidia(live.env(), recovery_quiet_period="1h")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        live.set(0, ecc_uncorrected_total=3)
        sick = until(stream, unhealthy(G0))
    assert devices(sick)[G0].health_description.startswith(
        "uncorrectable ECC errors rose from 0 to 3 (nvmlDeviceGetTotalEccErrors)"
    )


def test_the_gpu_unavailable_event_marks_the_gpu(scenario: Scenarios, nvidia: Start) -> None:
    live = scenario(profiles.h200().scenario)  # driver 580: the event exists
    plugin = nvidia(live.env(), fingerprint_period="1h", recovery_quiet_period="1h")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        watching(plugin)
        live.fire(1, GPU_UNAVAILABLE)
        sick = until(stream, unhealthy(G1))
    assert devices(sick)[G0].healthy
    assert devices(sick)[G1].health_description.startswith("GPU unavailable (NVML event)")


def test_the_recovery_action_nvml_asks_for_is_shown_while_it_lasts(
    scenario: Scenarios, nvidia: Start
) -> None:
    live = scenario(profiles.h200().scenario)
    plugin = nvidia(live.env(), fingerprint_period="1h")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        watching(plugin)
        live.set(0, recovery_action=2)
        live.fire(0, GPU_RECOVERY_ACTION)
        sick = until(stream, unhealthy(G0))
        assert devices(sick)[G0].health_description == (
            "NVML asks to reboot the node (nvmlDeviceGetFieldValues: GPU_RECOVERY_ACTION = 2)"
        )
        live.set(0, recovery_action=0)
        live.fire(0, GPU_RECOVERY_ACTION)
        until(stream, healthy(G0))


def test_an_xid_of_a_gpu_instance_marks_that_instance_only(
    scenario: Scenarios, nvidia: Start
) -> None:
    """An XID attributable to a GPU instance but no compute instance has ci 0xFFFFFFFF."""
    parent = gpu(
        0,
        mig_mode=1,
        mig=[
            mig(0, 1, 0, "1g.5gb", 4864),
            mig(0, 2, 0, "2c.3g.20gb", 9984),
            mig(0, 2, 1, "1c.3g.20gb", 9984),
        ],
    )
    live = scenario({"gpus": [parent]})
    plugin = nvidia(live.env(), fingerprint_period="1h", recovery_quiet_period="1h")
    one, two_a, two_b = mig_uuid(0, 1, 0), mig_uuid(0, 2, 0), mig_uuid(0, 2, 1)
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(one))
        watching(plugin)
        live.fire(0, XID, 95, gi=2)
        sick = until(stream, lambda gs: unhealthy(two_a)(gs) and unhealthy(two_b)(gs))
    assert devices(sick)[one].healthy


def test_a_lost_gpu_in_the_event_set_does_not_stop_events_of_the_others(
    scenario: Scenarios, nvidia: Start
) -> None:
    """nvmlEventSetWait answers GPU_IS_LOST while a GPU of the set is off the bus."""
    live = scenario({"gpus": [gpu(0), gpu(1)]})
    plugin = nvidia(live.env(), fingerprint_period="1h", recovery_quiet_period="1h")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G1))
        watching(plugin)
        live.set(1, lost=1)
        until(stream, unhealthy(G1))  # found by the rescan the failed wait asked for
        assert plugin.wait_for_log(
            lambda e: "NVML_ERROR_GPU_IS_LOST" in e.message and e.level == "warn"
        )
        assert plugin.wait_for_log(lambda e: e.message == "watching NVML events on 1 GPU(s)", 30)
        live.fire(0, XID, 79)
        until(stream, unhealthy(G0))
    assert not errors_logged(plugin)


def test_nvml_is_never_shut_down_under_an_event_wait(scenario: Scenarios, nvidia: Start) -> None:
    """nvmlShutdown while another thread waits is undefined: the fake aborts on it."""
    live = scenario({"gpus": [gpu(0)]})
    plugin = nvidia(live.env(), fingerprint_period="100ms")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        watching(plugin)
        # NVML failing as a whole makes the plugin start it over: shut down, init.
        live.update(errors=[{"call": "nvmlDeviceGetCount_v2", "target": "system", "code": 999}])
        assert plugin.wait_for_log(lambda e: "nvmlDeviceGetCount answered" in e.message)
        live.update(errors=[])
        # Events are watched again on the restarted NVML.
        again = plugin.wait_for_log(
            lambda e: e.message.startswith("watching NVML events"), timeout=30, count=2
        )
        assert len(again) == 2, plugin.messages()
        live.fire(0, XID, 79)
        until(stream, unhealthy(G0))
    result = plugin.client.kill()
    assert (result.outcome, result.returncode) == ("graceful", 0)
    assert not [m for m in plugin.messages() if m.startswith("fake NVML:")]


#: Drives the plugin's NVML layer in a child (the fake loads through LD_LIBRARY_PATH):
#: one command per stdin line, one JSON answer per stdout line.
_NVML_DRIVER = """
import json, sys
from nomad_device.plugins.nvidia.nvml import Nvml, Unavailable
nvml, uuids = Nvml(), []
for line in sys.stdin:
    if line.strip() == "scan":
        scan = nvml.scan()
        uuids = uuids or [g.uuid for g in scan.gpus]
        answer = "ok" if scan.unavailable is None else "unavailable"
    else:
        result = nvml.subscribe(uuids)
        answer = (
            result
            if result is None
            else result.kind
            if isinstance(result, Unavailable)
            else [c.uuid for c in result.coverage if c.watched]
        )
    print(json.dumps(answer), flush=True)
"""


def test_events_are_not_subscribed_between_an_nvml_restart_and_its_scan(
    scenario: Scenarios,
) -> None:
    """After NVML fails as a whole it is shut down, and its handles with it. A set
    made before the next scan registered no GPU while keyed as current, so the
    plugin's XIDs were lost for good (seen as a flaky
    test_nvml_is_never_shut_down_under_an_event_wait on a loaded machine)."""
    live = scenario({"gpus": [gpu(0)]})
    child = subprocess.Popen(
        [sys.executable, "-c", _NVML_DRIVER],
        env=live.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None

    def ask(command: str) -> Any:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(command + "\n")
        child.stdin.flush()
        return json.loads(child.stdout.readline())

    try:
        assert ask("scan") == "ok"
        assert ask("subscribe") == [gpu_uuid(0)]
        live.update(errors=[{"call": "nvmlDeviceGetCount_v2", "target": "system", "code": 999}])
        assert ask("scan") == "unavailable"
        assert ask("subscribe") is None  # not a set that watches nothing
        live.update(errors=[])
        assert ask("subscribe") is None  # still not scanned
        assert ask("scan") == "ok"
        assert ask("subscribe") == [gpu_uuid(0)]
    finally:
        child.stdin.close()
        child.wait(30)
    assert child.returncode == 0


def test_the_plugin_frees_its_event_set_and_nvml_when_it_stops(
    scenario: Scenarios, nvidia: Start
) -> None:
    live = scenario({"gpus": [gpu(0)]})
    plugin = nvidia(live.env())
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        watching(plugin)
        result = plugin.client.kill()  # Shutdown while a wait runs
    assert (result.outcome, result.returncode) == ("graceful", 0)
    assert not [m for m in plugin.messages() if m.startswith("fake NVML:")]


# ------------------------------------------------------------------- MIG and NUMA


def test_locality_bus_ids_are_in_the_form_nomad_compares_with_sysfs(
    scenario: Scenarios, nvidia: Start
) -> None:
    """NVML writes bus IDs in upper case; sysfs, and so Nomad's topology, in lower case."""
    plugin = nvidia(scenario(profiles.h200().scenario).env())
    with plugin.client.fingerprint() as stream:
        found = devices(until(stream, healthy(G1)))
    # What /sys/bus/pci/devices lists on such a node, and Nomad's equalBusID.
    sysfs = {"0000:1b:00.0": 0, "0000:9a:00.0": 1}

    def equal_bus_id(a: str, b: str) -> bool:
        return a == b or a.lstrip("0") == b.lstrip("0")

    def numa_node(bus_id: str | None) -> int | None:
        return next((n for s, n in sysfs.items() if bus_id and equal_bus_id(s, bus_id)), None)

    assert {device_id: numa_node(d.pci_bus_id) for device_id, d in found.items()} == {G0: 0, G1: 1}
    assert found[G1].pci_bus_id == "0000:9a:00.0"


def test_stats_never_read_a_reused_mig_handle_as_the_old_instance(
    scenario: Scenarios, nvidia: Start
) -> None:
    """nvml.h: MIG handles "may be reused and their properties can change"."""
    first, second = mig(0, 1, 0, "1g.5gb", 4864), mig(0, 2, 0, "3g.20gb", 19968)
    parent = gpu(0, mig_mode=1, mig=[first], supported_events=XID)  # no MIG-change events
    live = scenario({"gpus": [parent]})
    plugin = nvidia(live.env(), fingerprint_period="1h")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(mig_uuid(0, 1, 0)))
        with plugin.client.stats(interval=0.1) as stats:
            stats.next(timeout=20)
            live.set_migs(0, [second])  # slot 0's handle now names another instance
            regrouped = until(stream, healthy(mig_uuid(0, 2, 0)))
            for _ in range(20):
                for group in stats.next(timeout=20):
                    for instance_id, values in group.instance_stats.items():
                        summary = values.summary
                        assert summary is not None
                        memory = 4864 if instance_id == mig_uuid(0, 1, 0) else 19968
                        assert summary.int_denominator == memory, instance_id
    assert set(devices(regrouped)) == {mig_uuid(0, 2, 0)}
    assert plugin.wait_for_log(lambda e: e.message.startswith("MIG devices reconfigured"))


def test_mig_enabled_without_instances_is_said(scenario: Scenarios, nvidia: Start) -> None:
    plugin = nvidia(scenario({"gpus": [gpu(0, mig_mode=1, mig=[])]}).env())
    with plugin.client.fingerprint() as stream:
        assert stream.next(timeout=20) == []
    assert plugin.wait_for_log(lambda e: "has no MIG devices to offer" in e.message)


def _two_instances(scenario: Scenarios) -> Any:
    parent = gpu(1, mig_mode=1, mig=[mig(1, 1, 0, "1g.5gb", 4864), mig(1, 2, 0, "1g.5gb", 4864)])
    return scenario({"gpus": [gpu(0), parent]})


@pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true", reason="mknod needs root")
def test_missing_mig_capability_nodes_are_made_as_nvidia_modprobe_would(
    scenario: Scenarios, nvidia: Start, tmp_path: Path
) -> None:
    dev, proc = fake_tree(tmp_path, caps=(12, 13), caps_major=511)
    plugin = nvidia(_two_instances(scenario).env(), dev_root=str(dev), proc_root=str(proc))
    with plugin.client.fingerprint() as stream:
        stream.next(timeout=20)
    reserved = plugin.client.reserve([mig_uuid(1, 2, 0)])
    caps = [spec for spec in reserved.devices if "nvidia-caps" in spec.task_path]
    assert [spec.task_path for spec in caps] == [
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
    for spec, minor in zip(caps, (21, 22), strict=True):
        made = os.stat(spec.host_path)
        assert stat.S_ISCHR(made.st_mode)
        assert (os.major(made.st_rdev), os.minor(made.st_rdev)) == (511, minor)
        assert stat.S_IMODE(made.st_mode) == 0o444  # DeviceFileMode: 292
        assert (made.st_uid, made.st_gid) == (0, 0)


def test_missing_nodes_that_cannot_be_made_are_refused_with_the_fix(
    scenario: Scenarios, nvidia: Start, tmp_path: Path
) -> None:
    dev, proc = fake_tree(tmp_path, caps=(12, 13))  # no nvidia-caps in /proc/devices
    plugin = nvidia(_two_instances(scenario).env(), dev_root=str(dev), proc_root=str(proc))
    with plugin.client.fingerprint() as stream:
        stream.next(timeout=20)
    assert plugin.client.reserve([mig_uuid(1, 1, 0)]).devices  # its nodes exist
    with pytest.raises(CallError) as refused:
        plugin.client.reserve([mig_uuid(1, 2, 0)])
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert (
        f"{dev}/nvidia-caps/nvidia-cap21 does not exist and cannot be made: no nvidia-caps in"
        " /proc/devices; run nvidia-modprobe -f"
        " /proc/driver/nvidia/capabilities/gpu1/mig/gi2/access"
    ) in refused.value.details
    (dev / "nvidia0").unlink()
    with pytest.raises(CallError) as refused:
        plugin.client.reserve([G0])
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert f"{dev}/nvidia0 does not exist; create it with nvidia-modprobe -c 0" in (
        refused.value.details
    )


# ---------------------------------------------------------------- review findings


def test_a_quiet_period_shorter_than_the_scan_delay_does_not_wait_a_period(
    scenario: Scenarios, nvidia: Start
) -> None:
    live = scenario({"gpus": [gpu(0)]})
    plugin = nvidia(live.env(), fingerprint_period="1h", recovery_quiet_period="0s")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G0))
        watching(plugin)
        live.fire(0, XID, 79)
        until(stream, unhealthy(G0))
        until(stream, healthy(G0), timeout=10)  # about a second later, not an hour


def test_a_mig_change_event_rescans_at_once(scenario: Scenarios, nvidia: Start) -> None:
    parent = gpu(0, mig_mode=1, mig=[mig(0, 1, 0, "1g.5gb", 4864)])
    live = scenario({"gpus": [parent]})
    plugin = nvidia(live.env(), fingerprint_period="1h")
    with plugin.client.fingerprint() as stream:
        until(stream, healthy(mig_uuid(0, 1, 0)))
        watching(plugin)
        live.set_migs(0, [None, mig(0, 2, 0, "3g.20gb", 19968)])
        live.fire(0, MIG_CONFIG_CHANGE)
        regrouped = until(stream, healthy(mig_uuid(0, 2, 0)))
    assert set(devices(regrouped)) == {mig_uuid(0, 2, 0)}


NUMA_JOB = """\
job "train" {
  datacenters = ["dc1"]
  group "g" {
    task "main" {
      resources {
        cores = 4
        device "nvidia/gpu/NVIDIA H200" { count = %(count)d }
        numa {
          affinity = "require"
          devices  = ["nvidia/gpu/NVIDIA H200"]
        }
      }
    }
  }
}
"""


def test_numa_require_places_with_the_placement_checker(
    scenario: Scenarios, tmp_path: Path
) -> None:
    """Nomad Enterprise binds a device to a NUMA node only through its bus ID in sysfs's form."""
    live = scenario(profiles.h200().scenario)  # GPUs at 1b (NUMA node 0) and 9a (node 1)
    sysfs = tmp_path / "sys"
    (sysfs / "devices/system/node").mkdir(parents=True)
    (sysfs / "devices/system/node/online").write_text("0-1\n")
    for bus_id, node in (("0000:1b:00.0", 0), ("0000:9a:00.0", 1)):
        (sysfs / "bus/pci/devices" / bus_id).mkdir(parents=True)
        (sysfs / "bus/pci/devices" / bus_id / "numa_node").write_text(f"{node}\n")
    launcher = str(Path(sys.executable).with_name("nomad-device-launcher"))
    env = live.env(NOMAD_DEVICE_CHECK_SYS_ROOT=str(sysfs))
    outcomes = {}
    for count in (1, 2):
        job = tmp_path / f"job{count}.hcl"
        job.write_text(NUMA_JOB % {"count": count})
        result = subprocess.run(
            [launcher, "check", "--json", "--enterprise", str(job), "--", *PLUGIN],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        entry = json.loads(result.stdout)["TaskGroups"][0]["Nodes"][0]
        outcomes[count] = (result.returncode, entry["Outcome"])
    # One GPU: local to whichever NUMA node is tried. Two: never on one node.
    assert outcomes == {1: (0, "places"), 2: (1, "fails")}


def test_a_driver_without_event_waits_is_said_once_and_polled(
    scenario: Scenarios, nvidia: Start, fake_nvml_pre_r450_lib: Path
) -> None:
    """Drivers before R450 lack nvmlEventSetWait_v2, the only wait the binding calls:
    it answers FUNCTION_NOT_FOUND. That is a fact about the node, not a failure to
    retry: one warning, then detection's polling finds what events would have."""
    live = scenario({"gpus": [gpu(0), gpu(1)]}, lib_dir=fake_nvml_pre_r450_lib)
    plugin = nvidia(live.env())

    def said(e: Any) -> bool:
        return e.message.startswith("cannot watch NVML events") and e.level == "warn"

    with plugin.client.fingerprint() as stream:
        until(stream, healthy(G1))
        notice = plugin.wait_for_log(said, 30)
        assert notice, plugin.messages()
        assert "nvmlEventSetWait answered NVML_ERROR_FUNCTION_NOT_FOUND" in notice[0].message
        assert "R450" in notice[0].message
        live.set(1, lost=1)
        until(stream, unhealthy(G1))  # found by polling: no event could say it
        live.set(1, lost=None)
        live.update(gpus=[gpu(0)])  # the GPUs change: the plugin tries events again
        until(stream, lambda groups: G1 not in devices(groups))
    assert len([e for e in plugin.logs if said(e)]) == 1, plugin.messages()
    assert not errors_logged(plugin)
    assert not [m for m in plugin.messages() if m.startswith("watching NVML events")]
