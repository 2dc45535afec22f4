"""The tutorial's code blocks are real: extract them and run them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

DOC = ROOT / "docs" / "tutorial.md"
# The tutorial's plugin runs as a process, and under the conformance suite.
pytestmark = pytest.mark.slow

BLOCK = re.compile(r"```python\n# file: (?P<name>\S+)\n(?P<body>.*?)```", re.S)


def test_tutorial_blocks_run(tmp_path: Path) -> None:
    blocks = {m["name"]: m["body"] for m in BLOCK.finditer(DOC.read_text())}
    assert {"inventory_plugin.py", "test_inventory_plugin.py", "watched_plugin.py"} <= set(blocks)
    assert {"seats_plugin.py", "test_seats_plugin.py"} <= set(blocks)  # releases (issue 28)
    tests = sum(body.count("\ndef test_") for body in blocks.values())
    for name, body in blocks.items():
        (tmp_path / name).write_text(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{tests} passed" in done.stdout


def test_tutorial_plugin_conforms(tmp_path: Path) -> None:
    blocks = {m["name"]: m["body"] for m in BLOCK.finditer(DOC.read_text())}
    (tmp_path / "inventory_plugin.py").write_text(blocks["inventory_plugin.py"])
    (tmp_path / "cards.json").write_text('[{"serial": "A1", "status": "ok", "temp_c": 40}]')
    conformance = Path(sys.executable).with_name("nomad-device-conformance")
    command = [sys.executable, "inventory_plugin.py"]
    done = subprocess.run(
        [str(conformance), "--config-json", '{"inventory": "cards.json"}', "--", *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CONFORMS" in done.stdout


def test_the_tutorials_bundle_runs_under_its_agent_block(tmp_path: Path) -> None:
    """Step 5 as written: the bundle it builds, installed under the name its block has."""
    text = DOC.read_text()
    step = text.split("## 5. Install it into Nomad", 1)[1].split("\n## ", 1)[0]
    (shell,) = re.findall(r"```sh\n(.*?)```", step, re.S)
    hcl = re.findall(r"```hcl\n(.*?)```", step, re.S)[0]  # the agent's; then a job's
    build, install = shell.strip().splitlines()
    blocks = {m["name"]: m["body"] for m in BLOCK.finditer(text)}
    (tmp_path / "inventory_plugin.py").write_text(blocks["inventory_plugin.py"])
    cards = tmp_path / "cards.json"
    cards.write_text('[{"serial": "A1", "status": "ok", "temp_c": 40, "node": "/dev/null"}]')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["NO_COLOR"] = "1"
    built = subprocess.run(
        build, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stdout + built.stderr
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    # The install line, into this test's plugin_dir instead of /opt/nomad/plugins.
    assert install.startswith("sudo install -m 0755 ")
    subprocess.run(
        install.removeprefix("sudo ").replace("/opt/nomad/plugins", str(plugins)),
        shell=True,
        cwd=tmp_path,
        check=True,
    )
    (installed,) = plugins.iterdir()
    agent = tmp_path / "agent.hcl"
    agent.write_text(
        hcl.replace("/opt/nomad/plugins", str(plugins)).replace(
            "/var/lib/acme/cards.json", str(cards)
        )
    )
    assert re.findall(r'^plugin "([^"]+)"', hcl, re.M) == [installed.name]  # the file's name
    launcher = Path(sys.executable).with_name("nomad-device-launcher")
    done = subprocess.run(
        [str(launcher), "fingerprint", "-c", str(agent), str(installed)],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "acme/accelerator/a100x  (1 device, 1 healthy)" in done.stdout
