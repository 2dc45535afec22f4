"""A plugin whose module fails after importing the SDK (a typical author bug)."""

from nomad_device import DevicePlugin, serve

raise RuntimeError(f"config file missing for {DevicePlugin.__name__}")
serve(DevicePlugin)  # never reached
