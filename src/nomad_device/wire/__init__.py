"""Wire formats between Nomad and a device plugin, independent of gRPC plumbing.

- :mod:`nomad_device.wire.cty` -- cty types and go-cty's msgpack encoding, which is
  how ``SetConfig`` carries the operator's ``config`` block.
- :mod:`nomad_device.wire.hclspec` -- the ``hclspec.Spec`` schema a plugin returns
  from ``ConfigSchema``, and decoding ``SetConfig`` bytes against it.
- :mod:`nomad_device.wire.hcldec` -- what a Nomad agent does with an operator's
  ``config`` block before it sends it: decode against the schema (defaults,
  conversions, Nomad's diagnostics) and encode as cty msgpack.
- :mod:`nomad_device.wire.agentfile` -- the step before: an agent's HCL file (its
  ``plugin "<name>"`` blocks) read into the JSON shape hcldec decodes; needs
  python-hcl2 (the ``cli`` extra), imported only when a file is read.
- :mod:`nomad_device.wire.convert` -- model values to protobuf messages and back.

Submodules are imported on demand so that a plugin's start-up pays only for what
it uses.
"""
