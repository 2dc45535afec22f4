"""Helpers for the launcher tests: run the CLI as a user would, watch PIDs, drive a pty.

Not a conftest.py: the root tests/conftest.py is imported as ``conftest`` by other
test modules, and a second conftest here would shadow it. Test modules import the
fixtures below by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from support import PLUGINS

MISBEHAVING = PLUGINS / "misbehaving.py"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def launcher_command() -> list[str]:
    script = Path(sys.executable).with_name("nomad-device-launcher")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "nomad_device.cli"]


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LAUNCHER_TEST_MODE", None)
    env.pop("LAUNCHER_TEST_PID_FILE", None)
    env["NO_COLOR"] = "1"
    env.update(extra)
    return env


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    cwd: Path | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the launcher to completion and capture its output (``input``: piped REPL lines)."""
    return subprocess.run(
        [*launcher_command(), *args],
        input=input,
        capture_output=True,
        text=True,
        env=env or cli_env(),
        timeout=timeout,
        cwd=cwd,
        check=False,
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def read_pid(path: Path, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            text = path.read_text().strip()
            if text:
                return int(text)
        time.sleep(0.05)
    raise AssertionError(f"the plugin never wrote its PID to {path}")


class Terminal:
    """The launcher on a pseudo-terminal that is its controlling terminal (so
    Ctrl-C typed there is a real SIGINT to its process group)."""

    def __init__(self, args: Sequence[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        termios_attrs = termios.tcgetattr(slave)
        termios_attrs[3] |= termios.ISIG
        termios.tcsetattr(slave, termios.TCSANOW, termios_attrs)

        def become_session_leader() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            [*launcher_command(), *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            preexec_fn=become_session_leader,
        )
        os.close(slave)
        self.raw = b""

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")

    @property
    def plain(self) -> str:
        return ANSI.sub("", self.text).replace("\r", "")

    def pump(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                self.raw += chunk

    def expect(self, pattern: str, timeout: float = 20, start: int = 0) -> re.Match[str]:
        """Wait until ``pattern`` (a regex) appears in the plain output after ``start``."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.compile(pattern).search(self.plain, start)
            if match:
                return match
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not seen; output so far:\n{self.plain}")
            self.pump(0.1)

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait(self, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.pump(0.1)
        self.pump(0.2)
        return self.proc.wait(max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        with contextlib.suppress(OSError):
            os.close(self.master)


@contextlib.contextmanager
def terminals() -> Iterator[type[Terminal]]:
    """A :class:`Terminal` class whose instances are all closed on the way out."""
    opened: list[Terminal] = []

    class Tracked(Terminal):
        def __init__(self, args: Sequence[str], env: dict[str, str]) -> None:
            super().__init__(args, env)
            opened.append(self)

    try:
        yield Tracked
    finally:
        for term in opened:
            term.close()


def have_example() -> bool:
    """Whether the example plugin (written alongside the launcher) is installed."""
    try:
        import nomad_device.plugins.example.demo
        import nomad_device.plugins.example.plugin  # noqa: F401
    except ImportError:
        return False
    return True


def need_example() -> None:
    if not have_example():
        pytest.skip("the example plugin is not in this tree yet")
