"""nomad_device.sources: event sources (inotify, kernel uevents)."""
