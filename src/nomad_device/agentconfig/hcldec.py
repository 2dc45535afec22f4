"""Decode a plugin's ``config`` body against its schema the way a Nomad agent does.

A Nomad agent never hands the operator's HCL straight to ``hcldec``. It reads the
agent file with HCL 1 into plain Go maps and lists, writes that as JSON, parses the
JSON again with HCL 2's *JSON syntax*, and decodes that body with the spec it
built from the plugin's ``ConfigSchema``. The result is sent as cty msgpack
encoded with the value's own type. This module reproduces the last three steps:

- :class:`JValue` is the JSON document (objects keep their properties in order and
  remember where each came from, for error messages);
- :func:`compile_spec` turns our :mod:`~nomad_device.wire.hclspec` model into the
  hcldec spec Nomad builds (implied names, type expressions, literal defaults);
- :func:`decode` applies hcldec's JSON-body rules: unknown properties, required
  arguments, block unpacking (a JSON object is one block, an array is several),
  labels, ``Default``/``Literal`` fallbacks, and go-cty's type conversions with
  their error messages;
- :func:`encode` writes the decoded value with :func:`~nomad_device.wire.cty.marshal`.

Diagnostics keep HCL's summary and detail texts, which Nomad prints as
``summary: detail``. The front end that reads agent files and ``--config-json``
text is :mod:`nomad_device.agentconfig.agentfile`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final, TypeAlias

from nomad_device.agentconfig import hcltemplate
from nomad_device.agentconfig.ctyconvert import (
    TV,
    UNKNOWN,
    ConversionError,
    convert,
    go_quote,
    has_dynamic_part,
    unify,
)
from nomad_device.agentconfig.ctyfuncs import Unsupported, check_json
from nomad_device.hclexpr import MAX_DEPTH
from nomad_device.wire import cty, hclspec

__all__ = [
    "Decoded",
    "Diagnostic",
    "JProp",
    "JValue",
    "SchemaError",
    "Source",
    "compile_spec",
    "decode",
    "encode",
    "from_python",
    "name_suggestion",
]


# ---------------------------------------------------------------- documents


@dataclass(frozen=True)
class Source:
    """Where a piece of config came from: a line of a file, a key path, or both."""

    line: int | None = None
    column: int | None = None


@dataclass
class JProp:
    """One ``"name": value`` property of a JSON object."""

    name: str
    value: JValue
    where: Source = field(default_factory=Source)


@dataclass
class JValue:
    """A JSON value as HCL's JSON syntax sees it.

    ``kind`` is ``object`` (``value`` is a list of :class:`JProp`), ``array``
    (a list of :class:`JValue`), ``string``, ``number`` (an int, float or
    Decimal), ``bool`` or ``null``. ``from_hcl_object`` marks values the HCL 1
    reading turned from an object into a one-element list (for hints).
    """

    kind: str
    value: object
    where: Source = field(default_factory=Source)
    from_hcl_object: bool = False

    @property
    def props(self) -> list[JProp]:
        assert self.kind == "object"
        return self.value  # type: ignore[return-value]

    @property
    def items(self) -> list[JValue]:
        assert self.kind == "array"
        return self.value  # type: ignore[return-value]


def loads(text: str) -> object:
    """JSON text as :func:`from_python` takes it: fractions as Decimals, integers too
    long for Python's ``int()`` as Decimals, no ``NaN`` or ``Infinity``; ValueError
    when it is not JSON."""
    try:
        return json.loads(
            text, parse_float=Decimal, parse_int=_integer, parse_constant=_no_constant
        )
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None


def _integer(text: str) -> int | Decimal:
    return int(text) if len(text) < 4000 else Decimal(text)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def from_python(value: object, where: Source | None = None) -> JValue:
    """A :class:`JValue` for plain JSON-like Python data (``json.loads`` output).

    TypeError for what JSON cannot hold; ValueError past the decoder's limits
    (nesting deeper than :data:`~nomad_device.hclexpr.MAX_DEPTH`, a number's
    exponent past :data:`~nomad_device.agentconfig.ctyfuncs.MAX_EXPONENT`).
    """
    try:
        check_json(value)
    except Unsupported as exc:
        raise ValueError(str(exc)) from None
    return _from_python(value, where or Source())


def _from_python(value: object, at: Source) -> JValue:
    if value is None:
        return JValue("null", None, at)
    if isinstance(value, bool):
        return JValue("bool", value, at)
    if isinstance(value, int | float | Decimal):
        return JValue("number", value, at)
    if isinstance(value, str):
        return JValue("string", value, at)
    if isinstance(value, Mapping):
        return JValue(
            "object", [JProp(str(k), _from_python(v, at), at) for k, v in value.items()], at
        )
    if isinstance(value, list | tuple):
        return JValue("array", [_from_python(v, at) for v in value], at)
    raise TypeError(f"cannot use {type(value).__name__} as JSON config")


# -------------------------------------------------------------- diagnostics


Path: TypeAlias = tuple[str | int, ...]


@dataclass(frozen=True)
class Diagnostic:
    """An error in the config, worded as HCL words it (``summary: detail``)."""

    summary: str
    detail: str
    where: Source = field(default_factory=Source)
    path: Path = ()
    hint: str = ""

    def text(self) -> str:
        """Nomad's rendering: ``summary: detail``."""
        return f"{self.summary}: {self.detail}"

    def render(self, origin: str) -> str:
        """``origin:line: summary: detail`` (or the key path when there is no line)."""
        if self.where.line is not None:
            prefix = f"{origin}:{self.where.line}"
        else:
            shown = cty.format_path(self.path)
            prefix = f"{origin}: {shown}" if shown else origin
        message = f"{prefix}: {self.text()}"
        return f"{message}\n  hint: {self.hint}" if self.hint else message


class SchemaError(ValueError):
    """The plugin's ConfigSchema cannot be turned into a decoder (Nomad refuses it too)."""


# --------------------------------------------------------------- compiled spec


@dataclass(frozen=True)
class _Attr:
    name: str
    type: cty.CtyType
    required: bool


@dataclass(frozen=True)
class _Literal:
    value: object
    type: cty.CtyType


@dataclass(frozen=True)
class _Default:
    primary: Compiled
    default: Compiled


@dataclass(frozen=True)
class _Object:
    attrs: tuple[tuple[str, Compiled], ...]


@dataclass(frozen=True)
class _Tuple:
    elems: tuple[Compiled, ...]


@dataclass(frozen=True)
class _Block:
    name: str
    nested: Compiled
    required: bool


@dataclass(frozen=True)
class _BlockList:
    name: str
    nested: Compiled
    min_items: int
    max_items: int
    as_set: bool


@dataclass(frozen=True)
class _BlockMap:
    name: str
    labels: tuple[str, ...]
    nested: Compiled


@dataclass(frozen=True)
class _BlockAttrs:
    name: str
    elem: cty.CtyType
    required: bool


Compiled: TypeAlias = (
    _Attr | _Literal | _Default | _Object | _Tuple | _Block | _BlockList | _BlockMap | _BlockAttrs
)


def compile_spec(spec: hclspec.Spec) -> Compiled:
    """Build the decoder Nomad builds from a ConfigSchema; raise :class:`SchemaError`."""
    return _compile(spec, "")


def _compile(spec: hclspec.Spec, implied: str) -> Compiled:
    if isinstance(spec, hclspec.Object):
        return _Object(tuple((k, _compile(v, k)) for k, v in spec.attributes.items()))
    if isinstance(spec, hclspec.Array):
        return _Tuple(tuple(_compile(v, "") for v in spec.values))
    if isinstance(spec, hclspec.Attr | hclspec.BlockAttrs):
        is_attr = isinstance(spec, hclspec.Attr)
        name = spec.name or implied
        ty = _type(spec.type)
        if not name:
            raise SchemaError(f"Missing name in {'attribute' if is_attr else 'block_attrs'} spec")
        return (_Attr if is_attr else _BlockAttrs)(name, ty, spec.required)
    if isinstance(spec, hclspec.Block):
        return _Block(spec.name or implied, _compile(spec.nested, ""), spec.required)
    if isinstance(spec, hclspec.BlockList | hclspec.BlockSet):
        kind = "block_set" if isinstance(spec, hclspec.BlockSet) else "block_list"
        name = spec.name or implied
        nested = _compile(spec.nested, "")
        if not name:
            raise SchemaError(f"Missing name in {kind} spec")
        return _BlockList(
            name, nested, spec.min_items, spec.max_items, isinstance(spec, hclspec.BlockSet)
        )
    if isinstance(spec, hclspec.BlockMap):
        name = spec.name or implied
        nested = _compile(spec.nested, "")
        if not name:
            raise SchemaError("Missing name in block_map spec")
        return _BlockMap(name, tuple(spec.labels), nested)
    if isinstance(spec, hclspec.Literal):
        try:
            value = hclspec.parse_literal(spec.value)
        except ValueError as exc:
            raise SchemaError(str(exc)) from None
        return _Literal(value, cty.infer_type(value))
    if isinstance(spec, hclspec.Default):
        return _Default(_compile(spec.primary, ""), _compile(spec.default, ""))
    raise SchemaError(f"unsupported spec {spec!r}")


def _type(expr: str) -> cty.CtyType:
    try:
        return cty.parse_type(expr)
    except ValueError as exc:
        raise SchemaError(str(exc)) from None


def implied_type(spec: Compiled) -> cty.CtyType:
    """hcldec's implied type of a compiled spec."""
    if isinstance(spec, _Object):
        return cty.Object({k: implied_type(v) for k, v in spec.attrs})
    if isinstance(spec, _Tuple):
        return cty.Tuple([implied_type(v) for v in spec.elems])
    if isinstance(spec, _Attr):
        return spec.type
    if isinstance(spec, _Literal):
        return spec.type
    if isinstance(spec, _Default):
        return implied_type(spec.primary)
    if isinstance(spec, _Block):
        return implied_type(spec.nested)
    if isinstance(spec, _BlockList):
        elem = implied_type(spec.nested)
        return cty.Set(elem) if spec.as_set else cty.List(elem)
    if isinstance(spec, _BlockMap):
        ty = implied_type(spec.nested)
        for _ in spec.labels:
            ty = cty.Map(ty)
        return ty
    return cty.Map(spec.elem)


# ------------------------------------------------------------- body schema


@dataclass
class _Schema:
    attrs: list[tuple[str, bool]] = field(default_factory=list)
    blocks: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)


def _schema(spec: Compiled) -> _Schema:
    """The attributes and block types a spec reads from one body (ImpliedSchema)."""
    out = _Schema()

    def visit(s: Compiled) -> None:
        if isinstance(s, _Attr):
            out.attrs.append((s.name, s.required))
        elif isinstance(s, _Block | _BlockList | _BlockAttrs):
            out.blocks.append((s.name, ()))
        elif isinstance(s, _BlockMap):
            out.blocks.append((s.name, s.labels))
        elif isinstance(s, _Object):
            for _, child in s.attrs:
                visit(child)
        elif isinstance(s, _Tuple):
            for child in s.elems:
                visit(child)
        elif isinstance(s, _Default):
            visit(s.primary)
            visit(s.default)

    visit(spec)
    return out


@dataclass
class _BlockInst:
    type: str
    labels: tuple[str, ...]
    body: JValue
    where: Source
    path: Path


@dataclass
class _Content:
    attrs: dict[str, JProp]
    attr_paths: dict[str, Path]
    blocks: list[_BlockInst]
    where: Source
    path: Path


# ------------------------------------------------------------------ decoding


@dataclass(frozen=True)
class Panic:
    """Where, and why, a Nomad agent would panic decoding the config.

    ``message`` is go-cty's or hcldec's panic text; ``path`` is the block map
    (or block attributes) whose elements disagree; ``first``/``second`` are the
    two element keys and ``field`` the path, inside the element, where their
    types first differ (empty when the whole schema is at fault).
    """

    message: str
    path: Path = ()
    first: str = ""
    second: str = ""
    field: Path = ()
    types: tuple[cty.CtyType, cty.CtyType] | None = None
    #: The spec of the map's elements (a block map's nested spec, or the
    #: BlockAttrs spec), to explain the panic with.
    element: Compiled | None = None


class AgentPanic(Exception):
    """Raised inside the decoder: the agent process would die here."""

    def __init__(self, panic: Panic) -> None:
        super().__init__(panic.message)
        self.panic = panic


@dataclass(frozen=True)
class Decoded:
    """The decoded config: ``value`` of cty type ``type``.

    Valid when there are no ``diagnostics`` and no ``panic``; with a panic the
    agent would crash instead of printing the diagnostics.
    """

    value: object
    type: cty.CtyType
    diagnostics: tuple[Diagnostic, ...]
    panic: Panic | None = None

    @property
    def ok(self) -> bool:
        return not self.diagnostics and self.panic is None


def decode(spec: Compiled, body: JValue | None) -> Decoded:
    """Decode ``body`` (the ``config`` JSON object; None for no config) with ``spec``."""
    state = _Decoder()
    root = body if body is not None else JValue("object", [])
    try:
        value, ty = state.decode_body(root, spec, ())
    except AgentPanic as exc:
        return Decoded(None, cty.DYNAMIC, tuple(state.diags), exc.panic)
    return Decoded(value, ty, tuple(state.diags))


def encode(decoded: Decoded) -> bytes:
    """The cty msgpack Nomad sends to SetConfig for a successfully decoded config."""
    if not decoded.ok:
        raise ValueError("cannot encode a config that failed to decode")
    return cty.marshal(decoded.value, decoded.type)


def go_type(ty: cty.CtyType) -> str:
    """A cty type as Go's ``%#v`` prints it (in go-cty's panic messages)."""
    if ty is cty.DYNAMIC:
        return "cty.DynamicPseudoType"
    if isinstance(ty, cty.List | cty.Set | cty.Map):
        return f"cty.{type(ty).__name__}({go_type(ty.elem)})"
    if isinstance(ty, cty.Object):
        if not ty.attrs:
            return "cty.EmptyObject"
        inner = ", ".join(f'"{k}":{go_type(v)}' for k, v in ty.attrs.items())
        return f"cty.Object(map[string]cty.Type{{{inner}}})"
    if isinstance(ty, cty.Tuple):
        if not ty.elems:
            return "cty.EmptyTuple"
        return f"cty.Tuple([]cty.Type{{{', '.join(go_type(e) for e in ty.elems)}}})"
    return "cty." + str(ty).capitalize()


def has_dynamic(ty: cty.CtyType) -> bool:
    """Whether ``any`` occurs anywhere in ``ty`` (cty's ``HasDynamicTypes``)."""
    return has_dynamic_part(ty)


def type_difference(
    a: cty.CtyType, b: cty.CtyType, path: Path = ()
) -> tuple[Path, cty.CtyType, cty.CtyType]:
    """The first place (attribute path) where ``a`` and ``b`` differ, and the two types there."""
    if isinstance(a, cty.Object) and isinstance(b, cty.Object) and set(a.attrs) == set(b.attrs):
        for name in a.attrs:
            if a.attrs[name] != b.attrs[name]:
                return type_difference(a.attrs[name], b.attrs[name], (*path, name))
    if (
        isinstance(a, cty.List | cty.Set | cty.Map)
        and isinstance(b, cty.List | cty.Set | cty.Map)
        and type(a) is type(b)
        and a.elem != b.elem
    ):
        return type_difference(a.elem, b.elem, path)
    return path, a, b


def _collection_panic(
    what: str,
    elems: Sequence[tuple[str, cty.CtyType]],
    path: Path,
    element: Compiled | None = None,
) -> None:
    """go-cty's check in ``MapVal``/``ListVal``: every element not ``any`` has one type."""
    first: tuple[str, cty.CtyType] | None = None
    for key, ty in elems:
        if ty is cty.DYNAMIC:
            continue
        if first is None:
            first = (key, ty)
        elif ty != first[1]:
            field, ta, tb = type_difference(first[1], ty)
            raise AgentPanic(
                Panic(
                    f"inconsistent {what} element types ({go_type(first[1])} then {go_type(ty)})",
                    path,
                    first[0],
                    key,
                    field,
                    (ta, tb),
                    element,
                )
            )


def _element_type(elems: Sequence[tuple[str, cty.CtyType]], fallback: cty.CtyType) -> cty.CtyType:
    for _, ty in elems:
        if ty is not cty.DYNAMIC:
            return ty
    return cty.DYNAMIC if elems else fallback


class _Decoder:
    def __init__(self) -> None:
        self.diags: list[Diagnostic] = []

    def error(self, summary: str, detail: str, where: Source, path: Path, hint: str = "") -> None:
        self.diags.append(Diagnostic(summary, detail, where, path, hint))

    # -- bodies ---------------------------------------------------------------

    def deep_props(self, body: JValue, path: Path, label: str | None) -> list[JProp]:
        """The properties of an object, or of every object in an array."""
        if body.kind == "null":
            return []
        if body.kind == "object":
            return list(body.props)
        if body.kind == "array":
            props: list[JProp] = []
            for item in body.items:
                if item.kind == "object":
                    props.extend(item.props)
                elif label is not None:
                    self.error(
                        "Incorrect JSON value type",
                        f"A JSON object is required here, to specify {label} labels for "
                        "this block.",
                        item.where,
                        path,
                    )
                else:
                    self.error(
                        "Incorrect JSON value type",
                        "A JSON object is required here, to define arguments and child blocks.",
                        item.where,
                        path,
                    )
            return props
        if label is not None:
            self.error(
                "Incorrect JSON value type",
                "Either a JSON object or JSON array of objects is required here, to specify "
                f"{label} labels for this block.",
                body.where,
                path,
            )
        else:
            self.error(
                "Incorrect JSON value type",
                "Either a JSON object or JSON array of objects is required here, to define "
                "arguments and child blocks.",
                body.where,
                path,
            )
        return []

    def content(self, body: JValue, schema: _Schema, path: Path) -> _Content:
        """hcl's ``Body.Content`` for a JSON body: sort properties into the schema."""
        props = self.deep_props(body, path, None)
        attr_names = {name for name, _ in schema.attrs}
        block_labels = dict(schema.blocks)
        out = _Content({}, {}, [], body.where, path)
        used: set[str] = set()
        for prop in props:
            if prop.name in attr_names:
                if prop.name in out.attrs:
                    first = out.attrs[prop.name].where
                    self.error(
                        "Duplicate argument",
                        f"The argument {go_quote(prop.name)} was already set at "
                        f"{_at(first, out.attr_paths[prop.name])}.",
                        prop.where,
                        (*path, prop.name),
                    )
                    continue
                out.attrs[prop.name] = prop
                out.attr_paths[prop.name] = (*path, prop.name)
                used.add(prop.name)
            elif prop.name in block_labels:
                self.unpack_block(
                    prop.value,
                    prop.name,
                    prop.where,
                    block_labels[prop.name],
                    (),
                    (*path, prop.name),
                    out.blocks,
                )
                used.add(prop.name)
        for name, required in schema.attrs:
            if required and name not in out.attrs:
                self.error(
                    "Missing required argument",
                    f"The argument {go_quote(name)} is required, but no definition was found.",
                    body.where,
                    path,
                )
        # hcl reads the body's properties a second time for this check, so a body of
        # the wrong JSON type is reported twice, as the agent reports it.
        self.deep_props(body, path, None)
        # hcl tries attribute names (unused ones) before block types; Go's map order
        # makes Nomad's choice between equally close names random, ours is sorted.
        suggestions = sorted(n for n, _ in schema.attrs if n not in used)
        suggestions += sorted(n for n, _ in schema.blocks)
        for prop in props:
            if prop.name == "//" or prop.name in used:
                continue
            near = name_suggestion(prop.name, suggestions)
            extra = f" Did you mean {go_quote(near)}?" if near else ""
            # Nomad rewrites this summary ("Extraneous JSON object property") to
            # "Invalid label" before showing it; we show what the operator sees.
            self.error(
                "Invalid label",
                f"No argument or block type is named {go_quote(prop.name)}.{extra}",
                prop.where,
                (*path, prop.name),
            )
        return out

    def unpack_block(
        self,
        value: JValue,
        type_name: str,
        where: Source,
        labels_left: tuple[str, ...],
        labels: tuple[str, ...],
        path: Path,
        into: list[_BlockInst],
    ) -> None:
        if labels_left:
            props = self.deep_props(value, path, labels_left[0])
            if not props:
                if value.kind in ("object", "array", "null"):
                    self.error(
                        "Missing block label",
                        "At least one object property is required, whose name represents "
                        f"the {type_name} block's {labels_left[0]}.",
                        value.where,
                        path,
                    )
                return
            for prop in props:
                self.unpack_block(
                    prop.value,
                    type_name,
                    prop.where,
                    labels_left[1:],
                    (*labels, prop.name),
                    (*path, prop.name),
                    into,
                )
            return
        if value.kind == "null":
            return
        if value.kind == "object":
            into.append(_BlockInst(type_name, labels, value, value.where, path))
            return
        if value.kind == "array":
            many = len(value.items) > 1
            for i, item in enumerate(value.items):
                into.append(
                    _BlockInst(type_name, labels, item, item.where, (*path, i) if many else path)
                )
            return
        self.error(
            "Incorrect JSON value type",
            "Either a JSON object or a JSON array is required, representing the contents of "
            f"one or more {go_quote(type_name)} blocks.",
            value.where,
            path,
        )

    def decode_body(self, body: JValue, spec: Compiled, path: Path) -> TV:
        content = self.content(body, _schema(spec), path)
        return self.spec_value(spec, content)

    # -- specs ------------------------------------------------------------------

    def spec_value(self, spec: Compiled, content: _Content) -> TV:
        if isinstance(spec, _Object):
            values: dict[str, object] = {}
            types: dict[str, cty.CtyType] = {}
            for key, child in spec.attrs:
                values[key], types[key] = self.spec_value(child, content)
            return values, cty.Object(types)
        if isinstance(spec, _Tuple):
            pairs = [self.spec_value(child, content) for child in spec.elems]
            return [v for v, _ in pairs], cty.Tuple([t for _, t in pairs])
        if isinstance(spec, _Attr):
            return self.attr_value(spec, content)
        if isinstance(spec, _Literal):
            return spec.value, spec.type
        if isinstance(spec, _Default):
            value, ty = self.spec_value(spec.primary, content)
            if value is None:  # an unknown value (a failed attribute) is not null
                return self.spec_value(spec.default, content)
            return value, ty
        if isinstance(spec, _Block):
            return self.block_value(spec, content)
        if isinstance(spec, _BlockList):
            return self.block_list_value(spec, content)
        if isinstance(spec, _BlockMap):
            return self.block_map_value(spec, content)
        return self.block_attrs_value(spec, content)

    def attr_value(self, spec: _Attr, content: _Content) -> TV:
        prop = content.attrs.get(spec.name)
        if prop is None:
            return None, spec.type
        path = content.attr_paths[spec.name]
        given = self.expr_value(prop.value, path)
        try:
            return convert(given[0], given[1], spec.type)
        except ConversionError as exc:
            hint = ""
            if prop.value.from_hcl_object and isinstance(spec.type, cty.Map | cty.Object):
                hint = (
                    f"Nomad's agent configuration reads both `{spec.name} {{ ... }}` and "
                    f"`{spec.name} = {{ ... }}` as a list holding one object, so an attribute "
                    "of this type cannot be set from an agent file; the plugin needs a block "
                    "in its schema"
                )
            self.error(
                "Incorrect attribute value type",
                f"Inappropriate value for attribute {go_quote(spec.name)}: {exc}.",
                prop.value.where,
                path,
                hint,
            )
            return UNKNOWN, spec.type

    def find_blocks(self, name: str, content: _Content) -> list[_BlockInst]:
        return [b for b in content.blocks if b.type == name]

    def block_value(self, spec: _Block, content: _Content) -> TV:
        blocks = self.find_blocks(spec.name, content)
        if len(blocks) > 1:
            self.duplicate_block(spec.name, blocks)
        if not blocks:
            if spec.required:
                self.missing_block(spec.name, content)
            return None, implied_type(spec.nested)
        first = blocks[0]
        return self.decode_body(first.body, spec.nested, first.path)

    def duplicate_block(self, name: str, blocks: list[_BlockInst]) -> None:
        self.error(
            f"Duplicate {name} block",
            f"Only one block of type {go_quote(name)} is allowed. Previous definition was "
            f"at {_at(blocks[0].where, blocks[0].path)}.",
            blocks[1].where,
            blocks[1].path,
        )

    def missing_block(self, name: str, content: _Content) -> None:
        self.error(
            f"Missing {name} block",
            f"A block of type {go_quote(name)} is required here.",
            content.where,
            content.path,
        )

    def block_list_value(self, spec: _BlockList, content: _Content) -> TV:
        blocks = self.find_blocks(spec.name, content)
        elems = [self.decode_body(b.body, spec.nested, b.path) for b in blocks]
        if len(elems) < spec.min_items:
            self.error(
                f"Insufficient {spec.name} blocks",
                f"At least {spec.min_items} {go_quote(spec.name)} blocks are required.",
                content.where,
                content.path,
            )
        elif spec.max_items > 0 and len(elems) > spec.max_items:
            extra = blocks[spec.max_items]
            self.error(
                f"Too many {spec.name} blocks",
                f"No more than {spec.max_items} {go_quote(spec.name)} blocks are allowed",
                extra.where,
                extra.path,
            )
        kind = cty.Set if spec.as_set else cty.List
        if not elems:
            return [], kind(implied_type(spec.nested))
        unified = unify([t for _, t in elems])
        if unified is None:
            self.error(
                f"Unconsistent argument types in {spec.name} blocks",
                "Corresponding attributes in all blocks of this type must be the same.",
                blocks[0].where,
                blocks[0].path,
            )
            return UNKNOWN, cty.DYNAMIC
        values: list[object] = []
        for i, (value, ty) in enumerate(elems):
            try:
                values.append(convert(value, ty, unified)[0])
            except ConversionError as exc:
                self.error(
                    f"Unconsistent argument types in {spec.name} blocks",
                    f"Block with index {i} has inconsistent argument types: {exc}.",
                    blocks[i].where,
                    blocks[i].path,
                )
                return UNKNOWN, cty.DYNAMIC
        return values, kind(unified)

    def block_map_value(self, spec: _BlockMap, content: _Content) -> TV:
        implied = implied_type(spec)
        if has_dynamic_part(implied):
            raise AgentPanic(
                Panic(
                    "cty.DynamicPseudoType attributes may not be used inside a BlockMapSpec",
                    (*content.path, spec.name),
                )
            )
        blocks = self.find_blocks(spec.name, content)
        root: dict[str, object] = {}
        for block in blocks:
            decoded = self.decode_body(block.body, spec.nested, block.path)
            target = root
            for label in block.labels[:-1]:
                nxt = target.setdefault(label, {})
                assert isinstance(nxt, dict)
                target = nxt
            key = block.labels[-1]
            if key in target:
                shown = "".join(f" {go_quote(label)}" for label in block.labels)
                self.error(
                    f"Duplicate {spec.name} block",
                    f"A block for {spec.name}{shown} was already defined. The {spec.name} "
                    "labels must be unique.",
                    block.where,
                    block.path,
                )
                continue
            target[key] = decoded
        if not root:
            return {}, cty.Map(implied_type(spec.nested))
        return self.map_levels(root, len(spec.labels), (*content.path, spec.name), spec.nested)

    def map_levels(
        self,
        raw: dict[str, object],
        depth: int,
        path: Path,
        element: Compiled,
        outer: tuple[str, ...] = (),
    ) -> TV:
        """cty.MapVal at each label level, with its check that element types agree.

        A panic names the elements by all their labels (``kvm``, or ``a" "b`` for
        two labels, as they are written between quotes).
        """
        pairs: list[tuple[str, TV]] = []
        for key, item in raw.items():
            labels = (*outer, key)
            if depth == 1:
                pairs.append(('" "'.join(labels), item))  # type: ignore[arg-type]
            else:
                inner = self.map_levels(item, depth - 1, path, element, labels)  # type: ignore[arg-type]
                pairs.append(('" "'.join(labels), inner))
        types = [(k, t) for k, (_, t) in pairs]
        _collection_panic("map", types, path, element if depth == 1 else None)
        values = {k.rsplit('" "', 1)[-1]: v for k, (v, _) in pairs}
        return values, cty.Map(_element_type(types, cty.DYNAMIC))

    def block_attrs_value(self, spec: _BlockAttrs, content: _Content) -> TV:
        blocks = self.find_blocks(spec.name, content)
        if not blocks:
            if spec.required:
                self.missing_block(spec.name, content)
            return None, cty.Map(spec.elem)
        if len(blocks) > 1:
            self.duplicate_block(spec.name, blocks)
        block = blocks[0]
        if block.body.kind != "object":
            self.error(
                "Incorrect JSON value type",
                "A JSON object is required here, setting the arguments for this block.",
                block.where,
                block.path,
            )
            return UNKNOWN, cty.Map(spec.elem)
        values: dict[str, object] = {}
        types: list[tuple[str, cty.CtyType]] = []
        for prop in block.body.props:
            if prop.name == "//":
                continue
            path = (*block.path, prop.name)
            if prop.name in values:
                self.error(
                    "Duplicate attribute definition",
                    f"The argument {go_quote(prop.name)} was already set.",
                    prop.where,
                    path,
                )
                continue
            given = self.expr_value(prop.value, path)
            try:
                value, ty = convert(given[0], given[1], spec.elem)
            except ConversionError as exc:
                self.error(
                    "Invalid attribute value",
                    f"Invalid value for attribute of {go_quote(spec.name)} block: {exc}.",
                    prop.value.where,
                    path,
                )
                value, ty = UNKNOWN, spec.elem
            values[prop.name] = value
            types.append((prop.name, ty))
        if not values:
            return {}, cty.Map(spec.elem)
        _collection_panic("map", types, block.path, spec)
        return values, cty.Map(_element_type(types, spec.elem))

    # -- expressions --------------------------------------------------------------

    def expr_value(self, value: JValue, path: Path) -> TV:
        """A JSON value as an HCL expression; strings are templates.

        A part that fails (a template the agent refuses) is :data:`UNKNOWN`, with
        the type the agent gives it: ``string`` for a template with text around
        its interpolation, ``any`` for a lone interpolation or an object whose
        keys could not be evaluated.
        """
        if value.kind == "string":
            raw = str(value.value)
            got = self.template(raw, value.where, path)
            if got is None:
                parts = _template_parts(raw) or []
                alone = len(parts) == 1 and parts[0][0] == "interp"
                return UNKNOWN, cty.DYNAMIC if alone else cty.STRING
            return got
        if value.kind == "number":
            return value.value, cty.NUMBER
        if value.kind == "bool":
            return value.value, cty.BOOL
        if value.kind == "null":
            return None, cty.DYNAMIC
        if value.kind == "array":
            pairs = [self.expr_value(item, (*path, i)) for i, item in enumerate(value.items)]
            return [v for v, _ in pairs], cty.Tuple([t for _, t in pairs])
        obj: dict[str, object] = {}
        attr_types: dict[str, cty.CtyType] = {}
        known = True
        for prop in value.props:
            key = self.template_key(prop.name, prop.where, (*path, prop.name))
            got = self.expr_value(prop.value, (*path, prop.name))
            if key is None:
                known = False
                continue
            if key in obj:
                self.error(
                    "Duplicate object attribute",
                    f"An attribute named {go_quote(key)} was already defined.",
                    prop.where,
                    (*path, key),
                )
                continue
            obj[key] = got[0]
            attr_types[key] = got[1]
        return (obj, cty.Object(attr_types)) if known else (UNKNOWN, cty.DYNAMIC)

    def template(self, text: str, where: Source, path: Path) -> TV | None:
        """Evaluate a JSON string as Nomad does: a template, with functions but no variables.

        Literal text comes back as a string (``$${`` and ``%%{`` stand for ``${``
        and ``%{``); a lone interpolation gives its value, of any type. A variable
        gets the agent's own diagnostic (``Variables not allowed``), as does a
        failing function call; what the launcher cannot evaluate exactly (see
        :mod:`nomad_device.agentconfig.hcltemplate`) is refused and says why. None
        after an error, or an unknown value of any type where the agent could not
        parse the template.
        """
        parts = _template_parts(text)
        if parts is None:
            self.error(
                "Unsupported template",
                f"The string {go_quote(text)} holds an unterminated template sequence. Write "
                '"$${" for a literal "${" and "%%{" for a literal "%{".',
                where,
                path,
            )
            return UNKNOWN, cty.DYNAMIC  # what HCL makes of a template it cannot parse
        if all(kind == "text" for kind, _ in parts):
            return "".join(p for _, p in parts), cty.STRING
        variables = [name for kind, expr in parts if kind != "text" for name in _variables(expr)]
        for name in variables:
            self.error(
                "Variables not allowed",
                "Variables may not be used here.",
                where,
                path,
                f"a Nomad agent interpolates nothing in plugin config ({name!r} is a "
                'variable); write the value itself, or "$${" for a literal "${"',
            )
        if variables:
            return None
        try:
            return hcltemplate.evaluate(parts)
        except hcltemplate.EvalErrors as exc:
            for error in exc.errors:
                self.error(error.summary, error.detail, where, path)
            return exc.value
        except hcltemplate.EvalError as exc:  # raised while parsing (an escape)
            self.error(exc.summary, exc.detail, where, path)
        except hcltemplate.Unsupported as exc:
            self.error(
                "Unsupported template",
                f"The string {go_quote(text)} holds a template the launcher cannot evaluate "
                f"exactly as a Nomad agent would: {exc}. Write the resulting value instead, "
                'or "$${" for a literal "${".',
                where,
                path,
            )
            if isinstance(exc, hcltemplate.Unparsable):
                return UNKNOWN, cty.DYNAMIC
        return None

    def template_key(self, text: str, where: Source, path: Path) -> str | None:
        """An object key: a template whose value must convert to a string."""
        got = self.template(text, where, path)
        if got is None or got[0] is UNKNOWN:
            return None
        if got[0] is None:
            problem = "Cannot use null value as an object key."
        else:
            try:
                return str(convert(got[0], got[1], cty.STRING)[0])
            except ConversionError as exc:
                problem = f"Cannot use this expression as an object key: {exc}."
        self.error("Invalid object key expression", problem, where, path)
        return None


def _template_parts(text: str) -> list[tuple[str, str]] | None:
    """Split a template into ("text", s) and ("interp"|"directive", expr) parts.

    None when a sequence is never closed.
    """
    parts: list[tuple[str, str]] = []
    buf: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "$%" and text.startswith(ch + ch + "{", i):
            buf.append(ch + "{")
            i += 3
            continue
        if ch in "$%" and text.startswith(ch + "{", i):
            end = _sequence_end(text, i + 2)
            if end is None:
                return None
            if buf:
                parts.append(("text", "".join(buf)))
                buf = []
            inner = text[i + 2 : end].strip()
            inner = inner.removeprefix("~").removesuffix("~").strip()
            parts.append(("interp" if ch == "$" else "directive", inner))
            i = end + 1
            continue
        buf.append(ch)
        i += 1
    if buf:
        parts.append(("text", "".join(buf)))
    return parts


def _sequence_end(text: str, i: int) -> int | None:
    """The index of the ``}`` closing a template sequence whose body starts at ``i``."""
    depth = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch in "{[(":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "}":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return None


_WORD: Final = re.compile(
    r'"(?:[^"\\]|\\.)*"|([A-Za-z_][A-Za-z0-9_-]*)(\s*\()?|\.[A-Za-z_][A-Za-z0-9_-]*'
)
_KEYWORDS: Final = frozenset(
    {"true", "false", "null", "for", "in", "if", "else", "endif", "endfor"}
)


_KEY_AFTER: Final = re.compile(r"\s*(?:=(?!=)|:)")
_FOR: Final = re.compile(r"[\[{]\s*for\s")


def _variables(expr: str) -> list[str]:
    """The variable references (root names of traversals) in an HCL expression's text.

    None in a ``for`` expression: its names are its own, and the evaluator
    refuses the whole expression anyway.
    """
    if _FOR.search(expr):
        return []
    out = []
    for m in _WORD.finditer(expr):
        name, call = m.group(1), m.group(2)
        if name is None or call or name in _KEYWORDS:
            continue
        before = expr[: m.start()].rstrip()
        if before.endswith(".") or (before and before[-1].isdigit()):
            continue
        opens_item = expr[: m.start()].rstrip(" \t").endswith(("{", ",", "\n"))
        if opens_item and _KEY_AFTER.match(expr, m.end()):
            continue  # an object key ({a = 1}): a name, not a variable
        out.append(name)
    return out


# ------------------------------------------------------------------- helpers


def _at(where: Source, path: Path) -> str:
    if where.line is not None:
        return f"line {where.line}"
    return cty.format_path(path) or "the top level"


def _levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def name_suggestion(given: str, names: Iterable[str]) -> str:
    """hcl's ``nameSuggestion``: the first name within edit distance 2."""
    for name in names:
        if _levenshtein(given, name) < 3:
            return name
    return ""
