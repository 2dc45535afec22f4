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

The decoding itself is :mod:`nomad_device.agentconfig.hcldec` (the same decoder the
``nomad-device`` launcher uses); this module only adapts its diagnostics to
exceptions. Each problem is HCL's ``summary: detail`` text, prefixed with the
key path it concerns when that is not the top level. A config the agent would
not refuse but crash on raises :class:`AgentCrash`. :func:`config_from_agent_file`
starts one step earlier, from an agent file's text, read as the agent reads it
(HCL 1 or JSON, the last ``plugin`` block with the plugin's label).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from nomad_device.agentconfig import hcldec
from nomad_device.wire import cty, hclspec

__all__ = [
    "AgentCrash",
    "ConfigBodyError",
    "ConfigRequired",
    "config_from_agent_file",
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
    from nomad_device.agentconfig import setconfig

    result = setconfig.from_agent_text(text, spec, plugin)
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
    """The cty value (and its concrete type) hcldec would produce for ``body``.

    A schema Nomad could not build a decoder from raises
    :class:`~nomad_device.agentconfig.hcldec.SchemaError` (a :class:`ValueError`).
    """
    if isinstance(body, str):
        try:
            loaded = hcldec.loads(body)
        except ValueError as exc:
            raise ConfigBodyError([f"config is not valid JSON: {exc}"]) from None
        if not isinstance(loaded, dict):
            raise ConfigBodyError(["config JSON must be an object of settings"])
        body = loaded
    try:
        document = hcldec.from_python(body)
    except (TypeError, ValueError) as exc:
        raise ConfigBodyError([str(exc)]) from None
    decoded = hcldec.decode(hcldec.compile_spec(spec), document)
    if decoded.panic is not None:
        from nomad_device.agentconfig.setconfig import explain_panic

        raise AgentCrash([explain_panic(decoded.panic)])
    if decoded.diagnostics:
        problems = [_problem(d) for d in decoded.diagnostics]
        if all(_is_missing(d) for d in decoded.diagnostics):
            raise ConfigRequired(problems, [_setting(d) for d in decoded.diagnostics])
        raise ConfigBodyError(problems)
    return decoded.value, decoded.type


def _problem(diag: hcldec.Diagnostic) -> str:
    where = cty.format_path(diag.path)
    return f"{where}: {diag.text()}" if where else diag.text()


def _setting(diag: hcldec.Diagnostic) -> str:
    """The key a "missing" diagnostic asks for, with the path of the body it is missing from."""
    quoted = _QUOTED_RE.search(diag.detail)
    name = quoted.group(1) if quoted else diag.summary
    where = cty.format_path(diag.path)
    return f"{where}.{name}" if where else name


_QUOTED_RE = re.compile(r'"([^"\\]+)"')


def _is_missing(diag: hcldec.Diagnostic) -> bool:
    """Whether hcldec reports something required that the body does not give."""
    summary = diag.summary
    return (
        summary == "Missing required argument"
        or (summary.startswith("Missing ") and summary.endswith(" block"))
        or (summary.startswith("Insufficient ") and summary.endswith(" blocks"))
    )
