"""Shared fixtures: launch real plugin subprocesses and always clean them up."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.host import DevicePluginClient

TESTS = Path(__file__).parent
SDK_PLUGIN = TESTS / "plugins" / "sdk_plugin.py"


class Launched:
    """A launched plugin plus every hclog line it wrote."""

    def __init__(self, client: DevicePluginClient, logs: list[HclogEntry]) -> None:
        self.client = client
        self.logs = logs

    def messages(self) -> list[str]:
        return [e.message for e in self.logs]

    def wait_for_log(
        self, predicate: Callable[[HclogEntry], bool], timeout: float = 10, count: int = 1
    ) -> list[HclogEntry]:
        """Entries matching ``predicate`` once ``count`` arrived (stderr lags the wire)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in list(self.logs) if predicate(e)]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.02)


Launcher = Callable[..., Launched]


@pytest.fixture
def launch() -> Iterator[Launcher]:
    started: list[DevicePluginClient] = []

    def _launch(command: list[str] | None = None, **options: Any) -> Launched:
        logs: list[HclogEntry] = []
        client = DevicePluginClient.launch(
            command or [sys.executable, str(SDK_PLUGIN)],
            on_log=logs.append,
            start_timeout=30,
            **options,
        )
        started.append(client)
        return Launched(client, logs)

    yield _launch
    for client in started:
        client.kill()
