"""CDI specs for the tests: the plugin's answer in ``interop/cdi``'s shape, and spec texts.

- :func:`python_answer` runs :mod:`nomad_device.plugins.generic.cdi` over spec
  directories and answers as ``interop/bin/cdicheck`` does (specs loaded,
  errors per file, each device's edits and what injecting it does);
  :func:`disagreement` says where two answers differ.
- :func:`render` writes a spec (a Python mapping; :class:`Raw` for a scalar
  written exactly so) as JSON or YAML in one of several styles: what
  ``nvidia-ctk`` and other generators write, and what people write by hand.
- :func:`specs` and :func:`spec_dirs` are hypothesis strategies for the
  generated cross-check.
"""

from __future__ import annotations

import json
import os
import random
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from nomad_device.plugins.generic import cdi

Answer = dict[str, Any]


# --------------------------------------------------------------------- the plugin's answer


def _load(path: str, priority: int) -> cdi.Spec:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise cdi.SpecError(f"failed to read CDI Spec {path!r}: {exc.strerror}") from None
    return cdi.read_spec(data, path, priority)


def edits_json(edits: cdi.ContainerEdits) -> dict[str, Any]:
    rdt = edits.intel_rdt
    return {
        "env": list(edits.env),
        "deviceNodes": [
            {
                "path": n.path,
                "hostPath": n.host_path,
                "type": n.type,
                "major": n.major,
                "minor": n.minor,
                "fileMode": n.file_mode,
                "permissions": n.permissions,
                "uid": n.uid,
                "gid": n.gid,
            }
            for n in edits.device_nodes
        ],
        "netDevices": [
            {"hostInterfaceName": d.host_interface_name, "name": d.name} for d in edits.net_devices
        ],
        "hooks": [
            {
                "hookName": h.hook_name,
                "path": h.path,
                "args": list(h.args),
                "env": list(h.env),
                "timeout": h.timeout,
            }
            for h in edits.hooks
        ],
        "mounts": [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": list(m.options),
                "type": m.type,
            }
            for m in edits.mounts
        ],
        "intelRdt": None if rdt is None else _rdt_json(rdt),
        "additionalGids": list(edits.additional_gids),
    }


def _rdt_json(rdt: cdi.IntelRdt) -> dict[str, Any]:
    return {
        "closID": rdt.clos_id,
        "l3CacheSchema": rdt.l3_cache_schema,
        "memBwSchema": rdt.mem_bw_schema,
        "schemata": None if rdt.schemata is None else list(rdt.schemata),
        "enableMonitoring": rdt.enable_monitoring,
    }


def inject_json(devices: Sequence[cdi.Device]) -> dict[str, Any]:
    """What ``InjectDevices`` does to an empty OCI spec, in cdicheck's shape."""
    merged = cdi.merge(devices)
    try:
        cdi.check_edits(merged)
        filled = [cdi.fill_missing_info(n) for n in merged.device_nodes]
    except cdi.SpecError as exc:
        return {"error": str(exc)}
    applied = cdi.apply(merged)
    last = {h.node.path: h for h in filled}
    hooks: dict[str, list[dict[str, Any]]] = {}
    for hook in applied.hooks:
        hooks.setdefault(hook.hook_name, []).append(
            {
                "path": hook.path,
                "args": list(hook.args),
                "env": list(hook.env),
                "timeout": hook.timeout,
            }
        )
    return {
        "env": list(applied.env),
        "devices": [
            {
                "path": n.path,
                "type": last[n.path].type,
                "major": last[n.path].major,
                "minor": last[n.path].minor,
                "fileMode": last[n.path].file_mode,
            }
            for n in applied.device_nodes
        ],
        "cgroups": [
            {
                "allow": True,
                "type": h.type,
                "major": h.major,
                "minor": h.minor,
                "access": cdi.cgroup_access(h.node),
            }
            for h in filled
            if h.type in ("b", "c")
        ],
        "mounts": [
            {
                "destination": m.container_path,
                "source": m.host_path,
                "type": m.type,
                "options": list(m.options),
            }
            for m in applied.mounts
        ],
        "hooks": hooks,
        "intelRdt": None if applied.intel_rdt is None else _rdt_json(applied.intel_rdt),
        "additionalGids": list(applied.additional_gids),
        "netDevices": {d.host_interface_name: d.name for d in applied.net_devices},
    }


def python_answer(dirs: Sequence[str], combos: Sequence[Sequence[str]] = ()) -> Answer:
    """The plugin's reading of ``dirs``, in cdicheck's shape, plus ``declined``: the files
    it refused as outside what it reads (which the library may well read)."""
    catalog = cdi.scan_dirs(dirs, _load)
    answer: Answer = {
        "loaded": sorted(catalog.specs),
        "errors": {p: [str(e) for e in errs] for p, errs in catalog.errors.items()},
        "declined": sorted(
            p for p, errs in catalog.errors.items() if any(e.unsupported for e in errs)
        ),
        "devices": {
            name: {"edits": edits_json(device.resolved), "inject": inject_json([device])}
            for name, device in sorted(catalog.devices.items())
        },
        "combos": [],
    }
    for combo in combos:
        unknown = [n for n in combo if n not in catalog.devices]
        if unknown:
            answer["combos"].append({"error": f"unresolvable CDI devices {', '.join(unknown)}"})
        else:
            answer["combos"].append(inject_json([catalog.devices[n] for n in combo]))
    return answer


def _conflicts(messages: Sequence[str]) -> int:
    return sum("conflicting device" in m for m in messages)


def _same_outcome(py: Mapping[str, Any], go: Mapping[str, Any]) -> bool:
    if "error" in py or "error" in go:
        return ("error" in py) == ("error" in go)
    return dict(py) == dict(go)


def disagreement(py: Answer, go: Answer) -> str | None:
    """None when both read the directories alike; what differs otherwise.

    Both must load the same files, refuse the same (a file the library panics
    on counts as refused), report the same conflicts, resolve the same devices
    to the same edits and inject them alike (an injection that fails must fail
    on both sides; the messages differ in wording).
    """
    refused_go = set(go["errors"]) | set(go["panics"])
    if set(py["errors"]) != refused_go:
        return (
            f"files with errors: python {sorted(py['errors'])}, go {sorted(refused_go)}\n"
            f"python: {py['errors']}\ngo: {go['errors']} {go['panics']}"
        )
    if py["loaded"] != sorted(go["loaded"]):
        return (
            f"loaded: python {py['loaded']}, go {sorted(go['loaded'])}\n"
            f"{py['errors']}\n{go['errors']}"
        )
    for path, messages in go["errors"].items():
        if _conflicts(messages) != _conflicts(py["errors"].get(path, [])):
            return f"conflicts of {path}: python {py['errors'].get(path)}, go {messages}"
    if set(py["devices"]) != set(go["devices"]):
        return f"devices: python {sorted(py['devices'])}, go {sorted(go['devices'])}"
    for name, ours in py["devices"].items():
        theirs = go["devices"][name]
        if ours["edits"] != theirs["edits"]:
            return f"{name} edits:\npython {ours['edits']}\ngo     {theirs['edits']}"
        if not _same_outcome(ours["inject"], theirs["inject"]):
            return f"{name} inject:\npython {ours['inject']}\ngo     {theirs['inject']}"
    for index, (ours, theirs) in enumerate(zip(py["combos"], go["combos"], strict=True)):
        if not _same_outcome(ours, theirs):
            return f"combination {index}:\npython {ours}\ngo     {theirs}"
    return None


# ------------------------------------------------------------------------------ rendering


@dataclass(frozen=True)
class Raw:
    """A scalar written exactly as ``text`` (YAML plain, or a bare JSON token)."""

    text: str


@dataclass(frozen=True)
class Style:
    """How :func:`render` writes a spec."""

    json: bool = False
    json_indent: int | str | None = None
    indent: int = 2
    indent_sequences: bool = False  # "key:\n  - a" rather than "key:\n- a"
    flow_lists: float = 0.0  # chance a list of scalars is written [a, b]
    plain: float = 1.0  # chance a string that may be plain is written plain
    double: float = 0.5  # chance a quoted string uses double quotes
    comments: float = 0.0
    start: bool = False  # a "---" line first
    crlf: bool = False


_PLAIN_FIRST_BAD = set(",[]{}#&*!|>'\"%@`-?:")
_SPECIAL = {"", "~", "null", "Null", "NULL", "<<"}


def _plain_ok(text: str, flow: bool) -> bool:
    if not text or text != text.strip(" ") or text in _SPECIAL:
        return False
    if any(not (ch.isprintable() and ch.isascii()) or ch == "\t" for ch in text):
        return False
    if text[0] in _PLAIN_FIRST_BAD and not (text[0] == "-" and text[1:2].isalnum()):
        return False
    if ": " in text or " #" in text or text.endswith(":") or text.startswith(("---", "...")):
        return False
    return not (flow and (set(text) & set(",[]{}:#")))


def _double(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\t":
            out.append("\\t")
        elif not ch.isprintable() or ch in "\x85\u2028\u2029\ufeff":
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _scalar(value: Any, style: Style, rnd: random.Random, flow: bool) -> str:
    if isinstance(value, Raw):
        return value.text
    if value is None:
        return rnd.choice(["null", "~"]) if not style.json else "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if style.json:
        return json.dumps(text, ensure_ascii=rnd.random() < 0.5)
    if _plain_ok(text, flow) and rnd.random() < style.plain:
        return text
    if rnd.random() < style.double or any(not ch.isprintable() for ch in text):
        return _double(text)
    return "'" + text.replace("'", "''") + "'"


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def _flow(value: Any, style: Style, rnd: random.Random) -> str:
    if isinstance(value, dict):
        items = [
            f"{_scalar(k, style, rnd, True)}: {_flow(v, style, rnd)}" for k, v in value.items()
        ]
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v, style, rnd) for v in value) + "]"
    return _scalar(value, style, rnd, True)


def _block(value: Any, depth: int, style: Style, rnd: random.Random, lines: list[str]) -> None:
    """Lines for a mapping or sequence whose entries start at column ``depth``."""
    pad = " " * depth
    if isinstance(value, dict):
        if not value:
            raise ValueError("an empty mapping has no block form")
        for key, item in value.items():
            if style.comments and rnd.random() < style.comments:
                lines.append(f"{pad}# {rnd.choice(['generated', 'note: x', '---'])}")
            head = f"{pad}{_scalar(key, style, rnd, False)}:"
            lines.extend(_entry(head, item, depth, style, rnd, mapping=True))
    else:
        for item in value:
            lines.extend(_entry(f"{pad}-", item, depth, style, rnd, mapping=False))


def _entry(
    head: str, item: Any, depth: int, style: Style, rnd: random.Random, *, mapping: bool
) -> list[str]:
    if (
        _is_scalar(item)
        or not item
        or (
            isinstance(item, list)
            and all(map(_is_scalar, item))
            and rnd.random() < style.flow_lists
        )
    ):
        text = _flow(item, style, rnd) if not _is_scalar(item) else _scalar(item, style, rnd, False)
        comment = "  # c" if style.comments and rnd.random() < style.comments else ""
        return [f"{head} {text}{comment}"]
    lines: list[str] = []
    if isinstance(item, list) and mapping and not style.indent_sequences:
        lines.append(head)
        _block(item, depth, style, rnd, lines)
        return lines
    if not mapping and rnd.random() < 0.7:  # "- key: value" on the dash's line
        inner: list[str] = []
        _block(item, depth + 2, style, rnd, inner)
        first = inner[0].lstrip(" ")
        return [f"{head} {first}", *inner[1:]]
    lines.append(head)
    _block(item, depth + style.indent, style, rnd, lines)
    return lines


def _json(value: Any, style: Style, rnd: random.Random, depth: int) -> str:
    indent = style.json_indent
    step = (" " * indent if isinstance(indent, int) else indent) if indent is not None else ""
    sep = "\n" if indent is not None else ""
    pad, inner = step * depth, step * (depth + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [
            inner
            + _scalar(k, style, rnd, True)
            + (": " if sep else ":")
            + _json(v, style, rnd, depth + 1)
            for k, v in value.items()
        ]
        return "{" + sep + ("," + sep).join(items) + sep + pad + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        items = [f"{inner}{_json(v, style, rnd, depth + 1)}" for v in value]
        return "[" + sep + ("," + sep).join(items) + sep + pad + "]"
    return _scalar(value, style, rnd, True)


def render(spec: Mapping[str, Any], style: Style, seed: int = 0) -> bytes:
    """The spec's text in ``style``; ``seed`` picks among the style's choices."""
    rnd = random.Random(seed)
    if style.json:
        text = _json(dict(spec), style, rnd, 0) + "\n"
    else:
        lines = ["---"] if style.start else []
        _block(dict(spec), 0, style, rnd, lines)
        text = "\n".join(lines) + "\n"
    if style.crlf:
        text = text.replace("\n", "\r\n")
    return text.encode()


#: The styles the corpus and the generator write in.
STYLES: dict[str, Style] = {
    "json": Style(json=True),
    "json-indent": Style(json=True, json_indent=2),
    "json-tabs": Style(json=True, json_indent="\t"),
    # sigs.k8s.io/yaml, as nvidia-ctk writes: keys sorted, sequences at their key's indent.
    "yaml-k8s": Style(start=True, plain=1.0, double=1.0),
    "yaml-indented": Style(indent=4, indent_sequences=True, plain=0.5, double=0.3),
    "yaml-hand": Style(flow_lists=0.5, plain=0.8, comments=0.2, double=0.6),
    "yaml-crlf": Style(crlf=True, start=True, plain=0.7),
}


def write_spec(
    directory: Path,
    name: str,
    spec: Mapping[str, Any],
    style: str = "yaml-k8s",
    seed: int = 0,
    mode: int = 0o644,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(render(spec, STYLES[style], seed))
    path.chmod(mode)
    return path


# ----------------------------------------------------------------------------- generating

_NAME_CHARS = string.ascii_letters + string.digits + "_-.:"
_HOST_NODES = ["/dev/null", "/dev/zero", "/dev/full", "/dev/urandom"]
_MOUNT_PATHS = ["/usr/lib/libfoo.so.1", "/usr/lib", "/lib/firmware/x.bin", "/opt/a/b/c", "/bin/t"]


def _pick(rnd: random.Random, good: Sequence[Any], bad: Sequence[Any], p_bad: float = 0.015) -> Any:
    """Mostly a value CDI accepts, now and then one it refuses."""
    return rnd.choice(bad) if bad and rnd.random() < p_bad else rnd.choice(good)


def _name(rnd: random.Random) -> str:
    if rnd.random() < 0.6:
        return rnd.choice(
            ["0", "1", "2", "all", "gpu0", "GPU-8f6e2c1a", "0:0", "mig-1g.10gb", "a_b"]
        )
    middle = "".join(rnd.choice(_NAME_CHARS) for _ in range(rnd.randint(0, 5)))
    return rnd.choice(string.ascii_letters) + middle + rnd.choice(string.digits)


_BAD_NAMES = ["", "-bad", "bad-", "with space", "é", "a/b"]
_KINDS = [
    "nvidia.com/gpu",
    "example.com/dev",
    "amd.com/gpu",
    "intel.com/gpu",
    "vendor/class",
    "vendor.com/cl.ass",
    "vendor.com/mig",
]
_BAD_KINDS = ["", "novendor", "/class", "vendor/", "a/b/c", "1vendor/x", "v_/x"]
_INTS = [
    0,
    1,
    195,
    226,
    255,
    Raw("0x10"),
    Raw("0o17"),
    Raw("017"),
    Raw("08"),
    Raw("1_0"),
    Raw("1.0"),
    Raw("1e1"),
    Raw(".5"),
    Raw("+3"),
    Raw("~"),
]
_BAD_INTS = [Raw("-1"), Raw("true"), Raw('"5"'), Raw("abc"), Raw("9223372036854775808")]
_ENV = ["A=1", "B=two", "PATH=/usr/bin", "LD_LIBRARY_PATH=/usr/lib", "A=2", "C=", "D=x=y"]
_BAD_ENV = ["=x", "NOEQUALS", ""]


def _env(rnd: random.Random) -> list[Any]:
    return [_pick(rnd, _ENV, _BAD_ENV) for _ in range(rnd.randint(0, 3))]


def _shuffled(rnd: random.Random, fields: dict[str, Any]) -> dict[str, Any]:
    items = list(fields.items())
    rnd.shuffle(items)
    return dict(items)


def _device_node(rnd: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {"path": _pick(rnd, _HOST_NODES, [""])}
    if rnd.random() < 0.3:
        out["hostPath"] = _pick(rnd, _HOST_NODES, ["/dev/no-such-node"], 0.2)
    if rnd.random() < 0.3:
        out["type"] = _pick(rnd, ["c", "c", "b", "u", "p"], ["x"], 0.05)
    for key in ("major", "minor"):
        if rnd.random() < 0.25:
            out[key] = _pick(rnd, _INTS, _BAD_INTS)
    if rnd.random() < 0.4:
        out["permissions"] = _pick(rnd, ["rw", "rwm", "r", "none", "", "mrw", "w"], ["rx"])
    if rnd.random() < 0.1:
        out["fileMode"] = rnd.choice([Raw("0644"), 420, Raw("0o600")])
    if rnd.random() < 0.1:
        out["uid"] = _pick(rnd, [0, 1000], [Raw("-1"), Raw("4294967296")])
    if rnd.random() < 0.1:
        out["gid"] = rnd.choice([0, 44])
    return _shuffled(rnd, out)


def _mount(rnd: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {
        "hostPath": _pick(rnd, _MOUNT_PATHS, [""]),
        "containerPath": _pick(rnd, [*_MOUNT_PATHS, "/a", "/a/b/c/d/e"], [""]),
    }
    if rnd.random() < 0.7:
        out["options"] = rnd.sample(
            ["ro", "rw", "nosuid", "nodev", "bind", "rbind"], rnd.randint(0, 4)
        )
    if rnd.random() < 0.2:
        out["type"] = rnd.choice(["bind", "", "tmpfs"])
    return _shuffled(rnd, out)


def _hook(rnd: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {
        "hookName": _pick(rnd, sorted(cdi.HOOK_NAMES), ["bogus"]),
        "path": _pick(rnd, ["/usr/bin/nvidia-cdi-hook", "/bin/true"], [""]),
    }
    if rnd.random() < 0.8:
        out["args"] = ["nvidia-cdi-hook", rnd.choice(["update-ldcache", "create-symlinks"])]
    if rnd.random() < 0.2:
        out["env"] = _env(rnd)
    if rnd.random() < 0.2:
        out["timeout"] = rnd.choice([5, Raw("0x5"), Raw("1.5")])
    return _shuffled(rnd, out)


def _intel_rdt(rnd: random.Random) -> dict[str, Any] | None:
    if rnd.random() < 0.1:
        return None
    out: dict[str, Any] = {}
    if rnd.random() < 0.7:
        out["closID"] = _pick(rnd, ["/", "clos1", "c2"], [".", "a/b"], 0.2)
    if rnd.random() < 0.3:
        out["schemata"] = rnd.choice([[], ["L3:0=f"], None])
    if rnd.random() < 0.3:
        out["enableMonitoring"] = rnd.choice([True, False, Raw("yes"), Raw("off"), Raw('"true"')])
    return _shuffled(rnd, out)


def _edits(rnd: random.Random, rate: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rnd.random() < rate:
        out["env"] = _env(rnd)
    if rnd.random() < rate * 1.5:
        out["deviceNodes"] = [_device_node(rnd) for _ in range(rnd.randint(1, 3))]
    if rnd.random() < rate:
        out["mounts"] = [_mount(rnd) for _ in range(rnd.randint(1, 3))]
    if rnd.random() < rate / 2:
        out["hooks"] = [_hook(rnd) for _ in range(rnd.randint(1, 2))]
    if rnd.random() < rate / 6:
        out["intelRdt"] = _intel_rdt(rnd)
    if rnd.random() < rate / 6:
        out["additionalGids"] = [
            rnd.choice([0, 44, 1000, Raw("~")]) for _ in range(rnd.randint(1, 3))
        ]
    if rnd.random() < rate / 6:
        out["netDevices"] = [
            {
                "hostInterfaceName": _pick(rnd, ["eth1", "eth2"], [""]),
                "name": _pick(rnd, ["n0", "n1"], [""]),
            }
            for _ in range(rnd.randint(1, 2))
        ]
    return _shuffled(rnd, out)


def _annotations(rnd: random.Random) -> dict[str, Any]:
    keys = ["cdi.k8s.io/a", "b", "nvidia.com/gpu.product", "x y"]
    return {
        rnd.choice(keys): rnd.choice(["v", "1", "true", Raw("5")]) for _ in range(rnd.randint(0, 2))
    }


def random_spec(rnd: random.Random) -> dict[str, Any]:
    """A spec, mostly valid: every field CDI has, some values it refuses, odd YAML numbers."""
    devices = []
    for _ in range(rnd.choices([0, 1, 2, 3, 4], [1, 6, 5, 3, 2])[0]):
        device: dict[str, Any] = {"name": _pick(rnd, [_name(rnd)], _BAD_NAMES)}
        if rnd.random() < 0.97:
            device["containerEdits"] = _edits(rnd, 0.55) or {"env": ["A=1"]}
        if rnd.random() < 0.1:
            device["annotations"] = _annotations(rnd)
        devices.append(_shuffled(rnd, device))
    out: dict[str, Any] = {
        "cdiVersion": rnd.choice(["1.1.0", "v1.1.0", "1.1.0"])
        if rnd.random() < 0.6
        else _pick(rnd, cdi.SPEC_VERSIONS[:8], ["0.2.0", "1.2.0", "", "vv1.0.0", "1.0"], 0.1),
        "kind": _pick(rnd, _KINDS, _BAD_KINDS),
        "devices": devices,
    }
    if rnd.random() < 0.5:
        out["containerEdits"] = _edits(rnd, 0.4)
    if rnd.random() < 0.08:
        out["annotations"] = _annotations(rnd)
    if rnd.random() < 0.02:
        out[rnd.choice(["unknownField", "Kind", "device"])] = "x"
    return _shuffled(rnd, out)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    return random_spec(random.Random(draw(st.integers(0, 1 << 32))))


#: Small damage to a text: what a truncated write or a careless edit leaves.
_DAMAGE = [":", "\t", "- ", "{", "]", '"', "'", "#", "\n  x", "&a ", "\x01", "\\q"]


def damaged_text(rnd: random.Random) -> tuple[bytes, bool]:
    """A spec rendered in a random style and, now and then, damaged (and whether it was)."""
    style = rnd.choice(sorted(STYLES))
    data = render(random_spec(rnd), STYLES[style], rnd.randint(0, 1 << 16))
    if rnd.random() < 0.08:
        at = rnd.randint(0, len(data))
        return data[:at] + rnd.choice(_DAMAGE).encode() + data[at + rnd.randint(0, 3) :], True
    return data, False


@dataclass(frozen=True)
class Layout:
    """Spec directories to write: (directory index, file name, bytes, damaged)."""

    dirs: int
    files: tuple[tuple[int, str, bytes, bool], ...]


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    """One to three directories, a few files: names that sort, extensions the library reads
    and ones it skips, the same kind in several files (overrides and conflicts)."""
    rnd = random.Random(draw(st.integers(0, 1 << 32)))
    dirs = rnd.randint(1, 3)
    files = []
    for _ in range(rnd.choices([1, 2, 3, 4], [3, 4, 2, 1])[0]):
        name = rnd.choice(["a", "b", "nvidia", "z", "00"]) + rnd.choice(
            [".yaml", ".json", ".json", ".yaml", ".yml", ""]
        )
        files.append((rnd.randrange(dirs), name, *damaged_text(rnd)))
    return Layout(dirs, tuple(files))


def write_layout(base: Path, layout: Layout) -> list[str]:
    dirs = [base / f"d{i}" for i in range(layout.dirs)]
    for directory in dirs:
        directory.mkdir(parents=True, exist_ok=True)
    for index, name, data, _ in layout.files:
        (dirs[index] / name).write_bytes(data)
    return [str(d) for d in dirs]


def combos_for(answer: Answer, rnd: random.Random) -> list[list[str]]:
    names_ = sorted(answer["devices"])
    out = []
    for _ in range(2):
        if names_:
            out.append(rnd.sample(names_, min(len(names_), rnd.randint(1, 3))))
    out.append([*names_[:1], "unknown.com/x=y"])
    return out


def spec_dirs_exist(paths: Sequence[str]) -> bool:
    return all(os.path.isdir(p) for p in paths)
