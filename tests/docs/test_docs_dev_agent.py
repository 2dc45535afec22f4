"""deploy.md's recipe for trying a plugin on ``nomad agent -dev``, run as written.

There is no Nomad binary here, so the recipe's own stand-ins run instead: its
set-up lines as a shell runs them (with ``/tmp/nomad-dev`` moved into the
test's directory), ending in the launcher reading the agent file it wrote and
starting the plugin from ``plugin_dir`` as the agent would; then the launcher's
``config`` (the block decoded as the agent decodes it) and the ``check`` the
page names. The lines for the agent itself are held to the file the set-up
wrote.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support import ROOT

DOC = ROOT / "docs" / "deploy.md"
BIN = Path(sys.executable).parent


def _section() -> str:
    text = DOC.read_text()
    return text.split("## Try a plugin on `nomad agent -dev`", 1)[1].split("\n## ", 1)[0]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', os.defpath)}"  # pip's console scripts
    env["NO_COLOR"] = "1"
    return env


def test_the_dev_agent_recipe_runs_as_written(tmp_path: Path) -> None:
    section = _section()
    setup, agent, status = re.findall(r"```sh\n(.*?)```", section, re.S)
    base = tmp_path / "nomad-dev"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", setup.replace("/tmp/nomad-dev", str(base))],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The launcher started the plugin from plugin_dir with the block's config.
    assert re.search(r"^  device01  healthy", done.stdout, re.M), done.stdout
    assert re.search(r"^  device02  healthy", done.stdout, re.M), done.stdout

    hcl = (base / "agent.hcl").read_text()
    (plugin_dir,) = re.findall(r'^plugin_dir\s*=\s*"([^"]+)"', hcl, re.M)
    (plugin,) = Path(plugin_dir).iterdir()
    assert os.access(plugin, os.X_OK)
    # The label is the file's name: what Nomad matches the block by.
    assert re.findall(r'^plugin\s+"([^"]+)"', hcl, re.M) == [plugin.name]

    decoded = subprocess.run(
        [str(BIN / "nomad-device-launcher"), "config", "-c", str(base / "agent.hcl"), str(plugin)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert decoded.returncode == 0, decoded.stdout + decoded.stderr
    assert "The plugin accepted this config." in decoded.stdout

    assert agent.strip() == "sudo nomad agent -dev -config /tmp/nomad-dev/agent.hcl"
    assert status.strip() == "nomad node status -self -verbose"


def test_the_check_the_recipe_names_places_the_job_it_names(tmp_path: Path) -> None:
    flat = " ".join(_section().split())
    (device,) = re.findall(r"\(`(device \"[^`]+)`\)", flat)
    (check,) = re.findall(r"`(nomad-device-launcher check [^`]+)`", flat)
    setup = re.findall(r"```sh\n(.*?)```", _section(), re.S)[0]
    base = tmp_path / "nomad-dev"
    without_launcher = setup.rsplit("\n# What the agent will do", 1)[0]
    subprocess.run(
        ["bash", "-euo", "pipefail", "-c", without_launcher.replace("/tmp/nomad-dev", str(base))],
        env=_env(),
        check=True,
        timeout=60,
    )
    (tmp_path / "job.hcl").write_text(
        'job "try" {\n  group "g" {\n    task "t" {\n      driver = "raw_exec"\n'
        f"      resources {{\n        {device}\n      }}\n    }}\n  }}\n}}\n"
    )
    words = check.replace("/tmp/nomad-dev", str(base)).split()
    done = subprocess.run(
        [str(BIN / words[0]), *words[1:]],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "places on 1 of 1 node" in done.stdout
