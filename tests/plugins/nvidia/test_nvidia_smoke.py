"""The real-GPU smoke script (``scripts/nvidia_smoke.py``), as far as it runs without a GPU.

Its nvidia-smi parsing is checked on documents in the shapes real releases
write (element names that moved between driver 515, 535 and 595; ``N/A``,
deprecations, ``16x``). The whole script then runs end to end against the
fake NVML, with ``fake_smi.py`` as its nvidia-smi (a client of the same fake
library, as the real one is of NVML), a stand-in sysfs and /dev: it passes on
a healthy node, and fails where the plugin would cry wolf or Nomad's NUMA
matching would miss.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support import ROOT, SUPPORT
from support import nvidia_profiles as profiles
from support.nvidia import Scenarios, fake_tree

pytest.importorskip("pynvml")

SCRIPT = ROOT / "scripts" / "nvidia_smoke.py"
FAKE_SMI = SUPPORT / "fake_smi.py"


def smoke_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nvidia_smoke", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["nvidia_smoke"] = module
    spec.loader.exec_module(module)
    return module


def gpu_xml(power: str, display: str = "Disabled", bus: str = "00000000:1E:00.0") -> str:
    return f"""<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>515.105.01</driver_version>
  <gpu id="{bus}">
    <product_name>Tesla T4</product_name>
    <display_mode>{display}</display_mode>
    <persistence_mode>Enabled</persistence_mode>
    <mig_mode><current_mig>N/A</current_mig><pending_mig>N/A</pending_mig></mig_mode>
    <mig_devices>None</mig_devices>
    <uuid>GPU-d37e67a5-0000-0000-0000-99096249601a</uuid>
    <minor_number>3</minor_number>
    <pci>
      <pci_bus_id>{bus}</pci_bus_id>
      <pci_gpu_link_info>
        <pcie_gen><max_link_gen>3</max_link_gen></pcie_gen>
        <link_widths><max_link_width>16x</max_link_width></link_widths>
      </pci_gpu_link_info>
    </pci>
    <fb_memory_usage><total>15360 MiB</total><used>2 MiB</used></fb_memory_usage>
    <bar1_memory_usage><total>256 MiB</total><used>2 MiB</used></bar1_memory_usage>
    <utilization><gpu_util>0 %</gpu_util><memory_util>0 %</memory_util>
      <encoder_util>0 %</encoder_util><decoder_util>N/A</decoder_util></utilization>
    <ecc_errors><volatile><dram_correctable>0</dram_correctable></volatile></ecc_errors>
    <retired_pages><pending_retirement>Yes</pending_retirement></retired_pages>
    <remapped_rows>N/A</remapped_rows>
    <temperature><gpu_temp>40 C</gpu_temp></temperature>
    {power}
    <clocks><sm_clock>585 MHz</sm_clock><mem_clock>5000 MHz</mem_clock></clocks>
    <max_clocks>
      <graphics_clock>1590 MHz</graphics_clock><mem_clock>5001 MHz</mem_clock>
    </max_clocks>
  </gpu>
</nvidia_smi_log>
"""


@pytest.mark.parametrize(
    ("power", "display", "expected"),
    [
        # Driver 515: power_readings, power_draw, power_limit.
        (
            "<power_readings><power_draw>26.78 W</power_draw>"
            "<power_limit>70.00 W</power_limit></power_readings>",
            "Disabled",
            (26.78, 70.0, "0"),
        ),
        # Driver 535: gpu_power_readings, current_power_limit.
        (
            "<gpu_power_readings><power_draw>67.03 W</power_draw>"
            "<current_power_limit>500.00 W</current_power_limit></gpu_power_readings>",
            "Enabled",
            (67.03, 500.0, "1"),
        ),
        # Driver 595: average and instant draw; display mode deprecated.
        (
            "<gpu_power_readings><average_power_draw>139.62 W</average_power_draw>"
            "<instant_power_draw>142.33 W</instant_power_draw>"
            "<current_power_limit>320.00 W</current_power_limit></gpu_power_readings>",
            "Requested functionality has been deprecated",
            (139.62, 320.0, None),
        ),
    ],
)
def test_nvidia_smi_documents_of_every_release_are_read(
    power: str, display: str, expected: tuple[Any, ...]
) -> None:
    smoke = smoke_module()
    driver, (gpu,) = smoke.parse_query(gpu_xml(power, display))
    assert driver == "515.105.01"
    assert (gpu.power_draw, gpu.power_limit, gpu.display) == expected
    assert (gpu.uuid, gpu.name, gpu.minor) == (
        "GPU-d37e67a5-0000-0000-0000-99096249601a",
        "Tesla T4",
        3,
    )
    assert (gpu.memory_total, gpu.bar1_total, gpu.link_gen, gpu.link_width) == (15360, 256, 3, 16)
    assert gpu.utilization["Decoder utilization"] is None  # N/A
    assert gpu.retirement_pending and not gpu.remap_pending
    assert smoke.sysfs_bus_id(gpu.bus_id) == "0000:1e:00.0"
    assert smoke.pci_bandwidth(gpu.link_gen, gpu.link_width) == 16384


def test_mig_uuids_come_from_the_listing() -> None:
    smoke = smoke_module()
    document = (
        gpu_xml("")
        .replace("<current_mig>N/A</current_mig>", "<current_mig>Enabled</current_mig>")
        .replace(
            "<mig_devices>None</mig_devices>",
            "<mig_devices><mig_device><index>0</index>"
            "<fb_memory_usage><total>9856 MiB</total><used>13 MiB</used></fb_memory_usage>"
            "</mig_device></mig_devices>",
        )
    )
    _, gpus = smoke.parse_query(document)
    smoke.add_listing(
        gpus,
        "GPU 0: Tesla T4 (UUID: GPU-d37e67a5-0000-0000-0000-99096249601a)\n"
        "  MIG 1g.10gb     Device  0: (UUID: MIG-4b9e1c2a-0000-5000-8000-000000000000)\n",
    )
    assert smoke.expected_devices(gpus) == {
        "MIG-4b9e1c2a-0000-5000-8000-000000000000": (
            gpus[0],
            gpus[0].migs[0],
            "Tesla T4 MIG 1g.10gb",
        )
    }


def run_smoke(
    live: Any, tmp_path: Path, *extra: str, sysfs_ids: tuple[str, ...] = (), **config: Any
) -> tuple[int, dict[str, Any]]:
    """Run the script as an operator would; its exit status and JSON report."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_SMI} "$@"\n')
    smi.chmod(0o755)
    sysfs = tmp_path / "sys"
    for index, bus_id in enumerate(sysfs_ids):
        node = sysfs / "bus" / "pci" / "devices" / bus_id
        node.mkdir(parents=True)
        (node / "numa_node").write_text(f"{index}\n")
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--json",
            "--nvidia-smi",
            str(smi),
            "--sysfs",
            str(sysfs),
            "--config-json",
            json.dumps(config),
            *extra,
        ],
        env=live.env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return result.returncode, json.loads(result.stdout)


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {check["name"]: check["status"] for check in report["checks"]}


def test_the_smoke_script_passes_on_a_healthy_node(scenario: Scenarios, tmp_path: Path) -> None:
    live = scenario(profiles.h200().scenario)
    dev, proc = fake_tree(tmp_path / "tree")
    code, report = run_smoke(
        live,
        tmp_path,
        sysfs_ids=("0000:1b:00.0", "0000:9a:00.0"),
        dev_root=str(dev),
        proc_root=str(proc),
    )
    found = statuses(report)
    assert code == 0, [c for c in report["checks"] if c["status"] != "pass"]
    assert report["ok"] and found["conformance"] == "pass"
    for device_id in profiles.h200().devices:
        assert found[f"health: {device_id}"] == "pass"
        assert found[f"numa: {device_id}"] == "pass"
        assert found[f"stats: {device_id} Temperature"] == "pass"
        assert found[f"reserve: {device_id} GPU node"] == "pass"
    assert found["attribute: NVIDIA H200 memory"] == "pass"
    assert found["stats: devices"] == "pass"
    assert report["seconds"] < 240


def test_the_smoke_script_checks_mig_devices(scenario: Scenarios, tmp_path: Path) -> None:
    profile = profiles.h100_mig()
    live = scenario(profile.scenario)
    minors = {"gpu0/gi9/access": 30, "gpu0/gi9/ci0/access": 31, "gpu0/gi10/access": 40}
    minors |= {"gpu0/gi10/ci0/access": 41, "gpu0/gi2/access": 50, "gpu0/gi2/ci0/access": 51}
    dev, proc = fake_tree(tmp_path / "tree", caps=(30, 31, 40, 41, 50, 51), minors=minors)
    code, report = run_smoke(
        live,
        tmp_path,
        "--skip-conformance",
        sysfs_ids=("0000:4e:00.0",),
        dev_root=str(dev),
        proc_root=str(proc),
    )
    assert code == 0, [c for c in report["checks"] if c["status"] != "pass"]
    found = statuses(report)
    for device_id in profile.devices:
        assert found[f"stats: {device_id} memory total"] == "pass"
        assert found[f"fingerprint: {device_id} group"] == "pass"
    assert found["reserve: node /dev/nvidia-caps/nvidia-cap51"] == "pass"


def test_the_smoke_script_fails_a_plugin_that_cries_wolf_or_misses_numa(
    scenario: Scenarios, tmp_path: Path
) -> None:
    live = scenario(profiles.a100().scenario)
    dev, proc = fake_tree(tmp_path / "tree")
    # A temperature limit below the GPU's 31 C: the plugin reports it unhealthy,
    # where nvidia-smi finds nothing wrong. And sysfs lacks the GPU's bus ID.
    code, report = run_smoke(
        live,
        tmp_path,
        "--skip-conformance",
        sysfs_ids=("0000:b7:00.1",),
        dev_root=str(dev),
        proc_root=str(proc),
        temperature_limit=20,
    )
    assert code == 1 and not report["ok"]
    failed = {c["name"]: c["detail"] for c in report["checks"] if c["status"] == "fail"}
    (device_id,) = profiles.a100().devices
    assert failed[f"health: {device_id}"].startswith(
        "reported unhealthy on a GPU nvidia-smi finds fine: temperature 31 C"
    )
    assert "not found in sysfs" in failed[f"numa: {device_id}"]
