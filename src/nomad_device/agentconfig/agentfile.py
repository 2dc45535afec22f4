"""Read plugin config from an agent file the way a Nomad agent does.

An agent file names a plugin and configures it::

    plugin "nomad-device-example" {
      args = ["-v"]
      config {
        dir = "/srv/devices"
      }
    }

The agent parses the file with HCL 1 (:mod:`nomad_device.agentconfig.hcl1`; native
syntax or JSON) and decodes it into Go values: each ``plugin`` block becomes a
label, ``args`` and a ``config`` map, in which every object -- a nested block
or an ``= { ... }`` value -- is a *list of maps*, repeated keys merge (lists and
blocks add up, a later scalar replaces an earlier one, converted to the
earlier one's Go type) and labelled blocks nest one list per label. That map,
written as JSON, is what the plugin's schema is decoded against
(:mod:`nomad_device.agentconfig.hcldec`). This module reproduces that decoding,
keeping line numbers for messages, and what the agent does around it:

- keys left over from plugin items (a JSON file's nested objects read as
  labels) make the agent refuse the file (``unexpected keys device, kvm``);
- of several ``plugin`` blocks with one label the agent keeps the last, whole;
- a directory is read as ``nomad agent -config=DIR`` reads it: its ``.hcl`` and
  ``.json`` files in name order, editors' temporary files skipped; several files
  merge as the agent merges them (a later block's ``args`` and ``config``
  replace the earlier ones' unless empty);
- keys a ``plugin`` block does not know are silently ignored by the agent;
  they are reported here as warnings.

Also accepted, for the launcher: a bare ``config { ... }`` at the top of a
file, and JSON text (``--config-json``) taken as the config body itself.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Final, TypeAlias

from nomad_device.agentconfig import hcl1
from nomad_device.agentconfig.hcldec import (
    JProp,
    JValue,
    Source,
    from_python,
    loads,
    name_suggestion,
)
from nomad_device.golang import quote
from nomad_device.golang.strconv import float_error, int_error, parse_float, parse_int

__all__ = [
    "AgentFile",
    "ConfigFileError",
    "PluginBlock",
    "agent_paths",
    "block_names",
    "load_json_config",
    "merge_agent_files",
    "parse_agent_file",
    "parse_agent_paths",
    "parse_agent_text",
    "plugin_file",
]


class ConfigFileError(ValueError):
    """The config file cannot be read; the message names the file (and line).

    ``agent`` is what a Nomad agent says about the file, when it refuses it too
    (empty for problems of the launcher's own, such as an ambiguous block or a
    file past the reader's limits);
    ``crash`` is set when the agent would not refuse the file but panic.
    """

    def __init__(self, message: str, *, agent: str = "", crash: bool = False) -> None:
        super().__init__(message)
        self.agent = agent
        self.crash = crash


@dataclass
class PluginBlock:
    """One ``plugin "name" { ... }`` block (or a bare ``config`` block, name None)."""

    name: str | None
    args: list[str] | None
    config: JValue | None
    line: int
    #: Earlier blocks with the same label, which the agent ignores.
    shadowed: list[int] = field(default_factory=list)
    #: The file the block (and its ``line``) comes from; the config's, when merged.
    origin: str = ""
    #: The Go map held no key (``config {}`` or none): a later file's block then
    #: keeps an earlier one's config.
    empty: bool = True


@dataclass
class AgentFile:
    """What a file says about plugins (one block per label: the last)."""

    origin: str
    plugins: list[PluginBlock] = field(default_factory=list)
    bare: PluginBlock | None = None
    #: Things the agent accepts silently that an operator would want to know.
    warnings: list[str] = field(default_factory=list)

    def select(self, command: Sequence[str], wanted: str | None) -> PluginBlock:
        """The block for a plugin: by ``wanted`` name, else by the plugin's file name as
        the agent picks it (see :func:`block_names`), never "the only block": the agent
        skips a block named otherwise and starts the plugin without config."""
        if wanted is not None:
            for block in self.plugins:
                if block.name == wanted:
                    return block
            known = ", ".join(repr(b.name) for b in self.plugins) or "none"
            raise ConfigFileError(
                f"{self.origin}: no plugin block named {wanted!r} (found: {known})"
            )
        if not self.plugins:
            if self.bare is not None:
                return self.bare
            raise ConfigFileError(
                f'{self.origin}: found neither a plugin "<name>" {{ ... }} block nor a '
                "config { ... } block"
            )
        candidates = block_names(command)
        for name in candidates:
            for block in self.plugins:
                if block.name == name:
                    return block
        labels = [str(b.name) for b in self.plugins]
        near = next(filter(None, (name_suggestion(c, labels) for c in candidates)), "")
        looked = " or ".join(candidates) or "the plugin's file"
        hint = f"did you mean {quote(near)}?" if near else f"found {', '.join(map(quote, labels))}"
        raise ConfigFileError(
            f"{self.origin}: no block for {looked}; {hint} (a Nomad agent takes the plugin "
            f"block labelled with the file's name in plugin_dir, and skips the others: "
            "rename the block, or choose one with --plugin-name)"
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


AgentPaths: TypeAlias = "str | os.PathLike[str] | Sequence[str | os.PathLike[str]]"


def agent_paths(value: AgentPaths | None) -> list[str]:
    """The paths in a ``config_file`` option: none, one, or several in order."""
    if value is None:
        return []
    if isinstance(value, str | os.PathLike):
        return [os.fspath(value)]
    return [os.fspath(v) for v in value]


def parse_agent_file(path: str | os.PathLike[str]) -> AgentFile:
    """Read an agent file (HCL or JSON) or a directory of them as the agent does.

    Raises :class:`ConfigFileError`.
    """
    origin = os.fspath(path)
    if os.path.isdir(origin):
        return _parse_agent_dir(origin)
    return _read_agent_file(origin)


def _read_agent_file(origin: str) -> AgentFile:
    try:
        raw = Path(origin).read_bytes()
    except OSError as exc:
        raise ConfigFileError(f"{origin}: cannot read: {exc.strerror or exc}") from None
    return parse_agent_text(raw.decode("utf-8", "surrogateescape"), origin)


def parse_agent_paths(paths: AgentPaths) -> AgentFile:
    """Several ``-config`` paths (files or directories), merged in order as the agent does."""
    names = agent_paths(paths)
    if not names:
        raise ConfigFileError("no agent file given")
    merged = parse_agent_file(names[0])
    for name in names[1:]:
        merged = merge_agent_files(merged, parse_agent_file(name))
    if len(names) > 1:
        merged.origin = ", ".join(names)
    return merged


def _parse_agent_dir(directory: str) -> AgentFile:
    """``nomad agent -config=DIR``: its ``.hcl`` and ``.json`` files in name order.

    As the agent: entries that are directories are skipped (a link to one is not,
    and fails to read), and so are editors' temporary files (``x.hcl~``,
    ``.#x.hcl``, ``#x.hcl#``). An empty directory configures no plugin.
    """
    try:
        with os.scandir(directory) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as exc:
        raise ConfigFileError(f"{directory}: cannot read: {exc.strerror or exc}") from None
    merged: AgentFile | None = None
    for entry in entries:
        name = entry.name
        if entry.is_dir(follow_symlinks=False) or not name.endswith((".hcl", ".json")):
            continue
        if (
            name.endswith("~")
            or name.startswith(".#")
            or (name.startswith("#") and name.endswith("#"))
        ):
            continue
        one = _read_agent_file(os.path.join(directory, name))
        merged = one if merged is None else merge_agent_files(merged, one)
    if merged is None:
        return AgentFile(directory)
    merged.origin = directory
    return merged


def merge_agent_files(first: AgentFile, second: AgentFile) -> AgentFile:
    """Two agent files as the agent merges them (``PluginConfigSetMerge``).

    Blocks are matched by label; for a label in both, the second file's ``args``
    and ``config`` replace the first's when they are not empty. An operator
    would want to know that a later file replaced a config, so that is a warning.
    """
    out = AgentFile(second.origin, warnings=[*first.warnings, *second.warnings])
    later = {b.name: b for b in second.plugins}
    for block in first.plugins:
        other = later.pop(block.name, None)
        if other is None:
            out.plugins.append(block)
            continue
        merged = PluginBlock(
            block.name,
            other.args if other.args else block.args,
            block.config if other.empty else other.config,
            block.line if other.empty else other.line,
            origin=block.origin if other.empty else other.origin,
            empty=block.empty and other.empty,
        )
        if not other.empty and not block.empty:
            out.warnings.append(
                f"{other.origin}:{other.line}: plugin {quote(str(block.name))} replaces the "
                f"config given at {block.origin}:{block.line}; the agent uses only the later "
                "one, whole"
            )
        out.plugins.append(merged)
    out.plugins += later.values()
    out.bare = second.bare if second.bare is not None else first.bare
    return out


def parse_agent_text(text: str, origin: str = "<config>") -> AgentFile:
    """Like :func:`parse_agent_file`, for text already in hand."""
    kind = "JSON" if hcl1.is_json(text) else "HCL"
    try:
        root = hcl1.parse(text)
        return _Decoder(origin).agent_file(root)
    except hcl1.HCL1Error as exc:
        from nomad_device.agentconfig.hclsyntax import hint

        extra = hint(str(exc), text)
        raise ConfigFileError(
            f"{_at(origin, str(exc))}: invalid {kind}, the agent refuses to start: {exc}"
            + (f"\n  hint: {extra}" if extra else ""),
            agent=str(exc),
        ) from None
    except _DecodeError as exc:
        raise ConfigFileError(
            f"{_at(origin, str(exc))}: the agent refuses to start: failed to decode HCL file: "
            f"{exc}",
            agent=str(exc),
        ) from None
    except hcl1.HCL1Panic as exc:
        raise ConfigFileError(
            f"{origin}: a Nomad agent would crash reading this file (HCL 1 panics: {exc}); "
            "check the escapes in its strings",
            agent=str(exc),
            crash=True,
        ) from None
    except hcl1.HCL1Limit as exc:
        problem = str(exc).partition(": ")[2]
        raise ConfigFileError(
            f"{_at(origin, str(exc))}: {problem}: the launcher reads no deeper (what a Nomad "
            "agent makes of it is not checked)"
        ) from None


def _at(origin: str, message: str) -> str:
    """``origin:line`` when HCL 1's message starts with a position."""
    m = re.match(r"At (\d+):\d+: ", message)
    return f"{origin}:{m.group(1)}" if m else origin


def load_json_config(text: str, origin: str = "--config-json") -> JValue:
    """A JSON object given on the command line (or read from ``@file``) as the config body.

    This is the body after the agent's HCL 1 reading, not an agent file: blocks
    are written as lists of objects (``"usb": [{"vendor_id": "1a86"}]``).
    """
    if text.startswith("@"):
        source = text[1:]
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigFileError(f"{source}: cannot read: {exc.strerror or exc}") from None
        origin = source
    try:
        data = loads(text)
    except ValueError as exc:
        raise ConfigFileError(f"{origin}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"{origin}: the config must be a JSON object")
    try:
        return from_python(data)
    except ValueError as exc:
        raise ConfigFileError(f"{origin}: {exc}") from None


# ------------------------------------------------------------ HCL 1's Go values


class _DecodeError(Exception):
    """An error HCL 1's decoder returns; the text is its own."""


class _GoMap(dict[str, "GoValue"]):
    """``map[string]interface{}``; ``lines`` remembers where each key was set."""

    def __init__(self, line: int | None = None) -> None:
        super().__init__()
        self.line = line
        self.lines: dict[str, int | None] = {}


class _GoMapSlice(list[_GoMap]):
    """``[]map[string]interface{}``: what HCL 1 makes of objects inside a map."""

    def __init__(self, line: int | None = None) -> None:
        super().__init__()
        self.line = line


class _GoSlice(list["GoValue"]):
    """``[]interface{}``: a list."""

    def __init__(self, line: int | None = None) -> None:
        super().__init__()
        self.line = line


@dataclass
class _GoScalar:
    kind: str  # "string", "int", "float" or "bool"
    value: object
    line: int | None = None


GoValue: TypeAlias = _GoMap | _GoMapSlice | _GoSlice | _GoScalar


def _kind(value: GoValue | None) -> str:
    if value is None:
        return "interface"
    if isinstance(value, _GoMap):
        return "map"
    if isinstance(value, _GoMapSlice | _GoSlice):
        return "slice"
    return value.kind


def _line(node: hcl1.Node | None) -> int | None:
    if node is None:
        return None
    pos = node.pos
    return pos.line if pos.line > 0 else None


def _type_name(node: hcl1.Node) -> str:
    """Go's ``%T`` of an AST node."""
    return "*ast." + type(node).__name__


def _pos_error(node: hcl1.Node, message: str) -> _DecodeError:
    return _DecodeError(f"At {node.pos}: {message}")


@dataclass
class _PluginValue:
    """A decoded ``PluginConfig``: label, args, config, and the item it came from."""

    name: str
    args: list[str] | None
    config: _GoMap | None
    line: int | None
    unknown: list[str]


class _Decoder:
    """HCL 1's reflection-driven decoder, for the types Nomad's plugin config uses.

    The stack of Go kinds matters: an object met directly inside a list becomes
    a map, anywhere else a list holding one map.
    """

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.stack: list[str] = []

    @contextlib.contextmanager
    def _in(self, kind: str) -> Iterator[None]:
        """One Go kind deeper in :attr:`stack` while the block runs."""
        self.stack.append(kind)
        try:
            yield
        finally:
            self.stack.pop()

    # -- the root and plugin blocks ------------------------------------------

    def agent_file(self, root: hcl1.ObjectList) -> AgentFile:
        out = AgentFile(self.origin)
        self.stack.append("struct")
        plugin_items = [i for i in root.items if i.keys and _fold(i.keys[0], "plugin")]
        keys = [str(hcl1.token_value(k.token)) for i in plugin_items for k in i.keys]
        plugins: list[_PluginValue] = []
        filtered = hcl1.filter_items(root.items, "plugin")
        if filtered:
            first = next(i for i, k in enumerate(keys) if k.casefold() == "plugin")
            del keys[first]
            for node in _field_nodes(filtered):
                plugins += self.plugin_slice("root.plugin", node)
        unused = _Unused(keys)
        for p in plugins:
            unused.remove(p.name)
            unused.remove("config")
            unused.remove("plugin")
        unused = _agent_drops(unused)
        if unused.left():
            hint = ""
            if any(k.token.json for i in plugin_items for k in i.keys):
                hint = (
                    "\n  hint: in a JSON agent file HCL 1 reads an object whose values are all "
                    "objects as block labels; write blocks as lists of objects, as in "
                    '"device": [{"kvm": [{"paths": ["/dev/kvm"]}]}]'
                )
            raise ConfigFileError(
                f"{self.origin}: the agent refuses to start: unexpected keys "
                f"{', '.join(unused.left())}{hint}",
                agent=f"unexpected keys {', '.join(unused.left())}",
            )
        by_name: dict[str, PluginBlock] = {}
        for p in plugins:
            block = PluginBlock(
                p.name,
                p.args,
                _to_json(p.config) if p.config is not None else None,
                p.line or 0,
                origin=self.origin,
                empty=not p.config,
            )
            earlier = by_name.pop(p.name, None)
            if earlier is not None:
                block.shadowed = [*earlier.shadowed, earlier.line]
                out.warnings.append(
                    f"{self.origin}:{earlier.line}: plugin {quote(p.name)} is given again at "
                    f"line {block.line}; the agent uses only the last block, whole"
                )
            by_name[p.name] = block
            for key in p.unknown:
                near = name_suggestion(key, ("args", "config"))
                out.warnings.append(
                    f"{self.origin}:{block.line}: plugin {quote(p.name)}: the agent ignores "
                    f"{quote(key)}" + (f" (did you mean {quote(near)}?)" if near else "")
                )
        out.plugins = list(by_name.values())
        bare = hcl1.filter_items(root.items, "config")
        if bare and not plugins:
            value = self.struct_field_map("root.config", bare, None)
            line = _line(root.items[0]) or 0
            out.bare = PluginBlock(
                None,
                None,
                _to_json(value) if value is not None else None,
                line,
                origin=self.origin,
                empty=not value,
            )
        return out

    def plugin_slice(self, name: str, node: hcl1.Node) -> list[_PluginValue]:
        """``[]*PluginConfig`` decoded from a list of items (or a list value)."""
        with self._in("slice"):
            out = []
            for i, item in enumerate(self.slice_items(node)):
                item = _expand_object(item)
                with self._in("ptr"):
                    out.append(self.plugin_struct(f"{name}[{i}]", item))
            return out

    def plugin_struct(self, name: str, node: hcl1.Node) -> _PluginValue:
        with self._in("struct"):
            item: hcl1.ObjectItem | None = None
            if isinstance(node, hcl1.ObjectItem):
                item = node
                node = node.val  # type: ignore[assignment]
            if isinstance(node, hcl1.ObjectType):
                node = node.list
            if isinstance(node, hcl1.LiteralType) and item is not None:
                node = hcl1.ObjectList([item])
            if not isinstance(node, hcl1.ObjectList):
                raise _pos_error(
                    node, f"{name}: not an object type for struct ({_type_name(node)})"
                )
            if item is None:
                raise _pos_error(node, f"{name}: Name asked for 'key', impossible")
            label = str(hcl1.token_value(item.keys[0].token)) if item.keys else ""
            args = self.struct_field_args(f"{name}.args", node.items)
            filtered = hcl1.filter_items(node.items, "config")
            config = None
            if filtered:
                config = self.struct_field_map(f"{name}.config", filtered, None)
            firsts = {str(hcl1.token_value(i.keys[0].token)) for i in node.items if i.keys}
            unknown = sorted(k for k in firsts if k.casefold() not in ("args", "config"))
            return _PluginValue(label, args, config, _line(item), unknown)

    def struct_field_args(self, name: str, items: list[hcl1.ObjectItem]) -> list[str] | None:
        filtered = hcl1.filter_items(items, "args")
        if not filtered:
            return None
        out: list[str] = []
        for node in _field_nodes(filtered):
            out = self.string_slice(name, node, out)
        return out

    def string_slice(self, name: str, node: hcl1.Node, current: list[str] | None) -> list[str]:
        with self._in("slice"):
            items = self.slice_items(node)
            out = list(current or [])
            for i, item in enumerate(items):
                with self._in("string"):
                    out.append(str(self.decode_string(f"{name}[{i}]", item).value))
            return out

    def struct_field_map(
        self, name: str, filtered: list[hcl1.ObjectItem], current: _GoMap | None
    ) -> _GoMap | None:
        """The ``config`` field (``map[string]interface{}``) from its matching items."""
        value = current if current is not None else _GoMap(_line(filtered[0].val))
        for node in _field_nodes(filtered):
            value = self.decode_map_into(name, node, value)
        return value

    def decode_map_into(self, name: str, node: hcl1.Node, current: _GoMap | None) -> _GoMap:
        with self._in("map"):
            return self.decode_map(name, node, current)

    # -- the generic decoder ----------------------------------------------------

    def decode(self, name: str, node: hcl1.Node, current: GoValue | None) -> GoValue:
        """Decode ``node`` into an ``interface{}`` that holds ``current`` (None: empty)."""
        kind = _kind(current)
        if kind == "interface":
            return self.decode_interface(name, node)
        with self._in(kind):
            if kind == "map":
                return self.decode_map(name, node, current)  # type: ignore[arg-type]
            if kind == "slice":
                return self.decode_slice(name, node, current)  # type: ignore[arg-type]
            if kind == "string":
                return self.decode_string(name, node)
            if kind == "int":
                return self.decode_int(name, node)
            if kind == "float":
                return self.decode_float(name, node)
            return self.decode_bool(name, node)

    def decode_interface(self, name: str, node: hcl1.Node) -> GoValue:
        test = node.list if isinstance(node, hcl1.ObjectType) else node
        line = _line(node)
        created: GoValue
        if isinstance(test, hcl1.ObjectList):
            if not self.stack or self.stack[-1] == "slice":
                created = _GoMap(line)
            else:
                created = _GoMapSlice(line)
        elif isinstance(test, hcl1.ListType):
            created = _GoSlice(line)
        elif isinstance(test, hcl1.LiteralType):
            kind = {
                hcl1.Tok.BOOL: "bool",
                hcl1.Tok.FLOAT: "float",
                hcl1.Tok.NUMBER: "int",
                hcl1.Tok.STRING: "string",
                hcl1.Tok.HEREDOC: "string",
            }.get(test.token.type)
            if kind is None:
                raise _pos_error(node, f"{name}: cannot decode into interface: {_type_name(node)}")
            created = _GoScalar(kind, None, line)
        else:
            raise _DecodeError(f"{name}: cannot decode into interface: {_type_name(node)}")
        return self.decode(name, node, created)

    def decode_map(self, name: str, node: hcl1.Node, current: _GoMap | None) -> _GoMap:
        line = _line(node)
        if isinstance(node, hcl1.ObjectItem):
            node = hcl1.ObjectList([node])
        if isinstance(node, hcl1.ObjectType):
            node = node.list
        if not isinstance(node, hcl1.ObjectList):
            raise _pos_error(node, f"{name}: not an object type for map ({_type_name(node)})")
        result = current if current is not None else _GoMap(line)
        done: set[str] = set()
        for item in node.items:
            if item.val is None:
                continue
            if not item.keys:
                raise _pos_error(node, f"{name}: map must have string keys")
            key = str(hcl1.token_value(item.keys[0].token))
            if key in done:
                continue
            value: hcl1.Node = item.val
            if len(item.keys) > 1:
                value = hcl1.ObjectList(hcl1.filter_items(node.items, key))
                done.add(key)
            result[key] = self.decode(f"{name}.{key}", value, result.get(key))
            result.lines.setdefault(key, _line(item))
        return result

    def slice_items(self, node: hcl1.Node) -> list[hcl1.Node]:
        if isinstance(node, hcl1.ObjectList):
            return list(node.items)
        if isinstance(node, hcl1.ObjectType):
            return [node]
        if isinstance(node, hcl1.ListType):
            return list(node.items)
        raise _pos_error(node, f"unknown slice type: {_type_name(node)}")

    def decode_slice(
        self, name: str, node: hcl1.Node, current: _GoMapSlice | _GoSlice
    ) -> _GoMapSlice | _GoSlice:
        items = self.slice_items(node)
        for i, item in enumerate(items):
            element = f"{name}[{i}]"
            if isinstance(current, _GoMapSlice):
                current.append(self.decode_map_into(element, item, None))
            else:
                current.append(self.decode(element, item, None))
        return current

    def decode_string(self, name: str, node: hcl1.Node) -> _GoScalar:
        if isinstance(node, hcl1.LiteralType):
            tok = node.token
            if tok.type in (hcl1.Tok.NUMBER, hcl1.Tok.FLOAT, hcl1.Tok.BOOL):
                return _GoScalar("string", tok.text, _line(node))
            if tok.type in (hcl1.Tok.STRING, hcl1.Tok.HEREDOC):
                return _GoScalar("string", hcl1.token_value(tok), _line(node))
        raise _pos_error(node, f"{name}: unknown type for string {_type_name(node)}")

    def decode_int(self, name: str, node: hcl1.Node) -> _GoScalar:
        if isinstance(node, hcl1.LiteralType):
            tok = node.token
            if tok.type is hcl1.Tok.NUMBER:
                return _GoScalar("int", _parse_int(tok.text), _line(node))
            if tok.type is hcl1.Tok.STRING:
                return _GoScalar("int", _parse_int(str(hcl1.token_value(tok))), _line(node))
        raise _pos_error(node, f"{name}: unknown type {_type_name(node)}")

    def decode_float(self, name: str, node: hcl1.Node) -> _GoScalar:
        if isinstance(node, hcl1.LiteralType):
            tok = node.token
            if tok.type in (hcl1.Tok.FLOAT, hcl1.Tok.NUMBER):
                return _GoScalar("float", _parse_float(tok.text), _line(node))
        raise _pos_error(node, f"{name}: unknown type {_type_name(node)}")

    def decode_bool(self, name: str, node: hcl1.Node) -> _GoScalar:
        if isinstance(node, hcl1.LiteralType):
            tok = node.token
            if tok.type in (hcl1.Tok.BOOL, hcl1.Tok.STRING, hcl1.Tok.NUMBER):
                word = tok.text.replace('"', "").lower()
                if word in ("1", "true"):
                    return _GoScalar("bool", True, _line(node))
                if word in ("0", "false"):
                    return _GoScalar("bool", False, _line(node))
                raise _DecodeError(f"decodeBool: Unknown value for boolean: {tok.text}")
        raise _pos_error(node, f"{name}: unknown type {_type_name(node)}")


def _fold(key: hcl1.ObjectKey, word: str) -> bool:
    value = str(hcl1.token_value(key.token))
    return value == word or value.casefold() == word.casefold()


class _Unused:
    """The keys HCL 1's decoder leaves unused: a sorted list from which each removal
    takes the first key equal under Unicode case folding, as Go's ``EqualFold`` does,
    in constant time (a file may have tens of thousands of ``plugin`` blocks)."""

    def __init__(self, keys: list[str]) -> None:
        self.groups: dict[str, list[str]] = {}
        for key in sorted(keys):
            self.groups.setdefault(key.casefold(), []).append(key)
        self.taken: dict[str, int] = {}

    def remove(self, word: str, times: int = 1) -> None:
        fold = word.casefold()
        if fold in self.groups:
            self.taken[fold] = min(len(self.groups[fold]), self.taken.get(fold, 0) + times)

    def discard(self, fold: str, exact: tuple[str, ...] = ()) -> None:
        """Every key that folds to ``fold`` (``exact``: only those spelled so)."""
        group = self.groups.get(fold, [])
        left = group[self.taken.get(fold, 0) :]
        self.groups[fold] = [k for k in left if exact and k not in exact]
        self.taken[fold] = 0

    def left(self) -> list[str]:
        return sorted(k for f, group in self.groups.items() for k in group[self.taken.get(f, 0) :])


def _agent_drops(keys: _Unused) -> _Unused:
    """Leave out the keys the agent drops from its unused-key list whatever the file holds."""
    keys.remove("client", 6)
    for word in ("options", "meta", "chroot_env", "servers", "server_join", "template"):
        keys.remove(word)
    keys.remove("server", 4)
    for word in ("enabled_schedulers", "start_join", "retry_join", "server_join"):
        keys.remove(word)
    for word in ("datadog_tags", "telemetry"):
        keys.remove(word)
    keys.discard("keyring")
    for word in ("license", "vault", "consul"):
        keys.discard(word, exact=(word,))
    for word in ("service_identity", "task_identity", "default_identity"):
        keys.remove(word)
    return keys


def _field_nodes(filtered: list[hcl1.ObjectItem]) -> list[hcl1.Node]:
    """What HCL 1 decodes a struct field from, in its order: the items with keys left
    (labelled ones), as one list, then each value given without a label."""
    out: list[hcl1.Node] = []
    prefix = [i for i in filtered if i.keys]
    if prefix:
        out.append(hcl1.ObjectList(prefix))
    for match in filtered:
        if match.keys or match.val is None:
            continue
        node = match.val
        out.append(hcl1.ObjectList(node.list.items) if isinstance(node, hcl1.ObjectType) else node)
    return out


def _expand_object(node: hcl1.Node) -> hcl1.Node:
    """HCL 1 un-flattens a two-key item before decoding it into a struct."""
    if not isinstance(node, hcl1.ObjectItem) or len(node.keys) != 2:
        return node
    inner = hcl1.ObjectItem(node.keys[1:], node.val)
    return hcl1.ObjectItem(node.keys[:1], hcl1.ObjectType(hcl1.ObjectList([inner])))


def _parse_int(text: str) -> int:
    """``strconv.ParseInt(text, 0, 64)``, as HCL 1 reads an int, with Go's error text."""
    value = parse_int(text, 0)
    if value is None:
        raise _DecodeError(int_error(text, 0))
    return value


def _parse_float(text: str) -> float:
    """``strconv.ParseFloat(text, 64)``, as HCL 1 reads a float, with Go's error text."""
    value = parse_float(text)
    if value is None:
        raise _DecodeError(float_error(text))
    return value


# ------------------------------------------------------- Go values as JSON


def _go_string(text: str) -> str:
    """The string after Go's JSON encoder: bytes that are not UTF-8 become U+FFFD."""
    from nomad_device.golang import valid_utf8

    return valid_utf8(text)


def _to_json(value: GoValue, line: int | None = None) -> JValue:
    """The JSON the agent writes for a decoded Go value, as HCL 2's JSON parser reads it."""
    where = Source(line if line is not None else value.line)
    if isinstance(value, _GoMap):
        props = [
            JProp(_go_string(k), _to_json(v, value.lines.get(k)), Source(value.lines.get(k)))
            for k, v in value.items()
        ]
        return JValue("object", props, where)
    if isinstance(value, _GoMapSlice):
        return JValue("array", [_to_json(m) for m in value], where, from_hcl_object=True)
    if isinstance(value, _GoSlice):
        return JValue("array", [_to_json(v) for v in value], where)
    if value.kind == "string":
        return JValue("string", _go_string(str(value.value)), where)
    if value.kind == "bool":
        return JValue("bool", value.value, where)
    if value.kind == "int":
        return JValue("number", value.value, where)
    # float64: written in its shortest form, which is what HCL 2 reads back.
    return JValue("number", Decimal(repr(value.value)), where)
