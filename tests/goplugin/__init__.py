"""nomad_device.goplugin: the go-plugin transport, against the real Go client and server too."""
