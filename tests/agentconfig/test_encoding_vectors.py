"""Byte-for-byte: agent HCL -> decoded as Nomad decodes it -> the cty msgpack SetConfig gets.

Every expected byte string below is written out by hand from the encoding rules
(docs/nomad-device-protocol.md section 5, msgpack's formats):

- the config is a map whose keys are in sorted order; ``fixstr`` is ``0xa0 + length``;
- integers take the smallest msgpack int: 0..127 as one byte, then ``cc`` (uint8),
  ``cd`` (uint16), ``ce`` (uint32); negatives -32..-1 as one byte ``e0..ff``, then
  ``d0`` (int8), ``d1`` (int16);
- a non-integer that float64 holds exactly is ``cb`` + 8 bytes big-endian;
  any other number is its shortest decimal text as a msgpack string;
- null is ``c0``; lists, sets and tuples are arrays (``0x90 + n``); maps and
  objects are maps (``0x80 + n``); a set is written deduplicated, in cty's order
  (strings sorted).
"""

from __future__ import annotations

import pytest

from nomad_device.agentconfig import agentfile
from nomad_device.agentconfig.hcldec import compile_spec, decode, encode
from nomad_device.wire.hclspec import (
    Attr,
    Block,
    BlockAttrs,
    BlockList,
    BlockMap,
    Default,
    Literal,
    Object,
    Spec,
)


def s(text: str) -> str:
    """A short msgpack string (fixstr), as hex."""
    raw = text.encode()
    assert len(raw) < 32
    return f"{0xA0 + len(raw):02x}" + raw.hex()


def hx(*parts: str) -> bytes:
    return bytes.fromhex("".join(p.replace(" ", "") for p in parts))


def from_hcl(spec: Spec, body: str) -> bytes:
    text = f'plugin "p" {{\n  config {{\n{body}\n  }}\n}}\n'
    block = agentfile.parse_agent_text(text, "vector.hcl").select(["p"], None)
    decoded = decode(compile_spec(spec), block.config)
    assert decoded.ok, [d.render("vector.hcl") for d in decoded.diagnostics]
    return encode(decoded)


def from_json(spec: Spec, text: str) -> bytes:
    decoded = decode(compile_spec(spec), agentfile.load_json_config(text))
    assert decoded.ok, [d.render("json") for d in decoded.diagnostics]
    return encode(decoded)


def opt(name: str, type_: str, literal: str) -> Default:
    return Default(Attr(name, type_), Literal(literal))


SDK_SCHEMA = Object(
    {
        "devices": opt("devices", "number", "2"),
        "period_ms": opt("period_ms", "number", "100"),
        "flaky": opt("flaky", "bool", "false"),
        "invalid_group": opt("invalid_group", "bool", "false"),
        "stats_fail": opt("stats_fail", "bool", "false"),
    }
)


def test_defaults_only_keys_sorted() -> None:
    expected = hx(
        "85",
        s("devices"), "02",
        s("flaky"), "c2",
        s("invalid_group"), "c2",
        s("period_ms"), "64",
        s("stats_fail"), "c2",
    )  # fmt: skip
    assert from_hcl(SDK_SCHEMA, "") == expected
    assert encode(decode(compile_spec(SDK_SCHEMA), None)) == expected


def test_given_values_and_conversions() -> None:
    body = 'devices = "3"\nflaky = "true"\nperiod_ms = 250'
    assert from_hcl(SDK_SCHEMA, body) == hx(
        "85",
        s("devices"), "03",
        s("flaky"), "c3",
        s("invalid_group"), "c2",
        s("period_ms"), "cc fa",
        s("stats_fail"), "c2",
    )  # fmt: skip


NUMBERS = Object(
    {
        name: Attr(name, "number")
        for name in ("small", "big", "wide", "neg", "negbig", "half", "tenth", "whole", "text")
    }
)


def test_numbers_compact_ints_float64_and_text() -> None:
    body = "\n".join(
        [
            "small = 5",
            "big = 200",
            "wide = 70000",
            "neg = -1",
            "negbig = -200",
            "half = 0.5",
            "tenth = 0.1",
            "whole = 3.0",
            'text = "42"',
        ]
    )
    assert from_hcl(NUMBERS, body) == hx(
        "89",
        s("big"), "cc c8",  # uint8
        s("half"), "cb 3fe0000000000000",  # float64 0.5
        s("neg"), "ff",  # negative fixint
        s("negbig"), "d1 ff38",  # int16
        s("small"), "05",  # positive fixint
        s("tenth"), s("0.1"),  # not exact in float64: decimal text
        s("text"), "2a",  # "42" converted to a number
        s("whole"), "03",  # 3.0 is an integer
        s("wide"), "ce 00011170",  # uint32
    )  # fmt: skip


def test_numbers_from_json_beyond_int64_travel_as_text() -> None:
    spec = Object({"huge": Attr("huge", "number"), "neg": Attr("neg", "number")})
    assert from_json(spec, '{"huge": 18446744073709551616, "neg": -100}') == hx(
        "82",
        s("huge"), "b4", b"18446744073709551616".hex(),
        s("neg"), "d0 9c",  # int8
    )  # fmt: skip


STRINGS = Object(
    {
        "name": Attr("name", "string"),
        "missing": Attr("missing", "string"),
        "tags": Attr("tags", "list(string)"),
        "ports": Attr("ports", "list(number)"),
        "empty": Attr("empty", "list(string)"),
        "flags": Attr("flags", "set(string)"),
        "labels": Attr("labels", "map(string)"),
    }
)


def test_strings_nil_lists_and_sets() -> None:
    body = "\n".join(
        [
            'name = "gpu"',
            'tags = ["x", "y"]',
            'ports = ["80", 443]',
            "empty = []",
            'flags = ["b", "a", "b"]',
        ]
    )
    assert from_hcl(STRINGS, body) == hx(
        "87",
        s("empty"), "90",
        s("flags"), "92", s("a"), s("b"),
        s("labels"), "c0",
        s("missing"), "c0",
        s("name"), s("gpu"),
        s("ports"), "92 50 cd01bb",
        s("tags"), "92", s("x"), s("y"),
    )  # fmt: skip


def test_a_map_attribute_from_json() -> None:
    assert from_json(STRINGS, '{"labels": {"b": 2, "a": "x"}}') == hx(
        "87",
        s("empty"), "c0",
        s("flags"), "c0",
        s("labels"), "82", s("a"), s("x"), s("b"), s("2"),
        s("missing"), "c0",
        s("name"), "c0",
        s("ports"), "c0",
        s("tags"), "c0",
    )  # fmt: skip


NESTED = Object(
    {
        "limits": Block(
            "limits",
            Object({"max": Attr("max", "number"), "mode": opt("mode", "string", '"fast"')}),
        ),
        "absent": Block("absent", Object({"x": Attr("x", "string")})),
        "rule": BlockList("rule", Object({"path": Attr("path", "string", True)})),
        "norule": BlockList("norule", Object({"a": Attr("a", "string")})),
        "label": BlockMap("label", ["name"], Object({"v": Attr("v", "number")})),
        "nolabel": BlockMap("nolabel", ["name"], Object({"v": Attr("v", "number")})),
        "env": BlockAttrs("env", "string"),
    }
)


def test_nested_blocks() -> None:
    body = """
    limits {
      max = 3
    }
    rule {
      path = "/a"
    }
    rule {
      path = "/b"
    }
    label "y" {
      v = 2
    }
    label "x" {
      v = 1
    }
    env {
      A = "1"
      B = 2
    }
    """
    assert from_hcl(NESTED, body) == hx(
        "87",
        s("absent"), "c0",  # an absent block is null
        s("env"), "82", s("A"), s("1"), s("B"), s("2"),
        s("label"), "82", s("x"), "81", s("v"), "01", s("y"), "81", s("v"), "02",
        s("limits"), "82", s("max"), "03", s("mode"), s("fast"),
        s("nolabel"), "80",  # no labelled blocks: an empty map
        s("norule"), "90",  # no blocks: an empty list
        s("rule"), "92", "81", s("path"), s("/a"), "81", s("path"), s("/b"),
    )  # fmt: skip


def test_an_any_attribute_is_written_with_its_own_type() -> None:
    # Nomad marshals with the decoded value's type, so no dynamic wrapper appears:
    # HCL 1 made the object a list of one object.
    spec = Object({"extra": Attr("extra", "any")})
    assert from_hcl(spec, 'extra = { a = 1, b = "x" }') == hx(
        "81", s("extra"), "91 82", s("a"), "01", s("b"), s("x")
    )
    assert from_json(spec, '{"extra": {"a": [true]}}') == hx(
        "81", s("extra"), "81", s("a"), "91 c3"
    )


@pytest.mark.parametrize(
    ("literal", "encoded"),
    [
        ('"."', s(".")),
        ("5", "05"),
        ("1.5", "cb 3ff8000000000000"),
        ("true", "c3"),
        ("null", "c0"),
        ('["a"]', "91" + s("a")),
        ("{k = 1}", "81" + s("k") + "01"),
    ],
)
def test_literal_defaults(literal: str, encoded: str) -> None:
    spec = Object({"d": Default(Attr("d", "any"), Literal(literal))})
    assert from_hcl(spec, "") == hx("81", s("d"), encoded)
