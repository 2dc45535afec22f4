"""cty types and go-cty's msgpack encoding.

Nomad decodes a plugin's ``config`` block with the plugin's schema into a cty value
and hands it to ``SetConfig`` as the bytes go-cty's ``msgpack.Marshal`` writes. To
read those bytes -- and to write the very same bytes when playing Nomad's part in
tests -- this module models cty's types and reproduces go-cty's encoder exactly:

- object attributes and map keys are written in sorted order, sets in cty's set order;
- a number that is an int64 becomes the smallest msgpack int (non-negative ones in the
  unsigned forms), a non-integer that a float64 holds exactly becomes a float64, and
  anything else becomes its shortest decimal text (``big.Float.Text('f', -1)`` of the
  512-bit value cty keeps) in a msgpack string;
- null is nil, lists/sets/tuples are arrays, maps/objects are maps, and a value whose
  declared type is ``any`` is wrapped as ``[type JSON as bin, value]``.

Python values stand for cty values: ``str``, ``bool``, numbers (``int``, ``float``,
``decimal.Decimal``, ``fractions.Fraction``), ``None`` for null, sequences for
lists/sets/tuples and mappings for maps/objects. A ``float`` stands for the decimal
number its ``repr`` shows, because that is what Nomad's pipeline (HCL or JSON text
parsed at 512 bits) makes of a config number: ``0.1`` therefore travels as the
string ``"0.1"`` exactly as Nomad sends it. Unknown values are not supported.

The encoder (:func:`marshal`, :func:`concrete_type`) is in ``ctymarshal``, imported
on first use: a plugin only decodes, and should not load it at every launch.

Decoding is lenient where go-cty is (numbers as ints, floats or strings; binary for
strings) and a little more (a missing object attribute reads as null), and raises
:class:`CtyDecodeError` with the path of the offending value otherwise.
"""

from __future__ import annotations

import json
import math
import re
import struct
import unicodedata
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, NoReturn, TypeAlias, cast

if TYPE_CHECKING:
    # Imported where used: a plugin decodes config, whose numbers arrive as ints
    # or floats, and decimal with fractions cost each launch 3 ms and 0.4 MiB.
    from decimal import Decimal

__all__ = [
    "BOOL",
    "DYNAMIC",
    "NUMBER",
    "STRING",
    "CtyDecodeError",
    "CtyEncodeError",
    "CtyType",
    "List",
    "Map",
    "Object",
    "Path",
    "Set",
    "Tuple",
    "concrete_type",
    "format_path",
    "infer_type",
    "marshal",
    "normalize_number",
    "parse_type",
    "type_from_json",
    "type_to_json",
    "unmarshal",
]

Path: TypeAlias = tuple[str | int, ...]
"""Where a value sits: attribute names / map keys as ``str``, list indexes as ``int``."""


# --------------------------------------------------------------------------- types


class CtyType:
    """Base of the immutable cty type model; ``str(t)`` gives an HCL type expression."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")


class _Primitive(CtyType):
    __slots__ = ("_name",)
    _name: str

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __str__(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return self._name.upper()

    def __reduce__(self) -> str:
        return self._name.upper()


class _Dynamic(CtyType):
    __slots__ = ()

    def __str__(self) -> str:
        return "any"

    def __repr__(self) -> str:
        return "DYNAMIC"

    def __reduce__(self) -> str:
        return "DYNAMIC"


STRING: Final[CtyType] = _Primitive("string")
NUMBER: Final[CtyType] = _Primitive("number")
BOOL: Final[CtyType] = _Primitive("bool")
DYNAMIC: Final[CtyType] = _Dynamic()
"""The ``any`` pseudo-type: the value carries its own type."""


class _Collection(CtyType):
    __slots__ = ("elem",)
    _kind = ""
    elem: CtyType

    def __init__(self, elem: CtyType) -> None:
        if not isinstance(elem, CtyType):
            raise TypeError(f"{self._kind}() element type must be a CtyType, not {elem!r}")
        object.__setattr__(self, "elem", elem)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _Collection) and type(other) is type(self) and other.elem == self.elem
        )

    def __hash__(self) -> int:
        return hash((self._kind, self.elem))

    def __str__(self) -> str:
        return f"{self._kind}({self.elem})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.elem!r})"

    def __reduce__(self) -> tuple[type[_Collection], tuple[CtyType]]:
        return type(self), (self.elem,)


class List(_Collection):
    """``list(T)``: an ordered sequence of values of one type."""

    __slots__ = ()
    _kind = "list"


class Set(_Collection):
    """``set(T)``: unordered unique values; cty fixes the order they are written in."""

    __slots__ = ()
    _kind = "set"


class Map(_Collection):
    """``map(T)``: string keys to values of one type."""

    __slots__ = ()
    _kind = "map"


class Object(CtyType):
    """``object({name = T, ...})``: a fixed set of named attributes; order is irrelevant."""

    __slots__ = ("_attrs",)
    _attrs: dict[str, CtyType]

    def __init__(self, attrs: Mapping[str, CtyType]) -> None:
        items = sorted(attrs.items(), key=lambda kv: kv[0])
        for name, aty in items:
            if not isinstance(name, str) or not isinstance(aty, CtyType):
                raise TypeError(f"object attribute {name!r} must map a str to a CtyType")
        object.__setattr__(self, "_attrs", dict(items))

    @property
    def attrs(self) -> Mapping[str, CtyType]:
        """Attribute types, in sorted name order (the order cty writes them)."""
        return MappingProxyType(self._attrs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Object) and other._attrs == self._attrs

    def __hash__(self) -> int:
        return hash(("object", tuple(self._attrs.items())))

    def __str__(self) -> str:
        inner = ", ".join(f"{_render_key(k)} = {v}" for k, v in self._attrs.items())
        return f"object({{{inner}}})"

    def __repr__(self) -> str:
        return f"Object({self._attrs!r})"

    def __reduce__(self) -> tuple[type[Object], tuple[dict[str, CtyType]]]:
        return Object, (dict(self._attrs),)


class Tuple(CtyType):
    """``tuple([T1, T2, ...])``: a fixed-length sequence with a type per position."""

    __slots__ = ("elems",)
    elems: tuple[CtyType, ...]

    def __init__(self, elems: Sequence[CtyType]) -> None:
        for ety in elems:
            if not isinstance(ety, CtyType):
                raise TypeError(f"tuple element types must be CtyType, not {ety!r}")
        object.__setattr__(self, "elems", tuple(elems))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tuple) and other.elems == self.elems

    def __hash__(self) -> int:
        return hash(("tuple", self.elems))

    def __str__(self) -> str:
        return f"tuple([{', '.join(str(e) for e in self.elems)}])"

    def __repr__(self) -> str:
        return f"Tuple({list(self.elems)!r})"

    def __reduce__(self) -> tuple[type[Tuple], tuple[list[CtyType]]]:
        return Tuple, (list(self.elems),)


# Patterns used only for rare values or error messages stay strings until their
# first use (re caches what it compiles): compiling them costs every launch.
_IDENT: Final = r"[A-Za-z_][A-Za-z0-9_-]*\Z"


def _render_key(name: str) -> str:
    return name if re.match(_IDENT, name) else json.dumps(name, ensure_ascii=False)


# ----------------------------------------------------------- type expressions


_TYPE_TOKEN_RE: Final = re.compile(
    r"""(?P<ws>[ \t\r\n]+)
      | (?P<ident>[A-Za-z_][A-Za-z0-9_-]*)
      | (?P<str>"(?:[^"\\\n]|\\.)*")
      | (?P<punct>[(){}\[\]=,:])""",
    re.VERBOSE,
)
_PRIMITIVES: Final[Mapping[str, CtyType]] = {
    "string": STRING,
    "number": NUMBER,
    "bool": BOOL,
    "any": DYNAMIC,
}
_COLLECTIONS: Final[Mapping[str, type[_Collection]]] = {"list": List, "set": Set, "map": Map}


class _Tok:
    __slots__ = ("kind", "newline_before", "pos", "text")

    def __init__(self, kind: str, text: str, pos: int, newline_before: bool) -> None:
        self.kind = kind  # "ident", "str", "punct" or "end"
        self.text = text
        self.pos = pos
        self.newline_before = newline_before


class _TypeParser:
    """Recursive descent over the small type-expression language Nomad evaluates."""

    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.toks = self._tokenize(expr)
        self.i = 0

    def fail(self, problem: str, tok: _Tok | None = None) -> NoReturn:
        where = tok if tok is not None else self.toks[self.i]
        at = "at end of input" if where.kind == "end" else f"at offset {where.pos}"
        raise ValueError(f"invalid type expression {self.expr!r}: {problem} {at}")

    def _tokenize(self, expr: str) -> list[_Tok]:
        toks: list[_Tok] = []
        pos = 0
        newline = False
        while pos < len(expr):
            m = _TYPE_TOKEN_RE.match(expr, pos)
            if m is None:
                raise ValueError(
                    f"invalid type expression {expr!r}: unexpected character "
                    f"{expr[pos]!r} at offset {pos}"
                )
            kind = cast(str, m.lastgroup)
            if kind == "ws":
                newline = newline or "\n" in m.group()
            else:
                toks.append(_Tok(kind, m.group(), pos, newline))
                newline = False
            pos = m.end()
        toks.append(_Tok("end", "", len(expr), newline))
        return toks

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        tok = self.toks[self.i]
        if tok.kind != "end":
            self.i += 1
        return tok

    def expect(self, text: str, context: str) -> _Tok:
        tok = self.next()
        if tok.kind != "punct" or tok.text != text:
            found = "" if tok.kind == "end" else f", found {tok.text!r}"
            self.fail(f"expected {text!r} {context}{found}", tok)
        return tok

    def parse(self) -> CtyType:
        if self.peek().kind == "end":
            self.fail("a type is required")
        ty = self.parse_type()
        tok = self.peek()
        if tok.kind != "end":
            self.fail(f"unexpected {tok.text!r} after the type", tok)
        return ty

    def parse_type(self) -> CtyType:
        tok = self.next()
        if tok.kind == "str":
            self.fail("a type is required, not a quoted string (write it without quotes)", tok)
        if tok.kind != "ident":
            self.fail(
                "expected a type" + ("" if tok.kind == "end" else f", found {tok.text!r}"), tok
            )
        name = tok.text
        if name in _PRIMITIVES or name == "null":
            if self.peek().text == "(":
                self.fail(f"{name!r} is a type, not a type constructor", self.peek())
            return DYNAMIC if name == "null" else _PRIMITIVES[name]
        if name in _COLLECTIONS:
            self.expect("(", f"after {name!r} (write {name}(T))")
            elem = self.parse_type()
            self.expect(")", f"to close {name}(...)")
            return _COLLECTIONS[name](elem)
        if name == "object":
            self.expect("(", "after 'object' (write object({name = T, ...}))")
            attrs = self.parse_object_body()
            self.expect(")", "to close object(...)")
            return Object(attrs)
        if name == "tuple":
            self.expect("(", "after 'tuple' (write tuple([T, ...]))")
            elems = self.parse_tuple_body()
            self.expect(")", "to close tuple(...)")
            return Tuple(elems)
        self.fail(f"unknown type {name!r}", tok)

    def parse_object_body(self) -> dict[str, CtyType]:
        self.expect("{", "to open the attribute types of object(...)")
        attrs: dict[str, CtyType] = {}
        while True:
            tok = self.next()
            if tok.kind == "punct" and tok.text == "}":
                return attrs
            if tok.kind == "ident":
                key = tok.text
            elif tok.kind == "str":
                try:
                    key = cast(str, json.loads(tok.text))
                except ValueError:
                    self.fail("invalid quoted attribute name", tok)
            else:
                found = "" if tok.kind == "end" else f", found {tok.text!r}"
                self.fail(f"expected an attribute name{found}", tok)
            if key in attrs:
                self.fail(f"duplicate attribute {key!r}", tok)
            sep = self.next()
            if sep.kind != "punct" or sep.text not in ("=", ":"):
                self.fail(f"expected '=' after attribute name {key!r}", sep)
            attrs[key] = self.parse_type()
            after = self.peek()
            if after.kind == "punct" and after.text == ",":
                self.next()
            elif not (after.kind == "punct" and after.text == "}") and not after.newline_before:
                self.fail("expected ',' or '}' after an attribute type", after)

    def parse_tuple_body(self) -> list[CtyType]:
        self.expect("[", "to open the element types of tuple(...)")
        elems: list[CtyType] = []
        while True:
            tok = self.peek()
            if tok.kind == "punct" and tok.text == "]":
                self.next()
                return elems
            elems.append(self.parse_type())
            after = self.peek()
            if after.kind == "punct" and after.text == ",":
                self.next()
            elif not (after.kind == "punct" and after.text == "]"):
                self.fail("expected ',' or ']' after a tuple element type", after)


def parse_type(expr: str) -> CtyType:
    """Parse an HCL type expression as Nomad's ``Attr.type`` field holds it.

    Accepts ``string number bool any list(T) set(T) map(T) object({k = T, ...})
    tuple([T, ...])`` (and ``null``, which Nomad also reads as ``any``), with any
    whitespace; raises :class:`ValueError` naming the offending position otherwise.
    """
    if not isinstance(expr, str):
        raise TypeError(f"type expression must be a str, not {type(expr).__name__}")
    return _TypeParser(expr).parse()


# ---------------------------------------------------------------- type JSON


def type_to_json(ty: CtyType) -> str:
    """cty's JSON description of ``ty`` (``Type.MarshalJSON``), used by dynamic values."""
    if ty is DYNAMIC:
        return '"dynamic"'
    if isinstance(ty, _Primitive):
        return f'"{ty}"'
    if isinstance(ty, _Collection):
        return f'["{ty._kind}",{type_to_json(ty.elem)}]'
    if isinstance(ty, Object):
        from nomad_device.golang import json_string

        inner = ",".join(f"{json_string(k)}:{type_to_json(v)}" for k, v in ty.attrs.items())
        return f'["object",{{{inner}}}]'
    if isinstance(ty, Tuple):
        return f'["tuple",[{",".join(type_to_json(e) for e in ty.elems)}]]'
    raise TypeError(f"not a cty type: {ty!r}")


def type_from_json(data: str | bytes) -> CtyType:
    """Inverse of :func:`type_to_json`; raises :class:`ValueError` on bad input."""
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"type description is not JSON: {exc}") from None
    return _type_from_raw(raw)


def _type_from_raw(raw: object) -> CtyType:
    if isinstance(raw, str):
        if raw == "dynamic":
            return DYNAMIC
        if raw in ("string", "number", "bool"):
            return _PRIMITIVES[raw]
        raise ValueError(f"invalid primitive type name {raw!r}")
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[0], str):
        raise ValueError(f"invalid type description {json.dumps(raw)}")
    kind, arg = raw[0], raw[1]
    if kind in _COLLECTIONS and len(raw) == 2:
        return _COLLECTIONS[kind](_type_from_raw(arg))
    if kind == "object" and isinstance(arg, dict) and len(raw) in (2, 3):
        # A third element lists optional attributes; it matters only to conversions.
        return Object({str(k): _type_from_raw(v) for k, v in arg.items()})
    if kind == "tuple" and isinstance(arg, list) and len(raw) == 2:
        return Tuple([_type_from_raw(e) for e in arg])
    raise ValueError(f"invalid type description {json.dumps(raw)}")


# ------------------------------------------------------------------- errors


def format_path(path: Path) -> str:
    """Render a path for operators: ``devices[2].name``, ``labels["a b"]``."""
    parts: list[str] = []
    for step in path:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif re.match(_IDENT, step):
            parts.append(f".{step}" if parts else step)
        else:
            parts.append(f"[{json.dumps(step, ensure_ascii=False)}]")
    return "".join(parts)


class _PathError(ValueError):
    def __init__(self, path: Path, problem: str) -> None:
        self.path: Path = tuple(path)
        self.problem = problem
        where = format_path(self.path)
        super().__init__(f"{where}: {problem}" if where else problem)


class CtyEncodeError(_PathError):
    """A Python value does not fit the cty type it is being encoded as."""


class CtyDecodeError(_PathError):
    """msgpack bytes are malformed or do not match the expected cty type.

    ``path`` locates the value, ``problem`` says what is wrong, and ``malformed`` is
    true when the bytes are not valid msgpack at all (rather than a wrong kind).
    """

    def __init__(self, path: Path, problem: str, *, malformed: bool = False) -> None:
        super().__init__(path, problem)
        self.malformed = malformed


# ------------------------------------------------------------------ numbers

#: Digits past which a decoded whole number stays a Decimal (int() of it would be slow).
_MAX_DECIMAL_DIGITS: Final = 4_000

_NUMBER_TEXT: Final = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z"
_INF_TEXT: Final = r"[+-]?[Ii]nf\Z"


def normalize_number(value: Decimal) -> int | float | Decimal:
    """Pick the Python type for a decoded number.

    Whole numbers become ``int``; others become ``float`` when the float's ``repr``
    gives back the same decimal (so ``"0.1"`` reads as ``0.1``); anything a float
    would distort stays a :class:`~decimal.Decimal`. Infinities become floats.
    """
    if value.is_nan():
        raise ValueError("NaN is not a cty number")
    if value.is_infinite():
        return float(value)
    if value == value.to_integral_value():
        if value.adjusted() < _MAX_DECIMAL_DIGITS:
            return int(value)
        return value
    as_float = float(value)
    from decimal import Decimal

    if math.isfinite(as_float) and Decimal(repr(as_float)) == value:
        return as_float
    return value


# ----------------------------------------------------------- type inference


def _is_number(value: object) -> bool:
    """An int, float, Decimal or Fraction (a bool too: test for bool first)."""
    if isinstance(value, int | float):
        return True
    from decimal import Decimal
    from fractions import Fraction

    return isinstance(value, Decimal | Fraction)


def _py_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if _is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, set | frozenset):
        return "set"
    return type(value).__name__


def infer_type(value: object) -> CtyType:
    """The cty type a plain Python value would have in HCL terms.

    Sequences become tuples and mappings objects (as in cty's JSON/msgpack implied
    types), ``set``/``frozenset`` a set of their single element type, null ``any``.
    """
    return _infer(value, ())


def _infer(value: object, path: Path) -> CtyType:
    if value is None:
        return DYNAMIC
    if isinstance(value, bool):
        return BOOL
    if _is_number(value):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, Mapping):
        attrs: dict[str, CtyType] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CtyEncodeError(path, f"object keys must be strings, got {key!r}")
            attrs[key] = _infer(item, (*path, key))
        return Object(attrs)
    if isinstance(value, list | tuple):
        return Tuple([_infer(item, (*path, i)) for i, item in enumerate(value)])
    if isinstance(value, set | frozenset):
        etys = {_infer(item, path) for item in value}
        if len(etys) > 1:
            raise CtyEncodeError(path, "set elements have different types")
        return Set(etys.pop() if etys else DYNAMIC)
    raise CtyEncodeError(path, f"cannot represent {type(value).__name__} as a cty value")


def concrete_type(value: object, ty: CtyType) -> CtyType:
    """Replace ``any`` inside ``ty`` by the types of the matching parts of ``value``.

    Nomad encodes config with the decoded value's own type, so no dynamic wrappers
    appear; ``marshal(v, concrete_type(v, t))`` writes the same bytes Nomad would.
    """
    from nomad_device.wire import ctymarshal

    return ctymarshal.concrete_type(value, ty)


# ------------------------------------------------------------------ marshal


def marshal(value: object, ty: CtyType) -> bytes:
    """Encode ``value`` as type ``ty`` exactly as go-cty's ``msgpack.Marshal`` does.

    Raises :class:`CtyEncodeError` when the value does not fit the type. The
    encoder lives in :mod:`~nomad_device.wire.ctymarshal`, imported on first use:
    a plugin only decodes.
    """
    from nomad_device.wire import ctymarshal

    return ctymarshal.marshal(value, ty)


# ---------------------------------------------------------------- unmarshal

_MAX_DEPTH: Final = 256


class _Reader:
    """A bounds-checked cursor over msgpack bytes that reports offsets in errors."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def malformed(self, path: Path, problem: str) -> CtyDecodeError:
        return CtyDecodeError(path, f"malformed msgpack: {problem}", malformed=True)

    def take(self, n: int, path: Path) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            left = len(self.data) - self.pos
            raise self.malformed(
                path,
                f"data ends early at offset {self.pos}: needed {n} more bytes, only {left} left",
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def uint(self, size: int, path: Path) -> int:
        return int.from_bytes(self.take(size, path), "big")

    def head(self, path: Path) -> tuple[str, object]:
        """Read one value header: ``(kind, argument)``; containers give their length."""
        if self.pos >= len(self.data):
            raise self.malformed(path, f"data ends early: expected a value at offset {self.pos}")
        start = self.pos
        b = self.data[self.pos]
        self.pos += 1
        if b <= 0x7F:
            return "int", b
        if b >= 0xE0:
            return "int", b - 0x100
        if 0x80 <= b <= 0x8F:
            return "map", self.count(b & 0x0F, 2, start, path)
        if 0x90 <= b <= 0x9F:
            return "array", self.count(b & 0x0F, 1, start, path)
        if 0xA0 <= b <= 0xBF:
            return "str", self.take(b & 0x1F, path)
        if b == 0xC0:
            return "nil", None
        if b in (0xC2, 0xC3):
            return "bool", b == 0xC3
        if b in (0xC4, 0xC5, 0xC6):
            return "bin", self.take(self.uint(1 << (b - 0xC4), path), path)
        if b in (0xC7, 0xC8, 0xC9):
            size = self.uint(1 << (b - 0xC7), path)
            code = self.take(1, path)[0]
            return "ext", (code, self.take(size, path))
        if b == 0xCA:
            return "float", float(_FLOAT32.unpack(self.take(4, path))[0])
        if b == 0xCB:
            return "float", float(_FLOAT64.unpack(self.take(8, path))[0])
        if 0xCC <= b <= 0xCF:
            return "int", self.uint(1 << (b - 0xCC), path)
        if 0xD0 <= b <= 0xD3:
            size = 1 << (b - 0xD0)
            return "int", int.from_bytes(self.take(size, path), "big", signed=True)
        if 0xD4 <= b <= 0xD8:
            code = self.take(1, path)[0]
            return "ext", (code, self.take(1 << (b - 0xD4), path))
        if b in (0xD9, 0xDA, 0xDB):
            return "str", self.take(self.uint(1 << (b - 0xD9), path), path)
        if b in (0xDC, 0xDD):
            return "array", self.count(self.uint(2 << (b - 0xDC), path), 1, start, path)
        if b in (0xDE, 0xDF):
            return "map", self.count(self.uint(2 << (b - 0xDE), path), 2, start, path)
        raise self.malformed(path, f"invalid type byte 0x{b:02x} at offset {start}")

    def count(self, n: int, per_item: int, start: int, path: Path) -> int:
        """Reject a container length the remaining bytes cannot possibly hold."""
        left = len(self.data) - self.pos
        if n * per_item > left:
            raise self.malformed(
                path,
                f"data ends early: the container at offset {start} declares {n} entries "
                f"but only {left} bytes are left",
            )
        return n

    def next_is_bin(self) -> bool:
        return self.pos < len(self.data) and self.data[self.pos] in (0xC4, 0xC5, 0xC6)


_FLOAT32: Final = struct.Struct(">f")
_FLOAT64: Final = struct.Struct(">d")


def unmarshal(data: bytes, ty: CtyType) -> object:
    """Decode go-cty msgpack ``data`` as type ``ty`` into plain Python values.

    Strings -> ``str``; numbers -> ``int`` when whole, else ``float`` or ``Decimal``
    (see :func:`normalize_number`); bools; nil -> ``None``; lists, sets and tuples ->
    ``list``; maps and objects -> ``dict`` (objects list every attribute, missing
    ones as ``None``). ``any`` accepts go-cty's ``[type JSON, value]`` wrapper or a
    plain value. Raises :class:`CtyDecodeError` on anything else.
    """
    data = bytes(data)
    reader = _Reader(data)
    if not data:
        raise reader.malformed((), "no data")
    value = _decode(reader, ty, (), 0)
    extra = len(data) - reader.pos
    if extra:
        raise reader.malformed(
            (),
            f"{extra} unexpected byte{'s' if extra != 1 else ''} after the value "
            f"at offset {reader.pos}",
        )
    return value


def _expected(ty: CtyType) -> str:
    if isinstance(ty, _Primitive):
        return str(ty)
    if isinstance(ty, _Collection):
        return f"a {ty._kind}"
    if isinstance(ty, Object):
        return "an object"
    if isinstance(ty, Tuple):
        return "a tuple"
    return "a value"


def _describe(kind: str, arg: object) -> str:
    if kind in ("int", "float"):
        return "number"
    if kind == "str":
        text = cast(bytes, arg).decode("utf-8", "replace")
        shown = text if len(text) <= 40 else text[:37] + "..."
        return f"string {json.dumps(shown, ensure_ascii=False)}"
    if kind == "bin":
        return "binary data"
    if kind == "array":
        return "a list"
    if kind == "map":
        return "a map"
    return kind


def _text(raw: bytes, reader: _Reader, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise reader.malformed(path, "string is not valid UTF-8") from None


def _number(kind: str, arg: object, reader: _Reader, path: Path) -> int | float | Decimal:
    if kind == "int":
        return cast(int, arg)
    if kind == "float":
        f = cast(float, arg)
        if math.isnan(f):
            raise CtyDecodeError(path, "NaN is not a number cty can hold")
        if math.isinf(f) or not f.is_integer():
            return f
        return int(f)
    text = _text(cast(bytes, arg), reader, path)
    if re.match(_INF_TEXT, text):
        return -math.inf if text.startswith("-") else math.inf
    if not re.match(_NUMBER_TEXT, text):
        raise CtyDecodeError(path, f"expected number, got {_describe(kind, arg)}")
    from decimal import Decimal

    return normalize_number(Decimal(text))


def _type_error(ty: CtyType, kind: str, arg: object, path: Path) -> CtyDecodeError:
    return CtyDecodeError(path, f"expected {_expected(ty)}, got {_describe(kind, arg)}")


def _decode(reader: _Reader, ty: CtyType, path: Path, depth: int) -> object:
    if depth > _MAX_DEPTH:
        raise reader.malformed(path, "values nested too deeply")
    kind, arg = reader.head(path)
    if kind == "ext":
        raise CtyDecodeError(path, "unknown values (msgpack extensions) are not supported")
    if ty is DYNAMIC:
        return _decode_dynamic(reader, kind, arg, path, depth)
    if kind == "nil":
        return None
    if ty is STRING:
        if kind not in ("str", "bin"):
            raise _type_error(ty, kind, arg, path)
        return unicodedata.normalize("NFC", _text(cast(bytes, arg), reader, path))
    if ty is NUMBER:
        if kind not in ("int", "float", "str", "bin"):
            raise _type_error(ty, kind, arg, path)
        return _number(kind, arg, reader, path)
    if ty is BOOL:
        if kind != "bool":
            raise _type_error(ty, kind, arg, path)
        return arg
    if isinstance(ty, List | Set):
        if kind != "array":
            raise _type_error(ty, kind, arg, path)
        return [_decode(reader, ty.elem, (*path, i), depth + 1) for i in range(cast(int, arg))]
    if isinstance(ty, Tuple):
        if kind != "array":
            raise _type_error(ty, kind, arg, path)
        if arg != len(ty.elems):
            raise CtyDecodeError(path, f"expected a tuple of {len(ty.elems)} elements, got {arg}")
        return [_decode(reader, e, (*path, i), depth + 1) for i, e in enumerate(ty.elems)]
    if isinstance(ty, Map | Object):
        if kind != "map":
            raise _type_error(ty, kind, arg, path)
        out: dict[str, object] = {}
        for _ in range(cast(int, arg)):
            key = _map_key(reader, path)
            if isinstance(ty, Map):
                out[key] = _decode(reader, ty.elem, (*path, key), depth + 1)
            elif key in ty.attrs:
                out[key] = _decode(reader, ty.attrs[key], (*path, key), depth + 1)
            else:
                raise CtyDecodeError((*path, key), "unexpected attribute")
        if isinstance(ty, Object):
            return {name: out.get(name) for name in ty.attrs}
        return out
    raise TypeError(f"not a cty type: {ty!r}")


def _map_key(reader: _Reader, path: Path) -> str:
    kind, arg = reader.head(path)
    if kind not in ("str", "bin"):
        raise CtyDecodeError(path, f"map keys must be strings, got {_describe(kind, arg)}")
    return unicodedata.normalize("NFC", _text(cast(bytes, arg), reader, path))


def _decode_dynamic(reader: _Reader, kind: str, arg: object, path: Path, depth: int) -> object:
    if kind == "array" and arg == 2 and reader.next_is_bin():
        _, raw = reader.head(path)
        try:
            actual = type_from_json(cast(bytes, raw))
        except ValueError as exc:
            raise CtyDecodeError(path, f"invalid type in dynamic value: {exc}") from None
        return _decode(reader, actual, path, depth + 1)
    return _decode_plain(reader, kind, arg, path, depth)


def _decode_plain(reader: _Reader, kind: str, arg: object, path: Path, depth: int) -> object:
    """A value without type information, read the way cty infers types from msgpack."""
    if depth > _MAX_DEPTH:
        raise reader.malformed(path, "values nested too deeply")
    if kind == "nil":
        return None
    if kind == "bool":
        return arg
    if kind in ("int", "float"):
        return _number(kind, arg, reader, path)
    if kind == "str":
        return unicodedata.normalize("NFC", _text(cast(bytes, arg), reader, path))
    if kind == "array":
        items: list[object] = []
        for i in range(cast(int, arg)):
            sub_kind, sub_arg = reader.head((*path, i))
            items.append(_decode_plain(reader, sub_kind, sub_arg, (*path, i), depth + 1))
        return items
    if kind == "map":
        out: dict[str, object] = {}
        for _ in range(cast(int, arg)):
            key = _map_key(reader, path)
            sub_kind, sub_arg = reader.head((*path, key))
            out[key] = _decode_plain(reader, sub_kind, sub_arg, (*path, key), depth + 1)
        return out
    if kind == "ext":
        raise CtyDecodeError(path, "unknown values (msgpack extensions) are not supported")
    raise CtyDecodeError(path, f"expected a value, got {_describe(kind, arg)}")
