"""The placement checker against the generic plugin's PCI fingerprint, through the launcher.

Four Instinct MI210s, two per socket (pci_layouts.amd_rocm: the layout and its
sources), on a fake sysfs with two NUMA nodes. The launcher fingerprints the
plugin as Nomad does (``fingerprint --json``: NodeResources.Devices), then
``check --enterprise`` judges jobs against the same plugin, with the same fake
sysfs as the host's topology (``NOMAD_DEVICE_CHECK_SYS_ROOT``, read as Nomad's
client reads ``/sys/bus/pci/devices/*/numa_node``): what the plugin reports as
locality must be what the topology knows, and its attributes and units what
the checker compares.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.fake_tree import FakeTree, require_root
from support.generic import COMMAND, agent_file
from support.pci_layouts import PCI_IDS, amd_rocm

pytestmark = pytest.mark.timeout(240)

GROUP = "amd/gpu/instinct"
ON_SOCKET = {0: ["0000:03:00.0", "0000:06:00.0"], 1: ["0000:c3:00.0", "0000:c6:00.0"]}


def launcher(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("nomad-device-launcher")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "nomad_device.cli"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.fixture
def host(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The fake host's environment (for the plugin and the checker) and the agent file."""
    require_root()
    tree = FakeTree(tmp_path / "root")
    tree.pci_ids(PCI_IDS)
    tree.numa("0-1")
    amd_rocm(tree, per_socket=2)
    agent = tmp_path / "agent.hcl"
    agent.write_text(agent_file("amd"))
    env = {**os.environ, **tree.env, "NO_COLOR": "1", "NOMAD_DEVICE_CHECK_SYS_ROOT": str(tree.sys)}
    return env, agent


def job(tmp_path: Path, count: int, affinity: str = "require", memory: str = "64 GiB") -> Path:
    path = tmp_path / f"job-{count}-{affinity}-{memory.replace(' ', '')}.hcl"
    numa = f'numa {{\n affinity = "{affinity}"\n devices = ["{GROUP}"]\n }}' if affinity else ""
    path.write_text(
        f"""job "train" {{
  group "train" {{
    task "pytorch" {{
      driver = "docker"
      config {{
        image = "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0"
      }}
      resources {{
        cores = 8
        {numa}
        device "{GROUP}" {{
          count = {count}
          constraint {{
            attribute = "${{device.attr.memory}}"
            operator  = ">="
            value     = "{memory}"
          }}
          constraint {{
            attribute = "${{device.attr.pci_bandwidth}}"
            operator  = ">="
            value     = "32 GB/s"
          }}
          constraint {{
            attribute = "${{device.attr.pci_class}}"
            operator  = "regexp"
            value     = "^03"
          }}
        }}
      }}
    }}
  }}
}}
"""
    )
    return path


#: Run as ``python -m``, the plugin has no file named after its block: name the block.
NAME = "nomad-device-generic"


def check(env: dict[str, str], agent: Path, job_file: Path) -> tuple[int, dict[str, Any]]:
    options = ("--json", "--enterprise", "-q", "-c", str(agent), "--plugin-name", NAME)
    result = launcher("check", *options, str(job_file), "--", *COMMAND, env=env)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def picks(report: dict[str, Any]) -> list[tuple[tuple[str, ...], int]]:
    """Each possible outcome's devices and NUMA node, as check reports them."""
    (group,) = report["TaskGroups"]
    (node,) = group["Nodes"]
    out = []
    for outcome in node["Outcomes"]:
        for pick in outcome["Devices"]:
            out.append((tuple(pick["DeviceIDs"]), pick["NumaNode"]))
    return sorted(out)


def test_check_agrees_with_the_fingerprint(host: tuple[dict[str, str], Path]) -> None:
    env, agent = host
    fingerprint = launcher(
        "fingerprint",
        "--json",
        "-q",
        "-c",
        str(agent),
        "--plugin-name",
        NAME,
        "--",
        *COMMAND,
        env=env,
    )
    assert fingerprint.returncode == 0, fingerprint.stderr
    (group,) = json.loads(fingerprint.stdout)  # NodeResources.Devices
    assert f"{group['Vendor']}/{group['Type']}/{group['Name']}" == GROUP
    # Locality is each function's sysfs name, which is a key of the host's topology.
    localities = {i["ID"]: i["Locality"]["PciBusID"] for i in group["Instances"]}
    assert localities == {a: a for s in ON_SOCKET.values() for a in s}
    assert group["Attributes"]["memory"] == {"Int": 65536, "Unit": "MiB"}
    assert group["Attributes"]["pci_bandwidth"] == {"Int": 32768, "Unit": "MB/s"}
    assert group["Attributes"]["pci_class"] == {"String": "038000", "Unit": ""}
    assert "numa_node" not in group["Attributes"]  # two sockets: not the group's


def test_numa_require_takes_the_gpus_of_one_socket(
    host: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, agent = host
    code, report = check(env, agent, job(tmp_path, 2))
    assert code == 0, report
    # Either socket, each with both of its own GPUs, never one of each.
    found = picks(report)
    assert found == [(tuple(ON_SOCKET[0]), 0), (tuple(ON_SOCKET[1]), 1)], found


def test_three_gpus_on_one_socket_do_not_exist(
    host: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, agent = host
    code, report = check(env, agent, job(tmp_path, 3))
    assert code == 1, report
    assert report["TaskGroups"][0]["Nodes"][0]["Outcome"] == "fails"
    # Without the numa block, three of the four are a placement.
    code, report = check(env, agent, job(tmp_path, 3, affinity=""))
    assert code == 0, report


def test_attribute_constraints_in_their_units(
    host: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, agent = host
    code, report = check(env, agent, job(tmp_path, 1, memory="65537 MiB"))
    assert code == 1, report
    text = json.dumps(report)
    assert "memory" in text
    code, report = check(env, agent, job(tmp_path, 1, memory="0.0625 TiB"))
    assert code == 0, report
