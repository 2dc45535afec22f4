"""A test plugin whose author code fails in the ways authors' code does.

``python errors_plugin.py [badinfo|badschema]`` breaks ``plugin_info()`` or
``config_schema()``; Reserve picks the failure by its first device ID, and the
config's ``mode`` makes ``configure()`` fail.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from nomad_device import (
    Device,
    DeviceGroup,
    DevicePlugin,
    InvalidArgument,
    Mount,
    PluginInfo,
    Reservation,
    serve,
)
from nomad_device.errors import DevicePluginError


class Busy(DevicePluginError):
    """An author's own error class with a valid code."""

    code = "RESOURCE_EXHAUSTED"


@dataclass
class Config:
    mode: str = "ok"


class ErrorsPlugin(DevicePlugin[Config]):
    name = "errors-test"
    Config = Config

    def configure(self, config: Config) -> None:
        if config.mode == "refuse":
            raise InvalidArgument("mode: refused on purpose")
        if config.mode == "json":
            json.loads("{not json")  # an author's bug, not a refusal
        if config.mode == "value":
            raise ValueError("a plain ValueError from configure")

    def detect(self) -> list[DeviceGroup]:
        return [DeviceGroup("test", "errors", "e", (Device("e0"),))]

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        command = device_ids[0] if device_ids else ""
        if command == "!value":
            raise ValueError("a plain ValueError from reserve")
        if command == "!json":
            json.loads("")
        if command == "!unicode":
            b"\xff".decode("utf-8")
        if command == "!busy":
            raise Busy("all slots taken")
        if command == "!none":
            return None  # type: ignore[return-value]
        if command == "!badenv":
            return Reservation(envs={"A": 1})  # type: ignore[dict-item]
        if command == "!surrogate":
            return Reservation(mounts=(Mount("/dev/x", "/dev/\udcff"),))
        return Reservation(envs={"DEVICES": ",".join(device_ids)})


class BadInfo(ErrorsPlugin):
    def plugin_info(self) -> PluginInfo:
        return PluginInfo(name=self.name, version=None)  # type: ignore[arg-type]


class BadSchema(ErrorsPlugin):
    def config_schema(self) -> object:  # type: ignore[override]
        return "not a spec"


if __name__ == "__main__":
    modes = {"badinfo": BadInfo, "badschema": BadSchema}
    serve(modes.get(sys.argv[1] if sys.argv[1:] else "", ErrorsPlugin))
