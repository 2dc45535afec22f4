"""Read plugin config the way a Nomad agent reads its config file.

An agent file names a plugin and configures it::

    plugin "nomad-device-example" {
      args = ["-v"]
      config {
        dir = "/srv/devices"
      }
    }

The agent reads this with HCL 1 into Go maps, where every object -- a nested
block or an ``= { ... }`` value -- becomes a *list holding one map*, repeated
blocks add to that list, and labelled blocks nest one list per label. That
structure, written as JSON, is what the plugin's schema is decoded against
(:mod:`nomad_device.wire.hcldec`). This module parses the file with python-hcl2
(the ``cli`` extra) and rebuilds that structure with line numbers, so errors can
point at the file.

Also accepted: a bare ``config { ... }`` at the top of a file, and JSON text
(``--config-json``), which is taken as the JSON body itself.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from nomad_device.wire.hcldec import JProp, JValue, Source, from_python

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "CLI_EXTRA_HINT",
    "AgentFile",
    "ConfigFileError",
    "MissingExtraError",
    "PluginBlock",
    "block_names",
    "heredoc_text",
    "load_hcl2",
    "load_json_config",
    "parse_agent_file",
    "parse_agent_text",
    "plugin_file",
    "unescape_string",
]

CLI_EXTRA_HINT: Final = "pip install 'nomad-device-sdk[cli]'"

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


class ConfigFileError(ValueError):
    """The config file cannot be read; the message names the file and line."""


class MissingExtraError(RuntimeError):
    """python-hcl2 is not installed (or too old to be used)."""


def load_hcl2() -> ModuleType:
    """python-hcl2's API module, or :class:`MissingExtraError` saying what to install."""
    try:
        import hcl2.api
    except ImportError:
        raise MissingExtraError(
            "reading HCL config files needs python-hcl2, which comes with the launcher's "
            f"extra: {CLI_EXTRA_HINT}"
        ) from None
    if not hasattr(hcl2.api, "parses_to_tree"):
        raise MissingExtraError(
            f"python-hcl2 is too old for the launcher (need 8 or newer): {CLI_EXTRA_HINT}"
        )
    return hcl2.api


@dataclass
class PluginBlock:
    """One ``plugin "name" { ... }`` block (or a bare ``config`` block, name None)."""

    name: str | None
    args: list[str] | None
    config: JValue | None
    line: int


@dataclass
class AgentFile:
    """What a file says about plugins."""

    origin: str
    plugins: list[PluginBlock] = field(default_factory=list)
    bare: PluginBlock | None = None

    def select(self, command: Sequence[str], wanted: str | None) -> PluginBlock:
        """The block for a plugin: by ``wanted`` name, else by the plugin's file name
        (see :func:`block_names`), else the only one there is."""
        if wanted is not None:
            for block in self.plugins:
                if block.name == wanted:
                    return block
            known = ", ".join(repr(b.name) for b in self.plugins) or "none"
            raise ConfigFileError(
                f"{self.origin}: no plugin block named {wanted!r} (found: {known})"
            )
        if self.plugins:
            candidates = block_names(command)
            for name in candidates:
                for block in self.plugins:
                    if block.name == name:
                        return block
            if len(self.plugins) == 1 and self.bare is None:
                return self.plugins[0]
            names = ", ".join(repr(b.name) for b in self.plugins)
            looked = " or ".join(repr(n) for n in candidates) or "the plugin's file"
            raise ConfigFileError(
                f"{self.origin}: several plugin blocks ({names}) and none is named after "
                f"{looked}; choose one with --plugin-name"
            )
        if self.bare is not None:
            return self.bare
        raise ConfigFileError(
            f'{self.origin}: found neither a plugin "<name>" {{ ... }} block nor a '
            "config { ... } block"
        )


#: Interpreters whose first operand is the plugin's own file (``python3 plugin.py``).
_INTERPRETER_RE: Final = re.compile(r"(python|pypy)[0-9.]*(\.exe)?")


def plugin_file(command: Sequence[str]) -> str:
    """The name of the plugin's own file in ``command``, as it would lie in ``plugin_dir``.

    That is the executable's file name, except for a script run by an interpreter
    (``python3 license_seats.py``, as the launcher runs a ``.py`` file that is not
    executable): then it is the script's, and for ``python3 -m pkg.plugin`` the
    module's. Empty when there is no command.
    """
    if not command:
        return ""
    first = os.path.basename(command[0])
    if _INTERPRETER_RE.fullmatch(first):
        rest = list(command[1:])
        while rest:
            arg = rest.pop(0)
            if arg == "-m" and rest:
                return rest[0]
            if arg in ("-c", "-"):
                break
            if arg in ("-X", "-W") and rest:
                rest.pop(0)  # an option's own value
                continue
            if not arg.startswith("-"):
                return os.path.basename(arg)
    return first


def block_names(command: Sequence[str]) -> list[str]:
    """The ``plugin "<name>"`` labels that name this command's plugin, best first.

    Nomad matches a block to the file name in ``plugin_dir`` (less ``.exe``). A
    Python script may be installed there as ``foo.py`` or, more often, as
    ``foo``: so for ``foo.py`` a block ``"foo.py"`` is looked for first, then
    ``"foo"``.
    """
    name = plugin_file(command)
    if not name:
        return []
    if name.endswith(".exe") and len(name) > 4:
        name = name.removesuffix(".exe")
    names = [name]
    if name.endswith(".py") and len(name) > 3:
        names.append(name.removesuffix(".py"))
    return names


def parse_agent_file(path: str | os.PathLike[str]) -> AgentFile:
    """Parse an agent-style HCL file; raise :class:`ConfigFileError` or
    :class:`MissingExtraError`."""
    origin = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(f"{origin}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{origin}: not UTF-8 text") from None
    return parse_agent_text(text, origin)


def parse_agent_text(text: str, origin: str = "<config>") -> AgentFile:
    """Like :func:`parse_agent_file`, for text already in hand."""
    api = load_hcl2()
    try:
        tree = api.parses_to_tree(text)
    except Exception as exc:  # lark raises many error types; all mean "bad syntax"
        from nomad_device.wire.hclsyntax import explain

        line, problem = explain(exc, text)
        where = str(line) if line is not None else "?"
        raise ConfigFileError(f"{origin}:{where}: invalid HCL: {problem}") from None
    return _Reader(origin).agent_file(tree)


def load_json_config(text: str, origin: str = "--config-json") -> JValue:
    """A JSON object given on the command line (or read from ``@file``) as the config body."""
    if text.startswith("@"):
        source = text[1:]
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigFileError(f"{source}: cannot read: {exc.strerror or exc}") from None
        origin = source
    try:
        data = json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
    except ValueError as exc:
        raise ConfigFileError(f"{origin}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"{origin}: the config must be a JSON object")
    return from_python(data)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


# ------------------------------------------------------------------ tree walk


def _data(node: Any) -> str:
    """A lark Tree's rule name, or '' for a Token."""
    data = getattr(node, "data", None)
    return str(data) if data is not None else ""


def _line(node: Any) -> int | None:
    line = getattr(node, "line", None)
    if isinstance(line, int):
        return line
    meta = getattr(node, "meta", None)
    line = getattr(meta, "line", None) if meta is not None else None
    return line if isinstance(line, int) else None


def _subtrees(node: Any) -> list[Any]:
    return [c for c in node.children if _data(c)]


class _Reader:
    """Walks python-hcl2's lark tree and builds Nomad's view of it."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, node: Any, message: str) -> ConfigFileError:
        line = _line(node)
        return ConfigFileError(f"{self.origin}:{line if line is not None else '?'}: {message}")

    # -- top level ------------------------------------------------------------

    def agent_file(self, tree: Any) -> AgentFile:
        out = AgentFile(self.origin)
        body = _subtrees(tree)[0]
        for item in _subtrees(body):
            if _data(item) != "block":
                continue
            kind, labels, inner = self.block_parts(item)
            if kind == "plugin":
                if len(labels) != 1:
                    raise self.fail(item, 'a plugin block takes one label: plugin "<name>" { }')
                out.plugins.append(self.plugin_block(labels[0], inner, _line(item) or 0))
            elif kind == "config" and not labels:
                if out.bare is not None:
                    raise self.fail(item, "only one top-level config block is allowed")
                out.bare = PluginBlock(None, None, self.body(inner), _line(item) or 0)
        return out

    def plugin_block(self, name: str, body: Any, line: int) -> PluginBlock:
        block = PluginBlock(name, None, None, line)
        for item in _subtrees(body):
            kind = _data(item)
            if kind == "attribute":
                key, expr = self.attribute_parts(item)
                if key == "args":
                    block.args = self.args(expr)
                elif key == "config":
                    block.config = self.config_from_expr(expr, item)
                else:
                    raise self.fail(
                        item,
                        f'plugin "{name}": unexpected {key!r} (a plugin block takes '
                        "args and config)",
                    )
            elif kind == "block":
                key, labels, inner = self.block_parts(item)
                if key != "config" or labels:
                    raise self.fail(
                        item,
                        f'plugin "{name}": unexpected block {key!r} (a plugin block takes '
                        "args and config)",
                    )
                if block.config is not None:
                    raise self.fail(item, f'plugin "{name}": config is set more than once')
                block.config = self.body(inner)
        return block

    def args(self, expr: Any) -> list[str]:
        value = self.value(expr, in_map=False)
        if value.kind != "array" or not all(i.kind == "string" for i in value.items):
            raise self.fail(expr, "args must be a list of strings")
        return [str(i.value) for i in value.items]

    def config_from_expr(self, expr: Any, item: Any) -> JValue:
        node = self.unwrap(expr)
        if _data(node) != "object":
            raise self.fail(item, "config must be a block: config { ... }")
        return self.object_literal(node)

    # -- pieces -----------------------------------------------------------------

    def name_of(self, node: Any) -> str:
        kind = _data(node)
        if kind in ("identifier", "keyword", "literal_value"):
            return str(node.children[0])
        if kind == "string":
            return self.string(node)
        raise self.fail(node, f"expected a name, found {kind or node!r}")

    def attribute_parts(self, node: Any) -> tuple[str, Any]:
        subs = _subtrees(node)
        return self.name_of(subs[0]), subs[-1]

    def block_parts(self, node: Any) -> tuple[str, list[str], Any]:
        subs = [s for s in _subtrees(node) if _data(s) != "new_line_or_comment"]
        return self.name_of(subs[0]), [self.name_of(s) for s in subs[1:-1]], subs[-1]

    def body(self, body: Any) -> JValue:
        """A block body in a map: HCL 1's map, with objects turned into lists."""
        obj = JValue("object", [], Source(_line(body)))
        for item in _subtrees(body):
            kind = _data(item)
            if kind == "attribute":
                key, expr = self.attribute_parts(item)
                value = self.value(expr, in_map=True)
                self.put(obj, JProp(key, value, Source(_line(item))))
            elif kind == "block":
                key, labels, inner = self.block_parts(item)
                where = Source(_line(item))
                content = self.body(inner)
                content.where = where
                for label in reversed(labels):
                    wrapped = JValue("array", [content], where, from_hcl_object=True)
                    content = JValue("object", [JProp(label, wrapped, where)], where)
                value = JValue("array", [content], where, from_hcl_object=True)
                self.put(obj, JProp(key, value, where))
        return obj

    def put(self, obj: JValue, prop: JProp) -> None:
        """Add a key as HCL 1 does: repeated lists and blocks add up, the rest replace."""
        for existing in obj.props:
            if existing.name != prop.name:
                continue
            if existing.value.kind == "array" and prop.value.kind == "array":
                existing.value.items.extend(prop.value.items)
                existing.value.from_hcl_object = (
                    existing.value.from_hcl_object and prop.value.from_hcl_object
                )
            else:
                existing.value = prop.value
                existing.where = prop.where
            return
        obj.props.append(prop)

    def unwrap(self, node: Any) -> Any:
        """Step through ``expr_term`` wrappers and parentheses."""
        while _data(node) == "expr_term":
            subs = [s for s in _subtrees(node) if _data(s) != "new_line_or_comment"]
            if len(subs) != 1:
                break
            node = subs[0]
        return node

    def value(self, expr: Any, *, in_map: bool) -> JValue:
        node = self.unwrap(expr)
        kind = _data(node)
        where = Source(_line(node) or _line(expr))
        if kind == "string":
            return JValue("string", self.string(node), where)
        if kind in ("heredoc_template", "heredoc_template_trim"):
            return JValue("string", self.heredoc(node, kind.endswith("_trim")), where)
        if kind == "int_lit":
            return JValue("number", self.integer(node, str(node.children[0])), where)
        if kind == "float_lit":
            return JValue("number", self.floating(node, str(node.children[0])), where)
        if kind == "literal_value":
            word = str(node.children[0])
            if word == "null":
                raise self.fail(
                    node,
                    "null is not a value in Nomad's agent configuration (HCL 1 rejects it); "
                    "leave the setting out to get its default",
                )
            return JValue("bool", word == "true", where)
        if kind == "unary_op":
            op = str(node.children[0])
            inner = self.value(node.children[1], in_map=in_map)
            if op == "-" and inner.kind == "number":
                inner.value = -inner.value  # type: ignore[operator]
                return inner
            raise self.fail(node, f"only literal values are allowed here, not {op!r} expressions")
        if kind == "tuple":
            items = [
                self.value(s, in_map=False)
                for s in _subtrees(node)
                if _data(s) != "new_line_or_comment"
            ]
            return JValue("array", items, where)
        if kind == "object":
            obj = self.object_literal(node)
            if in_map:
                # HCL 1 decodes an object held in a map as a list of one map.
                return JValue("array", [obj], where, from_hcl_object=True)
            return obj
        raise self.fail(
            node,
            "only literal values (strings, numbers, bools, lists and objects) are allowed in "
            f"a plugin config, as in Nomad's agent configuration; found {kind or node!r}",
        )

    def object_literal(self, node: Any) -> JValue:
        obj = JValue("object", [], Source(_line(node)))
        for elem in _subtrees(node):
            if _data(elem) != "object_elem":
                continue
            subs = _subtrees(elem)
            key_node = self.unwrap(subs[0].children[0]) if _data(subs[0]) else subs[0]
            key = self.name_of(key_node)
            value = self.value(subs[-1], in_map=True)
            self.put(obj, JProp(key, value, Source(_line(elem))))
        return obj

    def integer(self, node: Any, text: str) -> int:
        value = int(text, 10)
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise self.fail(
                node, f"{text} does not fit a 64-bit integer, as Nomad's agent config needs"
            )
        return value

    def floating(self, node: Any, text: str) -> float:
        # HCL 1 reads a number with a fraction or exponent as a float64 first.
        value = float(text)
        if not math.isfinite(value):
            raise self.fail(node, f"{text} is out of range for a 64-bit float")
        return value

    def string(self, node: Any) -> str:
        out: list[str] = []
        for part in node.children:
            if _data(part) != "string_part":
                continue
            piece = part.children[0]
            if _data(piece):
                raise self.fail(
                    part,
                    "Unsupported template: the launcher (like a Nomad agent, which has no "
                    'variables here) takes only literal text. Write "$${" for a literal "${".',
                )
            kind = getattr(piece, "type", "")
            text = str(piece)
            if kind in ("ESCAPED_INTERPOLATION", "ESCAPED_DIRECTIVE"):
                out.append(text)  # kept escaped: the JSON body unescapes "$${" itself
            else:
                out.append(self.unescape(part, text))
        return "".join(out)

    def unescape(self, node: Any, text: str) -> str:
        out: list[str] = []
        i = 0
        simple = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}
        while i < len(text):
            ch = text[i]
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            esc = text[i + 1 : i + 2]
            if esc in simple:
                out.append(simple[esc])
                i += 2
                continue
            if esc in ("u", "U"):
                width = 4 if esc == "u" else 8
                digits = text[i + 2 : i + 2 + width]
                try:
                    code = int(digits, 16) if len(digits) == width else -1
                except ValueError:
                    code = -1
                if code < 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise self.fail(node, f"invalid escape \\{esc}{digits}")
                out.append(chr(code))
                i += 2 + width
                continue
            raise self.fail(node, f"invalid escape sequence \\{esc}")
        return "".join(out)

    def heredoc(self, node: Any, trim: bool) -> str:
        raw = str(node.children[0])
        first, _, rest = raw.partition("\n")
        marker = first.lstrip("<-").strip()
        lines = rest.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if lines and lines[-1].strip() == marker:
            lines.pop()
        lines = [ln.rstrip("\r") for ln in lines]
        if trim:
            indents = [len(ln) - len(ln.lstrip(" \t")) for ln in lines if ln.strip()]
            cut = min(indents, default=0)
            lines = [ln[cut:] for ln in lines]
        return "".join(ln + "\n" for ln in lines)


def unescape_string(node: Any, text: str, origin: str) -> str:
    """One literal part of a quoted HCL string, escapes resolved as HCL resolves them."""
    return _Reader(origin).unescape(node, text)


def heredoc_text(node: Any, trim: bool, origin: str) -> str:
    """A heredoc's text (``<<-`` trimmed when ``trim``), as HCL reads it."""
    return _Reader(origin).heredoc(node, trim)
