"""cty types and go-cty-compatible msgpack: hand-derived byte vectors, round trips, errors.

Every expected hex string below is derived from go-cty's rules (msgpack.Marshal with
vmihailenco/msgpack's EncodeInt/EncodeString/EncodeFloat64) and explained next to it.
The slow test at the end cross-checks a large set against go-cty itself.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import subprocess
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import msgpack
import pytest

from nomad_device.wire import cty
from nomad_device.wire.cty import (
    BOOL,
    DYNAMIC,
    NUMBER,
    STRING,
    CtyDecodeError,
    CtyEncodeError,
    List,
    Map,
    Object,
    Set,
    Tuple,
    concrete_type,
    format_path,
    infer_type,
    marshal,
    normalize_number,
    parse_type,
    type_from_json,
    type_to_json,
    unmarshal,
)


def h(text: str) -> bytes:
    """Hex with optional spaces -> bytes."""
    return bytes.fromhex(text.replace(" ", ""))


# ------------------------------------------------------------------------ types


@pytest.mark.parametrize(
    ("expr", "ty", "rendered"),
    [
        ("string", STRING, "string"),
        ("number", NUMBER, "number"),
        ("bool", BOOL, "bool"),
        ("any", DYNAMIC, "any"),
        ("null", DYNAMIC, "any"),
        ("list(string)", List(STRING), "list(string)"),
        (" set ( number ) ", Set(NUMBER), "set(number)"),
        ("map(list(bool))", Map(List(BOOL)), "map(list(bool))"),
        (
            "object({port = number, name=string})",
            Object({"name": STRING, "port": NUMBER}),
            "object({name = string, port = number})",
        ),
        ('object({"a b": string, c: any})', Object({"a b": STRING, "c": DYNAMIC}), None),
        ("object({\n  a = string\n  b = bool\n})", Object({"a": STRING, "b": BOOL}), None),
        ("object({})", Object({}), "object({})"),
        ("tuple([string, number,])", Tuple([STRING, NUMBER]), "tuple([string, number])"),
        ("tuple([])", Tuple([]), "tuple([])"),
        (
            "list(object({ids = set(string), t = tuple([bool])}))",
            List(Object({"ids": Set(STRING), "t": Tuple([BOOL])})),
            "list(object({ids = set(string), t = tuple([bool])}))",
        ),
    ],
)
def test_parse_type(expr: str, ty: cty.CtyType, rendered: str | None) -> None:
    assert parse_type(expr) == ty
    assert hash(parse_type(expr)) == hash(ty)
    if rendered is not None:
        assert str(ty) == rendered
    assert parse_type(str(ty)) == ty


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("", "a type is required at end of input"),
        ("strin", "unknown type 'strin' at offset 0"),
        ("list", "expected '(' after 'list'"),
        ("list(string", "expected ')' to close list(...)"),
        ("list()", "expected a type, found ')' at offset 5"),
        ("string(number)", "'string' is a type, not a type constructor"),
        ("string number", "unexpected 'number' after the type at offset 7"),
        ('"string"', "not a quoted string"),
        ("object(string)", "expected '{'"),
        ("object({a = string, a = number})", "duplicate attribute 'a'"),
        ("object({a string})", "expected '=' after attribute name 'a'"),
        ("object({a = string b = number})", "expected ',' or '}'"),
        ("object({1 = string})", "unexpected character '1'"),
        ("tuple(string)", "expected '['"),
        ("tuple([string number])", "expected ',' or ']'"),
        ("list(string) + 1", "unexpected character '+'"),
    ],
)
def test_parse_type_errors(expr: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_type(expr)
    assert fragment in str(info.value)
    assert repr(expr) in str(info.value)


def test_types_are_immutable_hashable_and_picklable() -> None:
    ty = Object({"b": List(STRING), "a": Tuple([NUMBER, DYNAMIC])})
    assert list(ty.attrs) == ["a", "b"]  # cty's order
    assert Object({"a": Tuple([NUMBER, DYNAMIC]), "b": List(STRING)}) == ty
    assert List(STRING) != Set(STRING)
    assert {ty: 1}[pickle.loads(pickle.dumps(ty))] == 1
    assert pickle.loads(pickle.dumps(STRING)) is STRING
    assert pickle.loads(pickle.dumps(DYNAMIC)) is DYNAMIC
    with pytest.raises(AttributeError):
        ty.x = 1
    with pytest.raises(TypeError):
        ty.attrs["c"] = STRING  # type: ignore[index]
    with pytest.raises(TypeError):
        List("string")  # type: ignore[arg-type]
    assert repr(ty) == "Object({'a': Tuple([NUMBER, DYNAMIC]), 'b': List(STRING)})"


def test_type_json() -> None:
    # Type.MarshalJSON: primitives as names, collections as ["kind", elem], objects
    # through json.Marshal of a Go map (sorted keys, HTML-safe escaping).
    assert type_to_json(STRING) == '"string"'
    assert type_to_json(DYNAMIC) == '"dynamic"'
    assert type_to_json(Set(List(NUMBER))) == '["set",["list","number"]]'
    assert type_to_json(Tuple([])) == '["tuple",[]]'
    assert type_to_json(Object({})) == '["object",{}]'
    assert (
        type_to_json(Object({"z": BOOL, "a<b>&\n\b\x01\u2028": Map(STRING)}))
        == '["object",{"a\\u003cb\\u003e\\u0026\\n\\b\\u0001\\u2028":["map","string"],'
        '"z":"bool"}]'
    )
    for ty in [Object({"a": Tuple([BOOL, DYNAMIC]), "é": Set(STRING)}), Map(NUMBER)]:
        assert type_from_json(type_to_json(ty)) == ty
    assert type_from_json('["object",{"a":"string"},["a"]]') == Object({"a": STRING})
    for bad in ['"str"', "[1]", '["list"]', '["object",[]]', "{", '["tuple",{}]']:
        with pytest.raises(ValueError):
            type_from_json(bad)


# ---------------------------------------------------------------- marshal vectors


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # Integers that fit int64 go through EncodeInt: non-negative values take the
        # *unsigned* forms (positive fixint, then uint8/16/32/64), negative values
        # negative fixint (>= -32), then int8/16/32/64 -- always the smallest.
        (0, "00"),  # positive fixint 0x00..0x7f
        (127, "7f"),
        (128, "cc 80"),  # uint8
        (255, "cc ff"),
        (256, "cd 0100"),  # uint16 big-endian
        (65535, "cd ffff"),
        (65536, "ce 00010000"),  # uint32
        (2**32 - 1, "ce ffffffff"),
        (2**32, "cf 0000000100000000"),  # uint64
        (2**63 - 1, "cf 7fffffffffffffff"),  # int64 max, still the unsigned form
        (-1, "ff"),  # negative fixint 0xe0..0xff
        (-32, "e0"),
        (-33, "d0 df"),  # int8: two's complement of -33 is 0xdf
        (-128, "d0 80"),
        (-129, "d1 ff7f"),  # int16
        (-32769, "d2 ffff7fff"),  # int32
        (-(2**63), "d3 8000000000000000"),  # int64 min
        # Whole numbers in any Python type are integers to cty.
        (Decimal("1E+2"), "64"),  # 100
        (Fraction(6, 3), "02"),
        (3.0, "03"),
        (-0.0, "00"),
        # A non-integer that float64 holds exactly: 0xcb + IEEE-754 big-endian.
        (1.5, "cb 3ff8000000000000"),  # 1.5 = 1.1b x 2^0 -> exp 0x3ff, mantissa 0x8...
        (-2.25, "cb c002000000000000"),  # sign bit, exp 0x400, mantissa 0x2000...
        (Decimal("0.5"), "cb 3fe0000000000000"),
        (Fraction(1, 4), "cb 3fd0000000000000"),
        (math.inf, "cb 7ff0000000000000"),
        (-math.inf, "cb fff0000000000000"),
        # Anything else is big.Float.Text('f', -1) in a msgpack str (fixstr 0xa0|len,
        # str8 0xd9 len, str16 0xda len16). 0.1 is not a float64, so it is text:
        (0.1, "a3 302e31"),  # "0.1"
        (Decimal("0.1"), "a3 302e31"),
        (Decimal("-0.000001"), "a9 2d302e303030303031"),  # "-0.000001"
        # Integers outside int64 are whole, so never float64 either: text.
        (2**63, "b3" + b"9223372036854775808".hex()),
        (2**64, "b4" + b"18446744073709551616".hex()),
        (-(2**63) - 1, "b4" + b"-9223372036854775809".hex()),
        (1e20, "b5" + b"100000000000000000000".hex()),
        # 1e400 rounds to 512 bits; its shortest digits are "1" then 400 zeros in %f
        # form: 401 bytes, str16 (0xda) length 0x0191.
        (Decimal("1e400"), "da 0191 31" + "30" * 400),
        # 1e-400: "0." + 399 zeros + "1" = 402 bytes (0x0192).
        (Decimal("1e-400"), "da 0192 302e" + "30" * 399 + "31"),
    ],
)
def test_marshal_numbers(value: object, expected: str) -> None:
    assert marshal(value, NUMBER) == h(expected)


@pytest.mark.parametrize(
    ("value", "ty", "expected"),
    [
        (None, NUMBER, "c0"),  # null is nil whatever the type
        (None, Object({"a": STRING}), "c0"),
        (True, BOOL, "c3"),
        (False, BOOL, "c2"),
        ("", STRING, "a0"),
        ("é", STRING, "a2 c3a9"),  # UTF-8
        ("e\u0301", STRING, "a2 c3a9"),  # cty NFC-normalises: e + combining acute = é
        ("x" * 31, STRING, "bf" + "78" * 31),  # fixstr up to 31 bytes
        ("x" * 32, STRING, "d9 20" + "78" * 32),  # then str8
        ("x" * 256, STRING, "da 0100" + "78" * 256),  # then str16
        ([1, 2, 3], List(NUMBER), "93 01 02 03"),  # fixarray 0x90|len
        ([], List(STRING), "90"),
        (list(range(16)), List(NUMBER), "dc 0010" + "".join(f"{i:02x}" for i in range(16))),
        ((True, "a"), Tuple([BOOL, STRING]), "92 c3 a161"),
        # Objects: map of attributes sorted by name, names as strings.
        ({"b": 1, "a": "x"}, Object({"b": NUMBER, "a": STRING}), "82 a161 a178 a162 01"),
        # A missing attribute is null.
        ({"b": 1}, Object({"b": NUMBER, "a": STRING}), "82 a161 c0 a162 01"),
        # Nested objects: {"outer": {"y": null, "z": true}}.
        (
            {"outer": {"z": True, "y": None}},
            Object({"outer": Object({"z": BOOL, "y": NUMBER})}),
            "81 a56f75746572 82 a179 c0 a17a c3",
        ),
        # Maps iterate in sorted key order too; keys are NFC-normalised.
        ({"zz": 1, "a": 2, "e\u0301": 3}, Map(NUMBER), "83 a161 02 a27a7a 01 a2c3a9 03"),
        # Sets of strings in lexicographic (byte) order, duplicates dropped:
        # "B" (0x42) < "a" (0x61) < "b" (0x62).
        (["b", "a", "B", "a"], Set(STRING), "93 a142 a161 a162"),
        # Sets of numbers in numeric order; 1 and 1.0 are the same number.
        ([10, -1, 2.5, 1, 1.0], Set(NUMBER), "94 ff 01 cb4004000000000000 0a"),
        ({True, False}, Set(BOOL), "92 c2 c3"),  # false sorts before true
        # A null set element sorts after the others.
        (["b", None, "a"], Set(STRING), "93 a161 a162 c0"),
        # Other element types sort by the text cty hashes them with: for an object
        # "<" + each attribute's hash + ";" + ">", numbers as %.10g. So 12345678901
        # ("<1.23456789e+10;>") sorts before 2 ("<2;>") -- not numeric order.
        (
            [{"n": 2}, {"n": 12345678901}],
            Set(Object({"n": NUMBER})),
            "92 81a16e cf00000002dfdc1c35 81a16e 02",
        ),
        # Strings hash quoted: '<"a";>' < '<"b";>'.
        ([{"s": "b"}, {"s": "a"}], Set(Object({"s": STRING})), "92 81a173a161 81a173a162"),
        # Lists hash as "[" + items + "]". Byte order puts '["a";"b";]' before
        # '["a";]' ('"' is 0x22, ']' is 0x5d), and both before '["b";]'.
        ([["b"], ["a", "b"], ["a"]], Set(List(STRING)), "93 92a161a162 91a161 91a162"),
    ],
)
def test_marshal_vectors(value: object, ty: cty.CtyType, expected: str) -> None:
    assert marshal(value, ty) == h(expected)


def test_marshal_dynamic_wrapper() -> None:
    # For declared type any, go-cty writes a 2-array: the value's type as JSON in a
    # msgpack *bin* (0xc4 len), then the value encoded with that type.
    type_json = b'["object",{"a":"number"}]'  # 25 = 0x19 bytes
    assert marshal({"a": 1}, DYNAMIC) == h("92 c419" + type_json.hex() + "81 a161 01")
    assert marshal("hi", DYNAMIC) == h("92 c408" + b'"string"'.hex() + "a2 6869")
    # Inferred types: sequences are tuples, null inside is dynamic and nil; the type
    # JSON is 30 (0x1e) bytes.
    assert marshal([1, None], DYNAMIC) == h(
        "92 c41e" + b'["tuple",["number","dynamic"]]'.hex() + "92 01 c0"
    )
    # A null dynamic value is plain nil; a typed attribute of type any is wrapped.
    assert marshal(None, DYNAMIC) == h("c0")
    assert marshal({"x": True}, Object({"x": DYNAMIC})) == h(
        "81 a178 92 c406" + b'"bool"'.hex() + "c3"
    )
    assert marshal({1, 2}, DYNAMIC) == h("92 c410" + b'["set","number"]'.hex() + "92 01 02")


def test_concrete_type_removes_dynamic() -> None:
    ty = Object({"x": DYNAMIC, "l": List(DYNAMIC), "n": NUMBER})
    value = {"x": {"a": [1, "b"]}, "l": ["p", "q"], "n": 1}
    concrete = concrete_type(value, ty)
    assert concrete == Object(
        {"x": Object({"a": Tuple([NUMBER, STRING])}), "l": List(STRING), "n": NUMBER}
    )
    # With the concrete type there are no wrappers: what Nomad sends.
    assert marshal(value, concrete) == h("83 a16c 92 a170 a171 a16e 01 a178 81 a161 92 01 a162")
    assert concrete_type({"x": None}, ty) == ty
    with pytest.raises(CtyEncodeError, match="different types"):
        concrete_type({"l": ["a", 1]}, ty)


def test_infer_type() -> None:
    assert infer_type({"a": [1, "x"], "b": None, "c": frozenset({True})}) == Object(
        {"a": Tuple([NUMBER, STRING]), "b": DYNAMIC, "c": Set(BOOL)}
    )
    assert infer_type(set()) == Set(DYNAMIC)
    with pytest.raises(CtyEncodeError, match="different types"):
        infer_type({1, "a"})
    with pytest.raises(CtyEncodeError, match="cannot represent bytes"):
        infer_type(b"x")
    with pytest.raises(CtyEncodeError, match="object keys must be strings"):
        infer_type({1: 2})


@pytest.mark.parametrize(
    ("value", "ty", "message"),
    [
        (1, STRING, "expected string, got number"),
        ("1", NUMBER, "expected number, got string"),
        (True, NUMBER, "expected number, got bool"),
        (1, BOOL, "expected bool, got number"),
        (math.nan, NUMBER, "NaN is not a number cty can hold"),
        (Decimal("NaN"), NUMBER, "NaN is not a number cty can hold"),
        (Decimal("1e99999"), NUMBER, "too long or too large"),
        ("x", List(STRING), "expected a list, got string"),
        ({"a"}, List(STRING), "expected a list, got set"),
        ([1], Map(NUMBER), "expected a map, got list"),
        ({1: 1}, Map(NUMBER), "map keys must be strings, got number"),
        ([1, 2], Tuple([NUMBER]), "expected a tuple of 1 elements, got 2"),
        ("\ud800", STRING, "lone surrogate"),
        (b"x", DYNAMIC, "cannot represent bytes"),
    ],
)
def test_marshal_errors(value: object, ty: cty.CtyType, message: str) -> None:
    with pytest.raises(CtyEncodeError) as info:
        marshal(value, ty)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_marshal_error_paths() -> None:
    ty = Object({"plugin": Object({"items": List(Object({"name": STRING}))})})
    value = {"plugin": {"items": [{"name": "a"}, {"name": "b"}, {"name": 3}]}}
    with pytest.raises(CtyEncodeError) as info:
        marshal(value, ty)
    assert info.value.path == ("plugin", "items", 2, "name")
    assert str(info.value) == "plugin.items[2].name: expected string, got number"
    with pytest.raises(CtyEncodeError) as info:
        marshal({"plugin": {"items": [], "extra": 1}}, ty)
    assert info.value.path == ("plugin", "extra")


# -------------------------------------------------------------------- unmarshal


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("00", 0),
        ("7f", 127),
        ("cc 80", 128),
        ("cd 0100", 256),
        ("ce 00010000", 65536),
        ("cf ffffffffffffffff", 2**64 - 1),  # uint64 beyond int64 still reads
        ("e0", -32),
        ("d0 df", -33),
        ("d1 ff7f", -129),
        ("d3 8000000000000000", -(2**63)),
        ("d0 05", 5),  # non-minimal forms are fine
        ("cb 3ff8000000000000", 1.5),
        ("ca 3fc00000", 1.5),  # float32
        ("cb 4008000000000000", 3),  # a whole float64 reads as int
        ("cb 7ff0000000000000", math.inf),
        ("a3 302e31", 0.1),  # "0.1": its float repr gives back "0.1"
        ("b4" + b"18446744073709551616".hex(), 2**64),
        ("a4" + b"1e30".hex(), 10**30),
        ("a4" + b"-2.5".hex(), -2.5),
        ("a3" + b"Inf".hex(), math.inf),
        ("c4 03" + b"0.5".hex(), 0.5),  # go-cty reads bin where it wants a string
        ("c0", None),
    ],
)
def test_unmarshal_numbers(data: str, expected: object) -> None:
    value = unmarshal(h(data), NUMBER)
    assert value == expected
    assert type(value) is type(expected)


def test_unmarshal_number_precision() -> None:
    # Text a float would change stays a Decimal; huge whole numbers become ints.
    text = "0.1000000000000000000001"
    assert unmarshal(marshal(Decimal(text), NUMBER), NUMBER) == Decimal(text)
    assert unmarshal(marshal(Decimal("1e400"), NUMBER), NUMBER) == 10**400
    third = unmarshal(marshal(Fraction(1, 3), NUMBER), NUMBER)
    assert isinstance(third, Decimal)
    assert abs(Fraction(third) - Fraction(1, 3)) < Fraction(1, 10**150)
    assert normalize_number(Decimal("2.50")) == 2.5
    assert isinstance(normalize_number(Decimal("1e5000")), Decimal)
    with pytest.raises(ValueError):
        normalize_number(Decimal("NaN"))


ROUND_TRIPS: list[tuple[object, cty.CtyType]] = [
    ("héllo", STRING),
    (True, BOOL),
    (None, Object({"a": STRING})),
    ([1, -2, 3.5, 0.1, 2**64], List(NUMBER)),
    (["a", "b"], Set(STRING)),
    ({"x": [True, False], "y": []}, Map(List(BOOL))),
    ({"a": "s", "b": {"c": [1, None]}}, Object({"a": STRING, "b": Object({"c": List(NUMBER)})})),
    (["a", 1, [True]], Tuple([STRING, NUMBER, Tuple([BOOL])])),
    ({"a": [1, {"b": None}], "c": "d"}, DYNAMIC),
    ({"any": [1, "x"]}, Object({"any": DYNAMIC})),
]


@pytest.mark.parametrize(("value", "ty"), ROUND_TRIPS)
def test_round_trip(value: object, ty: cty.CtyType) -> None:
    data = marshal(value, ty)
    assert unmarshal(data, ty) == value
    assert marshal(unmarshal(data, ty), ty) == data


def test_unmarshal_lenient_shapes() -> None:
    ty = Object({"a": STRING, "b": NUMBER})
    # Missing attributes read as null; attributes come back in cty order.
    assert unmarshal(h("81 a162 01"), ty) == {"a": None, "b": 1}
    assert list(unmarshal(h("82 a162 01 a161 a178"), ty)) == ["a", "b"]  # type: ignore[call-overload]
    # An empty map for an object, like go-cty's special case.
    assert unmarshal(h("80"), ty) == {"a": None, "b": None}
    # Dynamic accepts plain values (what Nomad sends) as well as the wrapper.
    assert unmarshal(h("82 a161 93 01 a178 c0 a162 80"), DYNAMIC) == {"a": [1, "x", None], "b": {}}
    assert unmarshal(h("92 01 02"), DYNAMIC) == [1, 2]
    assert unmarshal(h("c0"), DYNAMIC) is None
    # Strings are NFC-normalised as cty does.
    assert unmarshal(h("a3 65cc81"), STRING) == "é"


@pytest.mark.parametrize(
    ("data", "ty", "path", "message"),
    [
        ("c3", STRING, (), "expected string, got bool"),
        ("a3616263", NUMBER, (), 'expected number, got string "abc"'),
        ("a0", NUMBER, (), 'expected number, got string ""'),
        ("01", BOOL, (), "expected bool, got number"),
        ("81 a161 01", List(STRING), (), "expected a list, got a map"),
        ("93 01 02 03", Map(NUMBER), (), "expected a map, got a list"),
        ("93 01 02 03", Object({}), (), "expected an object, got a list"),
        ("92 01 02", Tuple([NUMBER]), (), "expected a tuple of 1 elements, got 2"),
        ("81 a178 01", Object({"a": NUMBER}), ("x",), "unexpected attribute"),
        ("81 01 01", Map(NUMBER), (), "map keys must be strings, got number"),
        ("cb 7ff8000000000000", NUMBER, (), "NaN"),
        ("d4 00 00", STRING, (), "unknown values"),
        ("92 c403 616263 01", DYNAMIC, (), "invalid type in dynamic value"),
        ("c4 01 ff", STRING, (), "malformed msgpack: string is not valid UTF-8"),
    ],
)
def test_unmarshal_errors(data: str, ty: cty.CtyType, path: cty.Path, message: str) -> None:
    with pytest.raises(CtyDecodeError) as info:
        unmarshal(h(data), ty)
    assert info.value.path == path
    assert message in info.value.problem


def test_unmarshal_error_path_names_the_value() -> None:
    ty = Object({"plugin": Object({"items": List(Object({"name": STRING}))})})
    value = {"plugin": {"items": [{"name": "a"}, {"name": "b"}, {"name": True}]}}
    data = msgpack.packb(value)  # a bool where a string belongs
    with pytest.raises(CtyDecodeError) as info:
        unmarshal(data, ty)
    assert info.value.path == ("plugin", "items", 2, "name")
    assert info.value.malformed is False
    assert str(info.value) == "plugin.items[2].name: expected string, got bool"


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ("", "malformed msgpack: no data"),
        ("01 02", "malformed msgpack: 1 unexpected byte after the value at offset 1"),
        ("c0 c0 c0", "2 unexpected bytes"),
        ("cd 01", "data ends early at offset 1: needed 2 more bytes, only 1 left"),
        ("a5 6869", "needed 5 more bytes, only 2 left"),
        ("92 01", "data ends early: the container at offset 0 declares 2 entries"),
        ("dd ffffffff 01", "declares 4294967295 entries"),
        ("c1", "invalid type byte 0xc1 at offset 0"),
    ],
)
def test_unmarshal_malformed(data: str, fragment: str) -> None:
    with pytest.raises(CtyDecodeError) as info:
        unmarshal(h(data), List(NUMBER) if data.startswith(("92", "dd")) else NUMBER)
    assert fragment in str(info.value)
    assert info.value.malformed is True


def test_unmarshal_truncated_inside_a_value_keeps_its_path() -> None:
    data = marshal({"items": ["abc", "def"]}, Object({"items": List(STRING)}))
    with pytest.raises(CtyDecodeError) as info:
        unmarshal(data[:-2], Object({"items": List(STRING)}))
    assert info.value.malformed
    assert info.value.path == ("items", 1)


def test_unmarshal_depth_limit() -> None:
    deep = h("91" * 300 + "c0")
    with pytest.raises(CtyDecodeError, match="nested too deeply"):
        unmarshal(deep, DYNAMIC)


def test_format_path() -> None:
    assert format_path(()) == ""
    assert format_path(("plugin", "items", 2)) == "plugin.items[2]"
    assert format_path(("labels", "a b", "x")) == 'labels["a b"].x'
    assert format_path((0, "x")) == "[0].x"


# ------------------------------------------------------ cross-check against go-cty

_GO_CHECKER = r"""
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"
)

// Each input line: {"type": T, "vtype": T?, "value": V}; V is cty JSON for vtype
// (or type), numbers as strings. Each output line: hex of msgpack.Marshal or ERR.
func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	for in.Scan() {
		var req struct {
			Type, VType, Value json.RawMessage
		}
		out, err := func() ([]byte, error) {
			if err := json.Unmarshal(in.Bytes(), &req); err != nil {
				return nil, err
			}
			var ty cty.Type
			if err := ty.UnmarshalJSON(req.Type); err != nil {
				return nil, err
			}
			vty := ty
			if len(req.VType) > 0 {
				if err := vty.UnmarshalJSON(req.VType); err != nil {
					return nil, err
				}
			}
			val, err := ctyjson.Unmarshal(req.Value, vty)
			if err != nil {
				return nil, err
			}
			return ctymsgpack.Marshal(val, ty)
		}()
		if err != nil {
			fmt.Println("ERR", err)
		} else {
			fmt.Println(hex.EncodeToString(out))
		}
	}
}
"""


def _cty_json(value: object, ty: cty.CtyType) -> object:
    """cty's JSON form of a value, numbers as decimal strings so nothing is lost."""
    if value is None:
        return None
    if ty is NUMBER:
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(ty, List | Set):
        return [_cty_json(v, ty.elem) for v in value]  # type: ignore[attr-defined]
    if isinstance(ty, Tuple):
        return [_cty_json(v, e) for v, e in zip(value, ty.elems, strict=True)]  # type: ignore[call-overload]
    if isinstance(ty, Map):
        return {k: _cty_json(v, ty.elem) for k, v in value.items()}  # type: ignore[attr-defined]
    if isinstance(ty, Object):
        return {k: _cty_json(value.get(k), t) for k, t in ty.attrs.items()}  # type: ignore[attr-defined]
    return value


def _cross_check_cases() -> list[tuple[object, cty.CtyType, cty.CtyType | None]]:
    import random

    rng = random.Random(20240601)
    numbers: list[object] = [0, 1, -1, 127, 128, 255, 256, 65535, 65536, 2**32, -32, -33]
    numbers += [-129, 2**63 - 1, -(2**63), 2**63, 2**64, 3**400, 1.5, 0.1, 1e20, 1e23]
    numbers += [5e-324, 1 / 3, Decimal("1e400"), Decimal("1e-400"), Decimal("-4.4e+500")]
    numbers += [Decimal("17e-300"), Decimal("3.14159265358979323846264338327950288419716939")]
    for _ in range(150):
        digits = str(rng.randint(1, 10 ** rng.randint(1, 60)))
        numbers.append(Decimal(f"{rng.choice('+-')}{digits}e{rng.randint(-2000, 2000)}"))
        numbers.append(rng.random() * 10 ** rng.randint(-30, 30))
    cases: list[tuple[object, cty.CtyType, cty.CtyType | None]] = [
        (n, NUMBER, None) for n in numbers
    ]
    obj = Object({"a": NUMBER, "b": STRING})
    dyn = {"a": 1, "b": [1, "x", None], "c<": {"d": True}}
    cases += [
        (["b", "a", "B", "e\u0301", "é"], Set(STRING), None),
        ([3, 1, 2.5, Decimal("0.1"), 1e30, -5], Set(NUMBER), None),
        (
            [{"a": 1.00000000002, "b": "x"}, {"a": 1.00000000001, "b": "x"}, {"a": 2, "b": "\n"}],
            Set(obj),
            None,
        ),
        ([[1e-5], [12345678.9], [1e15], [2**70], [-3.5e-9]], Set(Tuple([NUMBER])), None),
        ([["z", "y"], ["a"], []], Set(Set(STRING)), None),
        ([{"k": 1}, {"j": 2, "a": 3}], Set(Map(NUMBER)), None),
        (
            {"z": 1, "a": [1], "m": {"x": "y"}},
            Object({"z": NUMBER, "a": List(NUMBER), "m": Map(STRING)}),
            None,
        ),
        (dyn, DYNAMIC, infer_type(dyn)),
        ({"x": {"a": 1.5}}, Object({"x": DYNAMIC}), Object({"x": Object({"a": NUMBER})})),
        ("x" * 70000, STRING, None),
    ]
    return cases


@pytest.mark.slow
def test_marshal_matches_go_cty(tmp_path: Path) -> None:
    go = shutil.which("go")
    if go is None:
        if os.environ.get("CI") == "true":
            pytest.fail("go is required in CI for the go-cty cross-check")
        pytest.skip("go is not installed")
    version = os.environ.get("NOMAD_DEVICE_GO_CTY_VERSION", "v1.20.0")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    (tmp_path / "main.go").write_text(_GO_CHECKER)

    def run(*args: str) -> None:
        subprocess.run([go, *args], cwd=tmp_path, env=env, check=True, capture_output=True)

    try:
        run("mod", "init", "ctycheck")
        run("get", f"github.com/zclconf/go-cty@{version}")
        run("build", "-o", "ctycheck", ".")
    except subprocess.CalledProcessError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"cannot build the go-cty checker: {exc.stderr.decode()[-300:]}")

    cases = _cross_check_cases()
    lines = []
    for value, ty, vty in cases:
        request: dict[str, object] = {
            "type": json.loads(type_to_json(ty)),
            "value": _cty_json(value, vty or ty),
        }
        if vty is not None:
            request["vtype"] = json.loads(type_to_json(vty))
        lines.append(json.dumps(request))
    result = subprocess.run(
        [str(tmp_path / "ctycheck")],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    outputs = result.stdout.splitlines()
    assert len(outputs) == len(cases)
    mismatches = [
        (value, str(ty), go_hex[:120], marshal(value, ty).hex()[:120])
        for (value, ty, _), go_hex in zip(cases, outputs, strict=True)
        if marshal(value, ty).hex() != go_hex
    ]
    assert not mismatches
