"""nomad_device.agentconfig: how an agent turns its file into SetConfig bytes."""
