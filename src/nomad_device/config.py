"""Typed plugin configuration: one dataclass is both the schema and the decoder.

A plugin author declares the ``config { ... }`` block as a dataclass::

    @dataclass
    class FsConfig:
        dir: str = "."
        list_period: timedelta = timedelta(seconds=5)
        devices: list[DeviceRule] = field(default_factory=list)

:func:`config_spec` turns it into the ``hclspec`` tree Nomad asks for (so Nomad
validates the operator's HCL and applies the defaults), and :func:`decode_config`
turns ``SetConfig``'s cty msgpack back into an instance, raising :class:`ConfigError`
with an operator-readable ``path: problem`` message when anything is off.

Field mapping:

- ``str``/``int``/``float``/``bool`` -> ``Attr`` of string/number/number/bool;
  ``list[T]``, ``set[T]``/``frozenset[T]``, ``dict[str, T]`` -> list/set/map types;
  ``datetime.timedelta`` -> a string attribute in Go's duration syntax (``"1m30s"``);
  ``typing.Any`` -> ``any``.
- a nested dataclass -> ``Block`` (required unless the field has a default or is
  ``X | None``); ``list[DC]`` -> ``BlockList``; ``dict[str, DC]`` -> ``BlockMap``
  with one label, ``name``.
- a default on a string, number or bool becomes ``Default(Attr(...), Literal(...))``,
  so Nomad shows and applies it. A default on a list, set, map or ``Any`` field
  is applied by the plugin instead (the attribute is optional, null when
  absent): an HCL literal such as ``[]`` is a *tuple*, not a list, and inside
  labelled or repeated blocks that difference makes a Nomad agent panic
  (``inconsistent map element types``) when one block sets the field and
  another does not. No default makes the attribute required; ``X | None``
  makes it optional (null when absent).
- ``Any`` (alone or inside a collection) is refused inside repeated blocks
  (``list[DC]``, ``dict[str, DC]``) and as the element of an ``hcl_block`` map:
  its values take the type of whatever was written, different per block, and
  a Nomad agent panics on that too.
- ``field(metadata={"hcl": "other_name"})`` renames the HCL key.
- ``field(metadata={"hcl_default": True})`` on a list, set or map field writes
  its default into the schema as a literal after all (``[13, 31]``), as Go
  plugins do: for a plugin whose schema must be a Go plugin's, node for node.
  Refused inside repeated blocks, where it would make an agent panic.
- ``field(metadata={"hcl_block": True})`` on a ``dict[str, T]`` field makes it a
  ``BlockAttrs``, written ``env { KEY = "value" }``. Use it for maps an operator
  sets in a Nomad agent file: the agent reads ``env = { ... }`` as a list holding
  one object, which no map attribute accepts.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import types
import typing
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final, TypeVar, cast

from nomad_device.wire import cty, hclspec

__all__ = ["ConfigError", "config_spec", "decode_config", "encode_config"]

T = TypeVar("T")

_HCL_NAME_KEY: Final = "hcl"
_HCL_BLOCK_KEY: Final = "hcl_block"
_HCL_DEFAULT_KEY: Final = "hcl_default"


class ConfigError(ValueError):
    """The config Nomad sent cannot become the plugin's config object.

    ``path`` locates the value (HCL names, list indexes, map keys) and ``problem``
    says what is wrong; ``str()`` reads ``devices[2].name: expected string, got bool``,
    or ``config: ...`` for problems with the whole document.
    """

    def __init__(self, path: cty.Path, problem: str) -> None:
        self.path: cty.Path = tuple(path)
        self.problem = problem
        super().__init__(f"{cty.format_path(self.path) or 'config'}: {problem}")


# ----------------------------------------------------------------- converters


class _Conv(abc.ABC):
    """Maps one Python annotation to a cty type and converts decoded values to it."""

    __slots__ = ()

    @abc.abstractmethod
    def type_expr(self) -> str: ...

    @abc.abstractmethod
    def decode(self, value: object, path: cty.Path) -> object: ...

    def to_plain(self, value: object) -> object:
        """Python value -> the plain value that HCL/cty holds (for defaults, encoding)."""
        return value


class _Plain(_Conv):
    """``string``, ``bool`` or ``any``: the decoded value is already the Python one."""

    __slots__ = ("expr",)

    def __init__(self, expr: str) -> None:
        self.expr = expr

    def type_expr(self) -> str:
        return self.expr

    def decode(self, value: object, path: cty.Path) -> object:
        return value


class _Int(_Conv):
    def type_expr(self) -> str:
        return "number"

    def decode(self, value: object, path: cty.Path) -> object:
        if isinstance(value, int):
            return value
        raise ConfigError(path, f"expected a whole number, got {_show_number(value)}")


class _Float(_Conv):
    def type_expr(self) -> str:
        return "number"

    def decode(self, value: object, path: cty.Path) -> object:
        try:
            result = float(cast(float, value))
        except OverflowError:
            result = math.inf
        if math.isinf(result) and not (isinstance(value, float) and math.isinf(value)):
            raise ConfigError(path, f"number {_show_number(value)} is too large for a float")
        return result


class _Duration(_Conv):
    def type_expr(self) -> str:
        return "string"

    def decode(self, value: object, path: cty.Path) -> object:
        from nomad_device.golang import GoDurationError, parse_duration_timedelta

        try:
            return parse_duration_timedelta(cast(str, value))
        except GoDurationError as exc:
            message = str(exc).removeprefix("time: ")
            raise ConfigError(path, message) from None

    def to_plain(self, value: object) -> object:
        from nomad_device.golang import format_duration

        delta = cast(timedelta, value)
        return format_duration((delta // timedelta(microseconds=1)) * 1000)


# The converters and plans below are plain classes, not dataclasses: config.py is
# imported at every plugin's first SetConfig, and a dataclass costs ~0.7 ms to define.


class _Optional(_Conv):
    __slots__ = ("inner",)

    def __init__(self, inner: _Conv) -> None:
        self.inner = inner

    def type_expr(self) -> str:
        return self.inner.type_expr()

    def decode(self, value: object, path: cty.Path) -> object:
        return None if value is None else self.inner.decode(value, path)

    def to_plain(self, value: object) -> object:
        return None if value is None else self.inner.to_plain(value)


def _element(conv: _Conv, value: object, path: cty.Path) -> object:
    if value is None and not isinstance(conv, _Optional):
        raise ConfigError(path, "null is not allowed here")
    return conv.decode(value, path)


class _ListOf(_Conv):
    __slots__ = ("inner",)

    def __init__(self, inner: _Conv) -> None:
        self.inner = inner

    def type_expr(self) -> str:
        return f"list({self.inner.type_expr()})"

    def decode(self, value: object, path: cty.Path) -> object:
        items = cast(list[object], value)
        return [_element(self.inner, item, (*path, i)) for i, item in enumerate(items)]

    def to_plain(self, value: object) -> object:
        return [self.inner.to_plain(v) for v in cast(list[object], value)]


class _SetOf(_Conv):
    __slots__ = ("frozen", "inner")

    def __init__(self, inner: _Conv, frozen: bool) -> None:
        self.inner = inner
        self.frozen = frozen

    def type_expr(self) -> str:
        return f"set({self.inner.type_expr()})"

    def decode(self, value: object, path: cty.Path) -> object:
        items = cast(list[object], value)
        decoded = [_element(self.inner, item, (*path, i)) for i, item in enumerate(items)]
        return frozenset(decoded) if self.frozen else set(decoded)

    def to_plain(self, value: object) -> object:
        plain = [self.inner.to_plain(v) for v in cast(set[object], value)]
        return sorted(plain, key=repr)


class _MapOf(_Conv):
    __slots__ = ("inner",)

    def __init__(self, inner: _Conv) -> None:
        self.inner = inner

    def type_expr(self) -> str:
        return f"map({self.inner.type_expr()})"

    def decode(self, value: object, path: cty.Path) -> object:
        items = cast(dict[str, object], value)
        return {k: _element(self.inner, v, (*path, k)) for k, v in items.items()}

    def to_plain(self, value: object) -> object:
        items = cast(dict[str, object], value)
        return {k: self.inner.to_plain(v) for k, v in items.items()}


def _show_number(value: object) -> str:
    """A number as an operator would write it, abbreviated when it is huge."""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, int) and abs(value) >= 10**21:
        from decimal import Decimal

        return f"{Decimal(value):.6g}"
    return str(value)


# --------------------------------------------------------------------- plans

_MISSING: Final = dataclasses.MISSING


class _Field:
    """How one dataclass field maps to the schema and back."""

    __slots__ = (
        "conv", "default", "hcl_name", "kind", "literal", "nested", "optional", "py_name",
    )  # fmt: skip

    def __init__(
        self,
        py_name: str,
        hcl_name: str,
        kind: str,  # "attr", "block_attrs", "block", "block_list" or "block_map"
        conv: _Conv | None,  # attributes only
        nested: type | None,  # blocks only
        optional: bool,
        default: Callable[[], object] | None,  # None when the field has no default
        literal: bool = False,  # metadata['hcl_default']: the default goes into the schema
    ) -> None:
        self.py_name = py_name
        self.hcl_name = hcl_name
        self.kind = kind
        self.conv = conv
        self.nested = nested
        self.optional = optional
        self.default = default
        self.literal = literal

    @property
    def required(self) -> bool:
        return self.default is None and not self.optional


class _Plan:
    __slots__ = ("cls", "fields", "spec")

    def __init__(self, cls: type, fields: tuple[_Field, ...], spec: hclspec.Object) -> None:
        self.cls = cls
        self.fields = fields
        self.spec = spec


def _is_dataclass_type(tp: object) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _split_optional(tp: object) -> tuple[object, bool]:
    """``X | None`` -> (X, True); anything else -> (tp, False)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _attr_conv(tp: object, where: str) -> _Conv:
    inner, optional = _split_optional(tp)
    if optional:
        return _Optional(_attr_conv(inner, where))
    if tp is str:
        return _Plain("string")
    if tp is bool:
        return _Plain("bool")
    if tp is int:
        return _Int()
    if tp is float:
        return _Float()
    if tp is timedelta:
        return _Duration()
    if tp is Any or tp is object:
        return _Plain("any")
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list and len(args) == 1:
        return _ListOf(_attr_conv(args[0], where))
    if origin in (set, frozenset) and len(args) == 1:
        return _SetOf(_attr_conv(args[0], where), origin is frozenset)
    if origin is dict and len(args) == 2 and args[0] is str:
        return _MapOf(_attr_conv(args[1], where))
    raise TypeError(f"{where}: unsupported config field type {tp!r}")


def _default_of(f: dataclasses.Field[Any]) -> Callable[[], object] | None:
    if f.default is not _MISSING:
        value = f.default
        return lambda: value
    if f.default_factory is not _MISSING:
        return cast(Callable[[], object], f.default_factory)
    return None


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    """The (cached) plan for ``cls``; building twice under a race is harmless."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _build_plan(cls, ())
    return plan


def _build_plan(cls: type, building: tuple[type, ...]) -> _Plan:
    if not _is_dataclass_type(cls):
        raise TypeError(f"config classes must be dataclasses, not {cls!r}")
    if cls in building:
        raise TypeError(f"config class {cls.__name__} contains itself")
    hints = typing.get_type_hints(cls)
    fields: list[_Field] = []
    seen: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        where = f"{cls.__name__}.{f.name}"
        hcl_name = f.metadata.get(_HCL_NAME_KEY, f.name)
        if not isinstance(hcl_name, str) or not hcl_name:
            raise TypeError(f"{where}: metadata['hcl'] must be a non-empty string")
        if hcl_name in seen:
            raise TypeError(f"{where}: HCL name {hcl_name!r} is also used by {seen[hcl_name]}")
        seen[hcl_name] = f.name
        fields.append(_build_field(f, hints[f.name], hcl_name, where, (*building, cls)))
    spec = hclspec.Object({fp.hcl_name: _field_spec(fp) for fp in fields})
    return _Plan(cls, tuple(fields), spec)


def _build_field(
    f: dataclasses.Field[Any], tp: object, hcl_name: str, where: str, building: tuple[type, ...]
) -> _Field:
    default = _default_of(f)
    inner, optional = _split_optional(tp)
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    nested: type | None = None
    kind = "attr"
    if _is_dataclass_type(inner):
        kind, nested = "block", cast(type, inner)
    elif origin is list and len(args) == 1 and _is_dataclass_type(args[0]):
        kind, nested = "block_list", cast(type, args[0])
    elif origin is dict and len(args) == 2 and args[0] is str and _is_dataclass_type(args[1]):
        kind, nested = "block_map", cast(type, args[1])
    if nested is not None:
        _build_plan(nested, building)  # validate eagerly, with recursion detection
        return _Field(f.name, hcl_name, kind, None, nested, optional, default)
    conv = _attr_conv(tp, where)
    if default is not None:
        try:
            hclspec.hcl_literal(conv.to_plain(default()))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{where}: default cannot be written in HCL: {exc}") from None
    if f.metadata.get(_HCL_BLOCK_KEY):
        if not isinstance(conv, _MapOf):
            raise TypeError(f"{where}: metadata['hcl_block'] needs a dict[str, T] field")
        return _Field(f.name, hcl_name, "block_attrs", conv, None, optional, default)
    literal = bool(f.metadata.get(_HCL_DEFAULT_KEY))
    if literal and default is None:
        raise TypeError(f"{where}: metadata['hcl_default'] needs a default")
    return _Field(f.name, hcl_name, "attr", conv, None, optional, default, literal)


def _literal_default_ok(conv: _Conv) -> bool:
    """Whether an HCL literal has exactly the attribute's type (strings, numbers, bools)."""
    inner = conv.inner if isinstance(conv, _Optional) else conv
    if isinstance(inner, _Plain):
        return inner.expr != "any"
    return isinstance(inner, _Int | _Float | _Duration)


def _has_any(conv: _Conv) -> bool:
    """Whether the type is ``any`` or holds it (``list(any)``, ``map(any)`` ...)."""
    if isinstance(conv, _Plain) and conv.expr == "any":
        return True
    inner = getattr(conv, "inner", None)
    return isinstance(inner, _Conv) and _has_any(inner)


def _field_spec(fp: _Field) -> hclspec.Spec:
    if fp.kind == "attr":
        conv = cast(_Conv, fp.conv)
        if fp.default is not None and (fp.literal or _literal_default_ok(conv)):
            value = fp.default()
            if value is not None:
                primary = hclspec.Attr(fp.hcl_name, conv.type_expr(), False)
                literal = hclspec.Literal(hclspec.hcl_literal(conv.to_plain(value)))
                return hclspec.Default(primary, literal)
        return hclspec.Attr(fp.hcl_name, conv.type_expr(), fp.required)
    if fp.kind == "block_attrs":
        inner = cast(_MapOf, fp.conv).inner
        if _has_any(inner):
            raise TypeError(
                f"{fp.py_name}: metadata['hcl_block'] on a map of Any: the values would take "
                "whatever type each was written with, and a Nomad agent panics building a map "
                "of mixed types; use a concrete element type such as str"
            )
        element = inner.type_expr()
        return hclspec.BlockAttrs(fp.hcl_name, element, fp.required)
    nested_plan = _plan(cast(type, fp.nested))
    nested_spec = nested_plan.spec
    if fp.kind in ("block_list", "block_map"):
        _refuse_any(nested_plan, fp.py_name)
    if fp.kind == "block":
        return hclspec.Block(fp.hcl_name, nested_spec, fp.required)
    if fp.kind == "block_list":
        return hclspec.BlockList(fp.hcl_name, nested_spec)
    return hclspec.BlockMap(fp.hcl_name, ("name",), nested_spec)


def _refuse_any(plan: _Plan, where: str) -> None:
    """Refuse ``Any`` anywhere inside a repeated block (see the module docstring)."""
    for fp in plan.fields:
        if fp.literal:
            raise TypeError(
                f"{plan.cls.__name__}.{fp.py_name}: metadata['hcl_default'] inside repeated "
                f"blocks ({where}): a literal [] or {{}} is a tuple or object to an agent, and "
                "one block setting the field while another does not makes it panic"
            )
        if fp.conv is not None and _has_any(fp.conv):
            raise TypeError(
                f"{plan.cls.__name__}.{fp.py_name}: Any inside repeated blocks ({where}): each "
                "block's value would keep the type it was written with, and a Nomad agent "
                "panics building one list or map of them; use a concrete type"
            )
        if fp.nested is not None:
            _refuse_any(_plan(fp.nested), where)


# ----------------------------------------------------------------- public API


def config_spec(cls: type) -> hclspec.Object:
    """The ``hclspec`` schema for config dataclass ``cls`` (what ``ConfigSchema`` returns).

    Raises :class:`TypeError` when a field's type or default has no HCL equivalent.
    """
    return _plan(cls).spec


def decode_config(cls: type[T], data: bytes) -> T:
    """Build a ``cls`` from ``SetConfig``'s msgpack; empty ``data`` means no config sent.

    Nomad has already validated the HCL and applied the defaults, but the bytes are
    checked again against the schema; with empty ``data`` every field takes its
    default. Raises :class:`ConfigError` naming the offending field.
    """
    plan = _plan(cls)
    value: object = None
    if data:
        try:
            value = cty.unmarshal(data, hclspec.implied_type(plan.spec))
        except cty.CtyDecodeError as exc:
            if exc.malformed:
                where = cty.format_path(exc.path)
                raise ConfigError((), exc.problem + (f" (at {where})" if where else "")) from None
            raise ConfigError(exc.path, exc.problem) from None
    return cast(T, _decode_object(plan, value, ()))


def _decode_object(plan: _Plan, value: object, path: cty.Path) -> object:
    given = cast(dict[str, object], value) if isinstance(value, dict) else {}
    kwargs = {fp.py_name: _decode_field(fp, given.get(fp.hcl_name), path) for fp in plan.fields}
    return plan.cls(**kwargs)


def _decode_field(fp: _Field, raw: object, parent: cty.Path) -> object:
    path = (*parent, fp.hcl_name)
    if raw is None:
        if fp.default is not None:
            return fp.default()
        if fp.optional:
            return None
        if fp.kind == "block_list":
            return []
        if fp.kind == "block_map":
            return {}
        noun = "attribute" if fp.kind == "attr" else "block"
        raise ConfigError(path, f"missing required {noun}")
    if fp.kind in ("attr", "block_attrs"):
        return cast(_Conv, fp.conv).decode(raw, path)
    nested = _plan(cast(type, fp.nested))
    if fp.kind == "block":
        return _decode_object(nested, raw, path)
    if fp.kind == "block_list":
        items = cast(list[object], raw)
        return [_decode_object(nested, item, (*path, i)) for i, item in enumerate(items)]
    entries = cast(dict[str, object], raw)
    return {key: _decode_object(nested, item, (*path, key)) for key, item in entries.items()}


def encode_config(config: object) -> bytes:
    """The msgpack Nomad would send to ``SetConfig`` for ``config`` (a config dataclass).

    That is, for an agent file that writes every setting whose value differs from
    its default: a list, set or map still at its default is left out, so it
    travels as null (the plugin applies the default), as it does from Nomad.
    Useful for tests and host-side tools that play Nomad's part.
    """
    plan = _plan(type(config))
    value = _plain_object(plan, config)
    ty = hclspec.implied_type(plan.spec)
    return cty.marshal(value, cty.concrete_type(value, ty))


def _plain_object(plan: _Plan, obj: object) -> dict[str, object]:
    out: dict[str, object] = {}
    for fp in plan.fields:
        value = getattr(obj, fp.py_name)
        if value is None:
            out[fp.hcl_name] = {"block_list": [], "block_map": {}}.get(fp.kind)
        elif fp.kind in ("attr", "block_attrs"):
            conv = cast(_Conv, fp.conv)
            unset = fp.default is not None and not _literal_default_ok(conv)
            if unset and value == fp.default():  # type: ignore[misc]
                out[fp.hcl_name] = None
            else:
                out[fp.hcl_name] = conv.to_plain(value)
        else:
            nested = _plan(cast(type, fp.nested))
            if fp.kind == "block":
                out[fp.hcl_name] = _plain_object(nested, value)
            elif fp.kind == "block_list":
                out[fp.hcl_name] = [_plain_object(nested, v) for v in value]
            else:
                out[fp.hcl_name] = {k: _plain_object(nested, v) for k, v in value.items()}
    return out
