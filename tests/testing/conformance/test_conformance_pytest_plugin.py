"""The pytest plugin, run the way an author's project runs it: a pytest subprocess."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from support import CONFORMANCE_PLUGINS, ROOT

FIXTURES = CONFORMANCE_PLUGINS


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _command(name: str) -> str:
    return shlex.join([sys.executable, str(FIXTURES / f"{name}.py")])


def test_option_turns_each_check_into_a_test(tmp_path: Path) -> None:
    done = _pytest(tmp_path, f"--nomad-device-conformance={_command('ends_stream')}")
    assert done.returncode == 1, done.stdout
    assert "collected 19 items" in done.stdout
    assert "1 failed, 18 passed" in done.stdout
    assert "::fingerprint-stream-open" in done.stdout
    # The failure is the finding, not a Python traceback.
    assert "why: Any end of the Fingerprint stream" in done.stdout
    assert "Traceback" not in done.stdout


def test_option_reports_warnings_and_skips(tmp_path: Path) -> None:
    done = _pytest(
        tmp_path,
        f"--nomad-device-conformance={_command('stdout_chatter')}",
        f"--nomad-device-conformance={_command('needs_config')}",
        "-k",
        "stdout-quiet or set-config",
    )
    assert done.returncode == 0, done.stdout
    assert "collected 38 items / 34 deselected / 4 selected" in done.stdout
    assert "ConformanceWarning: stdout-quiet:" in done.stdout
    assert "SKIPPED" in done.stdout
    assert "the plugin needs operator config to run: 'dir' is required" in done.stdout


def test_option_passes_config_json(tmp_path: Path) -> None:
    done = _pytest(
        tmp_path,
        f"--nomad-device-conformance={_command('needs_config')}",
        '--nomad-device-config-json={"dir": "/srv/widgets"}',
    )
    assert done.returncode == 0, done.stdout
    assert "19 passed" in done.stdout


def test_strict_option_fails_skipped_checks(tmp_path: Path) -> None:
    done = _pytest(
        tmp_path,
        f"--nomad-device-conformance={_command('needs_config')}",
        "--nomad-device-strict",
    )
    assert done.returncode == 1, done.stdout
    assert "9 failed, 10 passed" in done.stdout
    assert "(--nomad-device-strict: skipped)" in done.stdout
    assert "::first-fingerprint" in done.stdout


def test_option_passes_an_agent_file(tmp_path: Path) -> None:
    (tmp_path / "agent.hcl").write_text(
        'plugin "needs_config" {\n  config {\n    dir = "/srv/widgets"\n  }\n}\n'
    )
    done = _pytest(
        tmp_path,
        f"--nomad-device-conformance={_command('needs_config')}",
        "--nomad-device-config=agent.hcl",
        "--nomad-device-strict",
    )
    assert done.returncode == 0, done.stdout
    assert "19 passed" in done.stdout


def test_fixture_takes_an_agent_file_and_strict(tmp_path: Path) -> None:
    (tmp_path / "agent.hcl").write_text(
        'plugin "needs_config" {\n  config {\n    dir = "/srv/widgets"\n  }\n}\n'
    )
    (tmp_path / "test_configured.py").write_text(
        textwrap.dedent(
            f"""
            import sys

            import pytest

            from nomad_device.testing.conformance import ConformanceError

            PLUGIN = [sys.executable, {str(FIXTURES / "needs_config.py")!r}]


            def test_configured(device_plugin_conformance):
                report = device_plugin_conformance(PLUGIN, config_file="agent.hcl")
                report.assert_ok(allow_warnings=False, strict=True)


            def test_unconfigured_is_not_enough_in_ci(device_plugin_conformance):
                report = device_plugin_conformance(PLUGIN)
                report.assert_ok()
                with pytest.raises(ConformanceError, match="9 of 19 checks skipped"):
                    report.assert_ok(strict=True)
            """
        )
    )
    done = _pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_without_pytest_the_plugin_names_the_extra(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden" / "pytest"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'pytest'\")\n")
    done = subprocess.run(
        [sys.executable, "-c", "import nomad_device.testing.pytest_plugin"],
        env={**os.environ, "PYTHONPATH": str(hidden.parent)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "pip install 'nomad-device-sdk[test]'" in done.stderr


def test_the_test_extra_brings_what_the_plugin_needs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = project["project"]["optional-dependencies"]["test"]
    names = {re.split(r"[<>=!~\[ ]", spec, maxsplit=1)[0] for spec in extra}
    # pytest for the plugin itself; conformance runs from an agent file need nothing more
    # (the SDK reads agent files with its own HCL 1 reader).
    assert names == {"pytest"}


def test_fixtures_in_an_authors_tests(tmp_path: Path) -> None:
    (tmp_path / "test_mine.py").write_text(
        textwrap.dedent(
            f"""
            import sys

            from nomad_device.testing import MockDevicePlugin, device_group, static_fingerprint

            WIDGETS = {str(FIXTURES / "_widgets.py")!r}


            def test_conforms(device_plugin_conformance):
                report = device_plugin_conformance([sys.executable, WIDGETS], open_window=1.0)
                report.assert_ok(allow_warnings=False)


            def test_in_process(device_plugin_harness):
                group = device_group("acme", "gpu", "g1", ["0"])
                h = device_plugin_harness(MockDevicePlugin(detect_fn=static_fingerprint(group)))
                assert h.first_fingerprint() == [group]
            """
        )
    )
    done = _pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_unused_plugin_imports_nothing_heavy(tmp_path: Path) -> None:
    """Loading the plugin must not import the testing machinery (nor the suite)."""
    (tmp_path / "test_nothing.py").write_text(
        textwrap.dedent(
            """
            import sys

            def test_lazy():
                loaded = [m for m in sys.modules if m.startswith("nomad_device.testing.")]
                assert loaded == ["nomad_device.testing.pytest_plugin"], loaded
            """
        )
    )
    done = _pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
