"""nomad_device.placement: Nomad's scheduler rules for devices (what `check` reports)."""
