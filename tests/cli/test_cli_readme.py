"""The README's quick start, run as written: the REPL line and the calls it says to type."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from launcher_support import ROOT, cli_env, run_cli

README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent


def _command(line: str) -> list[str]:
    """A README command line, with ``.venv/bin/`` standing for this environment's scripts."""
    words = shlex.split(line, comments=True)
    venv = ".venv/bin/"
    return [str(BIN / w.removeprefix(venv)) if w.startswith(venv) else w for w in words]


def _repl(command: list[str], calls: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        input="".join(call + "\n" for call in calls),
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_the_readme_repl_example_works_as_written() -> None:
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    [line] = [
        line
        for line in quick_start.splitlines()
        if line.startswith(".venv/bin/nomad-device-launcher ")
    ]
    typed = quick_start.split("At the REPL's prompt type", 1)[1].split("\n\n", 1)[0]
    calls = re.findall(r"`([a-z_]+\(.*?\))`", typed)
    assert calls == ["fingerprint()", "stats()", 'reserve("device02")', "exit()"]
    # The quick start runs from the checkout, where `make demo` was run.
    result = _repl(_command(line), calls, ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error" not in (result.stdout + result.stderr).lower()
    assert re.search(r"^  device02  healthy", result.stdout, re.MULTILINE), result.stdout
    assert re.search(r"/demo/device02  /tmp/task-mounts/device02  rw$", result.stdout, re.MULTILINE)


def test_the_demos_hint_runs_on_the_kept_directory(tmp_path: Path) -> None:
    result = run_cli("demo", "--keep")
    assert result.returncode == 0, result.stderr
    [hint] = [
        line.removeprefix("Try it yourself: ")
        for line in result.stdout.splitlines()
        if line.startswith("Try it yourself: ")
    ]
    directory = Path(result.stdout.split("kept the demo directory ", 1)[1].split()[0])
    try:
        command = _command(".venv/bin/" + hint)
        session = _repl(command, ['reserve("device02")', "exit()"], tmp_path)
        assert session.returncode == 0, session.stdout + session.stderr
        assert f"{directory}/device02  /tmp/task-mounts/device02  rw" in session.stdout
    finally:
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()
