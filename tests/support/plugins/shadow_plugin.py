"""A plugin whose author uses one of the names the SDK once kept on the plugin object.

Run as ``python shadow_plugin.py NAME`` with NAME one of ``_calls``,
``_engine``, ``_lifetime``, ``_closed``: the plugin keeps its own value under
that attribute and relies on it in every hook, as an author who never read
the SDK's source would. ``SHADOW_PLUGIN_LOG`` names a file that ``close()``
and its ``on_close`` clean-up append to.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence

from nomad_device import (
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DevicePlugin,
    DeviceStats,
    Reservation,
    StatValue,
    serve,
)


def _note(text: str) -> None:
    with open(os.environ["SHADOW_PLUGIN_LOG"], "a") as out:
        out.write(text + "\n")


class _Engine:
    """The author's own engine (a hardware library's, say)."""

    def devices(self) -> list[str]:
        return ["engine-0"]


class ShadowPlugin(DevicePlugin[None]):
    name = "shadow-test"
    fingerprint_period = 3600.0

    def __init__(self, attribute: str) -> None:
        super().__init__()
        self.attribute = attribute
        # The author's own meaning of each name.
        if attribute == "_calls":
            self._calls: list[str] = []  # every call this plugin answered
        elif attribute == "_engine":
            self._engine = _Engine()
        elif attribute == "_lifetime":
            self._lifetime = 3600  # a lease, in seconds
        elif attribute == "_closed":
            self._closed = threading.Event()  # set by close(); truthy as an object
        self.on_close(lambda: _note("on_close"))

    def _mine(self) -> str:
        """The author's value, read back: it must still be theirs."""
        value = getattr(self, self.attribute)
        if self.attribute == "_calls":
            value.append("call")
            return f"calls={len(value)}"
        if self.attribute == "_engine":
            return ",".join(value.devices())
        if self.attribute == "_lifetime":
            return f"lease={value}"
        return f"closed={value.is_set()}"

    def detect(self) -> list[DeviceGroup]:
        return [DeviceGroup("test", "shadow", self._mine().split("=")[0], (Device("dev-0"),))]

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        return Reservation(envs={"MINE": self._mine()})

    def stats(self) -> list[DeviceGroupStats]:
        value = StatValue(int_numerator=1, unit="ops")
        return [DeviceGroupStats("test", "shadow", "x", {"dev-0": DeviceStats(summary=value)})]

    def close(self) -> None:
        _note(f"close {self._mine()}")
        if self.attribute == "_closed":
            self._closed.set()


if __name__ == "__main__":
    serve(ShadowPlugin(sys.argv[1]))
