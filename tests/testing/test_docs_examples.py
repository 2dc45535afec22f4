"""Every example in docs/testing.md, run as written.

The code blocks are read out of the Markdown: ``# file: NAME`` blocks are
written to a scratch directory (the plugin and its test files, which run under
pytest there), other Python blocks are executed, console blocks are run, and the
sample reports are compared with real ones. Editing either the doc or the code
so that they disagree fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import CONFORMANCE_PLUGINS, ROOT

import nomad_device.testing as testing
from nomad_device import DevicePlugin
from nomad_device.testing import MockDevicePlugin
from nomad_device.testing.conformance import CHECKS, SuiteOptions, run_conformance
from nomad_device.testing.conformance.cli import _parser

# The page's examples run as programs: pytest on its test files, the conformance suite.
pytestmark = pytest.mark.slow

DOC = ROOT / "docs" / "testing.md"
FIXTURES = CONFORMANCE_PLUGINS
TEXT = DOC.read_text()
BLOCKS = [
    (m.group(1), m.group(2))
    for m in re.finditer(r"^```(\w*)\n(.*?)^```$", TEXT, re.DOTALL | re.MULTILINE)
]
FILE_HEADER = re.compile(r"# file: (\S+)\n")


def _files() -> dict[str, str]:
    out = {}
    for lang, body in BLOCKS:
        header = FILE_HEADER.match(body)
        if lang == "python" and header:
            out[header.group(1)] = body
    return out


def _snippets() -> list[str]:
    return [b for lang, b in BLOCKS if lang == "python" and not FILE_HEADER.match(b)]


def _commands() -> list[str]:
    return [
        line[2:]
        for lang, body in BLOCKS
        if lang == "console"
        for line in body.splitlines()
        if line.startswith("$ ")
    ]


def _samples() -> list[str]:
    return [body for lang, body in BLOCKS if lang == "text"]


def _mask(text: str) -> str:
    """Numbers vary from run to run (timings, line counts); the rest must not."""
    return re.sub(r"\d+(\.\d+)?", "N", text)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("docs-testing")
    for name, body in _files().items():
        (where / name).write_text(body)
    return where


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_every_block_is_exercised() -> None:
    kinds = {lang for lang, _ in BLOCKS}
    assert kinds == {"python", "console", "text"}, "a block of a kind nothing here runs"
    assert sorted(_files()) == [
        "test_thermo_conformance.py",
        "test_thermo_mock.py",
        "test_thermo_process.py",
        "test_thermo_unit.py",
        "thermo_plugin.py",
    ]
    assert len(_snippets()) == 2
    assert len(_commands()) == 2
    assert len(_samples()) == 3


def test_example_test_files_pass(workdir: Path) -> None:
    tests = [name for name in _files() if name.startswith("test_")]
    expected = sum(_files()[name].count("\ndef test_") for name in tests)
    done = _run(f"{sys.executable} -m pytest -q -p no:cacheprovider {' '.join(tests)}", workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{expected} passed" in done.stdout


def test_snippets_run(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(workdir))
    for snippet in _snippets():
        # As a reader runs it: without this file's `from __future__ import annotations`.
        code = compile(snippet, str(DOC), "exec", dont_inherit=True)
        exec(code, {"__name__": "docs_example"})
    sys.modules.pop("thermo_plugin", None)


def test_cli_command_and_its_sample_report(workdir: Path) -> None:
    (command,) = [c for c in _commands() if c.startswith("nomad-device-conformance")]
    done = _run(command, workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    sample = _samples()[0]
    assert _mask(done.stdout.strip()) == _mask(sample.strip())


def test_pytest_option_command(workdir: Path) -> None:
    (command,) = [c for c in _commands() if c.startswith("pytest")]
    done = _run(
        command.replace("pytest", f"{sys.executable} -m pytest -p no:cacheprovider", 1), workdir
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(CHECKS)} passed" in done.stdout


def test_sample_finding_matches_a_real_one() -> None:
    sample = _samples()[1]
    report = run_conformance(
        [sys.executable, str(FIXTURES / "ends_stream.py")], SuiteOptions(open_window=1.0)
    )
    real = _mask(report.render())
    for line in sample.strip("\n").splitlines():
        assert _mask(line) in real.splitlines(), line


def test_sample_crash_matches_a_real_one() -> None:
    sample = _samples()[2]
    report = run_conformance([sys.executable, str(FIXTURES / "dies_at_import.py")])
    real = report.render().splitlines()
    shown = [line for line in sample.strip("\n").splitlines() if line.strip() != "..."]
    assert len(shown) > 10
    for line in shown:
        assert line in real, line


def test_check_table_lists_every_check_in_order() -> None:
    section = TEXT.split("### The checks", 1)[1].split("###", 1)[0]
    ids = re.findall(r"^\| `([a-z-]+)` \|", section, re.MULTILINE)
    assert ids == [c.id for c in CHECKS]


def test_go_helper_table_names_exist() -> None:
    section = TEXT.split("| Nomad (Go) | Python |", 1)[1].split("\n\n", 1)[0]
    right = [row.split("|")[2] for row in section.strip().splitlines()[1:]]
    names = {n for cell in right for n in re.findall(r"`(\w+)`", cell)}
    params = set(MockDevicePlugin.__init__.__code__.co_varnames)
    for name in names:
        # a public helper, a mock hook, or the DevicePlugin method a helper stands in for
        assert name in testing.__all__ or name in params or hasattr(DevicePlugin, name), name


def test_cli_option_table_matches_the_parser() -> None:
    section = TEXT.split("| option | meaning |", 1)[1].split("\n\n", 1)[0]
    documented = set(re.findall(r"^\| `(-[-\w]+)", section, re.MULTILINE))
    actual = {
        option
        for action in _parser()._actions
        for option in action.option_strings
        if option not in ("-h", "--help", "--verbose")
    }
    assert documented == actual
