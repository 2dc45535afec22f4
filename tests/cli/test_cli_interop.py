"""The launcher driving the Go device plugin built for the interop tests (interop/).

The plugin is built by ``interop/build.sh``. Without Go these tests are skipped,
except in CI (``CI=true``), where a missing Go is a failure.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.launcher import (
    Terminal,
    cli_env,
    run_cli,
    terminals,
    wait_gone,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(900)]


@pytest.fixture
def terminal() -> Iterator[type[Terminal]]:
    with terminals() as factory:
        yield factory


@pytest.fixture(scope="module")
def goplugin(interop_bin: Path) -> str:
    return str(interop_bin / "goplugin")


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    directory = tmp_path / "devices"
    directory.mkdir()
    for name in ("alpha", "beta"):
        (directory / name).write_text(name)
    return directory


def test_info_of_a_go_plugin(goplugin: str) -> None:
    result = run_cli("info", "--json", goplugin)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "Name": "go-files",
        "PluginVersion": "0.2.0",
        "PluginApiVersions": ["v0.1.0"],
        "Type": "device",
    }


def test_schema_of_a_go_plugin(goplugin: str) -> None:
    result = run_cli("schema", goplugin)
    assert result.returncode == 0, result.stderr
    assert 'dir = string          # default "."' in result.stdout
    assert 'list_period = string  # default "5s"' in result.stdout


def test_go_plugin_configured_from_an_agent_file(
    goplugin: str, devices: Path, tmp_path: Path
) -> None:
    agent = tmp_path / "agent.hcl"
    agent.write_text(f'plugin "goplugin" {{\n  config {{\n    dir = "{devices}"\n  }}\n}}\n')
    result = run_cli("fingerprint", "--json", "--config", str(agent), goplugin)
    assert result.returncode == 0, result.stderr
    (group,) = json.loads(result.stdout)
    assert (group["Vendor"], group["Type"], group["Name"]) == ("interop", "file", "gofile")
    assert [d["ID"] for d in group["Instances"]] == ["alpha", "beta"]
    assert "goplugin: configured" in result.stderr  # its hclog output, shown as logs


def test_go_plugin_config_errors_use_nomads_words(goplugin: str, tmp_path: Path) -> None:
    agent = tmp_path / "agent.hcl"
    agent.write_text('plugin "goplugin" {\n  config {\n    directory = "/x"\n  }\n}\n')
    result = run_cli("fingerprint", "--config", str(agent), goplugin)
    assert result.returncode == 1
    assert f'{agent}:3: Invalid label: No argument or block type is named "directory".' in (
        result.stderr
    )


def test_go_plugin_stats_and_reserve(goplugin: str, devices: Path) -> None:
    config = json.dumps({"dir": str(devices)})
    stats = run_cli("stats", "--json", "--config-json", config, goplugin)
    assert stats.returncode == 0, stats.stderr
    (group,) = json.loads(stats.stdout)
    assert set(group["InstanceStats"]) == {"alpha", "beta"}
    reserve = run_cli("reserve", "--json", "--config-json", config, goplugin, "beta")
    assert reserve.returncode == 0, reserve.stderr
    assert json.loads(reserve.stdout)["Envs"] == {"GOFILE_DEVICES": "beta"}


def test_go_plugin_in_the_repl_with_ctrl_c(
    goplugin: str, devices: Path, terminal: type[Terminal]
) -> None:
    config = json.dumps({"dir": str(devices)})
    term = terminal(["--config-json", config, goplugin], cli_env())
    match = term.expect(r"go-files 0\.2\.0  \(pid (\d+)\)")
    pid = int(match.group(1))
    term.send("fingerprint()\r")
    term.expect(r"interop/file/gofile  \(2 devices, 2 healthy\)")
    term.send("\x03")  # Go plugins ignore SIGINT too; the launcher must kill it
    assert term.wait() == 128 + signal.SIGINT
    assert wait_gone(pid)
