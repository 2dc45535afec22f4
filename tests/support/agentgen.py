"""Agent files generated from a plugin's schema, and both sides' answers for them.

The strategies build an agent file (HCL or JSON, in the forms a Nomad agent
reads) around a ``plugin`` block whose ``config`` follows the plugin's schema
loosely: settings set or left out at random, 0-3 labelled or repeated blocks,
nested blocks, values of the right type and of wrong ones, nulls in JSON,
templates, duplicate plugin blocks and repeated ``config`` blocks. ``python``
runs the SDK's decoder (:mod:`nomad_device.agentconfig.setconfig`); the Go side is
``interop/bin/agentcfg``, on Nomad's own libraries. ``disagreement`` compares
the two.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from hypothesis import strategies as st

from nomad_device.agentconfig import setconfig
from nomad_device.wire import cty, hclspec

# ----------------------------------------------------------------- the model


@dataclass
class Attr:
    value: object  # a plain value: str, int, float, bool, None (JSON null), list, Obj


@dataclass
class Obj:
    """An object value (``{ k = v }``), kept apart from blocks."""

    items: list[tuple[str, object]]


@dataclass
class Block:
    labels: list[str]
    body: list[tuple[str, Attr | Block]]


Body = list[tuple[str, Attr | Block]]


@dataclass
class Case:
    """One agent file for one plugin label."""

    label: str
    text: str
    json: bool
    note: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------- values

_WORDS = ["a", "kvm", "serial", "/dev/kvm", "1a86", "x y", "5", "1.5", "true", "", "é"]
_TEMPLATES = [
    "${node.unique.id}",
    "a${attr.x}b",
    "$${literal}",
    "100%",
    "%%{x}",
    "${env.HOME}",
    # Templates the launcher evaluates: functions, operators, a conditional.
    '${upper("kvm")}',
    'x${lower("AB")}${strlen("ab")}',
    "${max(1, 2.5)}",
    '${concat(["a"], ["b"])}',
    '${true ? "a" : "b"}',
    "${nope(1)}",
    '${jsondecode("[1]")}',
    "${1 + 2 * 3}",
]


@functools.cache
def _strings() -> st.SearchStrategy[str]:
    words = st.sampled_from(_WORDS)
    text = st.text(alphabet=string.ascii_letters + string.digits + ' _-./"\\\n\té€😀', max_size=8)
    return st.one_of(words, words, words, text, text, st.sampled_from(_TEMPLATES))


@functools.cache
def _numbers() -> st.SearchStrategy[object]:
    small = st.integers(-5, 5)
    floats = st.sampled_from([0.5, 1.5, 0.1, -0.0, 1e21, 1e-7, 2.5e10, 123.456])
    wide = st.sampled_from([0, 1, 4, 10_000, 2**53 + 1, 2**63 - 1, -(2**63)])
    huge = st.sampled_from([2**63, 10**20])  # beyond int64: HCL 1 refuses the file
    return st.sampled_from([small] * 6 + [floats] * 3 + [wide] * 2 + [huge]).flatmap(lambda x: x)


@functools.cache
def _scalar() -> st.SearchStrategy[object]:
    return st.one_of(_strings(), _numbers(), st.booleans())


@functools.cache
def _wrong() -> st.SearchStrategy[object]:
    """Values of any shape, for settings that expect something else."""
    leaf = st.one_of(_scalar(), st.none())
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(st.tuples(st.sampled_from(["a", "b", "k"]), inner), max_size=2).map(Obj),
        ),
        max_leaves=4,
    )


@functools.cache
def _value_for(ty: cty.CtyType) -> st.SearchStrategy[object]:
    """A value of (roughly) the type ``ty``: what an operator would write."""
    if ty is cty.STRING:
        return _strings()
    if ty is cty.NUMBER:
        return st.one_of(_numbers(), st.sampled_from(["5", "0x10", "1e3"]))
    if ty is cty.BOOL:
        return st.one_of(st.booleans(), st.sampled_from(["true", "false", "1", 0, 1]))
    if isinstance(ty, cty.List | cty.Set):
        return st.lists(_value_for(ty.elem), max_size=3)
    if isinstance(ty, cty.Map):
        return st.lists(
            st.tuples(st.sampled_from(["a", "b", "c d"]), _value_for(ty.elem)), max_size=2
        ).map(Obj)
    if isinstance(ty, cty.Object):
        return st.tuples(*(_value_for(t) for t in ty.attrs.values())).map(
            lambda vs: Obj(list(zip(ty.attrs, vs, strict=True)))
        )
    return _wrong()


@functools.cache
def _attr_value(ty: cty.CtyType) -> st.SearchStrategy[object]:
    right = _value_for(ty)
    return st.one_of(right, right, right, right, right, right, _wrong())


# ------------------------------------------------------------------ bodies

_LABELS = ["a", "b", "kvm", "serial", "x y"]


@functools.cache
def _rarely(n: int) -> st.SearchStrategy[bool]:
    """True about once in ``n`` draws (hypothesis favours small integers, not list heads)."""
    return st.sampled_from([False] * (n - 1) + [True])


@functools.cache
def body_for(spec: hclspec.Spec, depth: int = 0) -> st.SearchStrategy[Body]:
    """A body for an Object spec (the strategy is built once per spec and depth)."""
    return _body_for(spec, depth)


_ABSENT: Final = st.sampled_from([True, False, False])
_BLOCK_COUNT: Final = st.sampled_from([0, 0, 1, 1, 1, 2])
_ATTRS_KEYS: Final = st.sampled_from(["A", "B", "C_D", "x-y"])
_STRAY: Final = st.sampled_from(["unknown", "pathz", "Device"])


@st.composite
def _body_for(draw: st.DrawFn, spec: hclspec.Spec, depth: int) -> Body:
    """A body for an Object spec (other roots get a few stray settings)."""
    out: Body = []
    if not isinstance(spec, hclspec.Object):
        return out
    for key, sub in spec.attributes.items():
        out.extend(draw(_entries_for(key, sub, depth)))
    if draw(_rarely(30)):
        out.append((draw(_STRAY), Attr(1)))
    order = draw(st.permutations(range(len(out)))) if out else []
    return [out[i] for i in order]


def _unwrap(spec: hclspec.Spec) -> hclspec.Spec:
    while isinstance(spec, hclspec.Default):
        spec = spec.primary
    return spec


@functools.cache
def _entries_for(key: str, spec: hclspec.Spec, depth: int) -> st.SearchStrategy[Body]:
    return _entries(key, spec, depth)


@st.composite
def _entries(draw: st.DrawFn, key: str, spec: hclspec.Spec, depth: int) -> Body:
    spec = _unwrap(spec)
    if isinstance(spec, hclspec.Attr):
        name = spec.name or key
        if draw(_ABSENT):
            return []
        return [(name, Attr(draw(_attr_value(cty.parse_type(spec.type)))))]
    if isinstance(spec, hclspec.BlockAttrs):
        n = draw(_BLOCK_COUNT)
        elem = cty.parse_type(spec.type)
        blocks: Body = []
        for _ in range(n):
            items = draw(_attrs_items(elem))
            blocks.append((spec.name or key, Block([], [(k, Attr(v)) for k, v in items])))
        return blocks
    if isinstance(spec, hclspec.Block | hclspec.BlockList | hclspec.BlockSet | hclspec.BlockMap):
        name = spec.name or key
        if depth > 2:
            return []
        n = draw(_BLOCK_COUNT if isinstance(spec, hclspec.Block) else _MANY)
        blocks = []
        for _ in range(n):
            labels: list[str] = []
            if isinstance(spec, hclspec.BlockMap):
                labels = [draw(_LABEL) for _ in spec.labels]
            blocks.append((name, Block(labels, draw(body_for(spec.nested, depth + 1)))))
        return blocks
    return []


_MANY: Final = st.integers(0, 3)
_LABEL: Final = st.sampled_from(_LABELS)


@functools.cache
def _attrs_items(elem: cty.CtyType) -> st.SearchStrategy[list[tuple[str, object]]]:
    return st.lists(
        st.tuples(_ATTRS_KEYS, _attr_value(elem)), max_size=3, unique_by=lambda kv: kv[0]
    )


# ----------------------------------------------------------------- rendering


def _hcl_string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _hcl_key(key: str) -> str:
    if key and (key[0].isalpha() or key[0] == "_") and all(c.isalnum() or c in "_-" for c in key):
        return key
    return _hcl_string(key)


def _hcl_value(value: object) -> str:
    if value is None:
        return '""'  # HCL 1 has no null; JSON's null reads as ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value == 0 and math.copysign(1, value) < 0:
            return "-0.0"
        text = repr(value)
        return text if any(c in text for c in ".e") else text + ".0"
    if isinstance(value, str):
        if value in ("0x10",):
            return value  # a hex number, HCL 1 style
        return _hcl_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_hcl_value(v) for v in value) + "]"
    if isinstance(value, Obj):
        return "{ " + " ".join(f"{_hcl_key(k)} = {_hcl_value(v)}" for k, v in value.items) + " }"
    raise TypeError(value)


def render_hcl_body(body: Body, indent: str) -> str:
    lines = []
    for name, entry in body:
        if isinstance(entry, Attr):
            lines.append(f"{indent}{_hcl_key(name)} = {_hcl_value(entry.value)}")
        else:
            labels = "".join(f" {_hcl_string(lab)}" for lab in entry.labels)
            inner = render_hcl_body(entry.body, indent + "  ")
            lines.append(f"{indent}{_hcl_key(name)}{labels} {{\n{inner}{indent}}}")
    return "".join(line + "\n" for line in lines)


def _json_value(value: object) -> object:
    if isinstance(value, Obj):
        return {k: _json_value(v) for k, v in value.items}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def _json_body(body: Body, form: str) -> dict[str, object]:
    """A body as HCL 1's JSON: blocks as lists of objects ("list") or nested objects."""
    out: dict[str, object] = {}
    for name, entry in body:
        if isinstance(entry, Attr):
            out[name] = _json_value(entry.value)
            continue
        inner: object = _json_body(entry.body, form)
        for label in reversed(entry.labels):
            inner = {label: [inner] if form == "list" else inner}
        if form == "list":
            existing = out.setdefault(name, [])
            if isinstance(existing, list):
                existing.append(inner)
            else:
                out[name] = [inner]
        else:
            out[name] = inner
    return out


def render(
    label: str, configs: Sequence[Body], *, as_json: bool, form: str = "list", args: bool = False
) -> str:
    """An agent file with one plugin block per body in ``configs`` (all with ``label``)."""
    if as_json:
        blocks = []
        for body in configs:
            block: dict[str, object] = {"config": [_json_body(body, form)]}
            if form != "list":
                block = {"config": _json_body(body, form)}
            if args:
                block["args"] = ["-v"]
            blocks.append({label: [block] if form == "list" else block})
        plugin: object = blocks if form == "list" else blocks[-1]
        return json.dumps({"plugin": plugin}, ensure_ascii=False, indent=1)
    parts = []
    for body in configs:
        extra = '  args = ["-v"]\n' if args else ""
        parts.append(
            f"plugin {_hcl_string(label)} {{\n{extra}  config {{\n"
            f"{render_hcl_body(body, '    ')}  }}\n}}\n"
        )
    return "".join(parts)


@functools.cache
def cases(spec: hclspec.Spec, label: str) -> st.SearchStrategy[Case]:
    """Agent files for ``spec`` (see :func:`_cases`)."""
    return _cases(spec, label)


_SHAPE: Final = st.sampled_from([2, 2, 2, 2, 2, 2, 2, 2, 0, 1])


@st.composite
def _cases(draw: st.DrawFn, spec: hclspec.Spec, label: str) -> Case:
    """An agent file around a config for ``spec``, in one of the forms the agent reads."""
    body = draw(body_for(spec))
    as_json = draw(_rarely(4))
    note = "json" if as_json else "hcl"
    form = "list"
    if as_json and draw(_rarely(4)):
        form = "object"
        note += "-object"
    configs = [body]
    shape = draw(_SHAPE)
    if shape == 0:  # a second block with the same label: the agent keeps the last
        configs = [draw(body_for(spec)), body]
        note += "-duplicate"
    text = render(label, configs, as_json=as_json, form=form, args=draw(st.booleans()))
    if shape == 1 and not as_json and len(body) >= 2:  # config split into two blocks
        cut = draw(st.integers(1, len(body) - 1))
        first, rest = render_hcl_body(body[:cut], "    "), render_hcl_body(body[cut:], "    ")
        head = f"plugin {_hcl_string(label)} {{\n"
        text = f"{head}  config {{\n{first}  }}\n  config {{\n{rest}  }}\n}}\n"
        note += "-split"
    if draw(_rarely(8)):  # a typo: HCL 1's scanner and parser errors, and their positions
        for _ in range(draw(_EDITS)):
            at = draw(st.integers(0, len(text)))
            insert = draw(_TYPO)
            text = text[:at] + insert + text[at + (0 if insert else 1) :]
        note += "-typo"
    return Case(label, text, as_json, note)


_EDITS: Final = st.integers(1, 2)
_TYPO: Final = st.sampled_from(
    [
        "",
        "",
        '"',
        "{",
        "}",
        "[",
        "]",
        "=",
        ",",
        ":",
        "#",
        "/",
        "\\",
        "<<",
        "$",
        "-",
        ".",
        "0",
        "'",
        "x",
        "\n",
        ";",
    ]
)


# --------------------------------------------------------------- the answers


def spec_b64(spec_pb: Any) -> str:
    return base64.b64encode(spec_pb.SerializeToString()).decode()


# ------------------------------------------------------------- templates

#: A spec with one attribute of each kind a template's value may land in.
TEMPLATED = hclspec.Object(
    {
        "label": hclspec.Attr("label", "string", False),
        "count": hclspec.Attr("count", "number", False),
        "ratio": hclspec.Attr("ratio", "number", False),
        "paths": hclspec.Attr("paths", "list(string)", False),
        "env": hclspec.Attr("env", "map(string)", False),
        "on": hclspec.Attr("on", "bool", False),
    }
)

#: Nomad's 15 functions, and one it does not have.
_FUNCTIONS: Final = [
    "abs", "coalesce", "concat", "hasindex", "int", "jsondecode", "jsonencode", "length",
    "lower", "max", "min", "reverse", "strlen", "substr", "upper", "nope",
]  # fmt: skip
_TEMPLATE_STRINGS: Final = ["", "a", "AbC", "kvm", "x y", "é", "1", "2.5", "true", "<&>", "-0"]
_TEMPLATE_NUMBERS: Final = ["0", "1", "2", "3", "7", "10", "0.5", "1.5", "2.25", "0.1", "1e3"]
_OPERATORS: Final = ["+", "-", "*", "/", "%", "==", "!=", "<", ">=", "&&", "||"]


@st.composite
def template_expression(draw: st.DrawFn, depth: int = 0) -> str:
    """An HCL 2 expression without variables: literals, calls, operators, conditionals."""
    leaves = ["number", "string", "bool", "null"]
    inner = ["tuple", "object", "call", "call", "call", "unary", "binary", "binary", "cond"]
    inner += ["index", "attr"]
    kind = draw(st.sampled_from(leaves + (inner if depth < 3 else [])))
    sub = template_expression(depth + 1)
    if kind == "number":
        return draw(st.sampled_from(_TEMPLATE_NUMBERS))
    if kind == "string":
        return json.dumps(draw(st.sampled_from(_TEMPLATE_STRINGS)), ensure_ascii=False)
    if kind == "bool":
        return draw(st.sampled_from(["true", "false"]))
    if kind == "null":
        return "null"
    if kind == "tuple":
        return "[" + ", ".join(draw(st.lists(sub, max_size=3))) + "]"
    if kind == "object":
        items = draw(st.lists(st.tuples(st.sampled_from("abk"), sub), max_size=2))
        return "{" + ", ".join(f"{k} = {v}" for k, v in items) + "}"
    if kind == "call":
        name = draw(st.sampled_from(_FUNCTIONS))
        return f"{name}({', '.join(draw(st.lists(sub, max_size=3)))})"
    if kind == "unary":
        return draw(st.sampled_from(["-", "!"])) + draw(sub)
    if kind == "binary":
        return f"({draw(sub)} {draw(st.sampled_from(_OPERATORS))} {draw(sub)})"
    if kind == "index":
        return f"{draw(sub)}[{draw(sub)}]"
    if kind == "attr":
        return f"{draw(sub)}.{draw(st.sampled_from('abk'))}"
    return f"({draw(sub)} ? {draw(sub)} : {draw(sub)})"


@st.composite
def template_cases(draw: st.DrawFn, attributes: Sequence[str]) -> Case:
    """A JSON agent file setting one of ``attributes`` of plugin "templated" to a template."""
    expression = draw(template_expression())
    template = "${" + expression + "}" if draw(st.booleans()) else "x${" + expression + "}y"
    attr = draw(st.sampled_from(list(attributes)))
    text = json.dumps({"plugin": [{"templated": [{"config": [{attr: template}]}]}]})
    return Case("templated", text, True, f"{attr} = {template}")


def declined(answer: dict[str, Any]) -> bool:
    """The launcher refused a template it does not reproduce exactly (and says so)."""
    return any(e.startswith("Unsupported template") for e in answer.get("errors", []))


def python(case: Case, spec: hclspec.Spec) -> dict[str, Any]:
    """The SDK's answer, in the Go tool's shape."""
    got = setconfig.from_agent_text(case.text, spec, case.label)
    out: dict[str, Any] = {"outcome": got.outcome}
    if got.outcome == "accept":
        out["msgpack"] = got.data.hex()
    else:
        out["stage"] = got.stage
        if got.outcome == "panic":
            out["panic"] = got.messages[0] if got.messages else ""
        else:
            out["errors"] = list(got.messages)
    return out


def _summaries(errors: Sequence[str]) -> list[str]:
    return sorted(e.split(": ", 1)[0] for e in errors)


#: Our summaries for a template the launcher refuses.
_OUR_TEMPLATE = {"Variables not allowed", "Unsupported template"}


#: What evaluating a template can report, in the agent's words on both sides.
_EVALUATION = {
    "Call to unknown function",
    "Invalid function argument",
    "Not enough function arguments",
    "Too many function arguments",
    "Error in function call",
    "Invalid template interpolation value",
    "Inconsistent conditional result types",
    "Null condition",
    "Incorrect condition type",
    "Invalid operand",
    "Invalid object key expression",
}


def _template_syntax(summary: str) -> bool:
    """An HCL 2 syntax error inside a template, which the launcher words its own way."""
    return (
        summary not in _OUR_TEMPLATE
        and summary not in _EVALUATION
        and not summary.startswith(
            ("Incorrect attribute value type", "Invalid label", "Invalid attribute value")
        )
        and summary not in ("Missing required argument", "Duplicate object attribute")
        and not (
            summary.startswith(
                ("Duplicate ", "Missing ", "Insufficient ", "Too many ", "Unconsistent ")
            )
        )
    )


def _same_errors(py: Sequence[str], go: Sequence[str]) -> bool:
    ours, theirs = _summaries(py), _summaries(go)
    if ours == theirs:
        return True
    # A malformed interpolation: the agent reports HCL 2's syntax errors where the
    # launcher (which does not parse expressions) says it refuses the template.
    if any(_template_syntax(s) for s in theirs) and any(s in _OUR_TEMPLATE for s in ours):
        rest_ours = [s for s in ours if s not in _OUR_TEMPLATE]
        rest_theirs = [s for s in theirs if not _template_syntax(s) and s not in _OUR_TEMPLATE]
        return rest_ours == rest_theirs
    return False


def disagreement(py: dict[str, Any], go: dict[str, Any]) -> str | None:
    """None when both sides say the same, else what differs."""
    if py["outcome"] != go["outcome"]:
        ours = py.get("errors") or py.get("panic")
        theirs = go.get("errors") or go.get("panic")
        return f"outcome: python {py['outcome']} {ours}, go {go['outcome']} {theirs}"
    if py["outcome"] == "accept":
        if py["msgpack"] != go.get("msgpack"):
            return f"msgpack: python {py['msgpack']}, go {go.get('msgpack')}"
        return None
    if py.get("stage") != go.get("stage"):
        return f"stage: python {py.get('stage')} {py}, go {go.get('stage')} {go}"
    if py["outcome"] == "panic":
        kind = lambda text: text.split("(")[0].split(":")[0].strip()  # noqa: E731
        if kind(py.get("panic", "")) != kind(go.get("panic", "")):
            return f"panic: python {py.get('panic')!r}, go {go.get('panic')!r}"
        return None
    if py["stage"] in ("file", "keys"):
        if py.get("errors") != go.get("errors"):
            return f"errors: python {py.get('errors')}, go {go.get('errors')}"
        return None
    if not _same_errors(py.get("errors", []), go.get("errors", [])):
        return f"errors: python {py.get('errors')}, go {go.get('errors')}"
    return None
