"""defaults_only_config / config_from_json: the SetConfig bytes Nomad would send."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import msgpack
import pytest

from nomad_device.config import config_spec, decode_config, encode_config
from nomad_device.testing import (
    TEST_SPEC,
    ConfigBodyError,
    ConfigRequired,
    config_from_json,
    defaults_only_config,
)
from nomad_device.testing.defaults import required_settings
from nomad_device.wire import hclspec as h


@dataclasses.dataclass
class Limits:
    max_ops: int = 10
    burst: float = 1.5


@dataclasses.dataclass
class Rule:
    match: str
    mode: str = "rw"


@dataclasses.dataclass
class Everything:
    name: str = "widgets"
    count: int = 3
    ratio: float = 0.25
    tiny: float = 0.1
    enabled: bool = True
    period: timedelta = timedelta(seconds=5)
    tags: list[str] = dataclasses.field(default_factory=lambda: ["a", "b"])
    labels: dict[str, int] = dataclasses.field(default_factory=dict)
    note: str | None = None
    limits: Limits | None = None
    rules: list[Rule] = dataclasses.field(default_factory=list)
    groups: dict[str, Rule] = dataclasses.field(default_factory=dict)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False)


def test_matches_the_sdk_encoder_for_a_default_dataclass() -> None:
    spec = config_spec(Everything)
    data = defaults_only_config(spec)
    assert data == encode_config(Everything())
    assert decode_config(Everything, data) == Everything()


def test_defaults_only_shape() -> None:
    value = _unpack(defaults_only_config(config_spec(Everything)))
    assert value == {
        "count": 3,
        "enabled": True,
        "groups": {},
        "labels": {},
        "limits": None,
        "name": "widgets",
        "note": None,
        "period": "5s",
        "ratio": 0.25,
        "rules": [],
        "tags": ["a", "b"],
        "tiny": "0.1",  # not exact in float64: cty sends the decimal text
    }
    assert list(value) == sorted(value)  # cty writes object keys in order


def test_go_plugin_schema_bytes() -> None:
    spec = h.Object(
        {
            "dir": h.Default(h.Attr("dir", "string"), h.Literal('"."')),
            "list_period": h.Default(h.Attr("list_period", "string"), h.Literal('"5s"')),
        }
    )
    assert defaults_only_config(spec) == b"\x82\xa3dir\xa1.\xablist_period\xa25s"


def test_absent_values_without_defaults() -> None:
    spec = h.Object(
        {
            "attr": h.Attr("attr", "list(string)"),
            "block": h.Block("block", h.Object({"x": h.Attr("x", "string", True)})),
            "attrs": h.BlockAttrs("attrs", "number"),
            "list": h.BlockList("list", h.Object({"y": h.Attr("y", "number")})),
            "set": h.BlockSet("set", h.Object({"y": h.Attr("y", "number")})),
            "map": h.BlockMap("map", ["name"], h.Object({"y": h.Attr("y", "number")})),
            "const": h.Literal("42"),
            "tuple": h.Array([h.Literal('"a"'), h.Attr("z", "bool")]),
        }
    )
    # A required attribute inside an absent optional block is not required.
    assert _unpack(defaults_only_config(spec)) == {
        "attr": None,
        "attrs": None,
        "block": None,
        "const": 42,
        "list": [],
        "map": {},
        "set": [],
        "tuple": ["a", None],
    }


def test_any_attribute_uses_the_concrete_type_of_its_default() -> None:
    spec = h.Object({"extra": h.Default(h.Attr("extra", "any"), h.Literal('{k = [1, "x"]}'))})
    data = defaults_only_config(spec)
    # No cty dynamic wrapper ([type JSON, value]): the object travels as a plain map.
    assert _unpack(data) == {"extra": {"k": [1, "x"]}}
    assert h.decode(spec, data) == {"extra": {"k": [1, "x"]}}


def test_test_spec_defaults_are_all_null() -> None:
    assert _unpack(defaults_only_config(TEST_SPEC)) == {"bar": None, "baz": None, "foo": None}


@pytest.mark.parametrize(
    "spec, problem",
    [
        (h.Object({"dir": h.Attr("dir", "string", True)}), "dir: required attribute (string)"),
        (h.Object({"b": h.Block("b", h.Object({}), True)}), "b: required block"),
        (h.Object({"a": h.BlockAttrs("a", "string", True)}), "a: required block"),
        (
            h.Object({"r": h.BlockList("r", h.Object({}), min_items=1)}),
            "r: at least 1 block(s) required, got 0",
        ),
        (
            # A Default does not make its primary optional: hcldec still insists.
            h.Object({"d": h.Default(h.Attr("d", "string", True), h.Literal('"x"'))}),
            "d: required attribute (string)",
        ),
    ],
)
def test_required_settings_without_defaults(spec: h.Spec, problem: str) -> None:
    with pytest.raises(ConfigRequired) as raised:
        defaults_only_config(spec)
    assert raised.value.problems == (problem,)
    assert required_settings(spec) == [problem]


def test_required_settings_of_a_complete_schema() -> None:
    assert required_settings(config_spec(Everything)) == []


def test_config_from_json_like_the_agent() -> None:
    spec = config_spec(Everything)
    body = {
        "count": "7",  # HCL converts "7" to a number for a number attribute
        "tags": ["x"],
        "limits": [{"max_ops": 5}],  # blocks arrive as lists of objects from HCL
        "rules": [{"match": "sd*"}, {"match": "nv*", "mode": "r"}],
        "groups": {"fast": {"match": "f*"}},
        "labels": {"tier": 1},
    }
    data = config_from_json(spec, body)
    assert decode_config(Everything, data) == Everything(
        count=7,
        tags=["x"],
        labels={"tier": 1},
        limits=Limits(max_ops=5),
        rules=[Rule("sd*"), Rule("nv*", "r")],
        groups={"fast": Rule("f*")},
    )
    assert config_from_json(spec, '{"count": 7}') == encode_config(Everything(count=7))


def test_config_from_json_rejects_what_the_agent_rejects() -> None:
    spec = config_spec(Everything)
    with pytest.raises(ConfigBodyError) as raised:
        config_from_json(spec, {"cont": 1, "limits": {"max_op": 2}, "rules": [{}]})
    assert not isinstance(raised.value, ConfigRequired)
    assert set(raised.value.problems) == {
        "cont: unsupported argument or block",
        "limits.max_op: unsupported argument or block",
        "rules[0].match: required attribute (string)",
    }
    with pytest.raises(ConfigBodyError, match="not valid JSON"):
        config_from_json(spec, "{nope")
    with pytest.raises(ConfigBodyError, match="must be an object"):
        config_from_json(spec, "[1]")
    with pytest.raises(ConfigBodyError, match="expected"):
        config_from_json(spec, {"count": "many"})
