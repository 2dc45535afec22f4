"""Wire formats between Nomad and a device plugin, independent of gRPC plumbing.

- :mod:`nomad_device.wire.cty` -- cty types and go-cty's msgpack encoding, which is
  how ``SetConfig`` carries the operator's ``config`` block
  (:mod:`~nomad_device.wire.ctymarshal` encodes, for hosts and tests).
- :mod:`nomad_device.wire.hclspec` -- the ``hclspec.Spec`` schema a plugin returns
  from ``ConfigSchema``, and decoding ``SetConfig`` bytes against it.
- :mod:`nomad_device.wire.convert` -- model values to protobuf messages and back.

How an agent builds those bytes from an agent file is not a wire format: that is
:mod:`nomad_device.agentconfig`, which no plugin imports.

Submodules are imported on demand so that a plugin's start-up pays only for what
it uses.
"""
