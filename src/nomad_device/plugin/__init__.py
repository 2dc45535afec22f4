"""The author's API: subclass :class:`DevicePlugin`, then ``serve(MyPlugin)``."""

from nomad_device.plugin.base import DevicePlugin
from nomad_device.plugin.serve import serve

__all__ = ["DevicePlugin", "serve"]
