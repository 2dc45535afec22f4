"""Fixtures for the interop tests: build the Go tools once, run the Go host.

The build (``interop/build.sh``) needs Go. Without Go the tests are skipped,
except in CI (``CI=true``), where a missing Go is a failure.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

#: One Go host run, launch to report.
HOST_TIMEOUT = 120

Report = dict[str, Any]
GoHost = Callable[..., Report]


@pytest.fixture
def gohost(interop_bin: Path) -> GoHost:
    """Run the Go host; return its parsed JSON report.

    ``gohost(*flags, command=[...])`` launches ``command``; without ``command``
    the flags must say what to do (``-reattach``).
    """

    def run(*flags: str, command: Sequence[str] = (), timeout: float = HOST_TIMEOUT) -> Report:
        argv = [str(interop_bin / "gohost"), *flags]
        if command:
            argv += ["--", *command]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        try:
            report: Report = json.loads(proc.stdout)
        except json.JSONDecodeError:
            pytest.fail(
                f"gohost exited {proc.returncode} without a report\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
            )
        report["_stderr"] = proc.stderr
        report["_returncode"] = proc.returncode
        return report

    return run


@pytest.fixture
def gohost_process(interop_bin: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start the Go host in the background (for -print-reattach); killed at the end."""
    started: list[subprocess.Popen[str]] = []

    def start(*flags: str, command: Sequence[str] = ()) -> subprocess.Popen[str]:
        argv = [str(interop_bin / "gohost"), *flags]
        if command:
            argv += ["--", *command]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.fixture
def goplugin(interop_bin: Path) -> str:
    """Path of the Go device plugin."""
    return str(interop_bin / "goplugin")
