"""A plugin's config from agent file to SetConfig bytes, with the agent's outcomes.

Each class of the issue 17 corpus: labelled blocks with collection settings set
in some and not others, JSON agent files in HCL 1's forms, duplicate plugin
labels, repeated config blocks, interpolation. Expected outcomes are the ones
a Nomad v2.0.5 agent gives (``tests/agentconfig/test_agent_config_crosscheck.py``
checks the same files against Nomad's libraries).
"""

from __future__ import annotations

import msgpack
import pytest

from nomad_device.agentconfig import schemasafety, setconfig
from nomad_device.config import config_spec, decode_config
from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig
from nomad_device.wire import hclspec
from nomad_device.wire.hclspec import (
    Attr,
    BlockAttrs,
    BlockList,
    BlockMap,
    Default,
    Literal,
    Object,
)

GENERIC = config_spec(GenericConfig)
LABEL = "nomad-device-generic"

#: The generic plugin's schema as the SDK built it before issue 17: ``paths``
#: with the literal default ``[]``.
OLD_DEVICE = Object(
    {
        "paths": Default(Attr("paths", "list(string)"), Literal("[]")),
        "share": Default(Attr("share", "number"), Literal("1")),
        "usb": BlockList(
            "usb", Object({"vendor_id": Default(Attr("vendor_id", "string"), Literal('""'))})
        ),
    }
)
OLD_GENERIC = Object({"device": BlockMap("device", ["name"], OLD_DEVICE)})


def agent(*devices: str, label: str = LABEL) -> str:
    inner = "".join(f"    {d}\n" for d in devices)
    return f'plugin "{label}" {{\n  config {{\n{inner}  }}\n}}\n'


SERIAL = 'device "serial" {\n      usb {\n        vendor_id = "1a86"\n      }\n    }'
KVM = 'device "kvm" {\n      paths = ["/dev/kvm"]\n      share = 4\n    }'


def value(result: setconfig.AgentConfig) -> object:
    assert result.ok, result.explanation
    return msgpack.unpackb(result.data, raw=False)


# ------------------------------------------- mixed set/unset in labelled blocks


@pytest.mark.parametrize("order", [(SERIAL, KVM), (KVM, SERIAL)], ids=["serial first", "kvm first"])
def test_the_issue_17_config_decodes_in_either_order(order: tuple[str, str]) -> None:
    result = setconfig.from_agent_text(agent(*order), GENERIC, LABEL)
    devices = value(result)["device"]  # type: ignore[index]
    assert devices["kvm"]["paths"] == ["/dev/kvm"]
    assert devices["serial"]["paths"] is None  # a typed null: the plugin reads "no paths"
    config = decode_config(GenericConfig, result.data)
    assert config.device["serial"] == DeviceBlock(usb=[config.device["serial"].usb[0]])
    assert not config.device["serial"].paths


@pytest.mark.parametrize(
    "devices",
    [
        (SERIAL, KVM),
        (KVM, SERIAL),
        (KVM, 'device "empty" {}'),
        ('device "a" {\n paths = []\n }', 'device "b" {}'),
        (SERIAL, 'device "s2" {\n usb {}\n }', KVM),
    ],
    ids=["serial, kvm", "kvm, serial", "an empty block", "explicit [] beside unset", "three"],
)
def test_the_old_schema_crashes_the_agent_and_says_what_to_write(devices: tuple[str, ...]) -> None:
    result = setconfig.from_agent_text(agent(*devices), OLD_GENERIC, LABEL)
    assert result.outcome == "panic"
    assert result.messages[0].startswith("inconsistent map element types (cty.Object(")
    text = result.explanation
    assert text.startswith("a Nomad agent given this config would crash")
    assert "at paths (" in text and "Write paths = [] in device " in text


def test_the_workaround_from_the_issue_starts_an_agent_with_the_old_schema() -> None:
    serial = SERIAL.replace('device "serial" {', 'device "serial" {\n      paths = []')
    assert setconfig.from_agent_text(agent(serial, KVM), OLD_GENERIC, LABEL).ok


@pytest.mark.parametrize(
    "extra",
    [
        'probe {\n command = ["true"]\n }',
        'env {\n A = "1"\n }',
        'attributes {\n speed = "4 GiB"\n }',
        "group_per_device = true",
        "share = 3",
        'usb {\n vendor_id = "1a86"\n }\n usb {\n vendor_id = "0403"\n }',
    ],
    ids=["probe", "env", "attributes", "group_per_device", "share", "two usb"],
)
def test_settings_in_one_block_only_keep_working(extra: str) -> None:
    one = 'device "one" {\n paths = ["/dev/null"]\n ' + extra + "\n }"
    result = setconfig.from_agent_text(agent(one, 'device "two" {}', KVM), GENERIC, LABEL)
    assert result.ok, result.explanation
    assert set(value(result)["device"]) == {"one", "two", "kvm"}  # type: ignore[index]


def test_any_inside_a_block_map_crashes_on_every_config() -> None:
    spec = Object({"m": BlockMap("m", ["n"], Object({"x": Attr("x", "any")}))})
    result = setconfig.from_agent_text(agent(label="p"), spec, "p")
    assert result.outcome == "panic"
    assert result.messages == (
        "cty.DynamicPseudoType attributes may not be used inside a BlockMapSpec",
    )
    assert "No config avoids it" in result.explanation


def test_mixed_values_under_an_any_block_attrs_crash() -> None:
    spec = Object({"env": BlockAttrs("env", "any")})
    result = setconfig.from_agent_text(agent('env {\n a = "x"\n b = 1\n }', label="p"), spec, "p")
    assert result.outcome == "panic"
    assert result.messages[0] == "inconsistent map element types (cty.String then cty.Number)"
    # One type is fine.
    assert setconfig.from_agent_text(agent('env {\n a = "x"\n }', label="p"), spec, "p").ok


def test_tuple_defaults_in_a_block_list_are_unified_not_crashed() -> None:
    spec = Object({"q": BlockList("q", OLD_DEVICE)})
    text = agent('q {\n paths = ["a"]\n }', "q {}", label="p")
    assert value(setconfig.from_agent_text(text, spec, "p")) == {
        "q": [
            {"paths": ["a"], "share": 1, "usb": []},
            {"paths": [], "share": 1, "usb": []},
        ]
    }


# ------------------------------------------------------------- JSON agent files


def test_json_agent_file_list_of_objects_form() -> None:
    text = (
        '{"plugin": [{"nomad-device-generic": [{"config": [{"device": [{"kvm": '
        '[{"paths": ["/dev/kvm"], "share": 4}]}]}]}]}]}'
    )
    result = setconfig.from_agent_text(text, GENERIC, LABEL, "agent.json")
    assert value(result)["device"]["kvm"]["share"] == 4  # type: ignore[index]
    same = setconfig.from_agent_text(agent(KVM), GENERIC, LABEL)
    assert result.data == same.data


def test_json_agent_file_flat_config_in_the_nested_object_form() -> None:
    text = '{"plugin": {"nomad-device-generic": {"config": {"fingerprint_period": "5s"}}}}'
    result = setconfig.from_agent_text(text, GENERIC, LABEL, "agent.json")
    assert value(result)["fingerprint_period"] == "5s"  # type: ignore[index]


def test_json_agent_file_nested_blocks_in_the_object_form_are_refused() -> None:
    text = (
        '{"plugin": {"nomad-device-generic": {"config": {"device": '
        '{"kvm": {"paths": ["/dev/kvm"], "share": 4}}}}}}'
    )
    result = setconfig.from_agent_text(text, GENERIC, LABEL, "agent.json")
    assert (result.outcome, result.stage, result.messages) == (
        "refuse",
        "keys",
        ("unexpected keys device, kvm",),
    )
    assert "lists of objects" in result.explanation


# ------------------------------------------- duplicate labels, repeated config


def test_two_plugin_blocks_with_one_label_the_last_wins_whole() -> None:
    first = agent(KVM).replace(
        "  config {", '  args = ["-v"]\n  config {\n    fingerprint_period = "1s"'
    )
    second = agent('device "null" {\n paths = ["/dev/null"]\n }')
    result = setconfig.from_agent_text(first + second, GENERIC, LABEL)
    got = value(result)
    assert set(got["device"]) == {"null"}  # type: ignore[index]
    assert got["fingerprint_period"] == "30s"  # type: ignore[index]  # the default: not merged
    assert result.data == setconfig.from_agent_text(second, GENERIC, LABEL).data
    assert any("uses only the last block, whole" in w for w in result.warnings)


def test_repeated_config_blocks_merge_key_by_key_the_later_winning() -> None:
    text = (
        f'plugin "{LABEL}" {{\n  config {{\n    fingerprint_period = "1s"\n    {KVM}\n  }}\n'
        f'  config {{\n    fingerprint_period = "2s"\n    {SERIAL}\n  }}\n}}\n'
    )
    got = value(setconfig.from_agent_text(text, GENERIC, LABEL))
    assert got["fingerprint_period"] == "2s"  # type: ignore[index]
    assert set(got["device"]) == {"kvm", "serial"}  # type: ignore[index]


# ---------------------------------------------------------------- interpolation


def test_interpolation_gets_the_agents_message() -> None:
    text = agent('device "x" {\n paths = ["${attr.kernel.name}"]\n }')
    result = setconfig.from_agent_text(text, GENERIC, LABEL)
    assert (result.outcome, result.messages) == (
        "refuse",
        ("Variables not allowed: Variables may not be used here.",),
    )
    assert "agent.hcl:4: Variables not allowed" in result.explanation


# ------------------------------------------------------------------- hazards


def test_every_ready_made_schema_is_safe() -> None:
    from nomad_device.plugins.example.plugin import ExampleConfig
    from nomad_device.plugins.nvidia.config import NvidiaConfig

    for spec in (GENERIC, config_spec(ExampleConfig), config_spec(NvidiaConfig)):
        assert schemasafety.hazards(spec) == []


def test_hazards_come_with_an_agent_file_that_crashes() -> None:
    (hazard,) = schemasafety.hazards(OLD_GENERIC, LABEL)
    assert (hazard.where, hazard.when) == ("device.paths", schemasafety.SOMETIMES)
    assert "its default [] is an empty tuple" in hazard.problem
    assert hazard.config == agent('device "a" {\n      paths = ["x"]\n    }', 'device "b" {\n    }')
    assert setconfig.from_agent_text(hazard.config, OLD_GENERIC, LABEL).outcome == "panic"


def test_nested_hazards_wrap_both_blocks() -> None:
    probe = Object({"env": Default(Attr("env", "map(string)"), Literal("{}"))})
    spec = Object({"d": BlockMap("d", ["n"], Object({"probe": hclspec.Block("probe", probe)}))})
    (hazard,) = schemasafety.hazards(spec, "p")
    assert hazard.where == "d.probe.env"
    assert 'd "a" {\n      probe {\n        env = { k = "v" }' in hazard.config
    assert 'd "b" {\n      probe {\n      }' in hazard.config
