"""Typed config: dataclass -> hclspec schema, SetConfig msgpack -> dataclass, errors."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import msgpack
import pytest

from nomad_device.config import ConfigError, config_spec, decode_config, encode_config
from nomad_device.proto import hclspec_pb2 as pb
from nomad_device.wire import cty
from nomad_device.wire.hclspec import (
    Attr,
    Block,
    BlockList,
    BlockMap,
    Default,
    Literal,
    Object,
    implied_type,
    to_proto,
)


@dataclass
class ExampleConfig:
    """The config of Nomad's example device plugin."""

    dir: str = "."
    list_period: timedelta = timedelta(seconds=5)
    unhealthy_perm: str = "-rwxrwxrwx"


@dataclass
class Rule:
    name: str
    count: int = 1


@dataclass
class Limits:
    max_devices: int
    ratio: float = 0.5


@dataclass(kw_only=True)
class Full:
    name: str
    count: int = 3
    ratio: float = 1.5
    enabled: bool = True
    period: timedelta = timedelta(seconds=5)
    tags: list[str] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=lambda: {"a": 0.5})
    ids: frozenset[str] = frozenset({"b", "a"})
    timeouts: list[timedelta] = field(default_factory=lambda: [timedelta(milliseconds=1500)])
    matrix: list[list[int]] = field(default_factory=list)
    note: str | None = None
    extra: Any = None
    renamed: str = field(default="x", metadata={"hcl": "other_name"})
    limits: Limits
    maybe_limits: Limits | None = None
    default_limits: Limits = field(default_factory=lambda: Limits(max_devices=7))
    rules: list[Rule] = field(default_factory=list)
    by_zone: dict[str, Rule] = field(default_factory=dict)
    internal: int = field(default=0, init=False)


RULE_SPEC = Object(
    {
        "name": Attr("name", "string", True),
        "count": Default(Attr("count", "number", False), Literal("1")),
    }
)
LIMITS_SPEC = Object(
    {
        "max_devices": Attr("max_devices", "number", True),
        "ratio": Default(Attr("ratio", "number", False), Literal("0.5")),
    }
)


# ---------------------------------------------------------------------- schema


def test_example_plugin_schema_is_gos() -> None:
    expected = Object(
        {
            "dir": Default(primary=Attr("dir", "string", False), default=Literal('"."')),
            "list_period": Default(Attr("list_period", "string", False), Literal('"5s"')),
            "unhealthy_perm": Default(
                Attr("unhealthy_perm", "string", False), Literal('"-rwxrwxrwx"')
            ),
        }
    )
    assert config_spec(ExampleConfig) == expected
    assert list(config_spec(ExampleConfig).attributes) == ["dir", "list_period", "unhealthy_perm"]
    # And the wire message is exactly what Go's hclspec helpers build.
    message = to_proto(config_spec(ExampleConfig))
    go_dir = message.object.attributes["dir"]
    assert go_dir == pb.Spec(
        default=pb.Default(
            primary=pb.Spec(Attr=pb.Attr(name="dir", type="string", required=False)),
            default=pb.Spec(literal=pb.Literal(value='"."')),
        )
    )


def test_every_field_kind_maps_to_its_spec() -> None:
    assert config_spec(Full) == Object(
        {
            "name": Attr("name", "string", True),
            "count": Default(Attr("count", "number", False), Literal("3")),
            "ratio": Default(Attr("ratio", "number", False), Literal("1.5")),
            "enabled": Default(Attr("enabled", "bool", False), Literal("true")),
            "period": Default(Attr("period", "string", False), Literal('"5s"')),
            "tags": Attr("tags", "list(string)", False),
            "weights": Attr("weights", "map(number)", False),
            "ids": Attr("ids", "set(string)", False),
            "timeouts": Attr("timeouts", "list(string)", False),
            "matrix": Attr("matrix", "list(list(number))", False),
            "note": Attr("note", "string", False),
            "extra": Attr("extra", "any", False),
            "other_name": Default(Attr("other_name", "string", False), Literal('"x"')),
            "limits": Block("limits", LIMITS_SPEC, required=True),
            "maybe_limits": Block("maybe_limits", LIMITS_SPEC, required=False),
            "default_limits": Block("default_limits", LIMITS_SPEC, required=False),
            "rules": BlockList("rules", RULE_SPEC),
            "by_zone": BlockMap("by_zone", ["name"], RULE_SPEC),
        }
    )
    assert config_spec(Full) is config_spec(Full)  # cached


# ---------------------------------------------------------------------- decode


def test_empty_data_applies_every_default() -> None:
    assert decode_config(ExampleConfig, b"") == ExampleConfig()
    with pytest.raises(ConfigError) as info:
        decode_config(Full, b"")
    assert str(info.value) == "name: missing required attribute"
    with pytest.raises(ConfigError, match=r"^limits: missing required block$"):
        decode_config(Full, msgpack.packb({"name": "n"}))


def test_decode_what_nomad_sends_for_the_example() -> None:
    # Nomad applied the defaults and sent all three attributes, keys sorted.
    data = bytes.fromhex(
        "83 a3646972 a12e"  # "dir": "."
        " ab6c6973745f706572696f64 a3316d30"  # "list_period": "1m0"... see below
        " ae756e6865616c7468795f7065726d aa2d727778727778727778".replace(" ", "")
    )
    with pytest.raises(ConfigError) as info:
        decode_config(ExampleConfig, data)
    # "1m0" is not a Go duration: the Go error names the problem.
    assert str(info.value) == 'list_period: missing unit in duration "1m0"'
    data = encode_config(ExampleConfig(dir="/dev", list_period=timedelta(minutes=1)))
    assert data == bytes.fromhex(
        "83 a3646972 a42f646576"  # "dir": "/dev"
        " ab6c6973745f706572696f64 a4316d3073"  # "list_period": "1m0s" (Go's String())
        " ae756e6865616c7468795f7065726d aa2d727778727778727778".replace(" ", "")
    )
    assert decode_config(ExampleConfig, data) == ExampleConfig("/dev", timedelta(minutes=1))


def full_value() -> Full:
    return Full(
        name="gpu",
        count=2**40,
        ratio=0.1,
        enabled=False,
        period=timedelta(hours=1, microseconds=5),
        tags=["a", "b"],
        weights={"x": 2.0, "y": 0.25},
        ids=frozenset({"z"}),
        timeouts=[timedelta(0), timedelta(milliseconds=3)],
        matrix=[[1, 2], []],
        note="hi",
        extra={"k": [1, "v"]},
        renamed="r",
        limits=Limits(max_devices=4, ratio=2.5),
        maybe_limits=None,
        default_limits=Limits(max_devices=1),
        rules=[Rule("r1"), Rule("r2", 5)],
        by_zone={"east": Rule("e", 2)},
    )


def test_round_trip_through_cty_msgpack() -> None:
    value = full_value()
    data = encode_config(value)
    assert decode_config(Full, data) == value
    # The bytes are valid against the schema's implied type as go-cty reads them.
    decoded = cty.unmarshal(data, implied_type(config_spec(Full)))
    assert isinstance(decoded, dict)
    assert decoded["other_name"] == "r"
    assert decoded["period"] == "1h0m0.000005s"
    assert decoded["maybe_limits"] is None


def test_decode_accepts_every_number_encoding() -> None:
    # Hand-built like Nomad's bytes: compact ints, float64 and numbers as strings.
    sent = {
        "name": "n",
        "count": "18446744073709551616",  # too big for int64: sent as text
        "ratio": "0.1",  # not a float64: sent as text
        "weights": {"a": 1, "b": 1.5, "c": "0.3"},
        "matrix": [[0, 255, 65536, -33]],
        "limits": {"max_devices": 3.0, "ratio": 2},  # whole float64 is fine for an int
        "maybe_limits": None,  # absent optional block: nil
        "rules": [],  # absent block list: empty array
        "by_zone": {},
    }
    config = decode_config(Full, msgpack.packb(sent))
    assert config.count == 2**64
    assert config.ratio == 0.1
    assert config.weights == {"a": 1.0, "b": 1.5, "c": 0.3}
    assert all(isinstance(v, float) for v in config.weights.values())
    assert config.matrix == [[0, 255, 65536, -33]]
    assert config.limits == Limits(max_devices=3, ratio=2.0)
    assert isinstance(config.limits.ratio, float)
    assert config.maybe_limits is None
    assert config.rules == []
    assert config.by_zone == {}
    # Attributes Nomad did not send take the dataclass defaults.
    assert config.period == timedelta(seconds=5)
    assert config.default_limits == Limits(max_devices=7)
    assert config.internal == 0


def test_decode_blocks() -> None:
    sent = {
        "name": "n",
        "limits": {"max_devices": 1, "ratio": 0.5},
        "maybe_limits": {"max_devices": 2, "ratio": None},
        "rules": [{"name": "a", "count": 1}, {"name": "b", "count": None}],
        "by_zone": {"west": {"name": "w", "count": 9}},
    }
    config = decode_config(Full, msgpack.packb(sent))
    assert config.maybe_limits == Limits(max_devices=2, ratio=0.5)
    assert config.rules == [Rule("a", 1), Rule("b", 1)]
    assert config.by_zone == {"west": Rule("w", 9)}


@pytest.mark.parametrize(
    ("sent", "message"),
    [
        ({"count": 1.5}, "count: expected a whole number, got 1.5"),
        ({"count": "0.1"}, "count: expected a whole number, got 0.1"),
        ({"count": "12345678901234567890.5"}, "count: expected a whole number, got 1234567890123"),
        ({"ratio": "1e400"}, "ratio: number 1.00000e+400 is too large for a float"),
        ({"period": "5 minutes"}, 'period: unknown unit " minutes" in duration "5 minutes"'),
        ({"period": "abc"}, 'period: invalid duration "abc"'),
        ({"timeouts": ["1s", "x"]}, 'timeouts[1]: invalid duration "x"'),
        ({"name": True}, "name: expected string, got bool"),
        ({"tags": [None]}, "tags[0]: null is not allowed here"),
        ({"tags": "a"}, 'tags: expected a list, got string "a"'),
        ({"rules": [{"name": "a"}, {"name": "b"}, {"name": False}]}, "rules[2].name: expected "),
        ({"by_zone": {"us east": {"name": 1}}}, 'by_zone["us east"].name: expected string'),
        ({"limits": {"max_devices": 1.5}}, "limits.max_devices: expected a whole number"),
        ({"bogus": 1}, "bogus: unexpected attribute"),
        ({"limits": {"max_devices": 1, "x": 2}}, "limits.x: unexpected attribute"),
    ],
)
def test_decode_errors_name_the_field(sent: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"name": "n", "limits": {"max_devices": 1}}
    with pytest.raises(ConfigError) as info:
        decode_config(Full, msgpack.packb({**base, **sent}))
    assert str(info.value).startswith(message)
    assert isinstance(info.value, ValueError)


def test_error_attributes() -> None:
    data = msgpack.packb({"name": "n", "limits": {"max_devices": 1}, "rules": [{"name": 1}]})
    with pytest.raises(ConfigError) as info:
        decode_config(Full, data)
    assert info.value.path == ("rules", 0, "name")
    assert info.value.problem == "expected string, got number"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x81", "config: malformed msgpack: data ends early: the container at offset 0"),
        (b"\xc1", "config: malformed msgpack: invalid type byte 0xc1 at offset 0"),
        (msgpack.packb({"dir": "."}) + b"\x00", "config: malformed msgpack: 1 unexpected byte"),
        (b"\x81\xa3dir\xa5ab", "config: malformed msgpack: data ends early at offset 6"),
        (b"\x93\x01\x02\x03", "config: expected an object, got a list"),
    ],
)
def test_malformed_msgpack(data: bytes, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode_config(ExampleConfig, data)
    assert str(info.value).startswith(message)
    assert info.value.path == ()


def test_malformed_inside_a_value_mentions_where() -> None:
    with pytest.raises(ConfigError) as info:
        decode_config(ExampleConfig, b"\x81\xa3dir\xa5ab")
    assert str(info.value).endswith("(at dir)")


# ------------------------------------------------------------ invalid classes


@dataclass
class BadType:
    x: tuple[int, int]


@dataclass
class BadKey:
    x: dict[int, str]


@dataclass
class BadDefault:
    x: float = float("inf")


@dataclass
class Clash:
    a: str = field(default="", metadata={"hcl": "b"})
    b: str = ""


@dataclass
class Loop:
    child: Loop | None = None


@dataclass
class EmptyName:
    a: str = field(default="", metadata={"hcl": ""})


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (BadType, "BadType.x: unsupported config field type tuple[int, int]"),
        (BadKey, "BadKey.x: unsupported config field type"),
        (BadDefault, "BadDefault.x: default cannot be written in HCL"),
        (Clash, "HCL name 'b' is also used by a"),
        (Loop, "config class Loop contains itself"),
        (EmptyName, "metadata['hcl'] must be a non-empty string"),
        (int, "config classes must be dataclasses"),
    ],
)
def test_invalid_config_classes(cls: type, message: str) -> None:
    with pytest.raises(TypeError) as info:
        config_spec(cls)
    assert message in str(info.value)


def test_field_metadata_is_respected_for_decoding() -> None:
    @dataclass
    class Renamed:
        value: int = field(default=1, metadata={"hcl": "the-value"})

    assert config_spec(Renamed).attributes.keys() == {"the-value"}
    assert decode_config(Renamed, msgpack.packb({"the-value": 9})) == Renamed(9)
    assert dataclasses.asdict(decode_config(Renamed, b"")) == {"value": 1}


@dataclass
class WithLabels:
    labels: dict[str, str] = field(default_factory=dict, metadata={"hcl_block": True})


def test_hcl_block_maps_are_block_attrs_that_an_agent_file_can_set() -> None:
    from nomad_device.agentconfig import agentfile
    from nomad_device.agentconfig.hcldec import compile_spec, decode, encode
    from nomad_device.wire.hclspec import BlockAttrs

    spec = config_spec(WithLabels)
    assert spec == Object({"labels": BlockAttrs("labels", "string", False)})
    assert decode_config(WithLabels, b"").labels == {}
    text = 'plugin "p" {\n  config {\n    labels {\n      tier = "gold"\n    }\n  }\n}\n'
    block = agentfile.parse_agent_text(text, "agent.hcl").select(["p"], None)
    decoded = decode(compile_spec(spec), block.config)
    assert decoded.ok, [d.render("agent.hcl") for d in decoded.diagnostics]
    assert decode_config(WithLabels, encode(decoded)).labels == {"tier": "gold"}
    round_trip = encode_config(WithLabels({"a": "b"}))
    assert decode_config(WithLabels, round_trip) == WithLabels({"a": "b"})


def test_hcl_block_needs_a_map_field() -> None:
    @dataclass
    class Wrong:
        tags: list[str] = field(default_factory=list, metadata={"hcl_block": True})

    with pytest.raises(TypeError, match="needs a dict"):
        config_spec(Wrong)


# -- hcl_default: a collection's default in the schema, as Go plugins write it


@dataclass
class _GoStyle:
    ids: list[str] = field(default_factory=list, metadata={"hcl_default": True})
    xids: list[int] = field(default_factory=lambda: [13, 31], metadata={"hcl_default": True})
    plain: list[str] = field(default_factory=list)


def test_hcl_default_writes_a_collections_default_as_a_literal() -> None:
    spec = config_spec(_GoStyle)
    assert spec.attributes["ids"] == Default(Attr("ids", "list(string)", False), Literal("[]"))
    assert spec.attributes["xids"] == Default(
        Attr("xids", "list(number)", False), Literal("[13, 31]")
    )
    assert spec.attributes["plain"] == Attr("plain", "list(string)", False)


def test_hcl_default_is_refused_inside_repeated_blocks() -> None:
    @dataclass
    class Holder:
        blocks: dict[str, _GoStyle] = field(default_factory=dict)

    with pytest.raises(TypeError, match=r"hcl_default.*repeated"):
        config_spec(Holder)
