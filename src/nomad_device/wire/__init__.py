"""Wire formats between Nomad and a device plugin, independent of gRPC plumbing.

- :mod:`nomad_device.wire.cty` -- cty types and go-cty's msgpack encoding, which is
  how ``SetConfig`` carries the operator's ``config`` block.
- :mod:`nomad_device.wire.hclspec` -- the ``hclspec.Spec`` schema a plugin returns
  from ``ConfigSchema``, and decoding ``SetConfig`` bytes against it.
- :mod:`nomad_device.wire.hcldec` -- what a Nomad agent does with an operator's
  ``config`` block before it sends it: decode against the schema (defaults,
  conversions, Nomad's diagnostics) and encode as cty msgpack.
- :mod:`nomad_device.wire.agentfile` -- the step before: an agent file (HCL or
  JSON; its ``plugin "<name>"`` blocks) read with HCL 1 (:mod:`~nomad_device.wire.hcl1`,
  the syntax a Nomad agent reads) into the JSON shape hcldec decodes.
- :mod:`nomad_device.wire.agentconfig` -- the whole path, agent file to SetConfig
  bytes, ending as the agent's would: accepted, refused, or with the agent crashing.
- :mod:`nomad_device.wire.schemasafety` -- whether a schema lets some config crash
  the agent, with an agent file that does.
- :mod:`nomad_device.wire.convert` -- model values to protobuf messages and back.

Submodules are imported on demand so that a plugin's start-up pays only for what
it uses.
"""
