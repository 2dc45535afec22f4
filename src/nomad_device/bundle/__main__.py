"""``python -m nomad_device.bundle``: the same as ``nomad-device-bundle``."""

from nomad_device.bundle.cli import _entry

_entry()
