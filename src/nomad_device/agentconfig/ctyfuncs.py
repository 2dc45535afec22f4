"""The go-cty standard functions a Nomad agent offers plugin config, as go-cty runs them.

Nomad's ``GetStdlibFuncs`` gives templates 15 functions. Each is here with
go-cty's parameter names and types (the caller converts arguments to them and
checks nulls, in HCL's order) and a body that gives go-cty's result exactly,
or raises :class:`Unsupported` where that would need what Python does not
carry: Go's Unicode case tables for the few characters Python maps to several
(``ß``), grapheme clusters beyond one character each (combining marks, flags),
lists, maps and sets (templates make tuples and objects only). An error the
agent reports raises :class:`EvalError` in HCL's words.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final

from nomad_device.agentconfig.ctyconvert import (
    TV,
    ConversionError,
    convertible,
    friendly,
    go_quote,
    mismatch,
    number_text,
    unify,
)
from nomad_device.agentconfig.ctyconvert import convert as _convert_value
from nomad_device.golang import json_string
from nomad_device.hclexpr import MAX_DEPTH
from nomad_device.wire import cty

__all__ = [
    "FUNCTIONS",
    "MAX_EXPONENT",
    "EvalError",
    "Function",
    "Unsupported",
    "check_json",
    "convert",
    "number",
]

#: The largest decimal exponent of a number the evaluator takes: go-cty's 512-bit
#: numbers reach further, configs never do, and exact arithmetic on numbers of
#: millions of digits would take Python minutes.
MAX_EXPONENT: Final = 4000


class Unsupported(Exception):
    """An expression the agent may accept but this evaluator does not reproduce."""


class EvalError(Exception):
    """What the agent reports: HCL's diagnostic summary and detail."""

    def __init__(self, summary: str, detail: str) -> None:
        super().__init__(f"{summary}: {detail}")
        self.summary = summary
        self.detail = detail


def number(value: Decimal) -> object:
    """A number as the evaluator keeps it; Unsupported past :data:`MAX_EXPONENT`."""
    if value.is_finite() and abs(value.adjusted()) > MAX_EXPONENT:
        raise Unsupported(
            f"the number {value:.6e}, past the launcher's limit (exponents up to {MAX_EXPONENT})"
        )
    return cty.normalize_number(value)


def convert(value: object, ty: cty.CtyType, want: cty.CtyType) -> TV:
    """go-cty's ``convert.Convert``, where a null of a type that does not convert fails too."""
    if value is None and ty is not cty.DYNAMIC and ty != want and not convertible(ty, want):
        raise ConversionError(mismatch(ty, want))
    return _convert_value(value, ty, want)


# ---------------------------------------------------------------- functions


@dataclass(frozen=True)
class Function:
    """A stdlib function as HCL calls it: parameters (converted before the call), an
    optional variadic one, whether null may be passed, and the body."""

    params: tuple[tuple[str, cty.CtyType], ...]
    var: tuple[str, cty.CtyType] | None
    impl: Callable[[list[TV]], TV]
    allow_null: bool = False

    def param(self, index: int) -> tuple[str, cty.CtyType]:
        if index < len(self.params):
            return self.params[index]
        assert self.var is not None
        return self.var


def _case_mapped(text: object, name: str, mapping: Callable[[str], str]) -> str:
    """Go's ``strings.ToUpper``/``ToLower``: each character by Unicode's simple mapping.

    Python maps some characters to several (``ß``, ``İ``); Go keeps or maps them
    to one, by tables this module does not carry, so those are refused.
    """
    assert isinstance(text, str)
    out = []
    for ch in text:
        mapped = mapping(ch)
        if len(mapped) != 1:
            raise Unsupported(f"{name}() of {ch!r}, which Go maps by its own Unicode tables")
        out.append(mapped)
    return unicodedata.normalize("NFC", "".join(out))


#: Characters that join a grapheme cluster without being marks: Hangul jamo,
#: regional indicators, emoji modifiers, and letters that are Prepend or SpacingMark.
_JOINING: Final = re.compile(
    "[\u1100-\u11ff\ua960-\ua97f\ud7b0-\ud7ff\U0001f1e6-\U0001f1ff"
    "\U0001f3fb-\U0001f3ff\u0e33\u0eb3\u0d4e\U000111c2\U000111c3\U0001193f"
    "\U00011941\U00011a3a\U00011a84-\U00011a89\U00011d46\U00011f02]"
)


def _clusters(text: object, name: str) -> list[str]:
    """Grapheme clusters of text where each character is one (CR LF excepted).

    Marks, format characters and the few letters that join (``_JOINING``) would
    need Unicode's segmentation rules, which Python lacks: refused.
    """
    assert isinstance(text, str)
    for ch in text:
        if unicodedata.category(ch)[0] in "MC" and ch not in "\r\n" and not _control(ch):
            raise Unsupported(f"{name}() of text with {ch!r}, part of a larger character")
        if _JOINING.match(ch):
            raise Unsupported(f"{name}() of text with {ch!r}, part of a larger character")
    return re.findall(r"\r\n|.", text, re.DOTALL)


def _control(ch: str) -> bool:
    return unicodedata.category(ch) == "Cc"


def _int_param(value: object, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _failed("substr", f"{name}: value must be a whole number")


def _upper(args: list[TV]) -> TV:
    return _case_mapped(args[0][0], "upper", str.upper), cty.STRING


def _lower(args: list[TV]) -> TV:
    return _case_mapped(args[0][0], "lower", str.lower), cty.STRING


def _strlen(args: list[TV]) -> TV:
    return len(_clusters(args[0][0], "strlen")), cty.NUMBER


def _reverse(args: list[TV]) -> TV:
    return "".join(reversed(_clusters(args[0][0], "reverse"))), cty.STRING


def _substr(args: list[TV]) -> TV:
    (text, _), (offset_v, _), (length_v, _) = args
    clusters = _clusters(text, "substr")
    offset, length = _int_param(offset_v, "offset"), _int_param(length_v, "length")
    # go-cty's walk: a negative offset counts from the end (and still before the
    # start, from the start); past the end gives ""; a negative length, or 0 with a
    # negative offset, takes the rest.
    if offset < 0:
        offset += len(clusters)
    elif length == 0:
        return "", cty.STRING
    if offset > len(clusters):
        return "", cty.STRING
    rest = clusters[max(offset, 0) :]
    if length <= 0:
        return "".join(rest), cty.STRING
    return "".join(rest[:length]), cty.STRING


def _abs(args: list[TV]) -> TV:
    value = args[0][0]
    if isinstance(value, int):
        return abs(value), cty.NUMBER
    return cty.normalize_number(abs(Decimal(number_text(value)))), cty.NUMBER


def _int(args: list[TV]) -> TV:
    value = args[0][0]
    if isinstance(value, int):
        return value, cty.NUMBER
    number = Decimal(number_text(value))
    if not number.is_finite():
        raise Unsupported("int() of an infinity")
    return int(number), cty.NUMBER


def _extreme(name: str, pick: Callable[[Decimal, Decimal], bool]) -> Callable[[list[TV]], TV]:
    def call(args: list[TV]) -> TV:
        if not args:
            raise _failed(name, "must pass at least one number")
        best = args[0][0]
        for value, _ in args[1:]:
            if pick(Decimal(number_text(value)), Decimal(number_text(best))):
                best = value
        return best, cty.NUMBER

    return call


def _length(args: list[TV]) -> TV:
    ((value, ty),) = args
    if not isinstance(ty, cty.Tuple | cty.List | cty.Map | cty.Set):
        raise _failed("length", "collection must be a list, a map or a tuple")
    assert isinstance(value, list | dict)
    return len(value), cty.NUMBER


def _failed(name: str, message: str) -> EvalError:
    """An error from a function's own checks (not its parameters'), as HCL words it."""
    detail = f"Call to function {go_quote(name)} failed: {message}."
    return EvalError("Error in function call", detail)


def _hasindex(args: list[TV]) -> TV:
    (value, ty), (key, key_ty) = args
    if not isinstance(ty, cty.Tuple) or key_ty is not cty.NUMBER:
        raise Unsupported("hasindex() other than a tuple and a number")
    assert isinstance(value, list)
    return isinstance(key, int) and 0 <= key < len(value), cty.BOOL


def _coalesce(args: list[TV]) -> TV:
    types = [ty for _, ty in args]
    if any(t not in (cty.STRING, cty.NUMBER, cty.BOOL, cty.DYNAMIC) for t in types):
        raise Unsupported("coalesce() of collections")
    # go-cty's unification leaves the type open once any argument's is (a bare null).
    want = cty.DYNAMIC if cty.DYNAMIC in types else unify(types)
    if want is None:
        raise _failed("coalesce", "all arguments must have the same type")
    for value, ty in args:
        if value is not None:
            return convert(value, ty, want)
    raise _failed("coalesce", "no non-null arguments")


def _concat(args: list[TV]) -> TV:
    if not args:
        raise _failed("concat", "at least one argument is required")
    values: list[object] = []
    types: list[cty.CtyType] = []
    for value, ty in args:
        if isinstance(ty, cty.List):
            raise Unsupported("concat() of lists")
        if not isinstance(ty, cty.Tuple) or not isinstance(value, list):
            raise EvalError(
                "Invalid function argument",
                'Invalid value for "seqs" parameter: all arguments must be lists or tuples; '
                f"got {friendly(ty)}.",
            )
        values.extend(value)
        types.extend(ty.elems)
    return values, cty.Tuple(types)


def _jsonencode(args: list[TV]) -> TV:
    ((value, ty),) = args
    return _json_text(value, ty), cty.STRING


def _json_text(value: object, ty: cty.CtyType) -> str:
    if value is None:
        return "null"
    if ty is cty.STRING:
        return json_string(str(value))
    if ty is cty.NUMBER:
        return number_text(value)
    if ty is cty.BOOL:
        return "true" if value else "false"
    if isinstance(ty, cty.Tuple) and isinstance(value, list):
        return "[" + ",".join(_json_text(v, t) for v, t in zip(value, ty.elems, strict=True)) + "]"
    if isinstance(ty, cty.Object) and isinstance(value, dict):
        members = [f"{json_string(k)}:{_json_text(value[k], ty.attrs[k])}" for k in sorted(value)]
        return "{" + ",".join(members) + "}"
    raise Unsupported(f"jsonencode() of {friendly(ty)}")


def _jsondecode(args: list[TV]) -> TV:
    text = args[0][0]
    assert isinstance(text, str)

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        out = dict(items)
        if len(out) != len(items):
            raise Unsupported("jsondecode() of an object with a repeated key")
        return out

    try:
        raw = json.loads(
            text,
            parse_float=Decimal,
            parse_int=Decimal,
            parse_constant=lambda c: _bad_json(c),
            object_pairs_hook=pairs,
        )
    except (ValueError, InvalidOperation) as exc:
        raise _failed("jsondecode", f"not JSON: {exc}") from None
    except RecursionError:
        raise Unsupported(f"jsondecode() of JSON nested deeper than {MAX_DEPTH} levels") from None
    check_json(raw)
    return _from_json(raw)


def check_json(raw: object) -> None:
    """Unsupported for decoded JSON nested past ``MAX_DEPTH`` or with a number past
    :data:`MAX_EXPONENT` (checked without recursing: what follows recurses)."""
    stack = [(raw, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise Unsupported(f"JSON nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, Mapping | list | tuple):
            items = value.values() if isinstance(value, Mapping) else value
            stack.extend((item, depth + 1) for item in items)
        elif isinstance(value, Decimal):
            number(value)


def _bad_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")


def _from_json(raw: object) -> TV:
    if raw is None:
        return None, cty.DYNAMIC
    if isinstance(raw, bool):
        return raw, cty.BOOL
    if isinstance(raw, Decimal):
        if raw.is_zero() and raw.is_signed():
            return -0.0, cty.NUMBER  # "-0": go-cty keeps the sign
        return number(raw), cty.NUMBER
    if isinstance(raw, str):
        return raw, cty.STRING
    if isinstance(raw, list):
        items = [_from_json(v) for v in raw]
        return [v for v, _ in items], cty.Tuple([t for _, t in items])
    assert isinstance(raw, dict)
    members = {k: _from_json(v) for k, v in raw.items()}
    return {k: v for k, (v, _) in members.items()}, cty.Object(
        {k: t for k, (_, t) in members.items()}
    )


_S, _N, _ANY = cty.STRING, cty.NUMBER, cty.DYNAMIC

#: Nomad's ``GetStdlibFuncs``: the functions a plugin config may call, with
#: go-cty's parameter names and types.
FUNCTIONS: Final[Mapping[str, Function]] = {
    "abs": Function((("num", _N),), None, _abs),
    "coalesce": Function((), ("vals", _ANY), _coalesce, allow_null=True),
    "concat": Function((), ("seqs", _ANY), _concat),
    "hasindex": Function((("collection", _ANY), ("key", _ANY)), None, _hasindex),
    "int": Function((("num", _N),), None, _int),
    "jsondecode": Function((("str", _S),), None, _jsondecode),
    "jsonencode": Function((("val", _ANY),), None, _jsonencode, allow_null=True),
    "length": Function((("collection", _ANY),), None, _length),
    "lower": Function((("str", _S),), None, _lower),
    "max": Function((), ("numbers", _N), _extreme("max", lambda a, b: a > b)),
    "min": Function((), ("numbers", _N), _extreme("min", lambda a, b: a < b)),
    "reverse": Function((("str", _S),), None, _reverse),
    "strlen": Function((("str", _S),), None, _strlen),
    "substr": Function((("str", _S), ("offset", _N), ("length", _N)), None, _substr),
    "upper": Function((("str", _S),), None, _upper),
}
