"""nomad_device.plugins: the ready-made plugins."""
