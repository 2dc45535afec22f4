"""A plugin's config as a Nomad agent builds it, from agent file to SetConfig bytes.

The agent's path, each step in its own module:

1. read the agent file with HCL 1 into Go values (:mod:`~nomad_device.agentconfig.agentfile`,
   on :mod:`~nomad_device.agentconfig.hcl1`), keep the last ``plugin`` block with the
   plugin's label;
2. write its ``config`` map as JSON and read that as an HCL 2 JSON body;
3. decode the body with hcldec and the spec built from the plugin's
   ``ConfigSchema`` (:mod:`~nomad_device.agentconfig.hcldec`);
4. encode the value as cty msgpack with its own type.

:func:`from_agent_text` and :func:`from_body` run the path and say how it ends
-- accepted (with the bytes), refused (with the agent's messages) or with the
agent crashing (with what to write instead) -- so that the launcher, the
conformance suite and test helpers all give the agent's answer. For plugin
authors' tests, :mod:`nomad_device.testing` offers the same as bytes or
exceptions (:func:`defaults_only_config`: what Nomad sends when the operator
wrote no ``config`` block; :func:`config_from_json`; :func:`config_from_agent_file`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from nomad_device.agentconfig import hcldec
from nomad_device.wire import cty, hclspec

__all__ = [
    "AgentConfig",
    "AgentCrash",
    "ConfigBodyError",
    "ConfigRequired",
    "config_from_agent_file",
    "config_from_json",
    "defaults_only_config",
    "explain_panic",
    "from_agent_text",
    "from_body",
    "required_settings",
]

Outcome = Literal["accept", "refuse", "panic"]

CRASH: Final = "a Nomad agent given this config would crash (every job on the node with it)"


@dataclass(frozen=True)
class AgentConfig:
    """How the agent's decoding of one plugin's config ends.

    ``stage`` says where: ``file`` (HCL 1 refused or crashed on the agent
    file), ``keys`` (keys the agent calls unexpected), ``schema`` (the plugin's
    spec cannot be built), ``decode`` (hcldec) or ``msgpack``; ``limit`` when the
    file is past this reader's own limits, which says nothing of the agent.
    ``messages`` are the agent's own words; ``explanation`` is for an operator.
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
    from nomad_device.agentconfig import agentfile

    try:
        parsed = agentfile.parse_agent_text(text, origin)
    except agentfile.ConfigFileError as exc:
        if not exc.agent:
            return AgentConfig("refuse", "limit", (str(exc),), str(exc))
        stage = "keys" if exc.agent.startswith("unexpected keys") else "file"
        return AgentConfig("panic" if exc.crash else "refuse", stage, (exc.agent,), str(exc))
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


def from_body(
    body: hcldec.JValue | None, spec: hclspec.Spec, origin: str = "config"
) -> AgentConfig:
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
            explain_panic(decoded.panic),
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
        return AgentConfig(
            "refuse", "msgpack", (str(exc),), f"cannot encode config: {exc}", decoded
        )
    return AgentConfig("accept", "", (), "", decoded, data)


# ------------------------------------------------- the same, as bytes or exceptions


class ConfigBodyError(ValueError):
    """The config body does not fit the schema (unknown key, wrong shape)."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


class ConfigRequired(ConfigBodyError):
    """The schema requires settings that have no default and were not given.

    ``settings`` names them (``device_dir``, ``limits.max_devices``), for
    messages that say what to write rather than quote HCL.
    """

    def __init__(self, problems: Sequence[str], settings: Sequence[str] = ()) -> None:
        super().__init__(problems)
        self.settings = tuple(settings)


class AgentCrash(ConfigBodyError):
    """A Nomad agent given this config would panic.

    :mod:`nomad_device.agentconfig.schemasafety` finds the schemas that allow it.
    """


def config_from_agent_file(spec: hclspec.Spec, text: str, plugin: str) -> bytes:
    """The SetConfig bytes for the plugin labelled ``plugin`` in an agent file's text.

    Raises :class:`AgentCrash` where the agent would crash and
    :class:`ConfigBodyError` where it would refuse (with its messages).
    """
    result = from_agent_text(text, spec, plugin)
    if result.outcome == "panic":
        raise AgentCrash([result.explanation])
    if not result.ok:
        raise ConfigBodyError(list(result.messages))
    return result.data


def defaults_only_config(spec: hclspec.Spec) -> bytes:
    """What Nomad sends to ``SetConfig`` when the operator wrote no config block.

    Raises :class:`ConfigRequired` when a required attribute or block has no
    default: such a plugin cannot start without operator config.
    """
    return config_from_json(spec, {})


def config_from_json(spec: hclspec.Spec, body: Mapping[str, object] | str) -> bytes:
    """Encode a config body (a mapping, or JSON text of one) as Nomad would.

    The body is what the agent holds after reading its HCL: blocks as objects or
    lists of objects. Raises :class:`ConfigRequired` for missing required
    settings and :class:`ConfigBodyError` for anything else the agent would
    reject; a schema Nomad could not build a decoder from raises
    :class:`~nomad_device.agentconfig.hcldec.SchemaError` (a ValueError).
    """
    if isinstance(body, str):
        try:
            body = hcldec.loads(body)  # type: ignore[assignment]
        except ValueError as exc:
            raise ConfigBodyError([f"config is not valid JSON: {exc}"]) from None
        if not isinstance(body, dict):
            raise ConfigBodyError(["config JSON must be an object of settings"])
    try:
        document = hcldec.from_python(body)
    except (TypeError, ValueError) as exc:
        raise ConfigBodyError([str(exc)]) from None
    result = from_body(document, spec)
    if result.outcome == "panic":
        raise AgentCrash([result.explanation])
    if result.stage == "schema":
        raise hcldec.SchemaError(result.messages[0])
    diagnostics = result.decoded.diagnostics if result.decoded is not None else []
    if diagnostics:
        problems = [_problem(d) for d in diagnostics]
        if all(_is_missing(d) for d in diagnostics):
            raise ConfigRequired(problems, [_required(d) for d in diagnostics])
        raise ConfigBodyError(problems)
    if not result.ok:  # msgpack
        raise ConfigBodyError(list(result.messages))
    return result.data


def required_settings(spec: hclspec.Spec) -> list[str]:
    """The settings an empty config body lacks (empty when defaults suffice)."""
    try:
        defaults_only_config(spec)
    except ConfigRequired as exc:
        return list(exc.problems)
    except ConfigBodyError:
        pass
    return []


def _problem(diag: hcldec.Diagnostic) -> str:
    where = cty.format_path(diag.path)
    return f"{where}: {diag.text()}" if where else diag.text()


def _required(diag: hcldec.Diagnostic) -> str:
    """The key a "missing" diagnostic asks for, with the path of the body it is missing from."""
    quoted = re.search(r'"([^"\\]+)"', diag.detail)
    name = quoted.group(1) if quoted else diag.summary
    where = cty.format_path(diag.path)
    return f"{where}.{name}" if where else name


def _is_missing(diag: hcldec.Diagnostic) -> bool:
    """Whether hcldec reports something required that the body does not give."""
    summary = diag.summary
    return (
        summary == "Missing required argument"
        or (summary.startswith("Missing ") and summary.endswith(" block"))
        or (summary.startswith("Insufficient ") and summary.endswith(" blocks"))
    )


# ----------------------------------------------------------- explaining crashes


def _describe(ty: cty.CtyType) -> str:
    if isinstance(ty, cty.Tuple):
        return "an empty tuple" if not ty.elems else f"a tuple ({ty})"
    if isinstance(ty, cty.Object) and not ty.attrs:
        return "an empty object"
    if ty is cty.DYNAMIC:
        return "a null of no type"
    return str(ty)


def _block(path: hcldec.Path, labels: str) -> str:
    """``device "kvm"``: the block type (the map's name) and the element's labels."""
    return f'{path[-1] if path else "block"} "{labels}"'


def _setting(element: hcldec.Compiled | None, field_path: hcldec.Path) -> hcldec.Compiled | None:
    """The spec, inside a map element's spec, that gives the value at ``field_path``.

    The path holds object attribute names, which are the Object specs' keys;
    a block on the way stands for its nested spec.
    """
    node = element
    for step in field_path:
        if isinstance(node, hcldec._Block | hcldec._BlockList | hcldec._BlockMap):
            node = node.nested
        node = dict(node.attrs).get(str(step)) if isinstance(node, hcldec._Object) else None
    return node


def explain_panic(panic: hcldec.Panic) -> str:
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
    shown = panic.message[:160] + ("..." if len(panic.message) > 160 else "")
    if isinstance(panic.element, hcldec._BlockAttrs):
        return (
            f"{CRASH}: in the {where} block, {panic.first!r} is {_describe(a)} and "
            f"{panic.second!r} {_describe(b)}, and Nomad builds one map of them (panic: "
            f"{shown}). Give every value in {where} the same type (quote numbers and bools to "
            "make them all strings)."
        )
    first, second = _block(panic.path, panic.first), _block(panic.path, panic.second)
    at = (
        f" at {field_name} ({_describe(a)} in one, {_describe(b)} in the other)"
        if field_name
        else ""
    )
    head = (
        f"{CRASH}: {first} and {second} decode to values of different types{at}, and Nomad "
        f"builds one map of them (panic: {shown})."
    )
    kind = str(panic.path[-1]) if panic.path else "labelled"
    node = _setting(panic.element, panic.field)
    if isinstance(node, hcldec._Default) and isinstance(node.default, hcldec._Literal):
        primary = node.primary
        declared = primary.type if isinstance(primary, hcldec._Attr) else None
        unset = second if declared is not None and b != declared else first
        literal = hclspec.hcl_literal(node.default.value)
        name = str(panic.field[-1])
        inside = ".".join(str(p) for p in panic.field[:-1])
        where_to = f"its {inside} block in {unset}" if inside else unset
        return (
            f"{head} {field_name} is unset in {unset}, where the schema's literal default "
            f"{literal} applies with a type of its own. Write {name} = {literal} in "
            f"{where_to} (set it in every {kind} block), or use a plugin whose schema gives "
            "collections no literal defaults."
        )
    return (
        f"{head} Set {field_name or 'the same settings'} the same way in every {kind} block, "
        "or fix the plugin's schema."
    )
