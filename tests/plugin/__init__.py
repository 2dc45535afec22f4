"""nomad_device.plugin: the SDK's plugin API, engine, servicer and release facility."""
