"""The transport checks: cookie, handshake, stdout, health and hclog on stderr.

These are go-plugin's part of the contract (protocol notes, sections 2 to 4):
what Nomad sees of a plugin before and beside any device RPC.
"""

from __future__ import annotations

import subprocess
import time

import grpc

from nomad_device.goplugin.hclog import parse_line
from nomad_device.host import CallError, DevicePluginClient
from nomad_device.testing.conformance.checks import Status
from nomad_device.testing.conformance.clock import Mark, PluginClock
from nomad_device.testing.conformance.launch import (
    APP_VERSION,
    Launch,
    crash_advice,
    plugin_env,
    python_crash,
)
from nomad_device.testing.conformance.suite import Suite, excerpt, seconds, waited_for_cpu

__all__ = ["cookie_refusal", "handshake", "hclog_stderr", "health", "stdout_quiet"]

#: Start-up slower than this is worth a warning: Nomad pays it three times per agent start.
#: Like every bound of the suite, it is counted in the plugin's own time (:mod:`.clock`).
SLOW_START = 5.0
#: How long a plugin run without the cookie may take to refuse (its own time).
COOKIE_TIMEOUT = 10.0


def cookie_refusal(suite: Suite) -> None:
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            suite.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=plugin_env(suite.options, cookie=False),
            cwd=suite.options.cwd,
        )
    except OSError as exc:
        suite.put("cookie-refusal", Status.FAIL, f"cannot start the plugin: {exc}")
        return
    output: list[tuple[bytes, bytes]] = []
    so_far = b""

    def finished(timeout: float) -> bool:
        nonlocal so_far
        try:
            output.append(proc.communicate(timeout=timeout))
        except subprocess.TimeoutExpired as exc:
            so_far = exc.stdout or b""
        return bool(output)

    if not PluginClock(proc.pid).wait(finished, COOKIE_TIMEOUT, Mark(started, {})):
        proc.kill()
        proc.wait()
        suite.put(
            "cookie-refusal",
            Status.FAIL,
            f"without the cookie the plugin was still running after {COOKIE_TIMEOUT:g} s",
            [f"stdout: {excerpt(so_far)}"],
        )
        return
    stdout, stderr_bytes = output[0]
    evidence = [f"exit status {proc.returncode}"]
    stderr = stderr_bytes.decode("utf-8", "replace")
    crash = python_crash(stderr.splitlines())
    if crash is not None:
        evidence.append(f"exception: {excerpt(crash)}")
    elif stderr.strip():
        evidence.append(f"stderr: {excerpt(stderr.strip().splitlines()[0])}")
    if stdout:
        evidence.append(f"stdout: {excerpt(stdout)}")
    if crash is not None:
        # Exit status 1 and text on stderr, yet nothing refused anything: it would
        # crash the same way under Nomad.
        suite.put(
            "cookie-refusal",
            Status.FAIL,
            f"without the cookie the plugin crashed ({crash}) instead of refusing to run",
            evidence,
            advice=crash_advice(crash),
        )
    elif stdout:
        summary = "without the cookie the plugin wrote to stdout"
        if b"|grpc" in stdout or b"|netrpc" in stdout:
            summary = "without the cookie the plugin printed a handshake and served anyway"
        suite.put("cookie-refusal", Status.FAIL, summary, evidence)
    elif proc.returncode == 0:
        suite.put("cookie-refusal", Status.FAIL, "without the cookie the plugin exited 0", evidence)
    elif proc.returncode != 1:
        suite.put(
            "cookie-refusal",
            Status.WARN,
            f"refused, but with exit status {proc.returncode} instead of 1",
            evidence,
        )
    elif not stderr.strip():
        suite.put(
            "cookie-refusal", Status.WARN, "exited 1 without explaining why on stderr", evidence
        )
    else:
        suite.put("cookie-refusal", Status.PASS, "exited 1 with an explanation on stderr", evidence)


def handshake(suite: Suite, launch: Launch, started: bool) -> None:
    evidence: list[str] = []
    if launch.handshake_raw is not None:
        evidence.append(f"handshake: {launch.handshake_raw!r}")
    if launch.handshake_seconds is not None:
        evidence.append(f"handshake after {seconds(launch.handshake_seconds)}")
    if launch.lines_before:
        evidence.extend(
            f"stdout before the handshake: {line!r}" for line in launch.lines_before[:5]
        )
        suite.put(
            "handshake",
            Status.FAIL,
            f"{len(launch.lines_before)} line(s) on stdout before the handshake; Nomad "
            "reads the first line as the handshake and refuses the plugin",
            evidence,
        )
    if not started:
        evidence.extend(launch.stderr_tail())
        crash = python_crash(launch.stderr_lines)
        if crash is not None:
            suite.put(
                "handshake",
                Status.FAIL,
                f"the plugin crashed before its handshake: {crash}",
                evidence,
                advice=crash_advice(crash),
            )
        suite.put(
            "handshake", Status.FAIL, launch.start_error or "the plugin did not start", evidence
        )
        return
    line = launch.handshake
    assert line is not None
    if line.app_version != APP_VERSION:
        suite.put(
            "handshake",
            Status.FAIL,
            f"app protocol version {line.app_version}; Nomad speaks only {APP_VERSION}",
            evidence,
        )
    if line.cert:
        suite.put(
            "handshake",
            Status.FAIL,
            "the handshake carries a certificate although the host asked for none; a Go "
            "host fails on it",
            evidence,
        )
    if line.multiplex:
        suite.put(
            "handshake",
            Status.FAIL,
            "the handshake asks for gRPC broker multiplexing, which Nomad does not enable",
            evidence,
        )
    took = launch.handshake_seconds or 0.0
    own = launch.handshake_own_seconds if launch.handshake_own_seconds is not None else took
    if took - own >= 0.05:
        evidence.append(waited_for_cpu(took - own))
    if own > SLOW_START:
        suite.put(
            "handshake",
            Status.WARN,
            f"the handshake took {seconds(own)} of the plugin's own time; Nomad starts each "
            "plugin three times per agent start",
            evidence,
        )
    suite.put(
        "handshake",
        Status.PASS,
        f"{line.network} socket, gRPC, app version {line.app_version}, after {seconds(took)}",
        evidence,
    )


def stdout_quiet(suite: Suite) -> None:
    total = sum(launch.stdout_after_total for launch in suite.launches)
    if not any(launch.handshake for launch in suite.launches):
        suite.skip(["stdout-quiet"], "skipped: no handshake (see handshake)")
        return
    if total:
        sample = next(
            bytes(launch.stdout_after) for launch in suite.launches if launch.stdout_after
        )
        suite.put(
            "stdout-quiet",
            Status.WARN,
            f"{total} byte(s) written to stdout after the handshake; Nomad discards them",
            [f"stdout: {excerpt(sample)}"],
        )
    else:
        suite.put("stdout-quiet", Status.PASS, "nothing on stdout after the handshake")


def health(suite: Suite, client: DevicePluginClient, timeout: float) -> None:
    try:
        status = client.health("plugin", timeout)
    except CallError as exc:
        if exc.code in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND):
            suite.put(
                "health",
                Status.WARN,
                f"no 'plugin' health service ({exc.code.name}); go-plugin servers have one",
            )
        else:
            suite.put("health", Status.FAIL, f"health check failed: {exc.code.name}: {exc.details}")
        return
    if status == "SERVING":
        suite.put("health", Status.PASS, "service 'plugin' is SERVING")
    else:
        suite.put("health", Status.FAIL, f"service 'plugin' reports {status}")


def hclog_stderr(suite: Suite) -> None:
    lines = [line for launch in suite.launches for line in launch.stderr_lines]
    bad: dict[str, int] = {}
    for line in lines:
        try:
            parse_line(line, strict=True)
        except ValueError as exc:
            bad[str(exc)] = bad.get(str(exc), 0) + 1
    if not any(launch.proc for launch in suite.launches):
        suite.skip(["hclog-stderr"], "skipped: the plugin was never started")
    elif bad:
        suite.put(
            "hclog-stderr",
            Status.FAIL,
            f"{sum(bad.values())} of {len(lines)} stderr line(s) are not hclog JSON",
            [f"{problem}" + (f" (x{n})" if n > 1 else "") for problem, n in bad.items()][:5],
        )
    else:
        suite.put("hclog-stderr", Status.PASS, f"all {len(lines)} stderr line(s) are hclog JSON")
