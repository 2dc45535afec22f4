"""Whether a plugin's config schema can crash a Nomad agent, with a config that shows it.

Nomad's decoder builds one cty map of the labelled blocks of a ``BlockMap`` (and
of the values in a ``BlockAttrs`` block), and go-cty panics when the elements
of a map do not all have the same type -- the agent process dies. Types differ
when a schema lets them:

- a ``Default`` whose ``Literal`` has a type of its own (``[]`` is an empty
  *tuple*, not a ``list(string)``; ``{}`` an empty object; ``null`` has no
  type), inside the labelled blocks: one block sets the setting, another
  leaves it to the literal (:data:`SOMETIMES`);
- ``any`` inside a block map: hcldec refuses to even try and panics on every
  config (:data:`ALWAYS`);
- ``any`` as the element type of a ``BlockAttrs`` block: values of different
  types in one block (:data:`SOMETIMES`).

:func:`hazards` finds these in a schema as a plugin sends it, and builds for
each an agent file that makes the agent panic; each is checked against the
decoder (:mod:`~nomad_device.agentconfig.setconfig`) before it is reported. Lists
of blocks are safe: hcldec unifies their element types first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from nomad_device.agentconfig import hcldec, setconfig
from nomad_device.wire import cty, hclspec

__all__ = ["ALWAYS", "SOMETIMES", "Hazard", "hazards"]

ALWAYS: Final = "always"
SOMETIMES: Final = "sometimes"


@dataclass(frozen=True)
class Hazard:
    """One way the schema crashes an agent; ``config`` is an agent file that does."""

    where: str
    problem: str
    when: str
    config: str
    panic: str


# A body to render: (name, labels, entries) for blocks, (name, value text) for attributes.
_Entry = tuple[str, tuple[str, ...], list["_Entry"]] | tuple[str, str]


def _sample(ty: cty.CtyType) -> str:
    """An HCL 1 value of (or, for maps and objects, written as) type ``ty``."""
    if ty is cty.NUMBER:
        return "1"
    if ty is cty.BOOL:
        return "true"
    if isinstance(ty, cty.List | cty.Set):
        return f"[{_sample(ty.elem)}]"
    if isinstance(ty, cty.Tuple):
        return "[" + ", ".join(_sample(e) for e in ty.elems) + "]"
    if isinstance(ty, cty.Map | cty.Object):
        return '{ k = "v" }'
    return '"x"'


def _render(entries: list[_Entry], indent: str) -> str:
    out = []
    for entry in entries:
        if len(entry) == 2:
            out.append(f"{indent}{entry[0]} = {entry[1]}\n")
        else:
            name, labels, inner = entry
            shown = "".join(f' "{label}"' for label in labels)
            out.append(f"{indent}{name}{shown} {{\n{_render(inner, indent + '  ')}{indent}}}\n")
    return "".join(out)


def _file(label: str, entries: list[_Entry]) -> str:
    return f'plugin "{label}" {{\n  config {{\n{_render(entries, "    ")}  }}\n}}\n'


def _required(spec: hclspec.Spec) -> list[_Entry]:
    """Entries for the required settings of an Object spec, so the witness is complete."""
    out: list[_Entry] = []
    if not isinstance(spec, hclspec.Object):
        return out
    for key, sub in spec.attributes.items():
        if isinstance(sub, hclspec.Attr) and sub.required:
            out.append((sub.name or key, _sample(cty.parse_type(sub.type))))
        elif isinstance(sub, hclspec.Block | hclspec.BlockAttrs) and sub.required:
            nested = _required(sub.nested) if isinstance(sub, hclspec.Block) else []
            out.append((sub.name or key, (), nested))
        elif isinstance(sub, hclspec.BlockList | hclspec.BlockSet) and sub.min_items:
            out += [(sub.name or key, (), _required(sub.nested))] * sub.min_items
    return out


def _without(entries: list[_Entry], name: str) -> list[_Entry]:
    return [e for e in entries if e[0] != name]


class _Finder:
    def __init__(self, label: str) -> None:
        self.label = label
        self.found: list[tuple[str, str, str, list[_Entry]]] = []

    def object(
        self,
        spec: hclspec.Spec,
        wrap: list[tuple[str, tuple[str, ...], hclspec.Spec]],
        in_map: bool,
    ) -> None:
        """Look through an Object spec; ``wrap`` is the chain of blocks around it."""
        if not isinstance(spec, hclspec.Object):
            return
        for key, sub in spec.attributes.items():
            self.node(key, sub, spec, wrap, in_map)

    def node(
        self,
        key: str,
        sub: hclspec.Spec,
        parent: hclspec.Spec,
        wrap: list[tuple[str, tuple[str, ...], hclspec.Spec]],
        in_map: bool,
    ) -> None:
        if isinstance(sub, hclspec.Default):
            primary = sub.primary
            if (
                in_map
                and isinstance(primary, hclspec.Attr)
                and isinstance(sub.default, hclspec.Literal)
            ):
                self.literal(key, primary, sub.default, parent, wrap)
            return
        if isinstance(sub, hclspec.BlockAttrs):
            elem = cty.parse_type(sub.type)
            if hcldec.has_dynamic(elem) and not in_map:
                name = sub.name or key
                inner: list[_Entry] = [("a", '"x"'), ("b", "1")]
                body = [*_without(_required(parent), name), (name, (), inner)]
                self.found.append(
                    (
                        self.where(wrap, name),
                        f"the values of {name} {{ ... }} have type any, so one block can hold a "
                        "string beside a number, and the agent builds one map of them",
                        SOMETIMES,
                        self.wrap(wrap, body),
                    )
                )
            return
        if isinstance(sub, hclspec.Block | hclspec.BlockList | hclspec.BlockSet):
            self.object(sub.nested, [*wrap, (sub.name or key, (), parent)], in_map)
        elif isinstance(sub, hclspec.BlockMap):
            name = sub.name or key
            labels = tuple("a" for _ in sub.labels)
            if hcldec.has_dynamic(hclspec.implied_type(sub)):
                self.found.append(
                    (
                        self.where(wrap, name),
                        f"{name} blocks hold a setting of type any, and hcldec panics on any "
                        "inside a block map, whatever the config says",
                        ALWAYS,
                        self.wrap(wrap, _required(parent)),
                    )
                )
                return
            self.object(sub.nested, [*wrap, (name, labels, parent)], True)

    def literal(
        self,
        key: str,
        primary: hclspec.Attr,
        literal: hclspec.Literal,
        parent: hclspec.Spec,
        wrap: list[tuple[str, tuple[str, ...], hclspec.Spec]],
    ) -> None:
        declared = cty.parse_type(primary.type)
        try:
            value = hclspec.parse_literal(literal.value)
        except ValueError:
            return
        own = cty.infer_type(value)
        if own == declared:
            return
        name = primary.name or key
        base = _without(_required(parent), name)
        with_it: list[_Entry] = [*base, (name, _sample(declared))]
        # The innermost block map gets two labelled blocks that differ only here.
        self.found.append(
            (
                self.where(wrap, name),
                f"{name} is {declared} when set but its default {literal.value} is "
                f"{_kind(own)}, so a block that sets it and one that does not decode to "
                "different types, and the agent builds one map of them",
                SOMETIMES,
                self.wrap(wrap, base, with_it),
            )
        )

    def where(self, wrap: list[tuple[str, tuple[str, ...], hclspec.Spec]], name: str) -> str:
        return ".".join([*(w[0] for w in wrap), name])

    def wrap(
        self,
        wrap: list[tuple[str, tuple[str, ...], hclspec.Spec]],
        body: list[_Entry],
        other: list[_Entry] | None = None,
    ) -> list[_Entry]:
        """Put ``body`` inside the chain of blocks. With ``other``, the innermost block
        map gets two labelled blocks that differ only there: one around ``other``, one
        around ``body``."""
        entries, alt = body, other
        for name, labels, parent in reversed(wrap):
            rest = _without(_required(parent), name)
            if alt is not None and labels:
                a = (name, tuple("a" for _ in labels), alt)
                b = (name, tuple("b" for _ in labels), entries)
                entries, alt = [*rest, a, b], None
                continue
            entries = [*rest, (name, labels, entries)]
            if alt is not None:
                alt = [*rest, (name, labels, alt)]
        return entries


def _kind(ty: cty.CtyType) -> str:
    if isinstance(ty, cty.Tuple):
        return "an empty tuple" if not ty.elems else "a tuple"
    if isinstance(ty, cty.Object):
        return "an empty object" if not ty.attrs else "an object"
    if ty is cty.DYNAMIC:
        return "null, of no type"
    return str(ty)


def hazards(spec: hclspec.Spec, label: str = "plugin") -> list[Hazard]:
    """The ways ``spec`` can crash a Nomad agent, each with an agent file that does.

    ``label`` is the plugin block's label in the files. Only hazards whose file
    really makes the decoder report a panic are returned.
    """
    finder = _Finder(label)
    finder.object(spec, [], False)
    out = []
    for where, problem, when, entries in finder.found:
        text = _file(label, entries)
        result = setconfig.from_agent_text(text, spec, label, "crash.hcl")
        if result.outcome != "panic":
            continue
        out.append(
            Hazard(where, problem, when, text, result.messages[0] if result.messages else "")
        )
    return out
