"""Nomad's attribute, unit and operator rules as ``check`` applies them: table-driven.

Every vector below was written from a reading of Nomad's source (the file and
function are named above each table), not from Nomad's own tests.
"""

from __future__ import annotations

import math

import pytest

from nomad_device.golang.strconv import parse_bool, parse_float, parse_int
from nomad_device.golang.version import parse_constraint, parse_version
from nomad_device.placement.attribute import Attribute, NaNComparison, parse_attribute
from nomad_device.placement.model import Instance, NodeDevices
from nomad_device.placement.operators import evaluate, resolve


def Int(v: int, u: str = "") -> Attribute:
    return Attribute(int_value=v, unit=u)


def F(v: float, u: str = "") -> Attribute:
    return Attribute(float_value=v, unit=u)


def S(v: str) -> Attribute:
    return Attribute(string_value=v)


def B(v: bool) -> Attribute:
    return Attribute(bool_value=v)


# --- plugins/shared/structs/attribute.go: ParseAttribute (with units.go's
# lengthSortedUnits; numbers through strconv.ParseInt/ParseFloat, then ParseBool).
PARSE = [
    ("", S("")),
    ("2 GiB", Int(2, "GiB")),
    ("2GiB", Int(2, "GiB")),
    ("1.5 GHz", F(1.5, "GHz")),
    ("4096", Int(4096)),
    ("1.5", F(1.5)),
    ("-3 W", Int(-3, "W")),
    ("5 MW", Int(5, "MW")),  # the longest unit first: MW, not W
    ("5mW", Int(5, "mW")),
    ("2 KiB/s", Int(2, "KiB/s")),
    ("2 GB/s", Int(2, "GB/s")),
    ("1.0 TiB", F(1.0, "TiB")),
    ("+5", Int(5)),
    ("1e3", F(1000.0)),
    ("0x1p-2", F(0.25)),  # Go's hex float syntax
    ("1_000", F(1000.0)),  # ParseInt refuses the underscore, ParseFloat takes it
    ("1e400", S("1e400")),  # out of float64 range: ParseFloat errs, so a string
    ("true", B(True)),
    ("t", B(True)),
    ("False", B(False)),
    ("1", Int(1)),  # an int before a bool
    ("GiB", S("GiB")),  # a unit with no number
    ("2 gib", S("2 gib")),  # units are case-sensitive
    (" 5", S(" 5")),
    ("5 ", S("5 ")),  # the last byte is no letter: no unit, and Go will not trim
    ("10 foo", S("10 foo")),
    ("T4", S("T4")),
    ("NOW", S("NOW")),  # ends in W, but "NO" is no number
]


@pytest.mark.parametrize(("text", "want"), PARSE, ids=[repr(p[0]) for p in PARSE])
def test_parse_attribute(text: str, want: Attribute) -> None:
    assert parse_attribute(text) == want


def test_parse_attribute_special_floats() -> None:
    assert parse_attribute("inf") == F(math.inf)
    assert parse_attribute("-Infinity") == F(-math.inf)
    nan = parse_attribute("NaN").float_value
    assert nan is not None and math.isnan(nan)
    assert parse_attribute("+nan") == S("+nan")  # Go takes a sign on Inf only


# --- Go's strconv (what ParseAttribute calls): ParseInt(s, 10, 64), ParseFloat(s, 64), ParseBool.
INTS = [("12", 12), ("+5", 5), ("-0", 0), ("1_000", None), ("0x10", None), (" 1", None)]
INTS += [("9223372036854775807", 2**63 - 1), ("9223372036854775808", None), ("\u0661", None)]
FLOATS = [("1_000.5", 1000.5), ("1__0", None), ("_1", None), ("0x10", None), ("0x1.8p1", 3.0)]
FLOATS += [("0x_1p0", 1.0), ("1e1_0", 1e10), ("1e+_5", None), (".5", 0.5), ("1.", 1.0)]
FLOATS += [("1e-400", 0.0), ("infin", None), ("0x", None), ("", None), ("1e", None)]
BOOLS = [("1", True), ("T", True), ("TRUE", True), ("tRUE", None), ("0", False), ("no", None)]


@pytest.mark.parametrize(("text", "want"), INTS)
def test_go_parse_int(text: str, want: int | None) -> None:
    assert parse_int(text) == want


@pytest.mark.parametrize(("text", "want"), FLOATS)
def test_go_parse_float(text: str, want: float | None) -> None:
    assert parse_float(text) == want


@pytest.mark.parametrize(("text", "want"), BOOLS)
def test_go_parse_bool(text: str, want: bool | None) -> None:
    assert parse_bool(text) == want


# --- plugins/shared/structs/attribute.go: Attribute.Compare (Comparable, numberComparator,
# intComparator with getInt, getBigFloat at 256 bits) over units.go's UnitIndex.
COMPARE = [
    (Int(2, "GiB"), Int(2048, "MiB"), 0),
    (Int(2, "GiB"), Int(4, "GiB"), -1),
    (Int(16384, "MiB"), Int(4, "GiB"), 1),
    (Int(2048), Int(2, "GiB"), None),  # a unit on one side only
    (Int(2, "GiB"), Int(2048), None),
    (Int(2, "GiB"), Int(2, "GHz"), None),  # different bases
    (Int(2, "GiB"), Int(2, "GiB/s"), None),  # bytes vs byte rate
    (Int(1, "GB"), Int(1000, "MB"), 0),
    (Int(1, "KiB"), Int(1, "kB"), 1),
    (Int(1, "KB"), Int(1, "kB"), 0),
    (F(1.5, "GiB"), Int(1536, "MiB"), 0),
    (Int(1500, "mW"), Int(1, "W"), 0),  # ints: 1500 mW is 1500/1000 = 1 W (integer division)
    (Int(1999, "mW"), Int(1, "W"), 0),
    (Int(-1999, "mW"), Int(-1, "W"), 0),  # Go's division truncates toward zero
    (F(1.5, "W"), Int(1500, "mW"), 0),  # big.Float: 1500 x round(1/1000) rounds back to 1.5
    (F(2.0, "W"), Int(2000, "mW"), 0),
    (Int(3, "mW"), F(0.003, "W"), -1),  # but float64's 0.003 is a little more than 3/1000
    (Int(1, "kW"), Int(1000, "W"), 0),
    (Int(2, "GHz"), Int(2000, "MHz"), 0),
    (Int(5), F(5.0), 0),
    (F(2.5), Int(3), -1),
    (Int(2**63 - 1, "KiB"), Int(1, "KiB"), -1),  # int64 overflow wraps, as in Go
    (Int(5, "foo"), Int(5), 0),  # an unknown unit is no unit
    (S("a"), S("b"), -1),
    (S("T4"), S("T4"), 0),
    (S("é"), S("z"), 1),  # bytes, not code points or locale
    (S("5"), Int(5), None),  # a string and a number
    (Int(5), S("5"), None),
    (B(True), B(False), 1),
    (B(False), B(True), 1),  # unequal bools compare as 1 both ways
    (B(True), B(True), 0),
    (B(True), Int(1), None),
    (Int(1), B(True), None),
    (F(math.inf, "GiB"), Int(2, "TiB"), 1),
]


@pytest.mark.parametrize(("a", "b", "want"), COMPARE)
def test_compare(a: Attribute, b: Attribute, want: int | None) -> None:
    assert a.compare(b) == want


def test_compare_nan_is_refused() -> None:
    # getBigFloat: big.Float.SetFloat64 panics on NaN; check reports it instead.
    with pytest.raises(NaNComparison):
        F(math.nan).compare(F(1.0))


# --- go-version (what checkAttributeVersionMatch uses): NewVersion, NewSemver, Compare.
VERSIONS = [
    ("1.2", "1.2.0", 0),
    ("v1.2.0", "1.2.0", 0),
    ("1.2.3-alpha", "1.2.3", -1),
    ("1.2.3-alpha.1", "1.2.3-alpha.2", -1),
    ("1.2.3-alpha.10", "1.2.3-alpha.2", 1),  # numeric parts compare as numbers
    ("1.2.3-1", "1.2.3-alpha", -1),  # numeric before alphanumeric
    ("1.2.3+meta", "1.2.3", 0),
    ("1.2.3.4", "1.2.3", 1),
    ("525.60.13", "525.60.2", 1),
    ("1.0beta", "1.0.0", -1),  # the loose form needs no "-"
]


@pytest.mark.parametrize(("a", "b", "want"), VERSIONS)
def test_version_compare(a: str, b: str, want: int) -> None:
    va, vb = parse_version(a), parse_version(b)
    assert va is not None and vb is not None
    assert va.compare(vb) == want
    assert vb.compare(va) == -want


def test_version_forms() -> None:
    assert parse_version("1.x") is None
    assert parse_version("1.0beta", strict=True) is None
    assert parse_version("1.0-beta", strict=True) is not None
    assert parse_version("99999999999999999999.0") is None  # a segment overflows int64


# --- scheduler/feasible/feasible.go: resolveDeviceTarget and checkAttributeConstraint,
# the "version" operator through go-version's NewConstraint and "semver" through
# helper/constraints/semver; regexp with Go's RE2 syntax; set operators on commas.
DEVICE = NodeDevices(
    "nvidia",
    "gpu",
    "T4",
    (Instance("GPU-1"), Instance("GPU-2", healthy=False)),
    {
        "memory": Int(16384, "MiB"),
        "cores": Int(2560),
        "family": S("turing"),
        "driver": S("525.60.13"),
        "pre": S("1.2.3-beta"),
        "major": Int(12),
        "clock": F(1.59, "GHz"),
        "ecc": B(True),
        "features": S("fp16,int8, tensor"),
    },
)
M = "${device.attr.memory}"
OPERATORS = [
    # ordering with units
    (M, ">=", "16 GiB", True),
    (M, ">", "16 GiB", False),
    (M, "<", "16 GiB", False),
    (M, "<=", "16 GiB", True),
    (M, "=", "16384 MiB", True),
    (M, "==", "16 GiB", True),
    (M, "is", "16 GiB", True),
    (M, "!=", "16 GiB", False),
    (M, "not", "8 GiB", True),
    (M, ">=", "2048", False),  # no unit against a unit: incomparable
    (M, "!=", "2048", False),  # incomparable is false even for !=
    (M, "=", "abc", False),
    ("${device.attr.cores}", ">", "2000", True),
    ("${device.attr.cores}", "<", "2.56e3", False),
    ("${device.attr.cores}", "=", "2560.0", True),
    ("${device.attr.clock}", ">", "1500 MHz", True),
    # the fixed targets
    ("${device.model}", "=", "T4", True),
    ("${device.model}", "==", "t4", False),
    ("${device.vendor}", "=", "nvidia", True),
    ("${device.type}", "=", "gpu", True),
    ("${device.ids}", "=", "GPU-1,GPU-2", True),  # every instance, healthy or not
    ("nvidia", "=", "${device.vendor}", True),  # a literal on the left
    # missing values
    ("${device.attr.nope}", "=", "x", False),
    ("${device.attr.nope}", "!=", "x", True),  # one side set: nil != some
    ("${device.attr.nope}", "!=", "${device.attr.none}", False),  # neither: false
    ("${device.attr.nope}", "<", "5", False),
    ("${device.attr.nope}", "regexp", ".*", False),
    ("${device.attr.nope}", "version", ">= 0", False),
    ("${device.attr.nope}", "set_contains", "a", False),
    ("${device.attr.nope}", "is_set", "", False),
    ("${device.attr.nope}", "is_not_set", "", True),
    (M, "is_set", "", True),
    (M, "is_not_set", "", False),
    ("${node.class}", "=", "x", False),  # not a device target: always missing
    ("${node.class}", "!=", "x", True),
    ("${device.attr.memory", "=", "x", False),  # missing brace: missing (after the prefix cut)
    # bools
    ("${device.attr.ecc}", "=", "true", True),
    ("${device.attr.ecc}", "=", "t", True),  # ParseBool reads "t"
    ("${device.attr.ecc}", "=", "1", False),  # "1" is an int first: bool vs int
    ("${device.attr.ecc}", ">", "false", True),  # unequal bools compare as 1
    ("${device.attr.ecc}", "<", "false", False),
    ("${device.attr.ecc}", ">", "true", False),
    # regexp (strings only, RE2 syntax, unanchored)
    ("${device.attr.family}", "regexp", "^tur", True),
    ("${device.attr.family}", "regexp", "^Tur", False),
    ("${device.attr.family}", "regexp", "(?i)^TUR", True),
    ("${device.model}", "regexp", r"T\d", True),
    ("${device.model}", "regexp", "4", False),  # the value "4" parses as a number
    ("${device.attr.cores}", "regexp", "25", False),  # the attribute is a number
    # version: go-version constraints, pre-releases only match pre-release constraints
    ("${device.attr.driver}", "version", ">= 525.0", True),
    ("${device.attr.driver}", "version", "< 500", False),
    ("${device.attr.driver}", "version", "~> 525.60", True),
    ("${device.attr.driver}", "version", "~> 525.61.0", False),
    ("${device.attr.driver}", "version", ">= 520, < 530", True),
    ("${device.attr.driver}", "version", "1", False),  # "1" parses as an int: no constraint
    ("${device.attr.major}", "version", ">= 12", True),  # an int reads as a version
    ("${device.attr.clock}", "version", ">= 1", False),  # a float does not
    ("${device.attr.pre}", "version", ">= 1.0", False),
    ("${device.attr.pre}", "version", ">= 1.2.3-alpha", True),
    # semver: strict constraints, no ~>, no pre-release rule
    ("${device.attr.driver}", "semver", ">= 525.60.13", True),
    ("${device.attr.driver}", "semver", "~> 525", False),
    ("${device.attr.pre}", "semver", ">= 1.0", True),
    ("${device.attr.pre}", "semver", "< 1.2.3", True),
    # sets: comma lists, spaces trimmed
    ("${device.attr.features}", "set_contains", "fp16,tensor", True),
    ("${device.attr.features}", "set_contains_all", "tensor , int8", True),
    ("${device.attr.features}", "set_contains", "fp16,fp64", False),
    ("${device.attr.features}", "set_contains_any", "fp64,int8", True),
    ("${device.attr.features}", "set_contains_any", "fp64", False),
    ("${device.ids}", "set_contains", "GPU-1", True),
    ("${device.attr.cores}", "set_contains", "2560", False),  # a number is no set
    # operators not about devices, and unknown ones
    ("${device.model}", "distinct_hosts", "", True),
    ("${device.model}", "contains", "T", False),
]


@pytest.mark.parametrize(
    ("left", "op", "right", "want"), OPERATORS, ids=[f"{o[0]} {o[1]} {o[2]}" for o in OPERATORS]
)
def test_operator(left: str, op: str, right: str, want: bool) -> None:
    ok, why = evaluate(op, resolve(left, DEVICE), resolve(right, DEVICE))
    assert ok is want
    assert bool(why) is not want or op in ("!=", "not")


EXPLAINED = [
    (M, ">=", "32 GiB", "memory = 16384 MiB"),
    (M, ">=", "2048", "one has a unit and the other none"),
    (M, ">=", "2 GHz", "MiB is byte and GHz is hertz"),
    ("${device.attr.nope}", "=", "x", "nope is not set"),
    ("${device.attr.family}", "=", "5", "a string and a int do not compare"),
    ("${device.model}", "regexp", "4", "regexp compares strings, and 4 is a int"),
    ("${device.attr.features}", "set_contains", "fp64", 'lacks "fp64"'),
    ("${device.attr.driver}", "version", "1.x", "is not a valid version constraint"),
]


@pytest.mark.parametrize(("left", "op", "right", "part"), EXPLAINED)
def test_false_says_why(left: str, op: str, right: str, part: str) -> None:
    ok, why = evaluate(op, resolve(left, DEVICE), resolve(right, DEVICE))
    assert not ok
    assert part in why


def test_version_constraint_forms() -> None:
    # go-version's NewConstraint and Nomad's semver.NewConstraint accept different things.
    assert parse_constraint("~> 1.2", semver=False) is not None
    assert parse_constraint("~> 1.2", semver=True) is None
    assert parse_constraint(">= 1.0beta", semver=False) is not None
    assert parse_constraint(">= 1.0beta", semver=True) is None
    assert parse_constraint("", semver=False) is None
    assert parse_constraint(">=1.0,<2", semver=False) is not None


def test_a_missing_attribute_suggests_one_the_group_has() -> None:
    dev = NodeDevices("v", "t", "n", (Instance("i"),), {"subsystem": S("usb"), "vendor_id": S("x")})
    ok, why = evaluate("=", resolve("${device.attr.subsytem}", dev), resolve("usb", dev))
    assert not ok and why == 'subsytem is not set (did you mean "subsystem"?)'
    ok, why = evaluate("is_set", resolve("${device.attr.speed}", dev), resolve("", dev))
    assert why == "speed is not set (the group has subsystem, vendor_id)"
    bare = NodeDevices("v", "t", "n", (Instance("i"),))
    _, why = evaluate("=", resolve("${device.attr.x}", bare), resolve("1", bare))
    assert why == "x is not set (the group has no attributes)"
