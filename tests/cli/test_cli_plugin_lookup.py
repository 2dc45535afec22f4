"""Which program a plugin name runs: never one from the current directory by accident.

Root running ``nomad-device-launcher info nomad-device-example`` from ``/tmp``
used to run ``/tmp/nomad-device-example`` when another user had planted it
(issue 26). A bare name is looked up beside the launcher's Python, then in the
absolute directories of PATH; only a path (``./NAME``) or a ``.py`` file name
reaches the current directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support.launcher import cli_env, run_cli

from nomad_device.cli.process import PluginNotFound, find_program, resolve_command

#: What a planted program does when it is run: leave a mark, then fail.
PLANTED = '#!/bin/sh\necho ran > "$(dirname "$0")/ran"\nexit 3\n'


def _plant(directory: Path, name: str) -> Path:
    path = directory / name
    path.write_text(PLANTED)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("path", ["/usr/bin:/bin", ":/usr/bin:/bin", ".:/usr/bin:/bin"])
def test_a_planted_plugin_in_the_current_directory_is_not_run(tmp_path: Path, path: str) -> None:
    """The launcher's own plugin runs, whatever PATH says about the current directory."""
    _plant(tmp_path, "nomad-device-example")
    result = run_cli("info", "nomad-device-example", cwd=tmp_path, env=cli_env(PATH=path))
    assert not (tmp_path / "ran").exists(), result.stderr
    assert result.returncode == 0, result.stderr
    assert "example-fs-device" in result.stdout


@pytest.mark.parametrize("path", ["/usr/bin:/bin", ":/usr/bin:/bin", ".:/usr/bin:/bin"])
def test_a_name_found_only_in_the_current_directory_is_refused(tmp_path: Path, path: str) -> None:
    _plant(tmp_path, "nomad-device-planted")
    result = run_cli("info", "nomad-device-planted", cwd=tmp_path, env=cli_env(PATH=path))
    assert not (tmp_path / "ran").exists(), result.stderr
    assert result.returncode == 1
    assert "no plugin named 'nomad-device-planted'" in result.stderr
    assert "./nomad-device-planted" in result.stderr  # how to mean the file


def test_a_path_to_the_file_runs_it(tmp_path: Path) -> None:
    """What the operator writes as a path is theirs to run."""
    _plant(tmp_path, "nomad-device-planted")
    result = run_cli("info", "./nomad-device-planted", cwd=tmp_path)
    assert (tmp_path / "ran").exists()
    assert result.returncode != 0


def test_lookup_order_beside_the_launcher_then_absolute_path_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path = tmp_path / "on-path"
    on_path.mkdir()
    _plant(on_path, "nomad-device-example")
    _plant(on_path, "only-on-path")
    monkeypatch.chdir(tmp_path)
    _plant(tmp_path, "only-here")
    monkeypatch.setenv("PATH", os.pathsep.join(["", ".", "on-path", str(on_path)]))
    beside = Path(sys.executable).with_name("nomad-device-example")
    if beside.is_file():
        assert find_program("nomad-device-example") == str(beside)
    assert find_program("only-on-path") == str(on_path / "only-on-path")
    assert find_program("only-here") is None
    with pytest.raises(PluginNotFound, match="'only-here'"):
        resolve_command(["only-here", "-v"])
    assert resolve_command([str(on_path / "only-here"), "-v"]) == [str(on_path / "only-here"), "-v"]


def test_a_py_file_is_a_file_as_python_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plugin.py").write_text("")
    assert resolve_command(["plugin.py", "-x"]) == [sys.executable, "plugin.py", "-x"]
    (tmp_path / "plugin.py").chmod(0o755)
    assert resolve_command(["plugin.py"]) == [os.path.join(os.curdir, "plugin.py")]
