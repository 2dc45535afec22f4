"""nomad_device.plugins.generic: /dev, USB, PCI and CDI devices."""
