"""The ``SetConfig`` bytes a Nomad agent would send for a given config block.

When the operator writes no ``config { }`` block, Nomad still decodes an empty
body against the plugin's schema: ``Default`` literals apply, absent attributes
and blocks are null, absent block lists and sets are empty, absent block maps
are empty maps. The decoded value is then encoded as cty msgpack *with the
value's own type* -- so an attribute whose schema type is ``any`` travels with
the concrete type of its default, never in cty's dynamic wrapper.

:func:`defaults_only_config` plays that part; :func:`config_from_json` does the
same for a config body given as JSON (the shape the agent holds after parsing
its HCL: blocks as objects or lists of objects). Both refuse, with
:class:`ConfigRequired`, when the schema insists on something the body lacks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, cast

from nomad_device.wire import cty, hclspec

__all__ = [
    "ConfigBodyError",
    "ConfigRequired",
    "config_from_json",
    "decode_body",
    "defaults_only_config",
    "required_settings",
]

Typed = tuple[object, cty.CtyType]


class ConfigBodyError(ValueError):
    """The config body does not fit the schema (unknown key, wrong shape)."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


class ConfigRequired(ConfigBodyError):
    """The schema requires settings that have no default and were not given."""


def defaults_only_config(spec: hclspec.Spec) -> bytes:
    """What Nomad sends to ``SetConfig`` when the operator wrote no config block.

    Raises :class:`ConfigRequired` when a required attribute or block has no
    default: such a plugin cannot start without operator config.
    """
    return config_from_json(spec, {})


def config_from_json(spec: hclspec.Spec, body: Mapping[str, object] | str) -> bytes:
    """Encode a config body (a mapping, or JSON text of one) as Nomad would.

    Raises :class:`ConfigRequired` for missing required settings and
    :class:`ConfigBodyError` for anything else the agent would reject.
    """
    value, ty = decode_body(spec, body)
    try:
        return cty.marshal(value, ty)
    except cty.CtyEncodeError as exc:
        raise ConfigBodyError([str(exc)]) from None


def required_settings(spec: hclspec.Spec) -> list[str]:
    """The settings an empty config body lacks (empty when defaults suffice)."""
    try:
        decode_body(spec, {})
    except ConfigRequired as exc:
        return list(exc.problems)
    return []


def decode_body(spec: hclspec.Spec, body: Mapping[str, object] | str) -> Typed:
    """The cty value (and its concrete type) hcldec would produce for ``body``."""
    if isinstance(body, str):
        try:
            loaded = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ConfigBodyError([f"config is not valid JSON: {exc}"]) from None
        if not isinstance(loaded, dict):
            raise ConfigBodyError(["config JSON must be an object of settings"])
        body = loaded
    walker = _Walker()
    result = walker.root(spec, body)
    missing = [p for p in walker.problems if p.startswith(_MISSING)]
    if missing and len(missing) == len(walker.problems):
        raise ConfigRequired([p[len(_MISSING) :] for p in missing])
    if walker.problems:
        raise ConfigBodyError([p.removeprefix(_MISSING) for p in walker.problems])
    return result


_MISSING = "\0missing:"


def _where(path: tuple[str, ...], name: str) -> str:
    return ".".join((*path, name))


class _Walker:
    """Evaluates a spec against a body, the way hcldec decodes it."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def root(self, spec: hclspec.Spec, body: Mapping[str, object]) -> Typed:
        used: set[str] = set()
        result = self.value(spec, body, (), used)
        self.unknown_keys(body, used, ())
        return result

    def unknown_keys(
        self, body: Mapping[str, object], used: set[str], path: tuple[str, ...]
    ) -> None:
        for key in sorted(set(body) - used):
            self.problems.append(f"{_where(path, key)}: unsupported argument or block")

    def missing(self, what: str) -> None:
        self.problems.append(_MISSING + what)

    def value(
        self, spec: hclspec.Spec, body: Mapping[str, object], path: tuple[str, ...], used: set[str]
    ) -> Typed:
        if isinstance(spec, hclspec.Object):
            values: dict[str, object] = {}
            types: dict[str, cty.CtyType] = {}
            for key, sub in spec.attributes.items():
                values[key], types[key] = self.value(sub, body, path, used)
            return values, cty.Object(types)
        if isinstance(spec, hclspec.Array):
            pairs = [self.value(sub, body, path, used) for sub in spec.values]
            return [v for v, _ in pairs], cty.Tuple([t for _, t in pairs])
        if isinstance(spec, hclspec.Literal):
            literal = hclspec.parse_literal(spec.value)
            return literal, cty.infer_type(literal)
        if isinstance(spec, hclspec.Default):
            value, ty = self.value(spec.primary, body, path, used)
            if value is None:
                return self.value(spec.default, body, path, used)
            return value, ty
        if isinstance(spec, hclspec.Attr):
            return self.attr(spec, body, path, used)
        return self.block(spec, body, path, used)

    def attr(
        self, spec: hclspec.Attr, body: Mapping[str, object], path: tuple[str, ...], used: set[str]
    ) -> Typed:
        declared = cty.parse_type(spec.type)
        used.add(spec.name)
        raw = body.get(spec.name)
        if raw is None:
            if spec.required:
                self.missing(f"{_where(path, spec.name)}: required attribute ({spec.type})")
            return None, declared
        return self.typed(raw, declared, _where(path, spec.name))

    def typed(self, raw: object, declared: cty.CtyType, where: str) -> Typed:
        converted = _convert(raw, declared)
        try:
            return converted, cty.concrete_type(converted, declared)
        except cty.CtyEncodeError as exc:
            self.problems.append(f"{where}: {exc}")
            return None, declared

    def block(
        self,
        spec: hclspec.Block
        | hclspec.BlockAttrs
        | hclspec.BlockList
        | hclspec.BlockSet
        | hclspec.BlockMap,
        body: Mapping[str, object],
        path: tuple[str, ...],
        used: set[str],
    ) -> Typed:
        used.add(spec.name)
        raw = body.get(spec.name)
        where = _where(path, spec.name)
        if isinstance(spec, hclspec.BlockAttrs):
            declared = cty.Map(cty.parse_type(spec.type))
            if raw is None:
                if spec.required:
                    self.missing(f"{where}: required block")
                return None, declared
            if isinstance(raw, list) and len(raw) == 1:
                raw = raw[0]
            if not isinstance(raw, Mapping):
                self.problems.append(f"{where}: expected a block of attributes")
                return None, declared
            return self.typed(dict(raw), declared, where)
        if isinstance(spec, hclspec.Block):
            if raw is None:
                if spec.required:
                    self.missing(f"{where}: required block")
                return None, hclspec.implied_type(spec.nested)
            items = self.block_bodies(raw, where)
            if len(items) > 1:
                self.problems.append(f"{where}: only one block of this kind is allowed")
            return self.nested(spec.nested, items[0] if items else {}, (*path, spec.name))
        if isinstance(spec, hclspec.BlockMap):
            return self.block_map(spec, raw, where, path)
        items = self.block_bodies(raw, where) if raw is not None else []
        count = len(items)
        if spec.min_items and count < spec.min_items:
            need = f"{where}: at least {spec.min_items} block(s) required, got {count}"
            if count == 0:
                self.missing(need)
            else:
                self.problems.append(need)
        if spec.max_items and count > spec.max_items:
            self.problems.append(f"{where}: at most {spec.max_items} block(s), got {count}")
        pairs = [
            self.nested(spec.nested, item, (*path, f"{spec.name}[{i}]"))
            for i, item in enumerate(items)
        ]
        kind = cty.Set if isinstance(spec, hclspec.BlockSet) else cty.List
        elem_types = {t for _, t in pairs}
        if len(elem_types) > 1:
            return [v for v, _ in pairs], cty.Tuple([t for _, t in pairs])
        elem = elem_types.pop() if elem_types else hclspec.implied_type(spec.nested)
        return [v for v, _ in pairs], kind(elem)

    def block_map(
        self, spec: hclspec.BlockMap, raw: object, where: str, path: tuple[str, ...]
    ) -> Typed:
        nested_type = hclspec.implied_type(spec.nested)

        def level(node: object, depth: int, at: tuple[str, ...]) -> Typed:
            empty_type: cty.CtyType = nested_type
            for _ in range(depth):
                empty_type = cty.Map(empty_type)
            if isinstance(node, list):
                merged: dict[str, object] = {}
                for part in node:
                    if isinstance(part, Mapping):
                        merged.update(part)
                node = merged
            if not isinstance(node, Mapping):
                self.problems.append(f"{'.'.join(at)}: expected labelled blocks")
                return {}, empty_type
            pairs: dict[str, Typed] = {}
            for label, inner in node.items():
                here = (*at, str(label))
                if depth == 1:
                    bodies = self.block_bodies(inner, ".".join(here))
                    pairs[str(label)] = self.nested(spec.nested, bodies[0] if bodies else {}, here)
                else:
                    pairs[str(label)] = level(inner, depth - 1, here)
            values = {k: v for k, (v, _) in pairs.items()}
            types = {t for _, t in pairs.values()}
            if len(types) > 1:
                return values, cty.Object({k: t for k, (_, t) in pairs.items()})
            return values, cty.Map(types.pop()) if types else empty_type

        if raw is None:
            return {}, hclspec.implied_type(spec)
        return level(raw, len(spec.labels), (*path, spec.name))

    def block_bodies(self, raw: object, where: str) -> list[Mapping[str, object]]:
        items = raw if isinstance(raw, list) else [raw]
        bodies: list[Mapping[str, object]] = []
        for item in items:
            if isinstance(item, Mapping):
                bodies.append(cast(Mapping[str, object], item))
            else:
                self.problems.append(f"{where}: expected a block, got {type(item).__name__}")
        return bodies

    def nested(
        self, spec: hclspec.Spec, body: Mapping[str, object], path: tuple[str, ...]
    ) -> Typed:
        used: set[str] = set()
        result = self.value(spec, body, path, used)
        self.unknown_keys(body, used, path)
        return result


def _convert(value: object, ty: cty.CtyType) -> Any:
    """HCL's safe conversions between primitives (``5`` to ``"5"`` and back)."""
    if value is None:
        return None
    if ty is cty.STRING and isinstance(value, bool):
        return "true" if value else "false"
    if ty is cty.STRING and isinstance(value, int | float):
        return (
            format(Decimal(repr(value)).normalize(), "f")
            if isinstance(value, float)
            else str(value)
        )
    if ty is cty.NUMBER and isinstance(value, str):
        try:
            return Decimal(value.strip())
        except InvalidOperation:
            return value
    if ty is cty.BOOL and value in ("true", "false"):
        return value == "true"
    if isinstance(ty, cty.List | cty.Set) and isinstance(value, list | tuple):
        return [_convert(v, ty.elem) for v in value]
    if isinstance(ty, cty.Map) and isinstance(value, Mapping):
        return {str(k): _convert(v, ty.elem) for k, v in value.items()}
    if isinstance(ty, cty.Object) and isinstance(value, Mapping):
        return {k: _convert(value.get(k), t) for k, t in ty.attrs.items()}
    return value
