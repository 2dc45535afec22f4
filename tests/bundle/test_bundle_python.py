"""A node without the bundle's Python: one hclog error line, exit 1, seen by Nomad.

Two ways a node lacks it: no python3.11/python3 at all (the shell prelude
reports it), or a python3 of another version (the Python bootstrap reports it,
before touching the cache). Both are checked raw and through the Go host, whose
logger is where Nomad's agent log gets the line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.bundle import node_env, other_python

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.hclog import HclogEntry, parse_line

pytestmark = pytest.mark.slow


def _nomad_env(**extra: str) -> dict[str, str]:
    return node_env(
        **{NOMAD_HANDSHAKE.magic_cookie_key: NOMAD_HANDSHAKE.magic_cookie_value},
        PLUGIN_PROTOCOL_VERSIONS="2",
        **extra,
    )


def _only_error(stderr: str) -> HclogEntry:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    entry = parse_line(lines[0], strict=True)
    assert (entry.level, entry.module) == ("error", "nomad-device-bundle")
    return entry


def _run(bundle: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bundle)], env=env, cwd="/", capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def wrong_python_path(tmp_path: Path) -> str:
    """A PATH whose only python3 is another minor version (as on a newer distribution)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(other_python())
    return str(bin_dir)


@pytest.fixture
def no_python_path(tmp_path: Path) -> str:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    return str(empty)


def test_wrong_python_version_is_one_clear_error(
    plugin_dir: Path, wrong_python_path: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    bundle = plugin_dir / "nomad-device-example"
    done = _run(bundle, _nomad_env(PATH=wrong_python_path, NOMAD_DEVICE_BUNDLE_CACHE=str(cache)))
    assert done.returncode == 1
    assert done.stdout == ""
    entry = _only_error(done.stderr)
    assert entry.message.startswith(f"cannot start plugin bundle {bundle}: it needs CPython 3.11")
    assert f"{wrong_python_path}/python3 is cpython 3." in entry.message
    assert "install Python 3.11 or set NOMAD_DEVICE_PYTHON" in entry.message
    assert not cache.exists()  # refused before unpacking anything


def test_missing_python_is_one_clear_error(plugin_dir: Path, no_python_path: str) -> None:
    bundle = plugin_dir / "nomad-device-example"
    done = _run(bundle, _nomad_env(PATH=no_python_path))
    assert done.returncode == 1
    assert done.stdout == ""
    entry = _only_error(done.stderr)
    assert entry.message == (
        f"cannot start plugin bundle {bundle}: no python3.11 or python3 on PATH "
        f"(PATH={no_python_path}); install Python 3.11 or set NOMAD_DEVICE_PYTHON to its path"
    )


def test_python_override_that_is_not_there(plugin_dir: Path, tmp_path: Path) -> None:
    bundle = plugin_dir / "nomad-device-example"
    missing = str(tmp_path / "python3.11")
    done = _run(bundle, _nomad_env(NOMAD_DEVICE_PYTHON=missing))
    assert done.returncode == 1
    entry = _only_error(done.stderr)
    assert f"NOMAD_DEVICE_PYTHON is not an executable file ({missing})" in entry.message


def _gohost(interop_bin: Path, bundle: Path, path: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(interop_bin / "gohost"), "-quiet", "-start-timeout", "30s", "--", str(bundle)],
        env=node_env(PATH=path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.mark.interop
@pytest.mark.parametrize("case", ["missing", "wrong"])
def test_nomads_loader_logs_the_reason_at_error_level(
    interop_bin: Path,
    plugin_dir: Path,
    case: str,
    request: pytest.FixtureRequest,
) -> None:
    path = request.getfixturevalue("no_python_path" if case == "missing" else "wrong_python_path")
    report = _gohost(interop_bin, plugin_dir / "nomad-device-example", path)
    assert report.get("error"), report  # the launch failed, as it must
    reasons = [r for r in report["logs"] if "cannot start plugin bundle" in r["message"]]
    assert len(reasons) == 1, report["logs"]
    assert reasons[0]["level"] == "error"
