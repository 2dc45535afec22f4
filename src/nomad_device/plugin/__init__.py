"""The author's API: subclass :class:`DevicePlugin`, then ``serve(MyPlugin)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nomad_device.plugin.backoff import Backoff
from nomad_device.plugin.base import DevicePlugin
from nomad_device.plugin.lifetime import Scheduled
from nomad_device.plugin.serve import serve
from nomad_device.plugin.wakeup import Wakeup

if TYPE_CHECKING:
    from nomad_device.plugin.nomadapi import NomadConfig

__all__ = ["Backoff", "DevicePlugin", "NomadConfig", "Scheduled", "Wakeup", "serve"]


def __getattr__(name: str) -> Any:
    # The nomad block's class loads with the first config that names it.
    if name == "NomadConfig":
        from nomad_device.plugin.nomadapi import NomadConfig

        return NomadConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
