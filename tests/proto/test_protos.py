"""Wire-compatibility checks for the bundled .proto files.

The tables below were written by hand from the upstream Nomad and go-plugin
protocol definitions. They pin every service path, streaming flag, message,
field number, field type, map and oneof, so that an accidental rename,
renumbering or retyping in ``src/nomad_device/proto`` makes a test fail.
"""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2, wrappers_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from support import ROOT

from nomad_device.proto import (
    attribute_pb2,
    base_pb2,
    device_pb2,
    goplugin_broker_pb2,
    goplugin_controller_pb2,
    goplugin_stdio_pb2,
    hclspec_pb2,
    stats_pb2,
)

MODULES: list[ModuleType] = [
    goplugin_controller_pb2,
    goplugin_stdio_pb2,
    goplugin_broker_pb2,
    hclspec_pb2,
    attribute_pb2,
    stats_pb2,
    base_pb2,
    device_pb2,
]

# Package names used below, to keep the tables readable.
GP = "plugin"
HCL = "hashicorp.nomad.plugins.shared.hclspec"
ST = "hashicorp.nomad.plugins.shared.structs"
BASE = "hashicorp.nomad.plugins.base.proto"
DEV = "hashicorp.nomad.plugins.device"

# file name -> (proto package, go_package option, imports)
FILES: dict[str, tuple[str, str, list[str]]] = {
    "nomad_device/proto/goplugin_controller.proto": (
        GP,
        "interop/gen/gopluginpb;gopluginpb",
        [],
    ),
    "nomad_device/proto/goplugin_stdio.proto": (
        GP,
        "interop/gen/gopluginpb;gopluginpb",
        ["google/protobuf/empty.proto"],
    ),
    "nomad_device/proto/goplugin_broker.proto": (
        GP,
        "interop/gen/gopluginpb;gopluginpb",
        [],
    ),
    "nomad_device/proto/hclspec.proto": (HCL, "interop/gen/hclspecpb;hclspecpb", []),
    "nomad_device/proto/attribute.proto": (ST, "interop/gen/structspb;structspb", []),
    "nomad_device/proto/stats.proto": (
        ST,
        "interop/gen/structspb;structspb",
        ["google/protobuf/wrappers.proto"],
    ),
    "nomad_device/proto/base.proto": (
        BASE,
        "interop/gen/basepb;basepb",
        ["nomad_device/proto/hclspec.proto"],
    ),
    "nomad_device/proto/device.proto": (
        DEV,
        "interop/gen/devicepb;devicepb",
        [
            "google/protobuf/duration.proto",
            "google/protobuf/timestamp.proto",
            "nomad_device/proto/attribute.proto",
            "nomad_device/proto/stats.proto",
        ],
    ),
}

# full method path -> (request type, response type, client streams, server streams)
METHODS: dict[str, tuple[str, str, bool, bool]] = {
    "/plugin.GRPCController/Shutdown": ("plugin.Empty", "plugin.Empty", False, False),
    "/plugin.GRPCStdio/StreamStdio": ("google.protobuf.Empty", "plugin.StdioData", False, True),
    "/plugin.GRPCBroker/StartStream": ("plugin.ConnInfo", "plugin.ConnInfo", True, True),
    f"/{BASE}.BasePlugin/PluginInfo": (
        f"{BASE}.PluginInfoRequest",
        f"{BASE}.PluginInfoResponse",
        False,
        False,
    ),
    f"/{BASE}.BasePlugin/ConfigSchema": (
        f"{BASE}.ConfigSchemaRequest",
        f"{BASE}.ConfigSchemaResponse",
        False,
        False,
    ),
    f"/{BASE}.BasePlugin/SetConfig": (
        f"{BASE}.SetConfigRequest",
        f"{BASE}.SetConfigResponse",
        False,
        False,
    ),
    f"/{DEV}.DevicePlugin/Fingerprint": (
        f"{DEV}.FingerprintRequest",
        f"{DEV}.FingerprintResponse",
        False,
        True,
    ),
    f"/{DEV}.DevicePlugin/Reserve": (
        f"{DEV}.ReserveRequest",
        f"{DEV}.ReserveResponse",
        False,
        False,
    ),
    f"/{DEV}.DevicePlugin/Stats": (
        f"{DEV}.StatsRequest",
        f"{DEV}.StatsResponse",
        False,
        True,
    ),
}

# enum full name -> {value name: number}
ENUMS: dict[str, dict[str, int]] = {
    "plugin.StdioData.Channel": {"INVALID": 0, "STDOUT": 1, "STDERR": 2},
    f"{BASE}.PluginType": {"UNKNOWN": 0, "DRIVER": 2, "DEVICE": 3},
    f"{BASE}.CoreGrade": {"Performance": 0, "Efficiency": 1},
}

# One row per field: (name, number, type, label, is_map, oneof).
# ``type`` is the scalar type name, the full name of a message or enum type, or
# "map<key, value>" for map fields. ``label`` is "repeated" or "singular".
Field = tuple[str, int, str, str, bool, str | None]

S, R = "singular", "repeated"

MESSAGES: dict[str, list[Field]] = {
    # goplugin_controller.proto
    "plugin.Empty": [],
    # goplugin_stdio.proto
    "plugin.StdioData": [
        ("channel", 1, "plugin.StdioData.Channel", S, False, None),
        ("data", 2, "bytes", S, False, None),
    ],
    # goplugin_broker.proto
    "plugin.ConnInfo": [
        ("service_id", 1, "uint32", S, False, None),
        ("network", 2, "string", S, False, None),
        ("address", 3, "string", S, False, None),
        ("knock", 4, "plugin.ConnInfo.Knock", S, False, None),
    ],
    "plugin.ConnInfo.Knock": [
        ("knock", 1, "bool", S, False, None),
        ("ack", 2, "bool", S, False, None),
        ("error", 3, "string", S, False, None),
    ],
    # hclspec.proto
    f"{HCL}.Spec": [
        ("object", 1, f"{HCL}.Object", S, False, "block"),
        ("array", 2, f"{HCL}.Array", S, False, "block"),
        ("Attr", 3, f"{HCL}.Attr", S, False, "block"),
        ("block_value", 4, f"{HCL}.Block", S, False, "block"),
        ("block_attrs", 5, f"{HCL}.BlockAttrs", S, False, "block"),
        ("block_list", 6, f"{HCL}.BlockList", S, False, "block"),
        ("block_set", 7, f"{HCL}.BlockSet", S, False, "block"),
        ("block_map", 8, f"{HCL}.BlockMap", S, False, "block"),
        ("default", 9, f"{HCL}.Default", S, False, "block"),
        ("literal", 10, f"{HCL}.Literal", S, False, "block"),
    ],
    f"{HCL}.Attr": [
        ("name", 1, "string", S, False, None),
        ("type", 2, "string", S, False, None),
        ("required", 3, "bool", S, False, None),
    ],
    f"{HCL}.Block": [
        ("name", 1, "string", S, False, None),
        ("required", 2, "bool", S, False, None),
        ("nested", 3, f"{HCL}.Spec", S, False, None),
    ],
    f"{HCL}.BlockAttrs": [
        ("name", 1, "string", S, False, None),
        ("type", 2, "string", S, False, None),
        ("required", 3, "bool", S, False, None),
    ],
    f"{HCL}.BlockList": [
        ("name", 1, "string", S, False, None),
        ("min_items", 2, "uint64", S, False, None),
        ("max_items", 3, "uint64", S, False, None),
        ("nested", 4, f"{HCL}.Spec", S, False, None),
    ],
    f"{HCL}.BlockSet": [
        ("name", 1, "string", S, False, None),
        ("min_items", 2, "uint64", S, False, None),
        ("max_items", 3, "uint64", S, False, None),
        ("nested", 4, f"{HCL}.Spec", S, False, None),
    ],
    f"{HCL}.BlockMap": [
        ("name", 1, "string", S, False, None),
        ("labels", 2, "string", R, False, None),
        ("nested", 3, f"{HCL}.Spec", S, False, None),
    ],
    f"{HCL}.Literal": [
        ("value", 1, "string", S, False, None),
    ],
    f"{HCL}.Default": [
        ("primary", 1, f"{HCL}.Spec", S, False, None),
        ("default", 2, f"{HCL}.Spec", S, False, None),
    ],
    f"{HCL}.Object": [
        ("attributes", 1, f"map<string, {HCL}.Spec>", R, True, None),
    ],
    f"{HCL}.Array": [
        ("values", 1, f"{HCL}.Spec", R, False, None),
    ],
    # attribute.proto
    f"{ST}.Attribute": [
        ("float_val", 1, "double", S, False, "value"),
        ("int_val", 2, "int64", S, False, "value"),
        ("string_val", 3, "string", S, False, "value"),
        ("bool_val", 4, "bool", S, False, "value"),
        ("unit", 5, "string", S, False, None),
    ],
    # stats.proto
    f"{ST}.StatObject": [
        ("nested", 1, f"map<string, {ST}.StatObject>", R, True, None),
        ("attributes", 2, f"map<string, {ST}.StatValue>", R, True, None),
    ],
    f"{ST}.StatValue": [
        ("float_numerator_val", 1, "google.protobuf.DoubleValue", S, False, None),
        ("float_denominator_val", 2, "google.protobuf.DoubleValue", S, False, None),
        ("int_numerator_val", 3, "google.protobuf.Int64Value", S, False, None),
        ("int_denominator_val", 4, "google.protobuf.Int64Value", S, False, None),
        ("string_val", 5, "google.protobuf.StringValue", S, False, None),
        ("bool_val", 6, "google.protobuf.BoolValue", S, False, None),
        ("unit", 7, "string", S, False, None),
        ("desc", 8, "string", S, False, None),
    ],
    # base.proto
    f"{BASE}.PluginInfoRequest": [],
    f"{BASE}.PluginInfoResponse": [
        ("type", 1, f"{BASE}.PluginType", S, False, None),
        ("plugin_api_versions", 2, "string", R, False, None),
        ("plugin_version", 3, "string", S, False, None),
        ("name", 4, "string", S, False, None),
    ],
    f"{BASE}.ConfigSchemaRequest": [],
    f"{BASE}.ConfigSchemaResponse": [
        ("spec", 1, f"{HCL}.Spec", S, False, None),
    ],
    f"{BASE}.SetConfigRequest": [
        ("msgpack_config", 1, "bytes", S, False, None),
        ("nomad_config", 2, f"{BASE}.NomadConfig", S, False, None),
        ("plugin_api_version", 3, "string", S, False, None),
    ],
    f"{BASE}.NomadConfig": [
        ("driver", 1, f"{BASE}.NomadDriverConfig", S, False, None),
    ],
    f"{BASE}.NomadDriverConfig": [
        ("ClientMaxPort", 1, "uint32", S, False, None),
        ("ClientMinPort", 2, "uint32", S, False, None),
        ("Topology", 3, f"{BASE}.ClientTopology", S, False, None),
    ],
    f"{BASE}.ClientTopology": [
        ("node_ids", 1, "uint32", R, False, None),
        ("distances", 2, f"{BASE}.ClientTopologySLIT", S, False, None),
        ("cores", 3, f"{BASE}.ClientTopologyCore", R, False, None),
        ("override_total_compute", 4, "uint64", S, False, None),
        ("override_withold_compute", 5, "uint64", S, False, None),
    ],
    f"{BASE}.ClientTopologySLIT": [
        ("dimension", 1, "uint32", S, False, None),
        ("values", 2, "uint32", R, False, None),
    ],
    f"{BASE}.ClientTopologyCore": [
        ("socket_id", 1, "uint32", S, False, None),
        ("node_id", 2, "uint32", S, False, None),
        ("core_id", 3, "uint32", S, False, None),
        ("core_grade", 4, f"{BASE}.CoreGrade", S, False, None),
        ("disable", 5, "bool", S, False, None),
        ("base_speed", 6, "uint64", S, False, None),
        ("max_speed", 7, "uint64", S, False, None),
        ("guess_speed", 8, "uint64", S, False, None),
    ],
    f"{BASE}.SetConfigResponse": [],
    # device.proto
    f"{DEV}.FingerprintRequest": [],
    f"{DEV}.FingerprintResponse": [
        ("device_group", 1, f"{DEV}.DeviceGroup", R, False, None),
    ],
    f"{DEV}.DeviceGroup": [
        ("vendor", 1, "string", S, False, None),
        ("device_type", 2, "string", S, False, None),
        ("device_name", 3, "string", S, False, None),
        ("devices", 4, f"{DEV}.DetectedDevice", R, False, None),
        ("attributes", 5, f"map<string, {ST}.Attribute>", R, True, None),
    ],
    f"{DEV}.DetectedDevice": [
        ("ID", 1, "string", S, False, None),
        ("healthy", 2, "bool", S, False, None),
        ("health_description", 3, "string", S, False, None),
        ("hw_locality", 4, f"{DEV}.DeviceLocality", S, False, None),
    ],
    f"{DEV}.DeviceLocality": [
        ("pci_bus_id", 1, "string", S, False, None),
    ],
    f"{DEV}.ReserveRequest": [
        ("device_ids", 1, "string", R, False, None),
    ],
    f"{DEV}.ReserveResponse": [
        ("container_res", 1, f"{DEV}.ContainerReservation", S, False, None),
    ],
    f"{DEV}.ContainerReservation": [
        ("envs", 1, "map<string, string>", R, True, None),
        ("mounts", 2, f"{DEV}.Mount", R, False, None),
        ("devices", 3, f"{DEV}.DeviceSpec", R, False, None),
    ],
    f"{DEV}.Mount": [
        ("task_path", 1, "string", S, False, None),
        ("host_path", 2, "string", S, False, None),
        ("read_only", 3, "bool", S, False, None),
    ],
    f"{DEV}.DeviceSpec": [
        ("task_path", 1, "string", S, False, None),
        ("host_path", 2, "string", S, False, None),
        ("permissions", 3, "string", S, False, None),
    ],
    f"{DEV}.StatsRequest": [
        ("collection_interval", 1, "google.protobuf.Duration", S, False, None),
    ],
    f"{DEV}.StatsResponse": [
        ("groups", 1, f"{DEV}.DeviceGroupStats", R, False, None),
    ],
    f"{DEV}.DeviceGroupStats": [
        ("vendor", 1, "string", S, False, None),
        ("type", 2, "string", S, False, None),
        ("name", 3, "string", S, False, None),
        ("instance_stats", 4, f"map<string, {DEV}.DeviceStats>", R, True, None),
    ],
    f"{DEV}.DeviceStats": [
        ("summary", 1, f"{ST}.StatValue", S, False, None),
        ("stats", 2, f"{ST}.StatObject", S, False, None),
        ("timestamp", 3, "google.protobuf.Timestamp", S, False, None),
    ],
}

_SCALAR_NAMES: dict[int, str] = {
    getattr(FieldDescriptor, attr): attr.removeprefix("TYPE_").lower()
    for attr in dir(FieldDescriptor)
    if attr.startswith("TYPE_")
}


def _is_map(field: FieldDescriptor) -> bool:
    message = field.message_type
    return message is not None and message.GetOptions().map_entry


def _type_name(field: FieldDescriptor) -> str:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        key = _type_name(message.fields_by_name["key"])
        value = _type_name(message.fields_by_name["value"])
        return f"map<{key}, {value}>"
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        assert message is not None
        return message.full_name
    if field.type == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        return field.enum_type.full_name
    return _SCALAR_NAMES[field.type]


def _describe(field: FieldDescriptor) -> Field:
    oneof = field.containing_oneof
    return (
        field.name,
        field.number,
        _type_name(field),
        R if field.is_repeated else S,
        _is_map(field),
        oneof.name if oneof is not None else None,
    )


def _walk(message: Descriptor) -> list[Descriptor]:
    """The message and all its nested messages, skipping synthetic map entries."""
    if message.GetOptions().map_entry:
        return []
    found = [message]
    for nested in message.nested_types:
        found.extend(_walk(nested))
    return found


def _all_messages() -> dict[str, Descriptor]:
    found: dict[str, Descriptor] = {}
    for module in MODULES:
        file: FileDescriptor = module.DESCRIPTOR
        for message in file.message_types_by_name.values():
            for desc in _walk(message):
                found[desc.full_name] = desc
    return found


def test_check_mode_reports_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_file_package_and_imports(module: ModuleType) -> None:
    file: FileDescriptor = module.DESCRIPTOR
    package, go_package, imports = FILES[file.name]
    assert file.package == package
    as_proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(as_proto)
    assert as_proto.syntax == "proto3"
    assert file.GetOptions().go_package == go_package
    assert sorted(dep.name for dep in file.dependencies) == sorted(imports)


def test_file_table_covers_all_modules() -> None:
    assert sorted(module.DESCRIPTOR.name for module in MODULES) == sorted(FILES)


def test_service_methods() -> None:
    actual: dict[str, tuple[str, str, bool, bool]] = {}
    for module in MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                actual[path] = (
                    method.input_type.full_name,
                    method.output_type.full_name,
                    method.client_streaming,
                    method.server_streaming,
                )
    assert actual == METHODS


def test_message_set() -> None:
    assert sorted(_all_messages()) == sorted(MESSAGES)


@pytest.mark.parametrize("full_name", sorted(MESSAGES))
def test_message_fields(full_name: str) -> None:
    descriptor = _all_messages()[full_name]
    actual = sorted((_describe(field) for field in descriptor.fields), key=lambda row: row[1])
    expected = sorted(MESSAGES[full_name], key=lambda row: row[1])
    assert actual == expected


def test_enums() -> None:
    actual: dict[str, dict[str, int]] = {}
    for module in MODULES:
        file: FileDescriptor = module.DESCRIPTOR
        enums = list(file.enum_types_by_name.values())
        for message in _all_messages().values():
            if message.file is file:
                enums.extend(message.enum_types)
        for enum in enums:
            actual[enum.full_name] = {value.name: value.number for value in enum.values}
    assert actual == ENUMS


def test_slit_values_are_packed() -> None:
    field = base_pb2.ClientTopologySLIT.DESCRIPTOR.fields_by_name["values"]
    assert field.is_packed
    encoded = base_pb2.ClientTopologySLIT(dimension=2, values=[10, 20]).SerializeToString()
    # field 2, wire type 2 (length-delimited), 2 bytes of varints
    assert encoded == b"\x08\x02\x12\x02\x0a\x14"


def test_detected_device_wire_bytes() -> None:
    device = device_pb2.DetectedDevice(ID="gpu0", healthy=True)
    assert device.SerializeToString() == b"\x0a\x04gpu0\x10\x01"


def test_device_group_round_trip() -> None:
    group = device_pb2.DeviceGroup(
        vendor="acme",
        device_type="gpu",
        device_name="model-x",
        devices=[
            device_pb2.DetectedDevice(
                ID="gpu-0",
                healthy=True,
                hw_locality=device_pb2.DeviceLocality(pci_bus_id="0000:01:00.0"),
            ),
            device_pb2.DetectedDevice(ID="gpu-1", healthy=False, health_description="too hot"),
        ],
        attributes={
            "memory": attribute_pb2.Attribute(int_val=8192, unit="MiB"),
            "clock": attribute_pb2.Attribute(float_val=1.5, unit="GHz"),
            "driver": attribute_pb2.Attribute(string_val="1.2.3"),
            "ecc": attribute_pb2.Attribute(bool_val=False),
        },
    )
    response = device_pb2.FingerprintResponse(device_group=[group])

    decoded = device_pb2.FingerprintResponse.FromString(response.SerializeToString())

    assert decoded == response
    got = decoded.device_group[0]
    assert [d.ID for d in got.devices] == ["gpu-0", "gpu-1"]
    assert got.devices[0].hw_locality.pci_bus_id == "0000:01:00.0"
    assert got.devices[1].health_description == "too hot"
    assert got.attributes["memory"].WhichOneof("value") == "int_val"
    assert got.attributes["memory"].int_val == 8192
    assert got.attributes["memory"].unit == "MiB"
    assert got.attributes["clock"].WhichOneof("value") == "float_val"
    assert got.attributes["driver"].WhichOneof("value") == "string_val"
    # A false bool inside the oneof is still recorded as "set".
    assert got.attributes["ecc"].WhichOneof("value") == "bool_val"
    assert got.attributes["ecc"].bool_val is False


def test_stat_value_round_trip_keeps_wrapper_presence() -> None:
    value = stats_pb2.StatValue(
        int_numerator_val=wrappers_pb2.Int64Value(value=0),
        int_denominator_val=wrappers_pb2.Int64Value(value=16384),
        unit="MiB",
        desc="memory in use",
    )
    stats = device_pb2.DeviceStats(
        summary=value,
        stats=stats_pb2.StatObject(
            attributes={
                "temperature": stats_pb2.StatValue(
                    float_numerator_val=wrappers_pb2.DoubleValue(value=61.5)
                )
            },
            nested={
                "fan": stats_pb2.StatObject(
                    attributes={
                        "ok": stats_pb2.StatValue(bool_val=wrappers_pb2.BoolValue(value=True))
                    }
                )
            },
        ),
    )
    stats.timestamp.FromSeconds(1_700_000_000)

    decoded = device_pb2.DeviceStats.FromString(stats.SerializeToString())

    assert decoded == stats
    summary = decoded.summary
    # A zero wrapped value must survive and stay distinguishable from "unset".
    assert summary.HasField("int_numerator_val")
    assert summary.int_numerator_val.value == 0
    assert summary.int_denominator_val.value == 16384
    assert not summary.HasField("float_numerator_val")
    assert not summary.HasField("string_val")
    assert decoded.stats.attributes["temperature"].float_numerator_val.value == 61.5
    assert decoded.stats.nested["fan"].attributes["ok"].bool_val.value is True
    assert decoded.timestamp.seconds == 1_700_000_000


def test_grpc_modules_expose_stubs_and_servicers() -> None:
    from nomad_device.proto import (
        base_pb2_grpc,
        device_pb2_grpc,
        goplugin_broker_pb2_grpc,
        goplugin_controller_pb2_grpc,
        goplugin_stdio_pb2_grpc,
    )

    for module, service in [
        (goplugin_controller_pb2_grpc, "GRPCController"),
        (goplugin_stdio_pb2_grpc, "GRPCStdio"),
        (goplugin_broker_pb2_grpc, "GRPCBroker"),
        (base_pb2_grpc, "BasePlugin"),
        (device_pb2_grpc, "DevicePlugin"),
    ]:
        assert hasattr(module, f"{service}Stub")
        assert hasattr(module, f"{service}Servicer")
        assert hasattr(module, f"add_{service}Servicer_to_server")
