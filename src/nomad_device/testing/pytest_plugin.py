"""pytest plugin for device-plugin authors (fixtures and the conformance suite)."""
