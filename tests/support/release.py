"""Launching plugins that follow releases against a fake agent, and watching what they say."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from nomad_device.config import encode_config
from nomad_device.host import CallError, Stream
from nomad_device.model import DeviceGroup, DeviceGroupStats
from nomad_device.plugin.nomadapi import NomadConfig
from nomad_device.testing.nomadagent import FakeNomadAgent
from support import PLUGINS
from support.processes import Launched, Launcher

PLUGIN = [sys.executable, str(PLUGINS / "release_plugin.py")]
if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))  # the test plugin's Config
GROUP = ("acme", "gpu", "x1")
IDS = ["GPU-0", "GPU-1", "GPU-2"]

T = TypeVar("T")


def gpus(*ids: str) -> list[tuple[str, str, str, list[str]]]:
    return [(*GROUP, list(ids))]


class Recorder(Generic[T]):
    """Every message of a stream, read in a thread of its own, to wait on."""

    def __init__(self, stream: Stream[T]) -> None:
        self.stream = stream
        self.messages: list[T] = []
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for message in self.stream:
                with self._cond:
                    self.messages.append(message)
                    self._cond.notify_all()
        except BaseException as exc:  # the test reads it
            with self._cond:
                self.error = exc
                self._cond.notify_all()

    def wait(self, condition: Callable[[T], bool], timeout: float = 30.0, after: int = 0) -> T:
        """The first message from index ``after`` on that satisfies ``condition``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for message in self.messages[after:]:
                    if condition(message):
                        return message
                left = deadline - time.monotonic()
                if left <= 0 or self.error is not None:
                    shown = "\n".join(repr(m) for m in self.messages[-3:])
                    raise AssertionError(
                        f"condition never met ({self.error!r}); last messages:\n{shown}"
                    )
                self._cond.wait(left)

    def count(self) -> int:
        with self._cond:
            return len(self.messages)

    def close(self) -> None:
        self.stream.cancel()


def health(groups: list[DeviceGroup]) -> dict[str, tuple[bool, str]]:
    return {
        d.id: (d.healthy, d.health_description)
        for g in groups
        if (g.vendor, g.type, g.name) == GROUP
        for d in g.devices
    }


def held_by(groups: list[DeviceGroupStats]) -> dict[str, str]:
    out = {}
    for g in groups:
        for device_id, stats in g.instance_stats.items():
            tree = stats.stats
            value = tree.attributes.get("held_by") if tree is not None else None
            if value is not None and value.string_value is not None:
                out[device_id] = value.string_value
    return out


class Journal:
    """The plugin's record of its released() calls."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def wait(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(calls := self.calls()) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{count} released() calls expected, saw {calls}")
            time.sleep(0.02)
        return calls


def wait_until(condition: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not met in {timeout:g}s: {what or condition}")
        time.sleep(0.02)


class Setup:
    """A fake agent, a state directory and a journal, and plugins launched against them."""

    def __init__(self, launch: Launcher, tmp: Path, agent: FakeNomadAgent) -> None:
        self.launch = launch
        self.tmp = tmp
        self.agent = agent
        self.journal = Journal(tmp / "journal")
        self.state = tmp / "state"
        self.hold = tmp / "hold"
        self.fail = tmp / "fail"

    def config(self, **nomad: Any) -> bytes:
        from release_plugin import Config

        block = NomadConfig(
            **{"address": self.agent.address, "state_dir": str(self.state), **nomad}
        )
        return encode_config(
            Config(
                ids=IDS,
                journal=str(self.journal.path),
                hold=str(self.hold),
                fail=str(self.fail),
                nomad=block,
            )
        )

    def start(self, **nomad: Any) -> tuple[Launched, Recorder[list[DeviceGroup]]]:
        """A plugin, configured and fingerprinting (so it knows its groups)."""
        launched = self.launch(PLUGIN)
        launched.client.set_config(self.config(**nomad))
        recorder = Recorder(launched.client.fingerprint())
        recorder.wait(lambda g: bool(health(g)))
        return launched, recorder

    def stats(self, launched: Launched) -> Recorder[list[DeviceGroupStats]]:
        return Recorder(launched.client.stats(0.05))

    def wait_held(
        self, launched: Launched, expected: dict[str, str], timeout: float = 30.0
    ) -> None:
        """Until the plugin's stats say exactly ``expected`` (device -> holder)."""
        recorder = self.stats(launched)
        try:
            recorder.wait(lambda groups: held_by(groups) == expected, timeout)
        finally:
            recorder.close()


def reserve_error(launched: Launched, ids: list[str]) -> CallError:
    try:
        launched.client.reserve(ids, timeout=60)
    except CallError as exc:
        return exc
    raise AssertionError(f"Reserve {ids} was not refused")
