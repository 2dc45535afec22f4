"""Shared fixtures: launch real plugin subprocesses and always clean them up."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.host import DevicePluginClient
from nomad_device.testing.conformance.clock import Mark, PluginClock

TESTS = Path(__file__).parent
SDK_PLUGIN = TESTS / "plugins" / "sdk_plugin.py"
INTEROP = TESTS.parent / "interop"


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


class OwnTime:
    """A plugin's own seconds over a ``with`` block: the wall time less what a busy machine
    kept it waiting for a CPU (the conformance suite's clock). For bounds on how long a
    plugin takes, which the wall clock of a loaded machine would break. Its threads' waits
    are sampled in the background, so the figure holds when the plugin exits in the block.
    """

    def __init__(self, pid: int) -> None:
        self.clock = PluginClock(pid)
        self.seconds = 0.0
        self._done = threading.Event()
        self._mark = Mark(0.0, {})
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> OwnTime:
        self._mark = self.clock.mark()
        self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.clock.since(self._mark)

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._sampler.join()
        self.seconds = self.clock.since(self._mark)


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


@pytest.fixture(scope="session")
def interop_bin() -> Path:
    """Build the Go host and Go plugin once per session; the directory holding them.

    Without Go the interop tests are skipped, except in CI (``CI=true``), where a
    missing Go is a failure.
    """
    if shutil.which("go") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("'go' is not on PATH: CI must run the interop tests (install Go 1.26+)")
        pytest.skip("'go' is not on PATH: the interop tests need Go 1.26+ to build interop/")
    result = subprocess.run(
        ["bash", str(INTEROP / "build.sh")],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"interop/build.sh failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return INTEROP / "bin"
