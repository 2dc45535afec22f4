"""nomad_device.wire: the formats that travel on the wire (cty, hclspec, conversions)."""
