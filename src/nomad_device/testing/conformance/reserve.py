"""The Reserve checks: odd requests get an answer, and the plugin survives them.

Reserve runs when the scheduler places an allocation; a plugin that crashes on
an unknown ID or an empty list takes every device of the node down with it.
"""

from __future__ import annotations

import secrets

import grpc

from nomad_device.host import CallError
from nomad_device.testing.conformance.checks import Status
from nomad_device.testing.conformance.launch import Launch
from nomad_device.testing.conformance.suite import Suite

__all__ = ["reserve_empty", "reserve_unknown"]


def _after_call(suite: Suite, launch: Launch) -> tuple[bool, str]:
    if launch.wait_exit(0.2) is not None:
        return False, f"the process exited with status {launch.exit_code()}"
    return launch.responsive(suite.options.timeout)


def reserve_unknown(suite: Suite, launch: Launch, known: set[tuple[str, str]]) -> None:
    client = launch.client
    assert client is not None
    if not launch.alive():
        suite.skip(["reserve-unknown-id"], "skipped: the plugin is no longer running")
        return
    taken = {device_id for _, device_id in known}
    unknown = "nomad-conformance-unknown-" + secrets.token_hex(4)
    while unknown in taken:  # pragma: no cover - astronomically unlikely
        unknown = "nomad-conformance-unknown-" + secrets.token_hex(4)
    answer: str
    error: CallError | None = None
    try:
        client.reserve([unknown], suite.options.timeout)
        answer = "a reservation"
    except CallError as exc:
        error = exc
        answer = f"{exc.code.name}: {exc.details}"
    ok, state = _after_call(suite, launch)
    evidence = [f"Reserve([{unknown!r}]) -> {answer}", f"afterwards: {state}"]
    if not ok:
        evidence.extend(launch.stderr_tail(3))
        suite.put(
            "reserve-unknown-id",
            Status.FAIL,
            f"the plugin did not survive it: {state}",
            evidence,
        )
    elif error is None:
        suite.put(
            "reserve-unknown-id",
            Status.WARN,
            "an ID the plugin never reported got a reservation instead of an error",
            evidence,
        )
    elif error.code == grpc.StatusCode.DEADLINE_EXCEEDED:
        suite.put("reserve-unknown-id", Status.FAIL, "no answer within the deadline", evidence)
    elif error.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        suite.put("reserve-unknown-id", Status.FAIL, f"the call broke off: {answer}", evidence)
    else:
        suite.put("reserve-unknown-id", Status.PASS, f"refused with {error.code.name}", evidence)


def reserve_empty(suite: Suite, launch: Launch) -> None:
    client = launch.client
    assert client is not None
    if not launch.alive():
        suite.skip(["reserve-empty"], "skipped: the plugin is no longer running")
        return
    error: CallError | None = None
    try:
        client.reserve([], suite.options.timeout)
        answer = "a reservation"
    except CallError as exc:
        error = exc
        answer = f"{exc.code.name}: {exc.details}"
    ok, state = _after_call(suite, launch)
    evidence = [f"Reserve([]) -> {answer}", f"afterwards: {state}"]
    if not ok:
        evidence.extend(launch.stderr_tail(3))
        suite.put("reserve-empty", Status.FAIL, f"the plugin did not survive it: {state}", evidence)
    elif error is not None and error.code in (
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
    ):
        suite.put("reserve-empty", Status.FAIL, f"no proper answer: {answer}", evidence)
    else:
        suite.put("reserve-empty", Status.PASS, f"answered with {answer.split(':')[0]}", evidence)
