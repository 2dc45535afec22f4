"""go-cty's conversions and unification, for values decoded from config.

What a Nomad agent does to a config value between decoding it and sending it:
``convert.Convert`` to the spec's type, ``unify`` for collections of blocks,
and go-cty's words when either fails. Shared by the decoder (``hcldec``) and
the template evaluator (``hcltemplate``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Final, TypeAlias

from nomad_device.golang import quote as go_quote
from nomad_device.wire import cty

__all__ = [
    "TV",
    "UNKNOWN",
    "ConversionError",
    "convert",
    "convertible",
    "friendly",
    "go_quote",
    "has_dynamic_part",
    "mismatch",
    "number_text",
    "unify",
]

TV: TypeAlias = tuple[object, cty.CtyType]
"""A decoded value with its cty type (the type Nomad marshals it with)."""


class _Unknown:
    """cty's unknown value: what hcldec puts where a part failed to decode."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = _Unknown()


class ConversionError(ValueError):
    """go-cty could not convert a value; the text is go-cty's message."""


def friendly(ty: cty.CtyType, constraint: bool = False) -> str:
    """go-cty's ``FriendlyName`` (or ``FriendlyNameForConstraint``)."""
    if ty is cty.DYNAMIC:
        return "any type" if constraint else "dynamic"
    if isinstance(ty, cty.List | cty.Set | cty.Map):
        kind = {cty.List: "list", cty.Set: "set", cty.Map: "map"}[type(ty)]
        if constraint and ty.elem is cty.DYNAMIC:
            return f"{kind} of any single type"
        return f"{kind} of {friendly(ty.elem, constraint)}"
    if isinstance(ty, cty.Object):
        return "object"
    if isinstance(ty, cty.Tuple):
        return "tuple"
    return str(ty)


def _is_primitive(ty: cty.CtyType) -> bool:
    return ty in (cty.STRING, cty.NUMBER, cty.BOOL)


def has_dynamic_part(ty: cty.CtyType) -> bool:
    if ty is cty.DYNAMIC:
        return True
    if isinstance(ty, cty.List | cty.Set | cty.Map):
        return has_dynamic_part(ty.elem)
    if isinstance(ty, cty.Object):
        return any(has_dynamic_part(t) for t in ty.attrs.values())
    if isinstance(ty, cty.Tuple):
        return any(has_dynamic_part(t) for t in ty.elems)
    return False


def convertible(src: cty.CtyType, dst: cty.CtyType) -> bool:
    """Whether go-cty has an (unsafe) conversion from ``src`` to ``dst``."""
    if src == dst or dst is cty.DYNAMIC or src is cty.DYNAMIC:
        return True
    if _is_primitive(src) and _is_primitive(dst):
        return cty.BOOL not in (src, dst) or cty.NUMBER not in (src, dst)
    if isinstance(dst, cty.Object) and isinstance(src, cty.Object):
        return all(
            name in src.attrs and convertible(src.attrs[name], aty)
            for name, aty in dst.attrs.items()
        )
    if isinstance(dst, cty.Tuple) and isinstance(src, cty.Tuple):
        return len(src.elems) == len(dst.elems) and all(
            convertible(s, d) for s, d in zip(src.elems, dst.elems, strict=True)
        )
    if isinstance(dst, cty.List | cty.Set) and isinstance(src, cty.List | cty.Set):
        return convertible(src.elem, dst.elem)
    if isinstance(dst, cty.Map) and isinstance(src, cty.Map):
        return convertible(src.elem, dst.elem)
    if isinstance(dst, cty.List | cty.Set) and isinstance(src, cty.Tuple):
        return _elements_convertible(list(src.elems), dst.elem)
    if isinstance(dst, cty.Map) and isinstance(src, cty.Object):
        return _elements_convertible(list(src.attrs.values()), dst.elem)
    if isinstance(dst, cty.Object) and isinstance(src, cty.Map):
        return all(convertible(src.elem, aty) for aty in dst.attrs.values())
    return False


def _elements_convertible(types: list[cty.CtyType], elem: cty.CtyType) -> bool:
    if not types:
        return True
    if elem is cty.DYNAMIC:
        unified = unify(types)
        if unified is None:
            return False
        if unified is cty.DYNAMIC:
            return all(t is cty.DYNAMIC for t in types)
        elem = unified
    return all(convertible(t, elem) for t in types)


_PRIMITIVE_PREFERENCE: Final = (cty.STRING, cty.NUMBER, cty.BOOL)


def unify(types: Sequence[cty.CtyType]) -> cty.CtyType | None:
    """A single type all ``types`` convert to (go-cty's ``unify``, for config values)."""
    concrete = [t for t in types if t is not cty.DYNAMIC]
    if not concrete:
        return cty.DYNAMIC
    first = concrete[0]
    if all(t == first for t in concrete):
        return first
    if all(isinstance(t, cty.Object) for t in concrete):
        objects = [t for t in concrete if isinstance(t, cty.Object)]
        names = set(objects[0].attrs)
        if any(set(o.attrs) != names for o in objects):
            return None
        attrs: dict[str, cty.CtyType] = {}
        for name in names:
            sub = unify([o.attrs[name] for o in objects])
            if sub is None:
                return None
            attrs[name] = sub
        return cty.Object(attrs)
    if all(isinstance(t, cty.List | cty.Tuple) for t in concrete) and any(
        isinstance(t, cty.List) for t in concrete
    ):
        # Tuples are lists in disguise (a literal default []): unify every element.
        elem_types = [
            e
            for t in concrete
            for e in (t.elems if isinstance(t, cty.Tuple) else (t.elem,))  # type: ignore[attr-defined]
        ]
        sub = unify(elem_types)
        return None if sub is None else cty.List(sub)
    collections = [t for t in concrete if isinstance(t, cty.List | cty.Set | cty.Map)]
    if len(collections) == len(concrete) and all(type(t) is type(first) for t in concrete):
        sub = unify([t.elem for t in collections])
        if sub is None:
            return None
        return (
            cty.List(sub)
            if isinstance(first, cty.List)
            else (cty.Set(sub) if isinstance(first, cty.Set) else cty.Map(sub))
        )
    if all(isinstance(t, cty.Tuple) for t in concrete):
        tuples = [t for t in concrete if isinstance(t, cty.Tuple)]
        size = len(tuples[0].elems)
        if any(len(t.elems) != size for t in tuples):
            return None
        elems: list[cty.CtyType] = []
        for i in range(size):
            sub = unify([t.elems[i] for t in tuples])
            if sub is None:
                return None
            elems.append(sub)
        return cty.Tuple(elems)
    for want in _PRIMITIVE_PREFERENCE:
        if want in concrete and all(convertible(t, want) for t in concrete):
            return want
    return None


def mismatch(got: cty.CtyType, want: cty.CtyType) -> str:
    """go-cty's ``MismatchMessage``: why ``got`` does not convert to ``want``."""
    if isinstance(got, cty.Object) and isinstance(want, cty.Object):
        missing = sorted(n for n in want.attrs if n not in got.attrs)
        if missing:
            quoted = [go_quote(n) for n in missing]
            if len(quoted) == 1:
                return f"attribute {quoted[0]} is required"
            if len(quoted) == 2:
                return f"attributes {quoted[0]} and {quoted[1]} are required"
            return f"attributes {', '.join(quoted[:-1])}, and {quoted[-1]} are required"
        for name, wty in want.attrs.items():
            gty = got.attrs[name]
            if gty != wty and not convertible(gty, wty):
                return f"attribute {go_quote(name)}: {mismatch(gty, wty)}"
        return "incorrect object attributes"
    collection = isinstance(want, cty.List | cty.Set | cty.Map)
    if isinstance(got, cty.Tuple) and isinstance(want, cty.List) and want.elem is cty.DYNAMIC:
        return "all list elements must have the same type"
    if isinstance(got, cty.Tuple) and isinstance(want, cty.Set) and want.elem is cty.DYNAMIC:
        return "all set elements must have the same type"
    if isinstance(got, cty.Object) and isinstance(want, cty.Map) and want.elem is cty.DYNAMIC:
        return "all map elements must have the same type"
    if isinstance(got, cty.Tuple | cty.Object) and isinstance(want, cty.List | cty.Set | cty.Map):
        if isinstance(want, cty.List | cty.Set) and not isinstance(got, cty.Tuple):
            return friendly(want, True) + " required"
        if isinstance(want, cty.Map) and not isinstance(got, cty.Object):
            return friendly(want, True) + " required"
        if isinstance(got, cty.Tuple):
            for i, ety in enumerate(got.elems):
                if ety != want.elem and not convertible(ety, want.elem):
                    return f"element {i}: {mismatch(ety, want.elem)}"
        elif isinstance(got, cty.Object):
            for name, aty in got.attrs.items():
                if aty != want.elem and not convertible(aty, want.elem):
                    return f"element {go_quote(name)}: {mismatch(aty, want.elem)}"
        return f"all elements must be {friendly(want.elem, True)}"
    if collection and isinstance(got, cty.List | cty.Set | cty.Map):
        return friendly(want, True) + " required"
    if not _likely_confusing(got, want):
        return f"{friendly(want)} required, but have {friendly(got)}"
    return friendly(want, True) + " required"


def _likely_confusing(got: cty.CtyType, want: cty.CtyType) -> bool:
    if _is_primitive(got) != _is_primitive(want):
        return False
    if want is cty.STRING:
        return False
    if {got, want} == {cty.BOOL, cty.NUMBER}:
        return False
    return not (isinstance(got, cty.Tuple) and isinstance(want, cty.Object))


_NUMBER_TEXT: Final = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z")


def number_text(value: object) -> str:
    """go's ``big.Float.Text('f', -1)`` for a config number (no exponent, no trailing 0s)."""
    if isinstance(value, bool):
        raise TypeError("bool is not a number")
    if isinstance(value, int):
        return str(value)
    number = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value))
    return format(number.normalize(), "f")  # "-0" stays "-0", as in Go


def convert(value: object, src: cty.CtyType, dst: cty.CtyType) -> TV:
    """Convert like ``convert.Convert``; raise :class:`ConversionError` with go-cty's words."""
    if src == dst or dst is cty.DYNAMIC:
        return value, src
    if value is None:
        return None, dst
    if not convertible(src, dst):
        raise ConversionError(mismatch(src, dst))
    if value is UNKNOWN:
        return UNKNOWN, dst
    if _is_primitive(dst):
        return _convert_primitive(value, src, dst), dst
    if isinstance(dst, cty.Object):
        if not isinstance(value, Mapping):
            raise ConversionError(mismatch(src, dst))
        given = dict(value)
        out: dict[str, object] = {}
        types: dict[str, cty.CtyType] = {}
        for name, aty in dst.attrs.items():
            if name not in given:
                raise ConversionError(f"map has no element for required attribute {go_quote(name)}")
            sty = src.attrs[name] if isinstance(src, cty.Object) else _elem(src)
            out[name], types[name] = convert(given[name], sty, aty)
        return out, cty.Object(types)
    if isinstance(dst, cty.Tuple):
        assert isinstance(src, cty.Tuple) and isinstance(value, list)
        pairs = [convert(v, s, d) for v, s, d in zip(value, src.elems, dst.elems, strict=True)]
        return [v for v, _ in pairs], cty.Tuple([t for _, t in pairs])
    assert isinstance(dst, cty.List | cty.Set | cty.Map)
    kind = type(dst)
    noun = {cty.List: "list", cty.Set: "set", cty.Map: "map"}[kind]
    if isinstance(dst, cty.Map):
        if not isinstance(value, Mapping):
            raise ConversionError(mismatch(src, dst))
        keyed = [(str(k), v, _member(src, str(k))) for k, v in value.items()]
    else:
        if not isinstance(value, list | tuple):
            raise ConversionError(mismatch(src, dst))
        keyed = [(str(i), v, _member(src, i)) for i, v in enumerate(value)]
    elem = dst.elem
    if elem is cty.DYNAMIC:
        unified = unify([t for _, _, t in keyed])
        if unified is None:
            raise ConversionError(mismatch(src, dst))
        elem = unified
    converted = [(k, *convert(v, t, elem)) for k, v, t in keyed]
    actual = {t for _, v, t in converted if v is not None}
    if len(actual) > 1:
        what = "map" if noun == "map" else noun
        raise ConversionError(f"element types must all match for conversion to {what}")
    elem_out = actual.pop() if actual else elem
    if isinstance(dst, cty.Map):
        return {k: v for k, v, _ in converted}, cty.Map(elem_out)
    return [v for _, v, _ in converted], kind(elem_out)


def _elem(ty: cty.CtyType) -> cty.CtyType:
    return ty.elem if isinstance(ty, cty.List | cty.Set | cty.Map) else cty.DYNAMIC


def _member(ty: cty.CtyType, key: str | int) -> cty.CtyType:
    if isinstance(ty, cty.Tuple) and isinstance(key, int):
        return ty.elems[key]
    if isinstance(ty, cty.Object) and isinstance(key, str):
        return ty.attrs[key]
    return _elem(ty)


def _convert_primitive(value: object, src: cty.CtyType, dst: cty.CtyType) -> object:
    if dst is cty.STRING:
        if src is cty.NUMBER:
            return number_text(value)
        if src is cty.BOOL:
            return "true" if value else "false"
        return value
    text = str(value)
    if dst is cty.NUMBER:
        if not _NUMBER_TEXT.match(text):
            raise ConversionError("a number is required")
        try:
            number = Decimal(text)
            if number.is_zero() and number.is_signed():
                return -0.0  # "-0": go-cty keeps the sign (a template may still print it)
            return cty.normalize_number(number)
        except (InvalidOperation, ValueError):
            raise ConversionError("a number is required") from None
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    if text.lower() in ("true", "false"):
        raise ConversionError(
            f'a bool is required; to convert from string, use lowercase "{text.lower()}"'
        )
    raise ConversionError("a bool is required")
