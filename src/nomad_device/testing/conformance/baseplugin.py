"""The BasePlugin checks: PluginInfo, ConfigSchema and SetConfig.

What a Nomad agent asks of every plugin at start, before any device RPC
(protocol notes, section 5): who it is, what config it takes, and whether it
accepts the config the agent decodes for it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from nomad_device.constants import DEVICE_API_VERSION, PLUGIN_TYPE_DEVICE
from nomad_device.host import CallError, DevicePluginClient
from nomad_device.testing.conformance.checks import Status
from nomad_device.testing.conformance.suite import Suite

__all__ = ["config_schema", "plugin_info", "schema_safe", "set_config"]

# hashicorp/go-version's notion of a version: digits with dots, optional
# pre-release and build metadata, an optional leading "v".
_VERSION_RE = re.compile(
    r"v?\d+(\.\d+)*"
    r"(-?[0-9A-Za-z~-]+(\.[0-9A-Za-z~-]+)*)?"
    r"(\+[0-9A-Za-z~-]+(\.[0-9A-Za-z~-]+)*)?"
)
_STRICT_SEMVER_RE = re.compile(r"v?\d+\.\d+\.\d+([-+][0-9A-Za-z.~+-]*)?")


def plugin_info(suite: Suite, client: DevicePluginClient, timeout: float) -> None:
    try:
        info = client.info(timeout)
    except CallError as exc:
        suite.put("plugin-info", Status.FAIL, f"PluginInfo failed: {exc.code.name}: {exc.details}")
        return
    suite.plugin_name, suite.plugin_version = info.name, info.version
    evidence = [
        f"name {info.name!r}, version {info.version!r}, type {info.type}, "
        f"API versions {list(info.api_versions)}"
    ]
    problems = []
    if info.type != PLUGIN_TYPE_DEVICE:
        problems.append(f"type is {info.type}, not DEVICE ({PLUGIN_TYPE_DEVICE})")
    if DEVICE_API_VERSION not in info.api_versions:
        problems.append(
            f"plugin_api_versions {list(info.api_versions)} lack {DEVICE_API_VERSION}: "
            "Nomad skips the plugin"
        )
    if not _VERSION_RE.fullmatch(info.version):
        problems.append(
            f"plugin_version {info.version!r} does not parse as a version: agent start fails"
        )
    if not info.name:
        problems.append("the name is empty")
    if problems:
        suite.put("plugin-info", Status.FAIL, "; ".join(problems), evidence)
    elif not _STRICT_SEMVER_RE.fullmatch(info.version):
        suite.put(
            "plugin-info",
            Status.WARN,
            f"version {info.version!r} parses, but is not MAJOR.MINOR.PATCH",
            evidence,
        )
    else:
        suite.put("plugin-info", Status.PASS, f"{info.name} {info.version}", evidence)


def config_schema(suite: Suite, client: DevicePluginClient, timeout: float) -> Any:
    from nomad_device.wire import cty, hclspec

    try:
        pb = client.schema_proto(timeout)
    except CallError as exc:
        suite.put(
            "config-schema", Status.FAIL, f"ConfigSchema failed: {exc.code.name}: {exc.details}"
        )
        return None
    if pb.WhichOneof("block") is None:
        # An empty spec: go's Convert yields no decoder; Nomad accepts no config.
        suite.put("config-schema", Status.PASS, "no schema (the plugin takes no config)")
        suite.put("schema-safe", Status.PASS, "no schema, nothing to decode")
        return hclspec.Object({})
    try:
        spec = hclspec.from_proto(pb)
        hclspec.implied_type(spec)
        problems = list(_literal_problems(spec))
    except (ValueError, TypeError, cty.CtyDecodeError) as exc:
        suite.put("config-schema", Status.FAIL, f"the schema does not convert: {exc}")
        return None
    if problems:
        suite.put("config-schema", Status.FAIL, "; ".join(problems))
        return None
    schema_safe(suite, spec)
    names = sorted(spec.attributes) if isinstance(spec, hclspec.Object) else []
    if not isinstance(spec, hclspec.Object):
        suite.put(
            "config-schema",
            Status.WARN,
            f"the schema's root is a {type(spec).__name__}, not an Object",
        )
    else:
        suite.put(
            "config-schema",
            Status.PASS,
            f"{len(names)} setting(s): {', '.join(names) or '(none)'}",
        )
    return spec


def schema_safe(suite: Suite, spec: Any) -> None:
    """Look for configs that make the agent panic, and show one for each way found."""
    from nomad_device.agentconfig import agentfile, schemasafety

    names = agentfile.block_names(suite.command)
    label = suite.config_block.name if suite.config_block and suite.config_block.name else None
    found = schemasafety.hazards(spec, label or (names[-1] if names else "plugin"))
    if not found:
        suite.put(
            "schema-safe",
            Status.PASS,
            "no combination of set and unset settings gives values of different types",
        )
        return
    evidence = []
    for hazard in found:
        evidence.append(f"{hazard.where}: {hazard.problem} (crashes {hazard.when})")
        evidence.append("this agent config crashes the agent:\n" + hazard.config.rstrip("\n"))
        evidence.append(f"panic: {hazard.panic[:300]}")
    always = [h.where for h in found if h.when == schemasafety.ALWAYS]
    summary = (
        f"every config crashes a Nomad agent ({', '.join(always)})"
        if always
        else f"a Nomad agent crashes on some configs: {', '.join(h.where for h in found)}"
    )
    suite.put("schema-safe", Status.FAIL, summary, evidence)


def set_config(suite: Suite, client: DevicePluginClient, spec: Any, timeout: float) -> bytes | None:
    from nomad_device.agentconfig import setconfig

    label = "the defaults-only config"
    data: bytes | None
    if suite.options.config is not None:
        data, label = suite.options.config, "the given config bytes"
    elif spec is None:
        suite.put("set-config", Status.SKIP, "skipped: no usable schema (see config-schema)")
        data = b""  # what Nomad never gets to: let later checks run on the plugin's own defaults
        with contextlib.suppress(CallError):
            client.set_config(data, timeout=timeout)
        return data
    elif suite.options.config_json is not None:
        label = "the given JSON config"
        try:
            data = setconfig.config_from_json(spec, suite.options.config_json)
        except setconfig.AgentCrash as exc:
            suite.put("set-config", Status.FAIL, f"the given JSON config: {exc}")
            return None
        except (setconfig.ConfigBodyError, ValueError) as exc:
            suite.put(
                "set-config",
                Status.FAIL,
                f"the given JSON config does not fit the schema: {exc}",
            )
            return None
    elif suite.config_block is not None:
        label = _block_label(suite)
        data = _encode_block(suite, spec, label)
        if data is None:
            return None
    else:
        try:
            data = setconfig.defaults_only_config(spec)
        except setconfig.ConfigRequired as exc:
            suite.put(
                "set-config",
                Status.SKIP,
                f"the plugin needs operator config to run: {_required(exc.settings)}; pass "
                "--config agent.hcl or --config-json to check the rest",
                [f"required: {p}" for p in exc.problems],
            )
            return None
        except (setconfig.ConfigBodyError, ValueError) as exc:
            suite.put("set-config", Status.FAIL, f"the schema's defaults do not encode: {exc}")
            return None
    evidence = [f"msgpack: {data.hex()[:120]}{'...' if len(data) > 60 else ''}"]
    # A validation launch sends the same bytes twice; the long-lived launch once more.
    for attempt in (1, 2):
        try:
            client.set_config(data, timeout=timeout)
        except CallError as exc:
            suite.put(
                "set-config",
                Status.FAIL,
                f"SetConfig with {label} failed (call {attempt}): {exc.code.name}: {exc.details}",
                evidence,
            )
            return None
    suite.put("set-config", Status.PASS, f"{label} accepted (twice)", evidence)
    return data


def _required(settings: Sequence[str]) -> str:
    names = [f"'{name}'" for name in settings]
    if len(names) == 1:
        return f"{names[0]} is required and has no default"
    return f"{', '.join(names[:-1])} and {names[-1]} are required and have no default"


def _block_label(suite: Suite) -> str:
    block = suite.config_block
    assert block is not None
    origin = block.origin or "the agent file"
    where = f'plugin "{block.name}" in {origin}' if block.name else origin
    return f"the config from {where}"


def _encode_block(suite: Suite, spec: Any, label: str) -> bytes | None:
    """The bytes a Nomad agent sends for the agent file's block (None when it would not)."""
    from nomad_device.agentconfig import setconfig

    block = suite.config_block
    assert block is not None
    origin = block.origin or "config"
    result = setconfig.from_body(block.config, spec, origin)
    if result.outcome == "panic":
        suite.put("set-config", Status.FAIL, f"{label}: {result.explanation}")
        return None
    if result.stage == "schema":
        suite.put(
            "set-config", Status.FAIL, f"the schema cannot decode a config: {result.messages[0]}"
        )
        return None
    if not result.ok:
        problems = result.explanation.split("\n")
        suite.put(
            "set-config",
            Status.FAIL,
            f"{label} does not fit the schema ({len(result.messages)} problem(s)); a Nomad "
            "agent would refuse to start",
            problems,
        )
        return None
    return result.data


def _literal_problems(spec: Any) -> Iterable[str]:
    """Literals and types anywhere in the tree that Nomad could not evaluate."""
    from nomad_device.wire import cty, hclspec

    if isinstance(spec, hclspec.Literal):
        try:
            hclspec.parse_literal(spec.value)
        except ValueError as exc:
            yield f"literal {spec.value!r}: {exc}"
    elif isinstance(spec, hclspec.Attr | hclspec.BlockAttrs):
        try:
            cty.parse_type(spec.type)
        except ValueError as exc:
            yield f"{spec.name}: type {spec.type!r}: {exc}"
    elif isinstance(spec, hclspec.Object):
        for sub in spec.attributes.values():
            yield from _literal_problems(sub)
    elif isinstance(spec, hclspec.Array):
        for sub in spec.values:
            yield from _literal_problems(sub)
    elif isinstance(spec, hclspec.Default):
        yield from _literal_problems(spec.primary)
        yield from _literal_problems(spec.default)
    elif isinstance(spec, hclspec.Block | hclspec.BlockList | hclspec.BlockSet | hclspec.BlockMap):
        yield from _literal_problems(spec.nested)
