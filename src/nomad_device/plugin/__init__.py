"""The author's API: subclass :class:`DevicePlugin`, then ``serve(MyPlugin)``."""

from nomad_device.plugin.backoff import Backoff
from nomad_device.plugin.base import DevicePlugin
from nomad_device.plugin.lifetime import Scheduled
from nomad_device.plugin.serve import serve
from nomad_device.plugin.wakeup import Wakeup

__all__ = ["Backoff", "DevicePlugin", "Scheduled", "Wakeup", "serve"]
