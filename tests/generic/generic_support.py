"""Launching nomad-device-generic over the real wire, and waiting on what it reports."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from conftest import Launched, Launcher

from nomad_device import DeviceGroup
from nomad_device.config import encode_config
from nomad_device.host import Stream
from nomad_device.model import Device
from nomad_device.plugins.generic.config import GenericConfig

COMMAND = [sys.executable, "-m", "nomad_device.plugins.generic"]

Groups = list[DeviceGroup]


def start(
    launch: Launcher, config: GenericConfig, env: dict[str, str] | None = None, **options: Any
) -> Launched:
    launched = launch(COMMAND, env={**os.environ, **(env or {})}, **options)
    launched.client.set_config(encode_config(config))
    return launched


def first_groups(
    launch: Launcher, config: GenericConfig, env: dict[str, str] | None = None
) -> tuple[Launched, Groups]:
    """Start the plugin, configure it, and read the first Fingerprint message."""
    launched = start(launch, config, env)
    with launched.client.fingerprint() as stream:
        return launched, stream.next(15)


def by_key(groups: Sequence[DeviceGroup]) -> dict[str, DeviceGroup]:
    return {g.key: g for g in groups}


def devices(groups: Sequence[DeviceGroup], key: str) -> dict[str, Device]:
    found = by_key(groups).get(key)
    return {} if found is None else {d.id: d for d in found.devices}


def wait_for(
    stream: Stream[Groups], condition: Callable[[Groups], bool], timeout: float = 15.0
) -> Groups:
    """Read messages until one satisfies ``condition``; fail with what was seen."""
    seen: list[Groups] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            shown = "\n".join(repr(m) for m in seen[-3:])
            raise AssertionError(f"condition never met; last messages:\n{shown}")
        try:
            message = stream.next(left)
        except TimeoutError:
            continue
        seen.append(message)
        if condition(message):
            return message


def wait_until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def logged(launched: Launched, text: str, timeout: float = 10.0) -> list[str]:
    """Messages containing ``text`` (with their fields), once one arrived."""

    def render() -> list[str]:
        out = []
        for entry in list(launched.logs):
            line = entry.message + " " + " ".join(f"{k}={v}" for k, v in entry.fields.items())
            if text in line:
                out.append(line)
        return out

    wait_until(lambda: bool(render()), timeout)
    return render()
