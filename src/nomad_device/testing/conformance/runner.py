"""Run the conformance checks against a plugin executable.

The runner plays a Nomad client, but watches more closely than one: it starts
the executable itself (so it sees every byte on stdout and every stderr line),
connects over the real wire with the SDK's host client, and walks the plugin
through the life Nomad gives it:

1. a launch without the magic cookie (in parallel with the rest);
2. the main launch: handshake, health, PluginInfo, ConfigSchema, SetConfig
   twice with the config Nomad would send, Fingerprint, then Stats after the
   first message, both watched for an observation window; then Reserve with an
   unknown ID and with none, a SIGINT, and Shutdown;
3. a second launch to compare device IDs across the restart.

A plugin that misbehaves early still gets every later check that can run; the
rest are reported as skipped with the reason.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import secrets
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import duration_pb2

from nomad_device.constants import DEVICE_API_VERSION, NOMAD_HANDSHAKE, PLUGIN_TYPE_DEVICE
from nomad_device.goplugin import handshake as hs
from nomad_device.goplugin.client import KillResult, PluginError, ReattachConfig
from nomad_device.goplugin.hclog import parse_line
from nomad_device.host import CallError, DevicePluginClient
from nomad_device.model import UNITS
from nomad_device.proto import device_pb2, device_pb2_grpc
from nomad_device.testing.conformance.checks import CHECKS, CheckResult, Status, check
from nomad_device.testing.conformance.report import ConformanceReport

__all__ = ["SuiteOptions", "run_conformance"]

#: How long Nomad gives a plugin to exit after Shutdown before SIGKILL.
SHUTDOWN_GRACE = 2.0
#: How long after SIGINT the plugin must still be serving.
SIGINT_WAIT = 0.5
#: Start-up slower than this is worth a warning: Nomad pays it three times per agent start.
SLOW_START = 5.0
#: How long a plugin run without the cookie may take to refuse.
COOKIE_TIMEOUT = 10.0
#: Nomad's app protocol version for device plugins.
APP_VERSION = NOMAD_HANDSHAKE.protocol_version

# hashicorp/go-version's notion of a version: digits with dots, optional
# pre-release and build metadata, an optional leading "v".
_VERSION_RE = re.compile(
    r"v?\d+(\.\d+)*"
    r"(-?[0-9A-Za-z~-]+(\.[0-9A-Za-z~-]+)*)?"
    r"(\+[0-9A-Za-z~-]+(\.[0-9A-Za-z~-]+)*)?"
)
_STRICT_SEMVER_RE = re.compile(r"v?\d+\.\d+\.\d+([-+][0-9A-Za-z.~+-]*)?")


@dataclass(frozen=True)
class SuiteOptions:
    """How to run the suite.

    ``config`` (raw msgpack) or ``config_json`` (a config body) replaces the
    defaults-only config. ``timeout`` bounds the first fingerprint and every
    call; ``open_window`` is how long the streams are watched.
    """

    config: bytes | None = None
    config_json: Mapping[str, object] | str | None = None
    timeout: float = 5.0
    start_timeout: float = 20.0
    open_window: float = 3.0
    env: Mapping[str, str] | None = None
    cwd: str | None = None


def run_conformance(
    command: Sequence[str], options: SuiteOptions | None = None
) -> ConformanceReport:
    """Run every check against the plugin started by ``command``."""
    if not command:
        raise ValueError("no plugin command given")
    return _Suite(list(command), options or SuiteOptions()).run()


# --------------------------------------------------------------------- helpers


def _plugin_env(options: SuiteOptions, cookie: bool) -> dict[str, str]:
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


def _excerpt(data: bytes | str, limit: int = 160) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _seconds(value: float) -> str:
    return f"{value:.2f} s"


class _Launch:
    """One plugin process, started as Nomad starts it, observed byte by byte."""

    MAX_LINES = 5000

    def __init__(self, command: list[str], options: SuiteOptions) -> None:
        self.command = command
        self.options = options
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: DevicePluginClient | None = None
        self.started = 0.0
        self.handshake_seconds: float | None = None
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
                env=_plugin_env(self.options, cookie=True),
                cwd=self.options.cwd,
            )
        except OSError as exc:
            self.start_error = f"cannot start {self.command[0]!r}: {exc}"
            return False
        for target, name in ((self._read_stdout, "stdout"), (self._read_stderr, "stderr")):
            thread = threading.Thread(target=target, name=f"conformance-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if not self._handshake_done.wait(self.options.start_timeout):
            self.start_error = (
                f"no handshake line within {self.options.start_timeout:g} s "
                "(Nomad gives up after 1 minute)"
            )
            return False
        if self.handshake is None:
            if self.handshake_error is not None:
                self.start_error = self.handshake_error
            else:
                code = self._wait_exit(2.0)
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

    def _wait_exit(self, timeout: float) -> int | None:
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

    def kill(self) -> KillResult:
        """Nomad's kill: Shutdown, 2 s grace, SIGKILL."""
        assert self.client is not None
        self.kill_result = self.client.kill()
        self._wait_exit(5.0)
        return self.kill_result

    def close(self) -> None:
        """Make sure the process is gone and every output line is read."""
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.process.close()
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
            self._wait_exit(5.0)
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


class _Watch:
    """Consumes a server stream in a thread, keeping every message with its time."""

    def __init__(self, call: Any, name: str) -> None:
        self._call = call
        self.started = time.monotonic()
        self.messages: list[tuple[float, Any]] = []
        self.ended_at: float | None = None
        self.end_code: grpc.StatusCode | None = None
        self.end_details = ""
        self._cancelled = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        code, details = grpc.StatusCode.OK, ""
        try:
            for message in self._call:
                with self._cond:
                    self.messages.append((time.monotonic() - self.started, message))
                    self._cond.notify_all()
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = (exc.details() if isinstance(exc, grpc.Call) else str(exc)) or ""
        with self._cond:
            if not (self._cancelled and code == grpc.StatusCode.CANCELLED):
                self.ended_at = time.monotonic() - self.started
                self.end_code, self.end_details = code, details
            self._cond.notify_all()

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate`` holds or the stream ends; the predicate's value."""
        with self._cond:
            self._cond.wait_for(lambda: predicate() or self.ended, max(0.0, timeout))
            return predicate()

    def snapshot(self) -> list[tuple[float, Any]]:
        with self._cond:
            return list(self.messages)

    def describe_end(self) -> str:
        assert self.ended_at is not None and self.end_code is not None
        when = f"after {_seconds(self.ended_at)}"
        if self.end_code == grpc.StatusCode.OK:
            return f"the stream ended {when} (the handler returned)"
        return f"the stream failed {when}: {self.end_code.name}: {self.end_details}"

    def cancel(self) -> None:
        with self._cond:
            self._cancelled = True
        self._call.cancel()
        self._thread.join(2.0)


def _group_problems(group: Any) -> list[str]:
    """Nomad's validation of one DeviceGroup message, in Nomad's words."""
    problems = [
        f"device {what} must be specified"
        for what, value in (
            ("vendor", group.vendor),
            ("type", group.device_type),
            ("name", group.device_name),
        )
        if not value
    ]
    problems.extend(
        f"device {i}: device ID must be specified" for i, d in enumerate(group.devices) if not d.ID
    )
    for name in sorted(group.attributes):
        attr = group.attributes[name]
        kind = attr.WhichOneof("value")
        problem = None
        if attr.unit and attr.unit not in UNITS:
            problem = f"unrecognized unit {attr.unit!r}"
        elif attr.unit and kind in ("string_val", "bool_val"):
            problem = "unit can not be specified on a boolean or string attribute"
        elif kind is None:
            problem = "no attribute value set"
        if problem:
            problems.append(f"device attribute {name!r} invalid: {problem}")
    return problems


def _group_key(group: Any) -> str:
    return f"{group.vendor}/{group.device_type}/{group.device_name}"


def _describe_groups(groups: Sequence[Any]) -> list[str]:
    lines = []
    for group in groups[:6]:
        ids = [d.ID for d in group.devices]
        shown = ", ".join(ids[:8]) + (", ..." if len(ids) > 8 else "")
        health = sum(1 for d in group.devices if d.healthy)
        lines.append(f"{_group_key(group)}: {len(ids)} device(s) [{shown}], {health} healthy")
    if len(groups) > 6:
        lines.append(f"... and {len(groups) - 6} more group(s)")
    return lines


def _id_set(groups: Iterable[Any]) -> set[tuple[str, str]]:
    return {(_group_key(g), d.ID) for g in groups for d in g.devices}


# ------------------------------------------------------------------------ suite


class _Suite:
    def __init__(self, command: list[str], options: SuiteOptions) -> None:
        self.command = command
        self.options = options
        self.results: dict[str, CheckResult] = {}
        self.launches: list[_Launch] = []
        self._lock = threading.Lock()
        self.plugin_name: str | None = None
        self.plugin_version: str | None = None

    # -- recording --------------------------------------------------------------

    def put(
        self, check_id: str, status: Status, summary: str, evidence: Iterable[str] = ()
    ) -> None:
        with self._lock:
            self.results.setdefault(
                check_id, CheckResult(check(check_id), status, summary, tuple(evidence))
            )

    def skip(self, ids: Iterable[str], reason: str) -> None:
        for check_id in ids:
            self.put(check_id, Status.SKIP, reason)

    # -- the run ------------------------------------------------------------------

    def run(self) -> ConformanceReport:
        began = time.monotonic()
        with ThreadPoolExecutor(1, thread_name_prefix="conformance-cookie") as pool:
            cookie = pool.submit(self.cookie_refusal)
            try:
                self.main()
            finally:
                cookie.result()
        self.hclog_stderr()
        self.skip([c.id for c in CHECKS], "not reached")
        ordered = tuple(self.results[c.id] for c in CHECKS)
        return ConformanceReport(
            command=tuple(self.command),
            results=ordered,
            seconds=time.monotonic() - began,
            plugin_name=self.plugin_name,
            plugin_version=self.plugin_version,
        )

    def cookie_refusal(self) -> None:
        try:
            proc = subprocess.run(
                self.command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=_plugin_env(self.options, cookie=False),
                cwd=self.options.cwd,
                timeout=COOKIE_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            self.put(
                "cookie-refusal",
                Status.FAIL,
                f"without the cookie the plugin was still running after {COOKIE_TIMEOUT:g} s",
                [f"stdout: {_excerpt(exc.stdout or b'')}"],
            )
            return
        except OSError as exc:
            self.put("cookie-refusal", Status.FAIL, f"cannot start the plugin: {exc}")
            return
        evidence = [f"exit status {proc.returncode}"]
        if proc.stderr.strip():
            evidence.append(f"stderr: {_excerpt(proc.stderr.strip().splitlines()[0])}")
        if proc.stdout:
            evidence.append(f"stdout: {_excerpt(proc.stdout)}")
        if proc.stdout:
            summary = "without the cookie the plugin wrote to stdout"
            if b"|grpc" in proc.stdout or b"|netrpc" in proc.stdout:
                summary = "without the cookie the plugin printed a handshake and served anyway"
            self.put("cookie-refusal", Status.FAIL, summary, evidence)
        elif proc.returncode == 0:
            self.put(
                "cookie-refusal", Status.FAIL, "without the cookie the plugin exited 0", evidence
            )
        elif proc.returncode != 1:
            self.put(
                "cookie-refusal",
                Status.WARN,
                f"refused, but with exit status {proc.returncode} instead of 1",
                evidence,
            )
        elif not proc.stderr.strip():
            self.put(
                "cookie-refusal", Status.WARN, "exited 1 without explaining why on stderr", evidence
            )
        else:
            self.put(
                "cookie-refusal", Status.PASS, "exited 1 with an explanation on stderr", evidence
            )

    def main(self) -> None:
        launch = _Launch(self.command, self.options)
        self.launches.append(launch)
        try:
            started = launch.start()
            self.judge_handshake(launch, started)
            if not started:
                self.skip(
                    [c.id for c in CHECKS if c.id not in ("cookie-refusal", "hclog-stderr")],
                    "the plugin did not start (see handshake)",
                )
                return
            self.session(launch)
        finally:
            launch.close()
            self.stdout_quiet()

    # -- the main launch ------------------------------------------------------------

    def judge_handshake(self, launch: _Launch, started: bool) -> None:
        evidence: list[str] = []
        if launch.handshake_raw is not None:
            evidence.append(f"handshake: {launch.handshake_raw!r}")
        if launch.handshake_seconds is not None:
            evidence.append(f"handshake after {_seconds(launch.handshake_seconds)}")
        if launch.lines_before:
            evidence.extend(
                f"stdout before the handshake: {line!r}" for line in launch.lines_before[:5]
            )
            self.put(
                "handshake",
                Status.FAIL,
                f"{len(launch.lines_before)} line(s) on stdout before the handshake; Nomad "
                "reads the first line as the handshake and refuses the plugin",
                evidence,
            )
        if not started:
            evidence.extend(launch.stderr_tail())
            self.put(
                "handshake", Status.FAIL, launch.start_error or "the plugin did not start", evidence
            )
            return
        line = launch.handshake
        assert line is not None
        if line.app_version != APP_VERSION:
            self.put(
                "handshake",
                Status.FAIL,
                f"app protocol version {line.app_version}; Nomad speaks only {APP_VERSION}",
                evidence,
            )
        if line.cert:
            self.put(
                "handshake",
                Status.FAIL,
                "the handshake carries a certificate although the host asked for none; a Go "
                "host fails on it",
                evidence,
            )
        if line.multiplex:
            self.put(
                "handshake",
                Status.FAIL,
                "the handshake asks for gRPC broker multiplexing, which Nomad does not enable",
                evidence,
            )
        seconds = launch.handshake_seconds or 0.0
        if seconds > SLOW_START:
            self.put(
                "handshake",
                Status.WARN,
                f"the handshake took {_seconds(seconds)}; Nomad starts each plugin three times "
                "per agent start",
                evidence,
            )
        self.put(
            "handshake",
            Status.PASS,
            f"{line.network} socket, gRPC, app version {line.app_version}, after "
            f"{_seconds(seconds)}",
            evidence,
        )

    def session(self, launch: _Launch) -> None:
        client = launch.client
        assert client is not None
        timeout = self.options.timeout
        self.health(client, timeout)
        self.plugin_info(client, timeout)
        spec = self.config_schema(client, timeout)
        config = self.set_config(client, spec, timeout)
        needs_config = [
            "first-fingerprint",
            "device-groups-valid",
            "fingerprint-stream-open",
            "stats-interval",
            "stats-stream-open",
            "reserve-unknown-id",
            "reserve-empty",
            "stable-ids",
        ]
        if config is None:
            self.skip(needs_config, "skipped: the plugin was not configured (see set-config)")
            self.sigint_ignored(launch, [])
            self.shutdown(launch, [])
            return
        stub = device_pb2_grpc.DevicePluginStub(client.process.channel)
        fingerprint = _Watch(stub.Fingerprint(device_pb2.FingerprintRequest()), "fingerprint")
        watches = [fingerprint]
        try:
            got_first = fingerprint.wait(lambda: bool(fingerprint.messages), timeout)
            self.first_fingerprint(fingerprint, got_first, launch)
            stats: _Watch | None = None
            if got_first:
                # Nomad starts collecting stats only once the first fingerprint arrived.
                request = device_pb2.StatsRequest(collection_interval=duration_pb2.Duration())
                stats = _Watch(stub.Stats(request), "stats")
                watches.append(stats)
                first_at = fingerprint.started + fingerprint.messages[0][0]
                self.observe(launch, first_at + self.options.open_window)
            self.fingerprint_open(fingerprint, launch)
            self.groups_valid(fingerprint)
            if stats is None:
                self.skip(
                    ["stats-interval", "stats-stream-open"],
                    "skipped: Nomad asks for stats only after the first fingerprint",
                )
            else:
                self.stats_checks(stats, fingerprint)
            known = _id_set(m for _, msg in fingerprint.snapshot() for m in msg.device_group)
            self.reserve_unknown(launch, known)
            self.reserve_empty(launch)
            self.sigint_ignored(launch, watches)
        finally:
            for watch in watches:
                watch.cancel()
        latest = fingerprint.snapshot()
        self.shutdown(launch, watches)
        if not latest:
            self.skip(["stable-ids"], "skipped: no fingerprint to compare")
        else:
            self.stable_ids(config, latest[-1][1])

    def observe(self, launch: _Launch, deadline: float) -> None:
        """Let the streams run until ``deadline`` (sooner if the process dies)."""
        while time.monotonic() < deadline and launch.alive():
            launch._wait_exit(min(0.1, max(0.0, deadline - time.monotonic())))

    def health(self, client: DevicePluginClient, timeout: float) -> None:
        try:
            status = client.health("plugin", timeout)
        except CallError as exc:
            if exc.code in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND):
                self.put(
                    "health",
                    Status.WARN,
                    f"no 'plugin' health service ({exc.code.name}); go-plugin servers have one",
                )
            else:
                self.put(
                    "health", Status.FAIL, f"health check failed: {exc.code.name}: {exc.details}"
                )
            return
        if status == "SERVING":
            self.put("health", Status.PASS, "service 'plugin' is SERVING")
        else:
            self.put("health", Status.FAIL, f"service 'plugin' reports {status}")

    def plugin_info(self, client: DevicePluginClient, timeout: float) -> None:
        try:
            info = client.info(timeout)
        except CallError as exc:
            self.put(
                "plugin-info", Status.FAIL, f"PluginInfo failed: {exc.code.name}: {exc.details}"
            )
            return
        self.plugin_name, self.plugin_version = info.name, info.version
        evidence = [
            f"name {info.name!r}, version {info.version!r}, type {info.type}, "
            f"API versions {list(info.api_versions)}"
        ]
        problems = []
        if info.type != PLUGIN_TYPE_DEVICE:
            problems.append(f"type is {info.type}, not DEVICE ({PLUGIN_TYPE_DEVICE})")
        if DEVICE_API_VERSION not in info.api_versions:
            problems.append(
                f"plugin_api_versions {list(info.api_versions)} lack {DEVICE_API_VERSION}: "
                "Nomad skips the plugin"
            )
        if not _VERSION_RE.fullmatch(info.version):
            problems.append(
                f"plugin_version {info.version!r} does not parse as a version: agent start fails"
            )
        if not info.name:
            problems.append("the name is empty")
        if problems:
            self.put("plugin-info", Status.FAIL, "; ".join(problems), evidence)
        elif not _STRICT_SEMVER_RE.fullmatch(info.version):
            self.put(
                "plugin-info",
                Status.WARN,
                f"version {info.version!r} parses, but is not MAJOR.MINOR.PATCH",
                evidence,
            )
        else:
            self.put("plugin-info", Status.PASS, f"{info.name} {info.version}", evidence)

    def config_schema(self, client: DevicePluginClient, timeout: float) -> Any:
        from nomad_device.wire import cty, hclspec

        try:
            pb = client.schema_proto(timeout)
        except CallError as exc:
            self.put(
                "config-schema", Status.FAIL, f"ConfigSchema failed: {exc.code.name}: {exc.details}"
            )
            return None
        if pb.WhichOneof("block") is None:
            # An empty spec: go's Convert yields no decoder; Nomad accepts no config.
            self.put("config-schema", Status.PASS, "no schema (the plugin takes no config)")
            return hclspec.Object({})
        try:
            spec = hclspec.from_proto(pb)
            hclspec.implied_type(spec)
            problems = list(_literal_problems(spec))
        except (ValueError, TypeError, cty.CtyDecodeError) as exc:
            self.put("config-schema", Status.FAIL, f"the schema does not convert: {exc}")
            return None
        if problems:
            self.put("config-schema", Status.FAIL, "; ".join(problems))
            return None
        names = sorted(spec.attributes) if isinstance(spec, hclspec.Object) else []
        if not isinstance(spec, hclspec.Object):
            self.put(
                "config-schema",
                Status.WARN,
                f"the schema's root is a {type(spec).__name__}, not an Object",
            )
        else:
            self.put(
                "config-schema",
                Status.PASS,
                f"{len(names)} setting(s): {', '.join(names) or '(none)'}",
            )
        return spec

    def set_config(self, client: DevicePluginClient, spec: Any, timeout: float) -> bytes | None:
        from nomad_device.testing import defaults

        label = "the defaults-only config"
        data: bytes | None
        if self.options.config is not None:
            data, label = self.options.config, "the given config bytes"
        elif spec is None:
            self.put("set-config", Status.SKIP, "skipped: no usable schema (see config-schema)")
            data = (
                b""  # what Nomad never gets to: let later checks run on the plugin's own defaults
            )
            with contextlib.suppress(CallError):
                client.set_config(data, timeout=timeout)
            return data
        elif self.options.config_json is not None:
            label = "the given JSON config"
            try:
                data = defaults.config_from_json(spec, self.options.config_json)
            except (defaults.ConfigBodyError, ValueError) as exc:
                self.put(
                    "set-config",
                    Status.FAIL,
                    f"the given JSON config does not fit the schema: {exc}",
                )
                return None
        else:
            try:
                data = defaults.defaults_only_config(spec)
            except defaults.ConfigRequired as exc:
                self.put(
                    "set-config",
                    Status.SKIP,
                    "info: the plugin needs operator config to run; pass --config-json "
                    "(or --config-msgpack-hex) to check the rest",
                    [f"required: {p}" for p in exc.problems],
                )
                return None
            except (defaults.ConfigBodyError, ValueError) as exc:
                self.put("set-config", Status.FAIL, f"the schema's defaults do not encode: {exc}")
                return None
        evidence = [f"msgpack: {data.hex()[:120]}{'...' if len(data) > 60 else ''}"]
        # A validation launch sends the same bytes twice; the long-lived launch once more.
        for attempt in (1, 2):
            try:
                client.set_config(data, timeout=timeout)
            except CallError as exc:
                self.put(
                    "set-config",
                    Status.FAIL,
                    f"SetConfig with {label} failed (call {attempt}): {exc.code.name}: "
                    f"{exc.details}",
                    evidence,
                )
                return None
        self.put("set-config", Status.PASS, f"{label} accepted (twice)", evidence)
        return data

    def first_fingerprint(self, watch: _Watch, got_first: bool, launch: _Launch) -> None:
        timeout = self.options.timeout
        if got_first:
            at, message = watch.messages[0]
            groups = list(message.device_group)
            self.put(
                "first-fingerprint",
                Status.PASS,
                f"first message after {_seconds(at)} with {len(groups)} group(s)",
                _describe_groups(groups),
            )
            return
        if watch.ended:
            summary = f"no first message: {watch.describe_end()}"
        elif not launch.alive():
            summary = f"no first message: the process exited with status {launch.exit_code()}"
        else:
            summary = (
                f"no message within {timeout:g} s; Nomad waits up to 50 s for it before "
                "registering the node"
            )
        self.put("first-fingerprint", Status.FAIL, summary, launch.stderr_tail(3))

    def fingerprint_open(self, watch: _Watch, launch: _Launch) -> None:
        messages = watch.snapshot()
        if watch.ended:
            self.put(
                "fingerprint-stream-open",
                Status.FAIL,
                f"{watch.describe_end()}; Nomad would drop the plugin's devices and kill it",
                [f"{len(messages)} message(s) before the end", *launch.stderr_tail(3)],
            )
            return
        if not launch.alive():
            self.put(
                "fingerprint-stream-open",
                Status.FAIL,
                f"the plugin process exited with status {launch.exit_code()}",
                launch.stderr_tail(3),
            )
            return
        open_for = time.monotonic() - watch.started
        self.put(
            "fingerprint-stream-open",
            Status.PASS,
            f"open for {_seconds(open_for)} with {len(messages)} message(s)",
        )

    def groups_valid(self, watch: _Watch) -> None:
        messages = watch.snapshot()
        if not messages:
            self.skip(["device-groups-valid"], "skipped: no fingerprint message received")
            return
        problems: list[str] = []
        duplicates: set[str] = set()
        for n, (_, message) in enumerate(messages, 1):
            seen: set[str] = set()
            for i, group in enumerate(message.device_group):
                problems.extend(
                    f"message {n}, device group {i} ({_group_key(group)}): {p}"
                    for p in _group_problems(group)
                )
                for device in group.devices:
                    if device.ID and device.ID in seen:
                        duplicates.add(device.ID)
                    seen.add(device.ID)
        last = list(messages[-1][1].device_group)
        if problems:
            self.put(
                "device-groups-valid",
                Status.FAIL,
                f"{len(problems)} problem(s); Nomad would drop all devices and kill the plugin",
                problems[:10],
            )
        elif duplicates:
            self.put(
                "device-groups-valid",
                Status.WARN,
                f"device ID(s) reported twice in one message: {', '.join(sorted(duplicates)[:5])}",
                _describe_groups(last),
            )
        else:
            total = sum(len(g.devices) for g in last)
            self.put(
                "device-groups-valid",
                Status.PASS,
                f"{len(messages)} message(s) valid; now {len(last)} group(s), {total} device(s)",
                _describe_groups(last),
            )

    def stats_checks(self, stats: _Watch, fingerprint: _Watch) -> None:
        messages = stats.snapshot()
        latest = fingerprint.snapshot()[-1][1]
        has_devices = any(g.devices for g in latest.device_group)
        window = (stats.ended_at if stats.ended else time.monotonic() - stats.started) or 0.0
        times = [t for t, _ in messages]
        evidence = [f"{len(messages)} message(s) in {_seconds(window)}"]
        if times:
            evidence.append("at " + ", ".join(f"{t:.2f}" for t in times[:10]) + " s")
        # -- the interval -------------------------------------------------------
        gaps = [b - a for a, b in itertools.pairwise(times)]
        if stats.ended and not messages:
            self.put(
                "stats-interval",
                Status.FAIL,
                f"Stats with interval 0 got no message: {stats.describe_end()}",
                evidence,
            )
        elif gaps and statistics.median(gaps) < 0.5:
            self.put(
                "stats-interval",
                Status.FAIL,
                f"messages every {statistics.median(gaps):.3f} s: interval 0 must mean 1 s",
                evidence,
            )
        elif not messages:
            note = "no devices" if not has_devices else "the plugin reports no statistics"
            self.put(
                "stats-interval",
                Status.PASS,
                f"interval 0 accepted; no messages ({note})",
                evidence,
            )
        elif gaps and statistics.median(gaps) > 2.0:
            self.put(
                "stats-interval",
                Status.WARN,
                f"messages every {statistics.median(gaps):.2f} s; expected about 1 s "
                "for interval 0",
                evidence,
            )
        elif times[0] > 1.5:
            self.put(
                "stats-interval",
                Status.WARN,
                f"the first message came after {_seconds(times[0])}; send it at once",
                evidence,
            )
        elif not gaps and window >= 2.5:
            self.put(
                "stats-interval",
                Status.WARN,
                f"only one message in {_seconds(window)}; expected one about every second",
                evidence,
            )
        else:
            cadence = f", every {statistics.median(gaps):.2f} s" if gaps else ""
            self.put("stats-interval", Status.PASS, f"interval 0 accepted{cadence}", evidence)
        # -- staying open ---------------------------------------------------------
        if not stats.ended:
            self.put("stats-stream-open", Status.PASS, f"open for {_seconds(window)}", evidence)
        elif not messages:
            self.put(
                "stats-stream-open",
                Status.SKIP,
                "skipped: Stats never sent a message (see stats-interval)",
            )
        elif stats.end_code == grpc.StatusCode.OK:
            self.put(
                "stats-stream-open",
                Status.FAIL,
                f"{stats.describe_end()}; Nomad stops collecting stats for good",
                evidence,
            )
        else:
            self.put(
                "stats-stream-open",
                Status.WARN,
                f"{stats.describe_end()}; Nomad retries only after 5 s or more",
                evidence,
            )

    def _after_call(self, launch: _Launch) -> tuple[bool, str]:
        if launch._wait_exit(0.2) is not None:
            return False, f"the process exited with status {launch.exit_code()}"
        return launch.responsive(self.options.timeout)

    def reserve_unknown(self, launch: _Launch, known: set[tuple[str, str]]) -> None:
        client = launch.client
        assert client is not None
        if not launch.alive():
            self.skip(["reserve-unknown-id"], "skipped: the plugin is no longer running")
            return
        taken = {device_id for _, device_id in known}
        unknown = "nomad-conformance-unknown-" + secrets.token_hex(4)
        while unknown in taken:  # pragma: no cover - astronomically unlikely
            unknown = "nomad-conformance-unknown-" + secrets.token_hex(4)
        answer: str
        error: CallError | None = None
        try:
            client.reserve([unknown], self.options.timeout)
            answer = "a reservation"
        except CallError as exc:
            error = exc
            answer = f"{exc.code.name}: {exc.details}"
        ok, state = self._after_call(launch)
        evidence = [f"Reserve([{unknown!r}]) -> {answer}", f"afterwards: {state}"]
        if not ok:
            evidence.extend(launch.stderr_tail(3))
            self.put(
                "reserve-unknown-id",
                Status.FAIL,
                f"the plugin did not survive it: {state}",
                evidence,
            )
        elif error is None:
            self.put(
                "reserve-unknown-id",
                Status.WARN,
                "an ID the plugin never reported got a reservation instead of an error",
                evidence,
            )
        elif error.code == grpc.StatusCode.DEADLINE_EXCEEDED:
            self.put("reserve-unknown-id", Status.FAIL, "no answer within the deadline", evidence)
        elif error.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
            self.put("reserve-unknown-id", Status.FAIL, f"the call broke off: {answer}", evidence)
        else:
            self.put("reserve-unknown-id", Status.PASS, f"refused with {error.code.name}", evidence)

    def reserve_empty(self, launch: _Launch) -> None:
        client = launch.client
        assert client is not None
        if not launch.alive():
            self.skip(["reserve-empty"], "skipped: the plugin is no longer running")
            return
        error: CallError | None = None
        try:
            client.reserve([], self.options.timeout)
            answer = "a reservation"
        except CallError as exc:
            error = exc
            answer = f"{exc.code.name}: {exc.details}"
        ok, state = self._after_call(launch)
        evidence = [f"Reserve([]) -> {answer}", f"afterwards: {state}"]
        if not ok:
            evidence.extend(launch.stderr_tail(3))
            self.put(
                "reserve-empty", Status.FAIL, f"the plugin did not survive it: {state}", evidence
            )
        elif error is not None and error.code in (
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.CANCELLED,
        ):
            self.put("reserve-empty", Status.FAIL, f"no proper answer: {answer}", evidence)
        else:
            self.put(
                "reserve-empty", Status.PASS, f"answered with {answer.split(':')[0]}", evidence
            )

    def sigint_ignored(self, launch: _Launch, watches: Sequence[_Watch]) -> None:
        if not launch.alive():
            self.skip(["sigint-ignored"], "skipped: the plugin is no longer running")
            return
        open_before = [w for w in watches if not w.ended]
        os.kill(launch.pid, signal.SIGINT)
        code = launch._wait_exit(SIGINT_WAIT)
        if code is not None:
            self.put(
                "sigint-ignored",
                Status.FAIL,
                f"the plugin exited with status {code} on SIGINT",
                launch.stderr_tail(3),
            )
            return
        ok, state = launch.responsive(self.options.timeout)
        ended = [w for w in open_before if w.ended]
        if not ok:
            self.put("sigint-ignored", Status.FAIL, f"not serving after SIGINT: {state}")
        elif ended:
            self.put(
                "sigint-ignored",
                Status.FAIL,
                "SIGINT ended a stream: " + "; ".join(w.describe_end() for w in ended),
            )
        else:
            self.put(
                "sigint-ignored",
                Status.PASS,
                f"still serving {SIGINT_WAIT:g} s after SIGINT ({state})",
            )

    def shutdown(self, launch: _Launch, watches: Sequence[_Watch]) -> None:
        if not launch.alive():
            self.skip(
                ["shutdown"],
                f"skipped: the plugin had already exited (status {launch.exit_code()})",
            )
            return
        for watch in watches:  # Nomad cancels its streams before it kills the plugin
            watch.cancel()
        result = launch.kill()
        code = launch.exit_code()
        evidence = [f"{result.outcome} after {_seconds(result.seconds)}, exit status {code}"]
        if result.outcome == "forced":
            self.put(
                "shutdown",
                Status.FAIL,
                f"still running {SHUTDOWN_GRACE:g} s after Shutdown: Nomad sends SIGKILL",
                evidence,
            )
        elif result.seconds >= SHUTDOWN_GRACE:
            self.put("shutdown", Status.FAIL, f"took {_seconds(result.seconds)} to exit", evidence)
        elif code not in (0, None):
            self.put("shutdown", Status.WARN, f"exited in time, but with status {code}", evidence)
        else:
            self.put(
                "shutdown",
                Status.PASS,
                f"exited {_seconds(result.seconds)} after Shutdown",
                evidence,
            )

    def stdout_quiet(self) -> None:
        total = sum(launch.stdout_after_total for launch in self.launches)
        if not any(launch.handshake for launch in self.launches):
            self.skip(["stdout-quiet"], "skipped: no handshake (see handshake)")
            return
        if total:
            sample = next(
                bytes(launch.stdout_after) for launch in self.launches if launch.stdout_after
            )
            self.put(
                "stdout-quiet",
                Status.WARN,
                f"{total} byte(s) written to stdout after the handshake; Nomad discards them",
                [f"stdout: {_excerpt(sample)}"],
            )
        else:
            self.put("stdout-quiet", Status.PASS, "nothing on stdout after the handshake")

    def stable_ids(self, config: bytes, latest: Any) -> None:
        before = _id_set(latest.device_group)
        launch = _Launch(self.command, self.options)
        self.launches.append(launch)
        try:
            if not launch.start():
                self.put(
                    "stable-ids",
                    Status.FAIL,
                    f"the second launch failed: {launch.start_error}",
                    launch.stderr_tail(3),
                )
                return
            assert launch.client is not None
            try:
                launch.client.set_config(config, timeout=self.options.timeout)
            except CallError as exc:
                self.put(
                    "stable-ids",
                    Status.FAIL,
                    f"the second launch refused the same config: {exc.code.name}: {exc.details}",
                )
                return
            stub = device_pb2_grpc.DevicePluginStub(launch.client.process.channel)
            watch = _Watch(stub.Fingerprint(device_pb2.FingerprintRequest()), "fingerprint-2")
            try:

                def same() -> bool:
                    return (
                        bool(watch.messages)
                        and _id_set(watch.messages[-1][1].device_group) == before
                    )

                watch.wait(same, self.options.timeout)
                after = [msg for _, msg in watch.snapshot()]
            finally:
                watch.cancel()
            if launch.alive():
                launch.kill()
        finally:
            launch.close()
        if not after:
            self.put("stable-ids", Status.FAIL, "the second launch sent no fingerprint")
            return
        now = _id_set(after[-1].device_group)
        if now == before:
            self.put(
                "stable-ids",
                Status.PASS,
                f"the same {len(now)} device ID(s) after a restart",
                [f"{key}: {device_id}" for key, device_id in sorted(now)[:8]],
            )
            return
        gone = sorted(before - now)
        new = sorted(now - before)
        self.put(
            "stable-ids",
            Status.FAIL,
            f"{len(gone)} ID(s) disappeared and {len(new)} appeared across a restart",
            [f"before only: {k}: {i}" for k, i in gone[:5]]
            + [f"after only: {k}: {i}" for k, i in new[:5]],
        )

    def hclog_stderr(self) -> None:
        lines = [line for launch in self.launches for line in launch.stderr_lines]
        bad: dict[str, int] = {}
        for line in lines:
            try:
                parse_line(line, strict=True)
            except ValueError as exc:
                bad[str(exc)] = bad.get(str(exc), 0) + 1
        if not any(launch.proc for launch in self.launches):
            self.skip(["hclog-stderr"], "skipped: the plugin was never started")
        elif bad:
            self.put(
                "hclog-stderr",
                Status.FAIL,
                f"{sum(bad.values())} of {len(lines)} stderr line(s) are not hclog JSON",
                [f"{problem}" + (f" (x{n})" if n > 1 else "") for problem, n in bad.items()][:5],
            )
        else:
            self.put("hclog-stderr", Status.PASS, f"all {len(lines)} stderr line(s) are hclog JSON")


def _literal_problems(spec: Any) -> Iterable[str]:
    """Literals and types anywhere in the tree that Nomad could not evaluate."""
    from nomad_device.wire import cty, hclspec

    if isinstance(spec, hclspec.Literal):
        try:
            hclspec.parse_literal(spec.value)
        except ValueError as exc:
            yield f"literal {spec.value!r}: {exc}"
    elif isinstance(spec, hclspec.Attr | hclspec.BlockAttrs):
        try:
            cty.parse_type(spec.type)
        except ValueError as exc:
            yield f"{spec.name}: type {spec.type!r}: {exc}"
    elif isinstance(spec, hclspec.Object):
        for sub in spec.attributes.values():
            yield from _literal_problems(sub)
    elif isinstance(spec, hclspec.Array):
        for sub in spec.values:
            yield from _literal_problems(sub)
    elif isinstance(spec, hclspec.Default):
        yield from _literal_problems(spec.primary)
        yield from _literal_problems(spec.default)
    elif isinstance(spec, hclspec.Block | hclspec.BlockList | hclspec.BlockSet | hclspec.BlockMap):
        yield from _literal_problems(spec.nested)
