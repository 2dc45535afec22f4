"""A plugin's config as a Nomad agent builds it, from agent file to SetConfig bytes.

The agent's path, each step in its own module:

1. read the agent file with HCL 1 into Go values (:mod:`~nomad_device.wire.agentfile`,
   on :mod:`~nomad_device.wire.hcl1`), keep the last ``plugin`` block with the
   plugin's label;
2. write its ``config`` map as JSON and read that as an HCL 2 JSON body;
3. decode the body with hcldec and the spec built from the plugin's
   ``ConfigSchema`` (:mod:`~nomad_device.wire.hcldec`);
4. encode the value as cty msgpack with its own type.

:func:`from_agent_text` and :func:`from_body` run the path and say how it ends
-- accepted (with the bytes), refused (with the agent's messages) or with the
agent crashing (with what to write instead) -- so that the launcher, the
conformance suite and test helpers all give the agent's answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from nomad_device.wire import cty, hcldec, hclspec

__all__ = ["AgentConfig", "explain_panic", "from_agent_text", "from_body"]

Outcome = Literal["accept", "refuse", "panic"]

CRASH: Final = "a Nomad agent given this config would crash (every job on the node with it)"


@dataclass(frozen=True)
class AgentConfig:
    """How the agent's decoding of one plugin's config ends.

    ``stage`` says where: ``file`` (HCL 1 refused or crashed on the agent
    file), ``keys`` (keys the agent calls unexpected), ``schema`` (the plugin's
    spec cannot be built), ``decode`` (hcldec) or ``msgpack``. ``messages`` are
    the agent's own words; ``explanation`` is for an operator.
    """

    outcome: Outcome
    stage: str = ""
    messages: tuple[str, ...] = ()
    explanation: str = ""
    decoded: hcldec.Decoded | None = None
    data: bytes = b""
    warnings: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.outcome == "accept"


def from_agent_text(
    text: str, spec: hclspec.Spec, plugin: str, origin: str = "agent.hcl"
) -> AgentConfig:
    """The config the agent builds for the plugin labelled ``plugin`` in ``text``."""
    from nomad_device.wire import agentfile

    try:
        parsed = agentfile.parse_agent_text(text, origin)
    except agentfile.ConfigFileError as exc:
        stage = "keys" if exc.agent.startswith("unexpected keys") else "file"
        return AgentConfig(
            "panic" if exc.crash else "refuse", stage, (exc.agent,), str(exc)
        )
    body = None
    for block in parsed.plugins:
        if block.name == plugin:
            body = block.config
    result = from_body(body, spec, origin)
    return AgentConfig(
        result.outcome,
        result.stage,
        result.messages,
        result.explanation,
        result.decoded,
        result.data,
        tuple(parsed.warnings),
    )


def from_body(body: hcldec.JValue | None, spec: hclspec.Spec, origin: str = "config") -> AgentConfig:
    """Steps 3 and 4 for a config body (the JSON of the agent's config map; None: none)."""
    try:
        compiled = hcldec.compile_spec(spec)
    except hcldec.SchemaError as exc:
        return AgentConfig(
            "refuse", "schema", (str(exc),), f"the plugin's config schema is invalid: {exc}"
        )
    decoded = hcldec.decode(compiled, body)
    if decoded.panic is not None:
        return AgentConfig(
            "panic",
            "decode",
            (decoded.panic.message,),
            explain_panic(decoded.panic, compiled),
            decoded,
        )
    if decoded.diagnostics:
        return AgentConfig(
            "refuse",
            "decode",
            tuple(d.text() for d in decoded.diagnostics),
            "\n".join(d.render(origin) for d in decoded.diagnostics),
            decoded,
        )
    try:
        data = hcldec.encode(decoded)
    except (cty.CtyEncodeError, ValueError) as exc:
        return AgentConfig("refuse", "msgpack", (str(exc),), f"cannot encode config: {exc}", decoded)
    return AgentConfig("accept", "", (), "", decoded, data)


# ----------------------------------------------------------- explaining crashes


def _describe(ty: cty.CtyType) -> str:
    if isinstance(ty, cty.Tuple):
        return "an empty tuple" if not ty.elems else f"a tuple ({ty})"
    if isinstance(ty, cty.Object) and not ty.attrs:
        return "an empty object"
    if ty is cty.DYNAMIC:
        return "a null of no type"
    return str(ty)


def _block(path: hcldec.Path, key: str) -> str:
    name = str(path[-1]) if path else "block"
    labels = [str(p) for p in path[1:-1]] if len(path) > 2 else []
    return " ".join([name, *(f'"{lab}"' for lab in [*labels, key])])


def _setting(spec: hcldec.Compiled, path: hcldec.Path, field_path: hcldec.Path) -> hcldec.Compiled | None:
    """The compiled spec of ``field_path`` inside the elements of the block map at ``path``."""
    node: hcldec.Compiled | None = spec
    names = [p for p in path if isinstance(p, str)]
    # Walk the block types named along the path (labels are skipped by name lookup).
    for step in (*names, *[p for p in field_path if isinstance(p, str)]):
        node = _child(node, step)
        if node is None:
            return None
    return node


def _child(node: hcldec.Compiled | None, name: str) -> hcldec.Compiled | None:
    if node is None:
        return None
    if isinstance(node, hcldec._Object):
        for key, sub in node.attrs:
            found = _named(sub, name)
            if found is not None:
                return found
        return None
    if isinstance(node, hcldec._Block | hcldec._BlockList | hcldec._BlockMap):
        return _child(node.nested, name)
    return None


def _named(node: hcldec.Compiled, name: str) -> hcldec.Compiled | None:
    if isinstance(node, hcldec._Attr | hcldec._Block | hcldec._BlockList | hcldec._BlockMap):
        return node if node.name == name else None
    if isinstance(node, hcldec._BlockAttrs):
        return node if node.name == name else None
    if isinstance(node, hcldec._Default):
        primary = _named(node.primary, name)
        return node if primary is not None else None
    if isinstance(node, hcldec._Object):
        return _child(node, name)
    return None


def explain_panic(panic: hcldec.Panic, spec: hcldec.Compiled | None = None) -> str:
    """What happened, in an operator's words, and what to write instead."""
    where = ".".join(str(p) for p in panic.path) or "the config"
    if panic.message.startswith("cty.DynamicPseudoType"):
        return (
            f"{CRASH}: the plugin's schema declares a setting of type `any` inside the "
            f"labelled blocks {where!r}, and Nomad's decoder panics on that for every config "
            f"(panic: {panic.message}). No config avoids it: the plugin's schema must change."
        )
    field_name = ".".join(str(p) for p in panic.field)
    a, b = panic.types or (cty.DYNAMIC, cty.DYNAMIC)
    first, second = _block(panic.path, panic.first), _block(panic.path, panic.second)
    head = (
        f"{CRASH}: {first} and {second} decode to values of different types"
        + (f" at {field_name} ({_describe(a)} in one, {_describe(b)} in the other)" if field_name else "")
        + f", and Nomad builds one map of them (panic: {panic.message[:160]}"
        + ("..." if len(panic.message) > 160 else "")
        + ")."
    )
    node = _setting(spec, panic.path, panic.field) if spec is not None else None
    if isinstance(node, hcldec._Default) and isinstance(node.default, hcldec._Literal):
        primary = node.primary
        declared = primary.type if isinstance(primary, hcldec._Attr) else None
        unset = second if declared is not None and b != declared else first
        literal = hclspec.hcl_literal(node.default.value)
        return (
            f"{head} {field_name} is unset in {unset}, where the schema's literal default "
            f"{literal} applies with a type of its own. Write {field_name} = {literal} in "
            f"{unset} (set it in every {panic.path[-1] if panic.path else 'block'} block), "
            "or use a plugin whose schema gives collections no literal defaults."
        )
    if isinstance(node, hcldec._BlockAttrs) or (field_name == "" and panic.field == ()):
        return (
            f"{head} Give every value in {where} the same type (quote numbers and bools to "
            "make them all strings)."
        )
    return (
        f"{head} Set {field_name or 'the same settings'} the same way in every "
        f"{panic.path[-1] if panic.path else ''} block, or fix the plugin's schema."
    )
