"""A test plugin whose hand-written schema can crash a Nomad agent; kept on purpose.

Its ``slot "<name>" { ... }`` blocks are a block map whose ``names`` list has the
literal default ``[]``, as the SDK generated before it stopped doing so. One
slot setting ``names`` beside one that does not decode to objects of different
types (a list beside an empty tuple), and a Nomad agent panics building the
map. The conformance suite's ``schema-safe`` check and the launcher must both
flag it; the plugin itself works (its SetConfig reads either shape).
"""

from __future__ import annotations

from collections.abc import Sequence

from nomad_device import Device, DeviceGroup, DevicePlugin, Reservation, serve
from nomad_device.wire import hclspec

SLOT = hclspec.Object(
    {
        "names": hclspec.Default(
            hclspec.Attr("names", "list(string)", False), hclspec.Literal("[]")
        ),
        "size": hclspec.Default(hclspec.Attr("size", "number", False), hclspec.Literal("1")),
    }
)
SPEC = hclspec.Object({"slot": hclspec.BlockMap("slot", ["name"], SLOT)})


class UnsafeSchemaPlugin(DevicePlugin[dict[str, object]]):
    name = "unsafe-schema"
    version = "0.1.0"

    def config_schema(self) -> hclspec.Spec:
        return SPEC

    def decode_config(self, data: bytes) -> dict[str, object]:
        return hclspec.decode(SPEC, data)

    def detect(self) -> list[DeviceGroup]:
        slots = self.config.get("slot") or {}
        assert isinstance(slots, dict)
        devices = tuple(Device(f"slot-{name}") for name in sorted(slots))
        return [DeviceGroup("test", "slot", "unsafe", devices)] if devices else []

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        return Reservation()


if __name__ == "__main__":
    serve(UnsafeSchemaPlugin)
