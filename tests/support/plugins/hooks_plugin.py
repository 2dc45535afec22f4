"""A plugin whose base-plugin hooks wait for each other, to show where they run.

Run as ``python hooks_plugin.py HOOK``: that hook (``plugin_info``,
``config_schema`` or ``decode_config``) waits, up to 30 s, until another
hook runs (``config_schema`` opens the gate for ``plugin_info``,
``plugin_info`` for the other two). Only hooks that run off the event loop
can meet that way: one that blocks the loop keeps the other RPC from being
served at all.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from nomad_device import DeviceGroup, DevicePlugin, PluginInfo, serve
from nomad_device.wire import hclspec


class HooksPlugin(DevicePlugin[Any]):
    name = "hooks-test"

    def __init__(self, waiting: str) -> None:
        super().__init__()
        self.waiting = waiting
        self.gate = threading.Event()

    def _hook(self, name: str) -> None:
        if name == self.waiting:
            self.log.info(f"{name}() waits")
            if not self.gate.wait(30):
                raise RuntimeError(f"{name}() waited 30 s for another hook")
        else:
            self.gate.set()

    def plugin_info(self) -> PluginInfo:
        self._hook("plugin_info")
        return super().plugin_info()

    def config_schema(self) -> hclspec.Spec:
        self._hook("config_schema")
        return super().config_schema()

    def decode_config(self, data: bytes) -> Any:
        self._hook("decode_config")
        return super().decode_config(data)

    def detect(self) -> list[DeviceGroup]:
        return []


if __name__ == "__main__":
    serve(HooksPlugin(sys.argv[1]))
