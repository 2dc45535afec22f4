"""The Fingerprint checks: a prompt first message, valid groups, a stream that stays open.

Nomad drops every device of a plugin whose Fingerprint stream ends or errors,
or sends one invalid group (protocol notes, section 5); the helpers here apply
Nomad's own validation to the messages on the wire.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from nomad_device.model import UNITS
from nomad_device.testing.conformance.checks import Status
from nomad_device.testing.conformance.launch import Launch
from nomad_device.testing.conformance.streams import StreamWatch
from nomad_device.testing.conformance.suite import Suite, seconds

__all__ = ["fingerprint_open", "first_fingerprint", "groups_valid", "id_set"]


def first_fingerprint(suite: Suite, watch: StreamWatch, got_first: bool, launch: Launch) -> None:
    timeout = suite.options.timeout
    if got_first:
        at, message = watch.messages[0]
        groups = list(message.device_group)
        suite.put(
            "first-fingerprint",
            Status.PASS,
            f"first message after {seconds(at)} with {len(groups)} group(s)",
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
    suite.put("first-fingerprint", Status.FAIL, summary, launch.stderr_tail(3))


def fingerprint_open(suite: Suite, watch: StreamWatch, launch: Launch) -> None:
    messages = watch.snapshot()
    if watch.ended:
        suite.put(
            "fingerprint-stream-open",
            Status.FAIL,
            f"{watch.describe_end()}; Nomad would drop the plugin's devices and kill it",
            [f"{len(messages)} message(s) before the end", *launch.stderr_tail(3)],
        )
        return
    if not launch.alive():
        suite.put(
            "fingerprint-stream-open",
            Status.FAIL,
            f"the plugin process exited with status {launch.exit_code()}",
            launch.stderr_tail(3),
        )
        return
    open_for = time.monotonic() - watch.started
    suite.put(
        "fingerprint-stream-open",
        Status.PASS,
        f"open for {seconds(open_for)} with {len(messages)} message(s)",
    )


def groups_valid(suite: Suite, watch: StreamWatch) -> None:
    messages = watch.snapshot()
    if not messages:
        suite.skip(["device-groups-valid"], "skipped: no fingerprint message received")
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
        suite.put(
            "device-groups-valid",
            Status.FAIL,
            f"{len(problems)} problem(s); Nomad would drop all devices and kill the plugin",
            problems[:10],
        )
    elif duplicates:
        suite.put(
            "device-groups-valid",
            Status.WARN,
            f"device ID(s) reported twice in one message: {', '.join(sorted(duplicates)[:5])}",
            _describe_groups(last),
        )
    else:
        total = sum(len(g.devices) for g in last)
        suite.put(
            "device-groups-valid",
            Status.PASS,
            f"{len(messages)} message(s) valid; now {len(last)} group(s), {total} device(s)",
            _describe_groups(last),
        )


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


def id_set(groups: Iterable[Any]) -> set[tuple[str, str]]:
    return {(_group_key(g), d.ID) for g in groups for d in g.devices}
