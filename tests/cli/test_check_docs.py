"""The worked ``check`` session in docs/launcher.md is real output: replay it and compare."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from support import ROOT
from support.launcher import cli_env, run_cli

DOC = (ROOT / "docs" / "launcher.md").read_text()
EXAMPLE = str(Path(sys.executable).with_name("nomad-device-example"))


def _block_after(command: str) -> str:
    """The output the doc shows after ``$ <command>``, up to the next prompt or fence."""
    at = DOC.index(f"$ {command}\n") + len(command) + 3
    rest = DOC[at:]
    end = re.search(r"^(\$ |```)", rest, re.MULTILINE)
    assert end is not None
    return rest[: end.start()]


def _job(name: str) -> str:
    """The job file the doc prints with ``cat``."""
    return _block_after(f"cat {name}")


def test_plugin_session_matches_the_doc(tmp_path: Path) -> None:
    devices = tmp_path / "devices"
    devices.mkdir()
    for name in ("device01", "device02"):
        (devices / name).write_text("x\n")
    (devices / "device01").chmod(0o777)
    (devices / "device02").chmod(0o644)
    (tmp_path / "agent.hcl").write_text(
        'plugin "nomad-device-example" {\n  config {\n    dir = "./devices"\n  }\n}\n'
    )
    (tmp_path / "job.hcl").write_text(_job("job.hcl"))
    command = "nomad-device-launcher check -q -c agent.hcl job.hcl nomad-device-example"
    args = [*command.split()[1:-1], EXAMPLE]
    env = cli_env()
    first = run_cli(*args, env=env, cwd=tmp_path)
    assert first.returncode == 1, first.stderr
    blocks = DOC.split(f"$ {command}\n")
    assert len(blocks) == 3
    assert blocks[1].startswith(first.stdout)
    (devices / "device01").chmod(0o644)
    second = run_cli(*args, env=env, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert blocks[2].startswith(second.stdout)


def test_node_json_session_matches_the_doc(tmp_path: Path) -> None:
    node = {
        "ID": "5b0c7e3a-6f1d-4c2e-9a8b-2f4d6e8a1c3b",
        "Name": "gpu-7",
        "Datacenter": "dc1",
        "Status": "ready",
        "SchedulingEligibility": "eligible",
        "NodeResources": {
            "Devices": [
                {
                    "Vendor": "nvidia",
                    "Type": "gpu",
                    "Name": "Tesla T4",
                    "Instances": [
                        {"ID": "GPU-3f1c", "Healthy": True},
                        {"ID": "GPU-8a2d", "Healthy": True},
                    ],
                    "Attributes": {"memory": {"Int": 15360, "Unit": "MiB"}},
                },
                {
                    "Vendor": "nvidia",
                    "Type": "gpu",
                    "Name": "A100-SXM4-40GB",
                    "Instances": [
                        {"ID": "GPU-c41e", "Healthy": True},
                        {
                            "ID": "GPU-d977",
                            "Healthy": False,
                            "HealthDescription": "Xid 79: GPU has fallen off the bus",
                        },
                    ],
                    "Attributes": {"memory": {"Int": 40, "Unit": "GiB"}},
                },
            ]
        },
    }
    import json

    (tmp_path / "gpu-node.json").write_text(json.dumps(node))
    job = """job "train" {
  datacenters = ["dc1"]
  group "trainer" {
    task "main" {
      resources {
        device "nvidia/gpu" {
          count = 2
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "%s"
          }%s
        }
      }
    }
  }
}
"""
    affinity = """
          affinity {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "24 GiB"
            weight    = 50
          }"""
    (tmp_path / "train.hcl").write_text(job % ("24 GiB", ""))
    (tmp_path / "train-2.hcl").write_text(job % ("12 GiB", affinity))
    for name, code in (("train.hcl", 1), ("train-2.hcl", 0)):
        command = f"nomad-device-launcher check {name} --node gpu-node.json"
        result = run_cli(*command.split()[1:], cwd=tmp_path)
        assert result.returncode == code, result.stderr
        assert _block_after(command) == result.stdout
