"""hclspec builder: proto round trips, implied types, HCL literals and decoding."""

from __future__ import annotations

from decimal import Decimal

import msgpack
import pytest

from nomad_device.proto import hclspec_pb2 as pb
from nomad_device.wire import cty
from nomad_device.wire.cty import BOOL, DYNAMIC, NUMBER, STRING, CtyDecodeError
from nomad_device.wire.hclspec import (
    Array,
    Attr,
    Block,
    BlockAttrs,
    BlockList,
    BlockMap,
    BlockSet,
    Default,
    Literal,
    Object,
    Spec,
    decode,
    from_proto,
    hcl_literal,
    implied_type,
    parse_literal,
    to_proto,
)

RULE = Object(
    {
        "name": Attr("name", "string", required=True),
        "count": Default(Attr("count", "number"), Literal("1")),
    }
)

EVERY_KIND = Object(
    {
        "attr": Attr("attr", "list(string)", required=True),
        "implied": Attr("", "number"),
        "array": Array([Attr("a", "string"), Literal('"x"')]),
        "block": Block("block", RULE, required=True),
        "battrs": BlockAttrs("battrs", "number"),
        "blist": BlockList("blist", RULE, min_items=1, max_items=3),
        "bset": BlockSet("bset", RULE, max_items=2),
        "bmap": BlockMap("bmap", ["name", "zone"], RULE),
        "default": Default(Attr("default", "bool"), Literal("true")),
        "literal": Literal('{a = [1, "b"]}'),
    }
)


def example_plugin_schema() -> Object:
    """Nomad's example device plugin schema, written as its Go source reads."""
    return Object(
        {
            "dir": Default(Attr("dir", "string", False), Literal('"."')),
            "list_period": Default(Attr("list_period", "string", False), Literal('"5s"')),
            "unhealthy_perm": Default(
                Attr("unhealthy_perm", "string", False), Literal('"-rwxrwxrwx"')
            ),
        }
    )


# ------------------------------------------------------------------- dataclasses


def test_specs_are_frozen_comparable_and_hashable() -> None:
    assert Attr("a", "string") == Attr("a", "string", False)
    assert BlockMap("m", ["x"], RULE).labels == ("x",)
    assert BlockMap("m", "x", RULE).labels == ("x",)
    assert Array([Literal("1")]).values == (Literal("1"),)
    assert hash(EVERY_KIND) == hash(from_proto(to_proto(EVERY_KIND)))
    assert len({EVERY_KIND, from_proto(to_proto(EVERY_KIND))}) == 1
    with pytest.raises(AttributeError):
        Attr("a", "string").name = "b"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: BlockMap("m", [], RULE), "at least one label"),
        (lambda: BlockList("l", RULE, min_items=-1), "must not be negative"),
        (lambda: BlockSet("s", RULE, min_items=3, max_items=2), "exceeds max_items"),
    ],
)
def test_spec_validation(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


# ------------------------------------------------------------------- protobuf


def test_example_plugin_schema_matches_go_bit_for_bit() -> None:
    # The message Go's hclspec.NewObject/NewDefault/NewAttr/NewLiteral produce.
    def go_default(name: str, literal: str) -> pb.Spec:
        return pb.Spec(
            default=pb.Default(
                primary=pb.Spec(Attr=pb.Attr(name=name, type="string", required=False)),
                default=pb.Spec(literal=pb.Literal(value=literal)),
            )
        )

    expected = pb.Spec(
        object=pb.Object(
            attributes={
                "dir": go_default("dir", '"."'),
                "list_period": go_default("list_period", '"5s"'),
                "unhealthy_perm": go_default("unhealthy_perm", '"-rwxrwxrwx"'),
            }
        )
    )
    ours = to_proto(example_plugin_schema())
    assert ours == expected
    # Same bytes too (deterministic serialisation orders map entries).
    assert ours.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )
    assert from_proto(expected) == example_plugin_schema()


@pytest.mark.parametrize("spec", [*EVERY_KIND.attributes.values(), EVERY_KIND, Object({})])
def test_proto_round_trip(spec: Spec) -> None:
    message = to_proto(spec)
    assert from_proto(message) == spec
    reparsed = pb.Spec.FromString(message.SerializeToString())
    assert from_proto(reparsed) == spec
    assert to_proto(from_proto(reparsed)) == message


def test_proto_field_names_follow_nomad() -> None:
    assert to_proto(Attr("a", "string", True)).WhichOneof("block") == "Attr"
    assert to_proto(Block("b", RULE)).WhichOneof("block") == "block_value"
    message = to_proto(BlockList("l", RULE, 1, 2))
    assert (message.block_list.min_items, message.block_list.max_items) == (1, 2)
    assert list(to_proto(BlockMap("m", ["a", "b"], RULE)).block_map.labels) == ["a", "b"]


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (pb.Spec(), "none of its kinds set"),
        (pb.Spec(block_value=pb.Block(name="b")), "block spec 'b' has no nested spec"),
        (pb.Spec(block_list=pb.BlockList(name="l")), "block_list spec 'l'"),
        (pb.Spec(block_set=pb.BlockSet(name="s")), "block_set spec 's'"),
        (pb.Spec(block_map=pb.BlockMap(name="m", labels=["x"])), "block_map spec 'm'"),
        (
            pb.Spec(default=pb.Default(primary=pb.Spec(literal=pb.Literal(value="1")))),
            "both a primary and a default",
        ),
    ],
)
def test_from_proto_rejects_incomplete_trees(message: pb.Spec, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        from_proto(message)


def test_to_proto_rejects_non_specs() -> None:
    with pytest.raises(TypeError):
        to_proto("nope")  # type: ignore[arg-type]


# -------------------------------------------------------------- implied types


def test_implied_types_follow_hcldec() -> None:
    rule = cty.Object({"name": STRING, "count": NUMBER})
    assert implied_type(EVERY_KIND) == cty.Object(
        {
            "attr": cty.List(STRING),
            "implied": NUMBER,
            "array": cty.Tuple([STRING, STRING]),
            "block": rule,  # a block is its nested object (null when absent)
            "battrs": cty.Map(NUMBER),
            "blist": cty.List(rule),
            "bset": cty.Set(rule),
            "bmap": cty.Map(cty.Map(rule)),  # one map level per label
            "default": BOOL,  # a Default has its primary's type
            # A literal has its value's type: HCL brackets/braces build tuples/objects.
            "literal": cty.Object({"a": cty.Tuple([NUMBER, STRING])}),
        }
    )
    assert implied_type(Object({})) == cty.Object({})
    assert implied_type(Literal("null")) == DYNAMIC
    assert implied_type(Attr("x", "any")) == DYNAMIC
    with pytest.raises(ValueError, match="unknown type"):
        implied_type(Attr("x", "strin"))
    with pytest.raises(ValueError, match="a type is required"):
        implied_type(Attr("x", ""))


# ---------------------------------------------------------------- literals


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (".", '"."'),
        ("5s", '"5s"'),
        ('say "hi"\\', '"say \\"hi\\"\\\\"'),
        ("a\nb\tc\r\x01\x7f", '"a\\nb\\tc\\r\\u0001\\u007f"'),
        ("${HOME} %{if x}", '"$${HOME} %%{if x}"'),
        ("$ and % alone", '"$ and % alone"'),
        ("日本", '"日本"'),
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (42, "42"),
        (-7, "-7"),
        (1.5, "1.5"),
        (1e20, "1e+20"),
        (Decimal("0.10"), "0.10"),
        ([], "[]"),
        ([1, "a", None], '[1, "a", null]'),
        ({}, "{}"),
        ({"a": 1, "b c": [True], "null": 0}, '{a = 1, "b c" = [true], "null" = 0}'),
    ],
)
def test_hcl_literal(value: object, expected: str) -> None:
    assert hcl_literal(value) == expected
    back = parse_literal(expected)
    assert back == (float(value) if isinstance(value, Decimal) else value)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), Decimal("Infinity")])
def test_hcl_literal_rejects_non_finite(value: object) -> None:
    with pytest.raises(ValueError):
        hcl_literal(value)


@pytest.mark.parametrize("value", [b"x", object(), {1: 2}])
def test_hcl_literal_rejects_other_types(value: object) -> None:
    with pytest.raises(TypeError):
        hcl_literal(value)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('"."', "."),
        ('  "x"  ', "x"),
        ('"\\u00e9\\U0001F600\\"\\\\"', 'é😀"\\'),
        ('"$${x} %%{y} $$ %%"', "${x} %{y} $$ %%"),
        ("0", 0),
        ("1.5", 1.5),
        ("1e3", 1000),
        ("-2.5", -2.5),
        ("- 3", -3),
        ("0.1", 0.1),
        ("3.14159265358979323846", Decimal("3.14159265358979323846")),
        ("true", True),
        ("null", None),
        ("(5)", 5),
        ("[1, 2,]", [1, 2]),
        ("[\n  1,\n  2\n]", [1, 2]),
        ("{}", {}),
        ('{a = 1, "b": "c"}', {"a": 1, "b": "c"}),
        ("{\n  a = 1\n  b = [true] # note\n}", {"a": 1, "b": [True]}),
        ("/* c */ [ // x\n 1 ]", [1]),
    ],
)
def test_parse_literal(expr: str, expected: object) -> None:
    value = parse_literal(expr)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("", "a value is required at end of input"),
        ("var.x", "variables such as 'var' are not allowed"),
        ('upper("x")', "function calls such as upper(...) are not allowed"),
        ('"${x}"', "template interpolation and directives are not allowed at offset 1"),
        ('"%{if a}"', "template interpolation"),
        ('"abc', "unterminated string at offset 0"),
        ('"a\nb"', "cannot span lines"),
        ('"\\q"', "invalid escape \\q"),
        ('"\\u12"', "needs 4 hex digits"),
        ('"\\uD800"', "not a valid Unicode character"),
        ("1 + 2", "unexpected character '+' at offset 2"),
        ("1 2", "unexpected '2' after the value"),
        ("[1 2]", "expected ',' or ']'"),
        ("{a = 1 b = 2}", "expected ',', a new line or '}'"),
        ("{a = 1, a = 2}", "duplicate object key 'a'"),
        ("{1 = 2}", "object keys must be names or quoted strings"),
        ("{a 1}", "expected '=' or ':'"),
        ("-true", "'-' applies to numbers only"),
        ("(1", "expected ')'"),
        ("<<EOT\nx\nEOT", "heredoc"),
        ("]", "unexpected ']'"),
        ("1.", "unexpected character '.'"),
    ],
)
def test_parse_literal_errors(expr: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_literal(expr)
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"invalid HCL literal {expr!r}: ")


# ------------------------------------------------------------------- decode


def test_decode_shapes_every_kind() -> None:
    # What Nomad sends: the decoded value with its own concrete type. Absent
    # optional block -> nil, absent block list/set -> [], absent block map -> {}.
    sent = {
        "attr": ["x"],
        "implied": 3,
        "array": ["a", "x"],
        "block": {"name": "b", "count": 1},
        "battrs": None,
        "blist": [{"name": "l1", "count": 2}],
        "bset": [],
        "bmap": {"n1": {"z1": {"name": "m", "count": 1}}},
        "default": True,
        "literal": {"a": [1, "b"]},
    }
    data = cty.marshal(sent, implied_type(EVERY_KIND))
    assert decode(EVERY_KIND, data) == sent


def test_decode_fills_what_is_missing() -> None:
    spec = Object(
        {
            "name": Attr("name", "string"),
            "opt": Block("opt", RULE),
            "list": BlockList("list", RULE),
            "set": BlockSet("set", RULE),
            "map": BlockMap("map", ["n", "m"], RULE),
            "flag": Default(Attr("flag", "bool"), Literal("false")),
            "const": Literal('"k"'),
            "pair": Array([Attr("p", "number"), Literal("2")]),
        }
    )
    expected: dict[str, object] = {
        "name": None,
        "opt": None,
        "list": [],
        "set": [],
        "map": {},
        "flag": False,
        "const": "k",
        "pair": [None, 2],
    }
    assert decode(spec, b"") == expected  # nothing sent
    assert decode(spec, msgpack.packb({})) == expected  # an empty object
    assert decode(spec, msgpack.packb(None)) == expected
    # A block list element's nested defaults apply too.
    data = msgpack.packb({"list": [{"name": "x"}]})
    assert decode(spec, data)["list"] == [{"name": "x", "count": 1}]


def test_decode_reads_every_number_encoding() -> None:
    spec = Object({"n": Attr("n", "list(number)")})
    data = msgpack.packb(
        {"n": [5, 300, -40, 1.5, "0.1", "18446744073709551616", 2.0]}, use_bin_type=True
    )
    assert decode(spec, data) == {"n": [5, 300, -40, 1.5, 0.1, 2**64, 2]}


def test_decode_errors_carry_paths() -> None:
    spec = Object({"blist": BlockList("blist", RULE)})
    data = msgpack.packb({"blist": [{"name": "a"}, {"name": "b"}, {"name": False}]})
    with pytest.raises(CtyDecodeError) as info:
        decode(spec, data)
    assert str(info.value) == "blist[2].name: expected string, got bool"
    with pytest.raises(CtyDecodeError, match="unexpected attribute"):
        decode(spec, msgpack.packb({"nope": 1}))
    with pytest.raises(CtyDecodeError, match="malformed msgpack"):
        decode(spec, b"\x81")
    with pytest.raises(ValueError, match="root of a config spec must be an Object"):
        decode(Attr("a", "string"), b"")
