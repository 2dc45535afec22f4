"""nomad_device.cli: the launcher and its commands."""
