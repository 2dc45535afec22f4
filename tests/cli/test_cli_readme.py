"""The README's quick start, run as written: the REPL line and the calls it says to type."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from support import ROOT
from support.launcher import run_cli

README = (ROOT / "README.md").read_text()


def _launcher_args(line: str) -> list[str]:
    """A README line that runs ``.venv/bin/nomad-device-launcher``: its arguments."""
    words = shlex.split(line, comments=True)
    assert words[0] in (".venv/bin/nomad-device-launcher", "nomad-device-launcher"), line
    return words[1:]


def test_the_readme_repl_example_works_as_written() -> None:
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    [line] = [
        line
        for line in quick_start.splitlines()
        if line.startswith(".venv/bin/nomad-device-launcher ")
    ]
    typed = quick_start.split("At the REPL's prompt type", 1)[1].split("\n\n", 1)[0]
    calls = re.findall(r"`([a-z_]+\(.*?\))`", typed)
    # stats() prints every second until stop_stats(): the README must say how it ends.
    assert calls == ["fingerprint()", "stats()", "stop_stats()", 'reserve("device02")', "exit()"]
    # The quick start runs from the checkout, where `make demo` was run.
    result = run_cli(*_launcher_args(line), input="".join(c + "\n" for c in calls), cwd=ROOT)
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
        typed = 'reserve("device02")\nexit()\n'
        session = run_cli(*_launcher_args(hint), input=typed, cwd=tmp_path)
        assert session.returncode == 0, session.stdout + session.stderr
        assert f"{directory}/device02  /tmp/task-mounts/device02  rw" in session.stdout
    finally:
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()
