"""The plugin processes a test starts: their hclog lines, and their own time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.host import DevicePluginClient
from nomad_device.testing.conformance.clock import Mark, PluginClock


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
