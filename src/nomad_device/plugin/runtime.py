"""The SDK's per-plugin state, kept out of the author's namespace (why a
name-mangled slot, not a registry: docs/architecture.md)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from nomad_device.plugin.calls import AuthorCalls
from nomad_device.plugin.lifetime import Lifetime

if TYPE_CHECKING:
    from nomad_device.plugin.engine import FingerprintEngine
    from nomad_device.plugin.release import Tracker

__all__ = ["SLOT", "Runtime", "runtime_of"]

#: What ``self.__runtime`` means inside ``DevicePlugin``; no author writes it by accident.
SLOT: Final = "_DevicePlugin__runtime"

_making = threading.Lock()


class Runtime:
    """One plugin's worker pools, lifetime, engine (once served), release tracker
    (when it follows releases) and closed state."""

    __slots__ = ("calls", "closed", "engine", "lifetime", "tracker")

    def __init__(self, worker_pools: object = None) -> None:
        self.calls = AuthorCalls(worker_pools if isinstance(worker_pools, Mapping) else None)
        self.lifetime = Lifetime(self.calls)
        self.engine: FingerprintEngine | None = None  # set when registered with a server
        self.closed = False  # close_plugin() began: the plugin's life ends once
        self.tracker: Tracker | None = None  # set by plugin/release.py's follow()


def runtime_of(plugin: object) -> Runtime:
    """The plugin's :class:`Runtime`, made on first use (safe from any thread)."""
    state = vars(plugin)
    runtime = state.get(SLOT)
    if runtime is None:
        with _making:
            runtime = state.get(SLOT)
            if runtime is None:
                runtime = state[SLOT] = Runtime(getattr(plugin, "worker_pools", None))
    return runtime
