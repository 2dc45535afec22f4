"""defaults_only_config / config_from_json: the SetConfig bytes Nomad would send."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from datetime import timedelta
from typing import Any

import msgpack
import pytest
from support import PLUGINS

from nomad_device.agentconfig import hcldec
from nomad_device.agentconfig.setconfig import required_settings
from nomad_device.config import config_spec, decode_config, encode_config
from nomad_device.testing import (
    TEST_SPEC,
    ConfigBodyError,
    ConfigRequired,
    config_from_json,
    defaults_only_config,
)
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
        "labels": None,
        "limits": None,
        "name": "widgets",
        "note": None,
        "period": "5s",
        "ratio": 0.25,
        "rules": [],
        # No literal default for collections: Nomad sends null, the plugin applies
        # its default (["a", "b"]); see nomad_device.config.
        "tags": None,
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


_ABSENT = h.Object(
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


def test_absent_values_without_defaults() -> None:
    # A required attribute inside an absent optional block is not required.
    assert _unpack(defaults_only_config(_ABSENT)) == {
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
        (
            h.Object({"dir": h.Attr("dir", "string", True)}),
            'Missing required argument: The argument "dir" is required, but no definition '
            "was found.",
        ),
        (
            h.Object({"b": h.Block("b", h.Object({}), True)}),
            'Missing b block: A block of type "b" is required here.',
        ),
        (
            h.Object({"a": h.BlockAttrs("a", "string", True)}),
            'Missing a block: A block of type "a" is required here.',
        ),
        (
            h.Object({"r": h.BlockList("r", h.Object({}), min_items=1)}),
            'Insufficient r blocks: At least 1 "r" blocks are required.',
        ),
        (
            # A Default does not make its primary optional: hcldec still insists.
            h.Object({"d": h.Default(h.Attr("d", "string", True), h.Literal('"x"'))}),
            'Missing required argument: The argument "d" is required, but no definition was found.',
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
    # hcldec's diagnostics, as Nomad words them, each after the key path it concerns.
    assert set(raised.value.problems) == {
        'cont: Invalid label: No argument or block type is named "cont". Did you mean "count"?',
        "limits.max_op: Invalid label: No argument or block type is named "
        '"max_op". Did you mean "max_ops"?',
        'rules: Missing required argument: The argument "match" is required, but no '
        "definition was found.",
    }
    with pytest.raises(ConfigBodyError, match="not valid JSON"):
        config_from_json(spec, "{nope")
    with pytest.raises(ConfigBodyError, match="must be an object"):
        config_from_json(spec, "[1]")
    with pytest.raises(ConfigBodyError, match="a number is required"):
        config_from_json(spec, {"count": "many"})
    with pytest.raises(ConfigBodyError, match="NaN is not a JSON number"):
        config_from_json(spec, '{"count": NaN}')
    with pytest.raises(ConfigBodyError, match="cannot use timedelta as JSON config"):
        config_from_json(spec, {"period": timedelta(seconds=1)})


def test_too_few_blocks_is_a_requirement() -> None:
    spec = h.Object({"r": h.BlockList("r", h.Object({"m": h.Attr("m", "string")}), min_items=2)})
    assert required_settings(spec) == ['Insufficient r blocks: At least 2 "r" blocks are required.']
    with pytest.raises(ConfigRequired):
        config_from_json(spec, {"r": [{"m": "a"}]})
    assert _unpack(config_from_json(spec, {"r": [{"m": "a"}, {"m": 1}]})) == {
        "r": [{"m": "a"}, {"m": "1"}]
    }


def test_json_numbers_are_read_exactly() -> None:
    spec = h.Object({"n": h.Attr("n", "number"), "s": h.Attr("s", "string")})
    # Decimal, not float: the string keeps every digit, as Nomad's big.Float does.
    data = config_from_json(spec, '{"n": 0.1, "s": 0.10000000000000000000001}')
    assert _unpack(data) == {"n": "0.1", "s": "0.10000000000000000000001"}


# -- the same decoder as the launcher --------------------------------------------


def _plugin_config(name: str) -> type:
    """The ``Config`` dataclass of a test plugin under tests/plugins/."""
    path = PLUGINS / f"{name}.py"
    module_name = f"_defaults_test_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    config: type = module.Config
    return config


def _schemas() -> dict[str, h.Spec]:
    from nomad_device.plugins.example.plugin import ExampleConfig

    return {
        "example plugin": config_spec(ExampleConfig),
        "sdk test plugin": config_spec(_plugin_config("sdk_plugin")),
        "config test plugin": config_spec(_plugin_config("config_plugin")),
        "everything": config_spec(Everything),
        "TEST_SPEC": TEST_SPEC,
        "absent values": _ABSENT,
        "any default": h.Object(
            {"extra": h.Default(h.Attr("extra", "any"), h.Literal('{k = [1, "x"]}'))}
        ),
        "literals": h.Object(
            {
                "a": h.Default(h.Attr("a", "number"), h.Literal("0.1")),
                "b": h.Default(h.Attr("b", "list(number)"), h.Literal("[1, 2.5]")),
                "c": h.Default(h.Attr("c", "map(string)"), h.Literal('{x = "y"}')),
                "d": h.Default(h.Attr("d", "bool"), h.Literal("true")),
                "e": h.Array([h.Literal('"x"'), h.Literal("[1, 2]")]),
            }
        ),
    }


@pytest.mark.parametrize("name", list(_schemas()))
def test_defaults_only_config_is_what_hcldec_encodes(name: str) -> None:
    spec = _schemas()[name]
    expected = hcldec.encode(hcldec.decode(hcldec.compile_spec(spec), None))
    assert defaults_only_config(spec) == expected


def test_plugin_defaults_match_the_sdk_encoder() -> None:
    # An anchor independent of hcldec: the SDK's own encoder of the default config.
    from nomad_device.plugins.example.plugin import ExampleConfig

    assert defaults_only_config(config_spec(ExampleConfig)) == encode_config(ExampleConfig())
    for name in ("sdk_plugin", "config_plugin"):
        config = _plugin_config(name)
        assert defaults_only_config(config_spec(config)) == encode_config(config())


def test_config_required_names_the_missing_settings() -> None:
    spec = h.Object(
        {
            "device_dir": h.Attr("device_dir", "string", True),
            "limits": h.Block("limits", h.Object({"max": h.Attr("max", "number", True)}), True),
        }
    )
    with pytest.raises(ConfigRequired) as raised:
        defaults_only_config(spec)
    assert raised.value.settings == ("device_dir", "limits")
    with pytest.raises(ConfigRequired) as raised:
        config_from_json(spec, {"device_dir": "/x", "limits": [{}]})
    assert raised.value.settings == ("limits.max",)
