"""One plugin process, started as Nomad starts it and observed byte by byte.

The suite does not use the host client's launcher: it needs to see every line
printed before the handshake, every byte after it and every stderr line, so it
starts the process itself and only then connects with the host client.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable

import grpc

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin import handshake as hs
from nomad_device.goplugin.client import KillResult, PluginError, ReattachConfig
from nomad_device.goplugin.hclog import parse_line
from nomad_device.host import CallError, DevicePluginClient
from nomad_device.testing.conformance.clock import STRETCH, Mark, PluginClock
from nomad_device.testing.conformance.suite import SuiteOptions

__all__ = ["APP_VERSION", "Launch", "crash_advice", "plugin_env", "python_crash"]

#: Nomad's app protocol version for device plugins.
APP_VERSION = NOMAD_HANDSHAKE.protocol_version


def plugin_env(options: SuiteOptions, cookie: bool) -> dict[str, str]:
    """The environment Nomad gives a plugin (or, without ``cookie``, an operator's shell)."""
    env = dict(os.environ if options.env is None else options.env)
    for key in (
        hs.ENV_CLIENT_CERT,
        hs.ENV_MULTIPLEX_GRPC,
        hs.ENV_UNIX_SOCKET_DIR,
        hs.ENV_UNIX_SOCKET_GROUP,
        NOMAD_HANDSHAKE.magic_cookie_key,
    ):
        env.pop(key, None)
    if cookie:
        env[NOMAD_HANDSHAKE.magic_cookie_key] = NOMAD_HANDSHAKE.magic_cookie_value
        env[hs.ENV_PROTOCOL_VERSIONS] = str(APP_VERSION)
        env[hs.ENV_MIN_PORT] = "10000"
        env[hs.ENV_MAX_PORT] = "25000"
    else:
        for key in (hs.ENV_PROTOCOL_VERSIONS, hs.ENV_MIN_PORT, hs.ENV_MAX_PORT):
            env.pop(key, None)
    return env


_TRACEBACK = "Traceback (most recent call last):"


def python_crash(lines: Iterable[str]) -> str | None:
    """The exception a Python plugin died of, from its stderr, or None.

    Recognises Python's own traceback (plain text: what an exception raised
    before any logging was set up prints, a ``ModuleNotFoundError`` at import
    for one) and the SDK's hclog record of one (an error with a ``traceback``
    field). The answer is the exception's last line, such as
    ``ModuleNotFoundError: No module named 'widgets'``; for chained
    exceptions, the last one's.
    """
    found: str | None = None
    in_traceback = False
    for line in lines:
        if line.startswith("{"):
            try:
                entry = parse_line(line)
            except ValueError:  # JSON, but not hclog: no record of an exception either
                continue
            if not entry.raw and entry.level == "error" and "traceback" in entry.fields:
                error = entry.fields.get("error")
                found = error if isinstance(error, str) and error else entry.message
            continue
        if line.startswith(_TRACEBACK):
            in_traceback = True
        elif in_traceback and line.strip() and not line[0].isspace():
            found, in_traceback = line.strip(), False
    return found


def crash_advice(exception: str) -> str:
    """What to do about a plugin that died of ``exception`` before it could serve."""
    advice = (
        "The plugin died of a Python exception before it could serve; its traceback is on "
        "stderr. Under Nomad that traceback is plain text, which the agent logs at debug "
        "level only, so an operator sees nothing but a plugin that failed to start (and a "
        "failed fingerprint launch stops the agent). "
    )
    if exception.startswith(("ModuleNotFoundError", "ImportError")):
        advice += (
            "A module is missing from the Python that runs the plugin: install it into that "
            "environment, or bundle the plugin with its requirements (nomad-device-bundle "
            "PLUGIN -r requirements.txt) so that a node needs only Python. "
        )
    return advice + (
        "Run the command by hand to see the whole traceback, and make sure an exception "
        "at import time cannot happen on a node (import optional libraries where they are "
        "used, and report their absence in the log)."
    )


class Launch:
    """One plugin process, started as Nomad starts it, observed byte by byte."""

    MAX_LINES = 5000

    def __init__(self, command: list[str], options: SuiteOptions) -> None:
        self.command = command
        self.options = options
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: DevicePluginClient | None = None
        self.started = 0.0
        #: The plugin's own time (see :mod:`.clock`): the bounds are about the plugin.
        self.clock = PluginClock(None)
        self._start_mark = Mark(0.0, {})
        self.handshake_seconds: float | None = None
        #: Of ``handshake_seconds``, the plugin's own time (less its wait for a CPU).
        self.handshake_own_seconds: float | None = None
        self.handshake_raw: str | None = None
        self.handshake: hs.HandshakeLine | None = None
        self.handshake_error: str | None = None
        self.start_error: str | None = None
        self.lines_before: list[str] = []
        self.stdout_after = bytearray()
        self.stdout_after_total = 0
        self.stderr_lines: list[str] = []
        self._handshake_done = threading.Event()
        self._threads: list[threading.Thread] = []
        self.kill_result: KillResult | None = None

    # -- start ------------------------------------------------------------------

    def start(self) -> bool:
        """Launch, read the handshake and connect; False (with ``start_error``) if not."""
        self.started = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=plugin_env(self.options, cookie=True),
                cwd=self.options.cwd,
            )
        except OSError as exc:
            self.start_error = f"cannot start {self.command[0]!r}: {exc}"
            return False
        self.clock = PluginClock(self.proc.pid)
        # A new process has waited for nothing yet: its every wait counts from here.
        self._start_mark = Mark(self.started, {})
        for target, name in ((self._read_stdout, "stdout"), (self._read_stderr, "stderr")):
            thread = threading.Thread(target=target, name=f"conformance-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if not self.clock.wait(self._handshake_done.wait, self.options.start_timeout):
            self.start_error = (
                f"no handshake line within {self.options.start_timeout:g} s "
                "(Nomad gives up after 1 minute)"
            )
            return False
        if self.handshake is None:
            if self.handshake_error is not None:
                self.start_error = self.handshake_error
            else:
                code = self.wait_exit(2.0)
                if code is not None:
                    self._threads[1].join(2.0)  # its last stderr lines: why it exited
                self.start_error = (
                    f"the plugin exited (status {code}) without printing a handshake"
                    if code is not None
                    else "stdout was closed without a handshake line"
                )
            return False
        line = self.handshake
        if line.protocol != "grpc":
            self.start_error = f"the plugin speaks {line.protocol!r}; Nomad requires grpc"
            return False
        config = ReattachConfig(line.network, line.address, self.proc.pid, line.app_version)
        try:
            self.client = DevicePluginClient.reattach(config, timeout=self.options.timeout)
        except PluginError as exc:
            self.start_error = f"cannot connect to {line.network}:{line.address}: {exc}"
            return False
        return True

    def _read_stdout(self) -> None:
        # A pipe closed under our feet (see close()) just ends the reading.
        with contextlib.suppress(OSError, ValueError):
            self._read_stdout_lines()

    def _read_stdout_lines(self) -> None:
        assert self.proc is not None and isinstance(self.proc.stdout, io.BufferedReader)
        stdout = self.proc.stdout
        try:
            while True:
                raw = stdout.readline()
                if not raw:
                    return
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                try:
                    parsed = hs.HandshakeLine.parse(text)
                except hs.HandshakeError as exc:
                    if text.count("|") >= 3:
                        self.handshake_raw = text
                        self.handshake_error = f"malformed handshake line {text!r}: {exc}"
                        return
                    if len(self.lines_before) < 50:
                        self.lines_before.append(text)
                    continue
                self.handshake_raw = text
                self.handshake = parsed
                self.handshake_seconds = time.monotonic() - self.started
                self.handshake_own_seconds = self.clock.since(self._start_mark)
                break
        finally:
            self._handshake_done.set()
        # After the handshake Nomad reads stdout only to discard it; we keep a sample.
        while True:
            chunk = stdout.read1(65536)
            if not chunk:
                return
            self.stdout_after_total += len(chunk)
            if len(self.stdout_after) < 4096:
                self.stdout_after += chunk[: 4096 - len(self.stdout_after)]

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        with contextlib.suppress(OSError, ValueError):
            for raw in self.proc.stderr:
                if len(self.stderr_lines) < self.MAX_LINES:
                    self.stderr_lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    # -- state ------------------------------------------------------------------

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status once the process exits within ``timeout``, else None."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def responsive(self, timeout: float) -> tuple[bool, str]:
        """Alive and answering: health if offered, else PluginInfo."""
        if not self.alive():
            return False, f"the process exited with status {self.exit_code()}"
        assert self.client is not None
        try:
            status = self.client.health("plugin", timeout)
            return status == "SERVING", f"health: {status}"
        except CallError as exc:
            if exc.code not in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND):
                return False, f"health check failed: {exc.code.name}: {exc.details}"
        try:
            self.client.info(timeout)
            return True, "PluginInfo answered"
        except CallError as exc:
            return False, f"PluginInfo failed: {exc.code.name}: {exc.details}"

    # -- end --------------------------------------------------------------------

    def kill(self, grace: float) -> tuple[KillResult, float]:
        """Nomad's kill, its grace in the plugin's own time: Shutdown, then SIGKILL once
        the plugin has had ``grace`` seconds of its own to exit.

        Returns how it ended (in wall seconds) and the plugin's own seconds until then.
        """
        assert self.client is not None
        mark = self.clock.mark()
        # The host client makes the Shutdown call and closes its side; its grace is the
        # longest the plugin's own may stretch to, and the SIGKILL is sent from here.
        asking = threading.Thread(
            target=self.client.process.kill,
            args=(grace * STRETCH,),
            name="conformance-kill",
            daemon=True,
        )
        asking.start()
        exited = self.clock.wait(self._exited, grace, mark)
        own = self.clock.since(mark)  # before the exit is reaped: /proc still knows it
        took = time.monotonic() - mark.wall
        if not exited:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.wait_exit(5.0)
        asking.join(5.0)
        self.kill_result = KillResult("graceful" if exited else "forced", took, self.exit_code())
        return self.kill_result, own

    def _exited(self, timeout: float) -> bool:
        """Whether the process exits within ``timeout``, left unreaped."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                    return True
            except ChildProcessError:  # reaped already
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def close(self) -> None:
        """Make sure the process is gone and every output line is read."""
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.process.close()
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
            self.wait_exit(5.0)
        for thread in self._threads:
            thread.join(2.0)
        if self.proc is not None:
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()

    def stderr_tail(self, n: int = 5) -> list[str]:
        """The last ``n`` notable stderr lines: warnings, errors and plain text."""
        notable: list[str] = []
        for line in reversed(self.stderr_lines):
            try:
                entry = parse_line(line, strict=True)
            except ValueError:
                if line.strip():
                    notable.append(f"stderr: {line[:200]}")
            else:
                if entry.level in ("warn", "error"):
                    notable.append(f"log {entry.level}: {entry.message[:200]}")
            if len(notable) >= n:
                break
        return notable[::-1]
