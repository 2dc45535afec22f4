"""Schemas built from any config dataclass never let a Nomad agent crash (issue 17).

Random dataclasses -- scalars, optional and defaulted fields, lists, sets and
maps, nested blocks, lists and maps of blocks, ``hcl_block`` maps, nested a
few levels deep -- give schemas in which no combination of set and unset
settings yields values of different types: the safety analysis finds nothing,
and generated agent files never make the decoder (held to Nomad's own code by
``tests/agentconfig/test_agent_config_crosscheck.py``) report a panic.
"""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.agentgen import cases

from nomad_device.agentconfig import schemasafety, setconfig
from nomad_device.config import ConfigError, config_spec, decode_config

_SCALARS: list[tuple[object, object]] = [
    (str, "x"),
    (int, 3),
    (float, 1.5),
    (bool, True),
    (timedelta, timedelta(seconds=5)),
    (str | None, None),
    (list[str], ["a"]),
    (list[int], []),
    (set[str], {"a", "b"}),
    (dict[str, int], {"k": 1}),
    (list[str] | None, None),
]

_counter = iter(range(10**9))


@st.composite
def config_classes(draw: st.DrawFn, depth: int = 0) -> type:
    fields: list[tuple[str, object, dataclasses.Field[Any]]] = []
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["scalar"] * 4 + ["block", "list", "map", "attrs"]))
        name = f"f{i}"
        if kind == "scalar" or depth >= 2:
            tp, default = draw(st.sampled_from(_SCALARS))
            if draw(st.booleans()) and default is not None:
                fields.append((name, tp, dataclasses.field()))
            else:
                fields.append((name, tp, dataclasses.field(default_factory=lambda d=default: d)))
        elif kind == "attrs":
            fields.append(
                (
                    name,
                    dict[str, str],
                    dataclasses.field(default_factory=dict, metadata={"hcl_block": True}),
                )
            )
        else:
            inner = draw(config_classes(depth + 1))
            if kind == "block":
                fields.append((name, inner | None, dataclasses.field(default=None)))
            elif kind == "list":
                fields.append((name, list[inner], dataclasses.field(default_factory=list)))  # type: ignore[valid-type]
            else:
                fields.append((name, dict[str, inner], dataclasses.field(default_factory=dict)))  # type: ignore[valid-type]
    # Required fields first, as dataclasses want them.
    fields.sort(
        key=lambda f: (
            f[2].default is not dataclasses.MISSING
            or f[2].default_factory is not dataclasses.MISSING
        )
    )  # type: ignore[misc]
    return dataclasses.make_dataclass(f"C{next(_counter)}", fields)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_no_dataclass_schema_can_crash_an_agent(data: st.DataObject) -> None:
    cls = data.draw(config_classes(), label="config class")
    spec = config_spec(cls)
    assert schemasafety.hazards(spec, "p") == []
    for _ in range(5):
        case = data.draw(cases(spec, "p"), label="agent file")
        result = setconfig.from_agent_text(case.text, spec, "p")
        assert result.outcome != "panic", (case.text, result.explanation)
        if result.ok:
            # A value the schema allows may still be refused by the field (a bad duration).
            with contextlib.suppress(ConfigError):
                decode_config(cls, result.data)


@dataclasses.dataclass
class Slot:
    names: list[str] = dataclasses.field(default_factory=lambda: ["a"])
    size: int = 1


@dataclasses.dataclass
class Slots:
    slot: dict[str, Slot] = dataclasses.field(default_factory=dict)


def test_collections_get_no_literal_default_and_the_plugin_applies_it() -> None:
    spec = config_spec(Slots)
    text = (
        'plugin "p" {\n  config {\n    slot "x" {\n      names = ["b"]\n    }\n'
        '    slot "y" {}\n  }\n}\n'
    )
    result = setconfig.from_agent_text(text, spec, "p")
    assert result.ok, result.explanation
    assert decode_config(Slots, result.data) == Slots({"x": Slot(["b"]), "y": Slot(["a"])})


@pytest.mark.parametrize(
    "field_type",
    [list[Any], dict[str, Any], Any],
    ids=["list[Any]", "dict[str, Any]", "Any"],
)
def test_any_inside_repeated_blocks_is_refused(field_type: object) -> None:
    optional = field_type | None  # type: ignore[operator]
    inner = dataclasses.make_dataclass("Inner", [("x", optional, dataclasses.field(default=None))])
    for outer_type in (list[inner], dict[str, inner]):  # type: ignore[valid-type]
        outer = dataclasses.make_dataclass(
            "Outer", [("items", outer_type, dataclasses.field(default_factory=list))]
        )
        with pytest.raises(TypeError, match="Any inside repeated blocks"):
            config_spec(outer)
    # At the top level, or in a single block, Any is safe and allowed.
    top = dataclasses.make_dataclass("Top", [("x", optional, dataclasses.field(default=None))])
    assert schemasafety.hazards(config_spec(top)) == []


def test_an_hcl_block_map_of_any_is_refused() -> None:
    cls = dataclasses.make_dataclass(
        "Env",
        [
            (
                "env",
                dict[str, Any],
                dataclasses.field(default_factory=dict, metadata={"hcl_block": True}),
            )
        ],
    )
    with pytest.raises(TypeError, match="a map of Any"):
        config_spec(cls)
