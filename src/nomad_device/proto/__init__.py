"""Generated protobuf and gRPC modules for the Nomad device plugin protocol.

The ``.proto`` sources live next to this file; regenerate the ``*_pb2*`` modules
with ``make protos`` (``scripts/gen_protos.py``). Nothing is imported eagerly:
import the submodule you need, e.g. ``from nomad_device.proto import device_pb2``.
"""
