"""The ``hclspec.Spec`` schema a plugin returns from ``ConfigSchema``, in plain Python.

Nomad turns the protobuf ``Spec`` tree into an hcldec spec, decodes the operator's
``config`` block with it (applying ``Default``/``Literal`` fallbacks), and sends the
result to ``SetConfig`` as cty msgpack. This module offers:

- one frozen dataclass per ``Spec`` kind, so schemas read like Go's
  ``hclspec.NewAttr(...)`` calls and compare with ``==``;
- :func:`to_proto` / :func:`from_proto`, an exact round trip to the wire message;
- :func:`implied_type`, the cty type hcldec gives each kind (what the msgpack holds);
- :func:`hcl_literal` / :func:`parse_literal` for the HCL expressions ``Literal``
  carries (constants only: no variables, functions or interpolation);
- :func:`decode`, which reads ``SetConfig`` bytes against a spec.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final, TypeAlias, cast

from nomad_device.frozen import frozen, set_field
from nomad_device.wire import cty

if TYPE_CHECKING:
    from nomad_device.proto import hclspec_pb2

__all__ = [
    "Array",
    "Attr",
    "Block",
    "BlockAttrs",
    "BlockList",
    "BlockMap",
    "BlockSet",
    "Default",
    "Literal",
    "Object",
    "Spec",
    "decode",
    "from_proto",
    "hcl_literal",
    "implied_type",
    "parse_literal",
    "to_proto",
]


# ------------------------------------------------------------------ spec kinds


@frozen
class Object:
    """An object whose keys are produced by the mapped specs (the usual root)."""

    attributes: Mapping[str, Spec]

    def __init__(self, attributes: Mapping[str, Spec]) -> None:
        set_field(self, "attributes", dict(attributes))

    def __hash__(self) -> int:
        return hash(("Object", frozenset(self.attributes.items())))


@frozen
class Array:
    """A fixed-length tuple whose elements come from ``values`` in order."""

    values: Sequence[Spec]

    def __init__(self, values: Sequence[Spec]) -> None:
        set_field(self, "values", tuple(values))


@frozen
class Attr:
    """An attribute ``name = value`` converted to the type expression ``type``."""

    name: str
    type: str
    required: bool = False


@frozen
class Block:
    """At most one ``name { ... }`` block decoded with ``nested``; null when absent."""

    name: str
    nested: Spec
    required: bool = False


@frozen
class BlockAttrs:
    """A ``name { k = v ... }`` block read as a map of free-form attributes of ``type``."""

    name: str
    type: str
    required: bool = False


@frozen
class BlockList:
    """Repeated ``name { ... }`` blocks as a list; zero item bounds mean no limit."""

    name: str
    nested: Spec
    min_items: int = 0
    max_items: int = 0

    def __init__(self, name: str, nested: Spec, min_items: int = 0, max_items: int = 0) -> None:
        _init_block_items(self, name, nested, min_items, max_items)


@frozen
class BlockSet:
    """Like :class:`BlockList`, but duplicates are dropped and order is cty's."""

    name: str
    nested: Spec
    min_items: int = 0
    max_items: int = 0

    def __init__(self, name: str, nested: Spec, min_items: int = 0, max_items: int = 0) -> None:
        _init_block_items(self, name, nested, min_items, max_items)


@frozen
class BlockMap:
    """Labelled ``name "label" { ... }`` blocks as nested maps, one level per label."""

    name: str
    labels: Sequence[str]
    nested: Spec

    def __init__(self, name: str, labels: Sequence[str], nested: Spec) -> None:
        labels = (labels,) if isinstance(labels, str) else tuple(labels)
        if not labels:
            raise ValueError(f"block map {name!r} needs at least one label name")
        set_field(self, "name", name)
        set_field(self, "labels", labels)
        set_field(self, "nested", nested)


@frozen
class Literal:
    """A constant; ``value`` is an HCL expression such as ``'"info"'`` or ``"true"``."""

    value: str


@frozen
class Default:
    """``primary`` unless it yields null, then ``default`` (usually a :class:`Literal`)."""

    primary: Spec
    default: Spec


#: Any node of a schema: what ``config_schema()`` returns and ``to_proto`` converts.
Spec: TypeAlias = (
    Object | Array | Attr | Block | BlockAttrs | BlockList | BlockSet | BlockMap | Literal | Default
)
"""Any node of a schema tree."""


def _init_block_items(
    spec: BlockList | BlockSet, name: str, nested: Spec, min_items: int, max_items: int
) -> None:
    """A block list's or set's ``__init__``: the item bounds checked, then the fields set."""
    if min_items < 0 or max_items < 0:
        raise ValueError(f"block {name!r}: item bounds must not be negative")
    if max_items and min_items > max_items:
        raise ValueError(f"block {name!r}: min_items {min_items} exceeds max_items {max_items}")
    set_field(spec, "name", name)
    set_field(spec, "nested", nested)
    set_field(spec, "min_items", min_items)
    set_field(spec, "max_items", max_items)


# ------------------------------------------------------------------- protobuf


def to_proto(spec: Spec) -> hclspec_pb2.Spec:
    """The ``hashicorp.nomad.plugins.shared.hclspec.Spec`` message for ``spec``."""
    from nomad_device.proto import hclspec_pb2 as pb

    if isinstance(spec, Object):
        obj = pb.Object()
        for key, sub in spec.attributes.items():
            obj.attributes[key].CopyFrom(to_proto(sub))
        return pb.Spec(object=obj)
    if isinstance(spec, Array):
        return pb.Spec(array=pb.Array(values=[to_proto(v) for v in spec.values]))
    if isinstance(spec, Attr):
        return pb.Spec(Attr=pb.Attr(name=spec.name, type=spec.type, required=spec.required))
    if isinstance(spec, Block):
        block = pb.Block(name=spec.name, required=spec.required, nested=to_proto(spec.nested))
        return pb.Spec(block_value=block)
    if isinstance(spec, BlockAttrs):
        attrs = pb.BlockAttrs(name=spec.name, type=spec.type, required=spec.required)
        return pb.Spec(block_attrs=attrs)
    if isinstance(spec, BlockList):
        block_list = pb.BlockList(
            name=spec.name,
            min_items=spec.min_items,
            max_items=spec.max_items,
            nested=to_proto(spec.nested),
        )
        return pb.Spec(block_list=block_list)
    if isinstance(spec, BlockSet):
        block_set = pb.BlockSet(
            name=spec.name,
            min_items=spec.min_items,
            max_items=spec.max_items,
            nested=to_proto(spec.nested),
        )
        return pb.Spec(block_set=block_set)
    if isinstance(spec, BlockMap):
        block_map = pb.BlockMap(
            name=spec.name, labels=list(spec.labels), nested=to_proto(spec.nested)
        )
        return pb.Spec(block_map=block_map)
    if isinstance(spec, Literal):
        return pb.Spec(literal=pb.Literal(value=spec.value))
    if isinstance(spec, Default):
        default = pb.Default(primary=to_proto(spec.primary), default=to_proto(spec.default))
        return pb.Spec(default=default)
    raise TypeError(f"not a spec: {spec!r}")


def from_proto(pb: hclspec_pb2.Spec) -> Spec:
    """Inverse of :func:`to_proto`; raises :class:`ValueError` on an incomplete tree."""
    kind = pb.WhichOneof("block")
    if kind == "object":
        return Object({k: from_proto(v) for k, v in pb.object.attributes.items()})
    if kind == "array":
        return Array([from_proto(v) for v in pb.array.values])
    if kind == "Attr":
        return Attr(pb.Attr.name, pb.Attr.type, pb.Attr.required)
    if kind == "block_value":
        msg = pb.block_value
        nested = _nested(msg.HasField("nested"), msg.nested, "block", msg.name)
        return Block(msg.name, nested, msg.required)
    if kind == "block_attrs":
        return BlockAttrs(pb.block_attrs.name, pb.block_attrs.type, pb.block_attrs.required)
    if kind in ("block_list", "block_set"):
        items = pb.block_list if kind == "block_list" else pb.block_set
        nested = _nested(items.HasField("nested"), items.nested, kind, items.name)
        cls = BlockList if kind == "block_list" else BlockSet
        return cls(items.name, nested, items.min_items, items.max_items)
    if kind == "block_map":
        bm = pb.block_map
        nested = _nested(bm.HasField("nested"), bm.nested, "block_map", bm.name)
        return BlockMap(bm.name, list(bm.labels), nested)
    if kind == "literal":
        return Literal(pb.literal.value)
    if kind == "default":
        d = pb.default
        if not d.HasField("primary") or not d.HasField("default"):
            raise ValueError("default spec needs both a primary and a default spec")
        return Default(from_proto(d.primary), from_proto(d.default))
    raise ValueError("spec message has none of its kinds set")


def _nested(present: bool, msg: hclspec_pb2.Spec, kind: str, name: str) -> Spec:
    if not present:
        raise ValueError(f"{kind} spec {name!r} has no nested spec")
    return from_proto(msg)


# --------------------------------------------------------------- implied types


def implied_type(spec: Spec) -> cty.CtyType:
    """The cty type hcldec gives ``spec``'s result: the shape of ``SetConfig``'s msgpack."""
    if isinstance(spec, Object):
        return cty.Object({k: implied_type(v) for k, v in spec.attributes.items()})
    if isinstance(spec, Array):
        return cty.Tuple([implied_type(v) for v in spec.values])
    if isinstance(spec, Attr):
        return cty.parse_type(spec.type)
    if isinstance(spec, Block):
        return implied_type(spec.nested)
    if isinstance(spec, BlockAttrs):
        return cty.Map(cty.parse_type(spec.type))
    if isinstance(spec, BlockList):
        return cty.List(implied_type(spec.nested))
    if isinstance(spec, BlockSet):
        return cty.Set(implied_type(spec.nested))
    if isinstance(spec, BlockMap):
        ty = implied_type(spec.nested)
        for _ in spec.labels:
            ty = cty.Map(ty)
        return ty
    if isinstance(spec, Literal):
        return cty.infer_type(parse_literal(spec.value))
    if isinstance(spec, Default):
        return implied_type(spec.primary)
    raise TypeError(f"not a spec: {spec!r}")


# ---------------------------------------------------------------- HCL literals

# Patterns stay strings until first used (re caches what it compiles): a plugin
# launch renders or parses literals rarely, and compiling costs every launch.
_IDENT: Final = r"[A-Za-z_][A-Za-z0-9_-]*\Z"
_KEYWORDS: Final = frozenset({"true", "false", "null"})


def _quote(text: str) -> str:
    out = ['"']
    i = 0
    while i < len(text):
        ch = text[i]
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if ch in "$%" and nxt == "{":
            out.append(ch + ch + "{")  # keep "${" and "%{" from starting a template
            i += 2
            continue
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
        i += 1
    out.append('"')
    return "".join(out)


def hcl_literal(value: object) -> str:
    """Render a plain Python value as an HCL constant expression for :class:`Literal`.

    Handles ``None``, bools, ints, finite floats and Decimals, strings (escaped, with
    ``${``/``%{`` doubled so they stay text), sequences and string-keyed mappings.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no HCL literal")
        return repr(value)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, Mapping):
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"HCL object keys must be strings, not {key!r}")
            shown = key if re.match(_IDENT, key) and key not in _KEYWORDS else _quote(key)
            items.append(f"{shown} = {hcl_literal(item)}")
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(hcl_literal(v) for v in value) + "]"
    from decimal import Decimal

    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value!r} has no HCL literal")
        return str(value)
    raise TypeError(f"cannot render {type(value).__name__} as an HCL literal")


def parse_literal(expr: str) -> object:
    """Evaluate a constant HCL expression, as found in a :class:`Literal`.

    Supports quoted strings with escapes, numbers (see
    :func:`~nomad_device.wire.cty.normalize_number`), ``true``/``false``/``null``,
    ``[...]`` and ``{k = v, "k": v}``, comments and parentheses. Raises
    :class:`ValueError` for anything needing evaluation: variables, functions,
    operators, template interpolation or heredocs.
    """
    if not isinstance(expr, str):
        raise TypeError(f"HCL expression must be a str, not {type(expr).__name__}")
    from nomad_device.hclexpr import ParseError, parse

    try:
        tree = parse(expr)
    except ParseError as exc:
        raise _literal_error(expr, exc.problem, exc.offset) from None
    return _constant(expr, tree)


def _literal_error(expr: str, problem: str, at: int) -> ValueError:
    where = "at end of input" if at >= len(expr) else f"at offset {at}"
    return ValueError(f"invalid HCL literal {expr!r}: {problem} {where}")


def _constant(expr: str, node: tuple[object, ...]) -> object:
    """The value of a parsed literal; the first thing that needs evaluation is refused."""
    kind, at, *rest = node
    assert isinstance(at, int)
    if kind == "number":
        from decimal import Decimal

        return cty.normalize_number(Decimal(str(rest[0])))
    if kind == "string":
        return _literal_string(expr, str(rest[0]), at + 1)
    if kind == "name":
        if rest[0] in _KEYWORDS:
            return {"true": True, "false": False, "null": None}[str(rest[0])]
        raise _literal_error(expr, f"variables such as {rest[0]!r} are not allowed", at)
    if kind == "call":
        raise _literal_error(expr, f"function calls such as {rest[0]}(...) are not allowed", at)
    if kind == "tuple":
        return [_constant(expr, item) for item in cast(list[tuple[object, ...]], rest[0])]
    if kind == "object":
        items: dict[str, object] = {}
        for key, value in cast(list[tuple[tuple[object, ...], ...]], rest[0]):
            assert isinstance(key[1], int)
            if key[0] not in ("key", "string"):
                raise _literal_error(expr, "object keys must be names or quoted strings", key[1])
            name = str(key[2]) if key[0] == "key" else _constant(expr, key)
            assert isinstance(name, str)
            if name in items:
                raise _literal_error(expr, f"duplicate object key {name!r}", key[1])
            items[name] = _constant(expr, value)
        return items
    if kind == "unary" and rest[0] == "-":
        operand = _constant(expr, cast(tuple[object, ...], rest[1]))
        from decimal import Decimal

        if isinstance(operand, bool) or not isinstance(operand, int | float | Decimal):
            raise _literal_error(expr, "'-' applies to numbers only", at)
        return -operand
    if kind in ("binary", "cond", "index", "attr"):  # what comes before the operator first
        _constant(expr, cast(tuple[object, ...], rest[1] if kind == "binary" else rest[0]))
    op = {"cond": "?", "index": "[", "attr": "."}.get(str(kind), rest[0])
    raise _literal_error(expr, f"unexpected character {op!r}", at)


def _literal_string(expr: str, body: str, start: int) -> str:
    """A quoted string's text; ``$${`` and ``%%{`` stand for ``${`` and ``%{``."""
    from nomad_device.hclexpr import EscapeError, read_escape

    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            try:
                char, i = read_escape(body, i)
            except EscapeError as exc:
                raise _literal_error(expr, str(exc), start + i) from None
            out.append(char)
            continue
        if ch in "$%" and body[i + 1 : i + 2] == "{":
            raise _literal_error(
                expr, "template interpolation and directives are not allowed", start + i
            )
        if ch in "$%" and body[i + 1 : i + 3] == ch + "{":
            out.append(ch + "{")
            i += 3
            continue
        out.append(ch)
        i += 1
    return "".join(out)


# ----------------------------------------------------------------------- decode


def decode(spec: Spec, data: bytes) -> dict[str, object]:
    """Read ``SetConfig``'s msgpack against ``spec``, whose root must be an :class:`Object`.

    The bytes are decoded with :func:`implied_type` (raising
    :class:`~nomad_device.wire.cty.CtyDecodeError`), then shaped: every attribute of
    every object is present (missing ones as ``None``), an absent optional block is
    ``None``, absent block lists/sets are ``[]`` and absent block maps ``{}``, and a
    null ``Default``/``Literal`` takes its literal value. Empty ``data`` means nothing
    was sent, so the result holds only those fallbacks.
    """
    if not isinstance(spec, Object):
        raise ValueError(f"the root of a config spec must be an Object, not {type(spec).__name__}")
    value = cty.unmarshal(data, implied_type(spec)) if data else None
    return cast(dict[str, object], _shape(spec, value))


def _shape(spec: Spec, value: object) -> object:
    if isinstance(spec, Object):
        given = value if isinstance(value, dict) else {}
        return {key: _shape(sub, given.get(key)) for key, sub in spec.attributes.items()}
    if isinstance(spec, Array):
        items = value if isinstance(value, list) else []
        return [
            _shape(sub, items[i] if i < len(items) else None) for i, sub in enumerate(spec.values)
        ]
    if isinstance(spec, Block):
        return None if value is None else _shape(spec.nested, value)
    if isinstance(spec, BlockList | BlockSet):
        return [_shape(spec.nested, item) for item in cast(list[object], value or [])]
    if isinstance(spec, BlockMap):
        return _shape_map(spec.nested, value, len(spec.labels))
    if isinstance(spec, Default):
        if value is None:
            return _shape(spec.default, None)
        return _shape(spec.primary, value)
    if isinstance(spec, Literal):
        return parse_literal(spec.value) if value is None else value
    return value


def _shape_map(nested: Spec, value: object, depth: int) -> dict[str, object]:
    given = cast(dict[str, object], value) if isinstance(value, dict) else {}
    if depth == 1:
        return {key: _shape(nested, item) for key, item in given.items()}
    return {key: _shape_map(nested, item, depth - 1) for key, item in given.items()}
