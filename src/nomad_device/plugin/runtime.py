"""What the SDK keeps for one plugin instance, out of the author's namespace.

An author's subclass owns its attributes: a ``self._calls = []`` or a
``self._closed`` flag of its own must not break the SDK, and nothing warns
when a name collides. So the SDK's per-plugin state (its worker pools, its
timers and clean-up, its detection engine, whether it has closed) is one
:class:`Runtime`, which the author's code reaches only through
:class:`~nomad_device.plugin.base.DevicePlugin`'s methods (``rescan``,
``run_blocking``, ``call_later``, ``on_close``).

It is kept under one name-mangled key of the instance's ``__dict__``
(:data:`SLOT`): Python mangles a double-underscore name with the class that
writes it, so an author's own ``self.__runtime`` lands elsewhere. A registry
beside the plugins would need them hashable (an author's ``__eq__`` makes a
class unhashable) or keyed by ``id()``, and, being a root, would keep alive
every plugin whose timers, clean-up or engine refer to it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from nomad_device.plugin.calls import AuthorCalls
from nomad_device.plugin.lifetime import Lifetime

if TYPE_CHECKING:
    from nomad_device.plugin.engine import FingerprintEngine

__all__ = ["SLOT", "Runtime", "runtime_of"]

#: Where the runtime is kept: what ``self.__runtime`` means inside ``DevicePlugin``.
SLOT: Final = "_DevicePlugin__runtime"

_making = threading.Lock()


class Runtime:
    """One plugin's worker pools, lifetime, engine (once served) and closed state."""

    __slots__ = ("calls", "closed", "engine", "lifetime")

    def __init__(self, worker_pools: object = None) -> None:
        self.calls = AuthorCalls(worker_pools if isinstance(worker_pools, Mapping) else None)
        self.lifetime = Lifetime(self.calls)
        #: The detection engine, set when the plugin is registered with a server.
        self.engine: FingerprintEngine | None = None
        #: True once ``close_plugin`` began: the plugin's life ends only once.
        self.closed = False


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
