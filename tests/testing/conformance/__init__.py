"""nomad_device.testing.conformance: the conformance suite."""
