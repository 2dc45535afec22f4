"""nomad_device.plugins.example: Nomad's file-backed example plugin."""
