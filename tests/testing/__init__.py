"""nomad_device.testing: the test helpers the SDK offers plugin authors."""
