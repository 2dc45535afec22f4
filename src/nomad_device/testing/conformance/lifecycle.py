"""The lifecycle checks: SIGINT ignored, Shutdown honoured in time, the same IDs after a restart.

How Nomad ends a plugin and starts it again (protocol notes, sections 5 and 6).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from typing import Any

from nomad_device.host import CallError
from nomad_device.proto import device_pb2, device_pb2_grpc
from nomad_device.testing.conformance.checks import Status
from nomad_device.testing.conformance.fingerprint import id_set
from nomad_device.testing.conformance.launch import Launch
from nomad_device.testing.conformance.streams import StreamWatch
from nomad_device.testing.conformance.suite import Suite, seconds, waited_for_cpu

__all__ = ["shutdown", "sigint_ignored", "stable_ids"]

#: How long Nomad gives a plugin to exit after Shutdown before SIGKILL.
SHUTDOWN_GRACE = 2.0
#: How long after SIGINT the plugin must still be serving.
SIGINT_WAIT = 0.5


def sigint_ignored(suite: Suite, launch: Launch, watches: Sequence[StreamWatch]) -> None:
    if not launch.alive():
        suite.skip(["sigint-ignored"], "skipped: the plugin is no longer running")
        return
    open_before = [w for w in watches if not w.ended]
    os.kill(launch.pid, signal.SIGINT)
    code = launch.wait_exit(SIGINT_WAIT)
    if code is not None:
        suite.put(
            "sigint-ignored",
            Status.FAIL,
            f"the plugin exited with status {code} on SIGINT",
            launch.stderr_tail(3),
        )
        return
    ok, state = launch.responsive(suite.options.timeout)
    ended = [w for w in open_before if w.ended]
    if not ok:
        suite.put("sigint-ignored", Status.FAIL, f"not serving after SIGINT: {state}")
    elif ended:
        suite.put(
            "sigint-ignored",
            Status.FAIL,
            "SIGINT ended a stream: " + "; ".join(w.describe_end() for w in ended),
        )
    else:
        suite.put(
            "sigint-ignored",
            Status.PASS,
            f"still serving {SIGINT_WAIT:g} s after SIGINT ({state})",
        )


def shutdown(suite: Suite, launch: Launch, watches: Sequence[StreamWatch]) -> None:
    if not launch.alive():
        suite.skip(
            ["shutdown"],
            f"skipped: the plugin had already exited (status {launch.exit_code()})",
        )
        return
    for watch in watches:  # Nomad cancels its streams before it kills the plugin
        watch.cancel()
    result, own = launch.kill(SHUTDOWN_GRACE)
    code = launch.exit_code()
    evidence = [f"{result.outcome} after {seconds(result.seconds)}, exit status {code}"]
    if result.seconds - own >= 0.05:
        evidence.append(waited_for_cpu(result.seconds - own))
    if result.outcome == "forced":
        suite.put(
            "shutdown",
            Status.FAIL,
            f"still running {SHUTDOWN_GRACE:g} s after Shutdown: Nomad sends SIGKILL",
            evidence,
        )
    elif code not in (0, None):
        suite.put("shutdown", Status.WARN, f"exited in time, but with status {code}", evidence)
    else:
        suite.put(
            "shutdown",
            Status.PASS,
            f"exited {seconds(result.seconds)} after Shutdown",
            evidence,
        )


def stable_ids(suite: Suite, config: bytes, latest: Any) -> None:
    before = id_set(latest.device_group)
    launch = Launch(suite.command, suite.options)
    suite.launches.append(launch)
    try:
        if not launch.start():
            suite.put(
                "stable-ids",
                Status.FAIL,
                f"the second launch failed: {launch.start_error}",
                launch.stderr_tail(3),
            )
            return
        assert launch.client is not None
        try:
            launch.client.set_config(config, timeout=suite.options.timeout)
        except CallError as exc:
            suite.put(
                "stable-ids",
                Status.FAIL,
                f"the second launch refused the same config: {exc.code.name}: {exc.details}",
            )
            return
        stub = device_pb2_grpc.DevicePluginStub(launch.client.process.channel)
        request = device_pb2.FingerprintRequest()
        watch = StreamWatch(stub.Fingerprint(request), "fingerprint-2", launch.clock)
        try:

            def same() -> bool:
                return bool(watch.messages) and id_set(watch.messages[-1][1].device_group) == before

            watch.wait(same, suite.options.timeout)
            after = [msg for _, msg in watch.snapshot()]
        finally:
            watch.cancel()
        if launch.alive():
            launch.kill(SHUTDOWN_GRACE)
    finally:
        launch.close()
    if not after:
        suite.put("stable-ids", Status.FAIL, "the second launch sent no fingerprint")
        return
    now = id_set(after[-1].device_group)
    if now == before:
        suite.put(
            "stable-ids",
            Status.PASS,
            f"the same {len(now)} device ID(s) after a restart",
            [f"{key}: {device_id}" for key, device_id in sorted(now)[:8]],
        )
        return
    gone = sorted(before - now)
    new = sorted(now - before)
    suite.put(
        "stable-ids",
        Status.FAIL,
        f"{len(gone)} ID(s) disappeared and {len(new)} appeared across a restart",
        [f"before only: {k}: {i}" for k, i in gone[:5]]
        + [f"after only: {k}: {i}" for k, i in new[:5]],
    )
