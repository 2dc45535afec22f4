"""nomad_device.golang: the ports of Go's behaviour."""
