"""nomad_device.proto: the generated protobuf modules."""
