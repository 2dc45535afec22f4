"""Human-readable output: tables, health in colour, values with units, the schema tree.

Everything here returns text; :mod:`nomad_device.cli.console` decides where it
goes. Colour is only a decoration: :class:`Style` with ``enabled=False`` gives
the same text without escape codes. Every string a plugin or device supplied
goes through :func:`~nomad_device.display.printable` before it is styled or
padded: a product string with ``ESC [2J`` is shown, not obeyed.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, TextIO

from nomad_device.display import printable
from nomad_device.model import (
    Attribute,
    DeviceGroup,
    DeviceGroupStats,
    PluginInfo,
    Reservation,
    StatObject,
    StatValue,
)
from nomad_device.wire import cty, hclspec

__all__ = [
    "Style",
    "color_wanted",
    "format_attribute",
    "format_stat_value",
    "hex_dump",
    "render_config_value",
    "render_groups",
    "render_info",
    "render_reservation",
    "render_schema",
    "render_stats",
    "table",
    "visible_len",
]

_ANSI_RE: Final = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def visible_len(text: str) -> int:
    """Length of ``text`` as the terminal shows it (escape codes take no room)."""
    return len(_ANSI_RE.sub("", text))


def color_wanted(stream: TextIO, mode: str = "auto") -> bool:
    """Colour for ``always``; never for ``never``; for ``auto``: a terminal, unless
    ``NO_COLOR`` is set (https://no-color.org) or ``TERM=dumb``."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@dataclass(frozen=True)
class Style:
    """ANSI styling that switches off cleanly."""

    enabled: bool = False

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled and text else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def cyan(self, text: str) -> str:
        return self._wrap("36", text)

    def level(self, level: str, text: str) -> str:
        """Colour a log level word the way hclog's terminal output does."""
        colour = {"error": self.red, "warn": self.yellow, "info": self.green}.get(level)
        return colour(text) if colour else self.dim(text)


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], indent: str = "") -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    all_rows = [list(headers), *[list(r) for r in rows]]
    widths = [0] * len(headers)
    for row in all_rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], visible_len(cell))
    lines = []
    for row in all_rows:
        cells = [
            cell + " " * (widths[i] - visible_len(cell)) if i < len(row) - 1 else cell
            for i, cell in enumerate(row)
        ]
        lines.append((indent + "  ".join(cells)).rstrip())
    return "\n".join(lines)


# ------------------------------------------------------------------- values


def _format_float(value: float, max_precision: int = 3) -> str:
    """A float as Nomad's CLI shows one: plain digits, at most three decimals (cut)."""
    text = format(Decimal(repr(value)), "f") if value == value else "NaN"
    if "." not in text:
        return text
    head, _, frac = text.partition(".")
    return f"{head}.{frac[:max_precision]}" if len(frac) > max_precision else text


def format_attribute(attr: Attribute) -> str:
    """``2 GiB``, ``1.5 GHz``, ``w1``, ``true`` (as ``nomad node status`` prints them)."""
    value = attr.value
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = _format_float(value)
    else:
        text = printable(str(value))
    unit = printable(attr.unit)
    return f"{text} {unit}" if unit and not isinstance(value, str | bool) else text


def format_stat_value(value: StatValue | None) -> str:
    """``3 / 8 GiB``, ``41.5 C``, ``ok`` (Nomad's StatValue rendering)."""
    if value is None:
        return "<none>"
    if value.bool_value is not None:
        return "true" if value.bool_value else "false"
    if value.string_value is not None:
        return printable(value.string_value)
    if value.float_numerator is not None:
        text = _format_float(value.float_numerator)
        if value.float_denominator is not None:
            text += " / " + _format_float(value.float_denominator)
    elif value.int_numerator is not None:
        text = str(value.int_numerator)
        if value.int_denominator is not None:
            text += f" / {value.int_denominator}"
    else:
        return "<none>"
    return f"{text} {printable(value.unit)}" if value.unit else text


def _flatten_stats(obj: StatObject | None, prefix: str = "") -> list[tuple[str, StatValue]]:
    if obj is None:
        return []
    out = [(prefix + printable(k), v) for k, v in sorted(obj.attributes.items())]
    for name, nested in sorted(obj.nested.items()):
        out.extend(_flatten_stats(nested, f"{prefix}{printable(name)}."))
    return out


# ---------------------------------------------------------------- sections


def render_info(info: PluginInfo, style: Style, problems: Sequence[str] = ()) -> str:
    kind = {2: "driver", 3: "device"}.get(info.type, f"unknown ({info.type})")
    rows = [
        ("Name", style.bold(printable(info.name))),
        ("Version", printable(info.version)),
        ("Type", kind),
        ("API versions", printable(", ".join(info.api_versions)) or "(none)"),
    ]
    text = table(["", ""], rows).split("\n", 1)[1]
    for problem in problems:
        text += "\n" + style.yellow(f"warning: {printable(problem, lines=True)}")
    return text


def health_word(healthy: bool, style: Style) -> str:
    return style.green("healthy") if healthy else style.red("unhealthy")


def render_groups(groups: Sequence[DeviceGroup], style: Style) -> str:
    """The devices of every group: a heading per group, attributes, then a device table."""
    if not groups:
        return style.dim("(no devices)")
    parts = []
    for group in groups:
        healthy = sum(1 for d in group.devices if d.healthy)
        count = len(group.devices)
        summary = f"{count} device{'s' if count != 1 else ''}, {healthy} healthy"
        lines = [f"{style.bold(printable(group.key))}  {style.dim('(' + summary + ')')}"]
        if group.attributes:
            attrs = [
                (style.cyan(printable(name)), format_attribute(attr))
                for name, attr in sorted(group.attributes.items())
            ]
            lines.append("  Attributes")
            lines.append(table(["", ""], attrs, indent="    ").split("\n", 1)[1])
        if group.devices:
            rows = [
                (
                    printable(dev.id),
                    health_word(dev.healthy, style),
                    printable(dev.pci_bus_id or ""),
                    printable(dev.health_description),
                )
                for dev in group.devices
            ]
            lines.append(table(["ID", "HEALTH", "PCI BUS", "DESCRIPTION"], rows, indent="  "))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _clock(when: _dt.datetime) -> str:
    return when.astimezone().strftime("%H:%M:%S")


def render_stats(groups: Sequence[DeviceGroupStats], style: Style) -> str:
    """One table per group: device, summary and the flattened detailed statistics."""
    if not groups:
        return style.dim("(no statistics)")
    parts = []
    for group in groups:
        lines = [style.bold(printable(f"{group.vendor}/{group.type}/{group.name}"))]
        rows = []
        for dev_id, stats in sorted(group.instance_stats.items()):
            details = ", ".join(
                f"{name}={format_stat_value(v)}" for name, v in _flatten_stats(stats.stats)
            )
            rows.append(
                (
                    printable(dev_id),
                    format_stat_value(stats.summary),
                    style.dim(_clock(stats.timestamp)),
                    details,
                )
            )
        lines.append(table(["DEVICE", "SUMMARY", "AT", "STATS"], rows, indent="  "))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


#: A variable a plugin names what it could not give the task in (nomad-device-generic's
#: CDI devices: hooks and other edits a reservation has no place for), "; "-separated.
SKIPPED_SUFFIX = "_CDI_SKIPPED"


def render_reservation(res: Reservation, style: Style) -> str:
    lines = []
    if res.envs:
        lines.append(style.bold("Environment"))
        lines.extend(f"  {printable(k)}={printable(v)}" for k, v in sorted(res.envs.items()))
    skipped = [
        item
        for key, value in sorted(res.envs.items())
        if key.endswith(SKIPPED_SUFFIX)
        for item in value.split("; ")
        if item
    ]
    if skipped:
        lines.append(style.bold("Skipped (the task does not get these)"))
        lines.extend(f"  {style.yellow(printable(item))}" for item in skipped)
    if res.mounts:
        lines.append(style.bold("Mounts"))
        lines.append(
            table(
                ["HOST PATH", "TASK PATH", "MODE"],
                [
                    (printable(m.host_path), printable(m.task_path), "ro" if m.read_only else "rw")
                    for m in res.mounts
                ],
                indent="  ",
            )
        )
    if res.devices:
        lines.append(style.bold("Devices"))
        lines.append(
            table(
                ["HOST PATH", "TASK PATH", "CGROUP PERMS"],
                [
                    (printable(d.host_path), printable(d.task_path), printable(d.permissions))
                    for d in res.devices
                ],
                indent="  ",
            )
        )
    return "\n".join(lines) if lines else style.dim("(empty reservation: nothing to mount)")


# ------------------------------------------------------------------- schema


@dataclass
class _Line:
    depth: int
    code: str
    note: str = ""


def render_schema(spec: hclspec.Spec, style: Style) -> str:
    """The config schema as an HCL-like tree with types, defaults and requirements."""
    lines: list[_Line] = []
    if isinstance(spec, hclspec.Object):
        lines.append(_Line(0, "config {"))
        _schema_body(spec, 1, lines)
        lines.append(_Line(0, "}"))
    else:
        lines.append(_Line(0, "config {", "the schema's root is not an object"))
        _schema_entry("", spec, 1, lines)
        lines.append(_Line(0, "}"))
    # The names, types and defaults are the plugin's: escaped before they are measured.
    lines = [_Line(ln.depth, printable(ln.code), printable(ln.note)) for ln in lines]
    width = max((2 * ln.depth + len(ln.code) for ln in lines if ln.note), default=0)
    out = []
    for ln in lines:
        code = "  " * ln.depth + ln.code
        if ln.note:
            code = code + " " * (width - len(code) + 2) + style.dim("# " + ln.note)
        out.append(code)
    return "\n".join(out)


def _schema_body(spec: hclspec.Object, depth: int, lines: list[_Line]) -> None:
    if not spec.attributes:
        lines.append(_Line(depth, "", "(no settings)"))
    for key, sub in sorted(spec.attributes.items()):
        _schema_entry(key, sub, depth, lines)


def _literal_text(spec: hclspec.Spec) -> str | None:
    if isinstance(spec, hclspec.Literal):
        return spec.value.strip()
    return None


def _schema_entry(key: str, spec: hclspec.Spec, depth: int, lines: list[_Line]) -> None:
    default_note = ""
    if isinstance(spec, hclspec.Default):
        literal = _literal_text(spec.default)
        default_note = f"default {literal}" if literal is not None else "default from another spec"
        spec = spec.primary
    renamed = ""
    if isinstance(spec, hclspec.Attr):
        name = spec.name or key
        if key and name != key:
            renamed = f"sent as {key!r}"
        note = "required" if spec.required else (default_note or "optional")
        lines.append(_Line(depth, f"{name} = {spec.type}", _join(note, renamed)))
    elif isinstance(spec, hclspec.Block):
        name = spec.name or key
        note = "block, required" if spec.required else "block, optional"
        _schema_block(name, "", spec.nested, depth, lines, _join(note, default_note))
    elif isinstance(spec, hclspec.BlockList | hclspec.BlockSet):
        name = spec.name or key
        kind = "set" if isinstance(spec, hclspec.BlockSet) else "list"
        note = f"repeatable block ({kind}{_bounds(spec.min_items, spec.max_items)})"
        _schema_block(name, "", spec.nested, depth, lines, note)
    elif isinstance(spec, hclspec.BlockMap):
        name = spec.name or key
        labels = " ".join(f'"<{label}>"' for label in spec.labels)
        note = "repeatable block, keyed by " + ", ".join(spec.labels)
        _schema_block(name, " " + labels, spec.nested, depth, lines, note)
    elif isinstance(spec, hclspec.BlockAttrs):
        name = spec.name or key
        note = "block of free-form attributes, " + ("required" if spec.required else "optional")
        lines.append(_Line(depth, f"{name} {{", note))
        lines.append(_Line(depth + 1, f"<name> = {spec.type}"))
        lines.append(_Line(depth, "}"))
    elif isinstance(spec, hclspec.Literal):
        lines.append(_Line(depth, "", f"{key or 'value'} is always {spec.value.strip()}"))
    elif isinstance(spec, hclspec.Object):
        lines.append(_Line(depth, "", f"{key or 'value'}: an object of"))
        _schema_body(spec, depth, lines)
    elif isinstance(spec, hclspec.Array):
        lines.append(_Line(depth, "", f"{key or 'value'}: a tuple of"))
        for i, sub in enumerate(spec.values):
            _schema_entry(f"{key}[{i}]", sub, depth, lines)
    else:  # a Default inside a Default
        _schema_entry(key, spec.primary, depth, lines)


def _schema_block(
    name: str, labels: str, nested: hclspec.Spec, depth: int, lines: list[_Line], note: str
) -> None:
    lines.append(_Line(depth, f"{name}{labels} {{", note))
    if isinstance(nested, hclspec.Object):
        _schema_body(nested, depth + 1, lines)
    else:
        _schema_entry("", nested, depth + 1, lines)
    lines.append(_Line(depth, "}"))


def _bounds(low: int, high: int) -> str:
    if low and high:
        return f", {low} to {high}"
    if low:
        return f", at least {low}"
    if high:
        return f", at most {high}"
    return ""


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


# ------------------------------------------------------------ config values


def render_config_value(value: object, ty: cty.CtyType, depth: int = 0) -> str:
    """A decoded config as HCL-like text (``key = value`` lines, nested ``{ }``)."""
    pad = "  " * depth
    if isinstance(value, Mapping) and isinstance(ty, cty.Object | cty.Map):
        if not value:
            return "{}"
        lines = ["{"]
        for key in sorted(value):
            sub_ty = ty.attrs[key] if isinstance(ty, cty.Object) else ty.elem
            shown = key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key) else _quoted(key)
            lines.append(f"{pad}  {shown} = {render_config_value(value[key], sub_ty, depth + 1)}")
        lines.append(pad + "}")
        return "\n".join(lines)
    if isinstance(value, list | tuple):

        def elem_type(i: int) -> cty.CtyType:
            if isinstance(ty, cty.Tuple):
                return ty.elems[i]
            if isinstance(ty, cty.List | cty.Set):
                return ty.elem
            return cty.DYNAMIC

        items = [render_config_value(v, elem_type(i), depth + 1) for i, v in enumerate(value)]
        return "[" + ", ".join(items) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quoted(value)
    if isinstance(value, float):
        return format(Decimal(repr(value)).normalize(), "f") if value == value else "NaN"
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    return printable(str(value))


def hex_dump(data: bytes, indent: str = "  ", width: int = 32) -> str:
    """Bytes as spaced hex, ``width`` bytes a line."""
    if not data:
        return indent + "(empty)"
    return "\n".join(indent + data[i : i + width].hex(" ") for i in range(0, len(data), width))


def _quoted(text: str) -> str:
    # HCL's own escapes cover C0 controls; printable() what they leave (C1, bidi).
    return printable(hclspec.hcl_literal(text))
