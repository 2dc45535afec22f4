"""The tutorial's code blocks are real: extract them and run them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).parent.parent / "docs" / "tutorial.md"
# The tutorial's plugin runs as a process, and under the conformance suite.
pytestmark = pytest.mark.slow

BLOCK = re.compile(r"```python\n# file: (?P<name>\S+)\n(?P<body>.*?)```", re.S)


def test_tutorial_blocks_run(tmp_path: Path) -> None:
    blocks = {m["name"]: m["body"] for m in BLOCK.finditer(DOC.read_text())}
    assert {"inventory_plugin.py", "test_inventory_plugin.py", "watched_plugin.py"} <= set(blocks)
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
