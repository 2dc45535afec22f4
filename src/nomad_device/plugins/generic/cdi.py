"""CDI specs read as the reference library reads them: decoding, validation, spec directories.

The Container Device Interface describes devices in spec files (``kind:
nvidia.com/gpu``, a list of named devices, each with ``containerEdits``:
device nodes, mounts, environment, hooks ...). This module is the pure part:
what ``tags.cncf.io/container-device-interface`` v1.1.2 (the newest the Go
module proxy serves) makes of a directory of specs, written from its rules:

- **decoding** (:func:`decode_spec`): the text is read by :mod:`.yamlsubset`
  (JSON is YAML) and decoded as go-yaml v3 decodes into CDI's Go types with
  ``KnownFields``: an unknown or repeated key is an error, a null is the zero
  value (a null entry of a list of strings is dropped), a plain scalar
  becomes a number by go-yaml's rules (``0x10``, ``0o17``, ``017``, ``1_000``,
  a float truncated) and a quoted one never does;
- **validation** (:func:`validate_spec`): the spec version (``0.3.0`` to
  ``1.1.0``, a leading ``v`` allowed) must be one CDI knows and at least
  what the spec's features need (``hostPath`` 0.5.0, annotations 0.6.0,
  ``intelRdt`` 0.7.0, ``netDevices`` 1.1.0 ...; a mount ``type`` and a
  ``hostPath`` count only in the spec's own edits and its last device's, as
  in the library, whose loop looks at the last device each time); vendor, class and device
  names by CDI's character rules; every edit as CDI checks it. Annotations
  are not checked: the library's check never runs on them (it tests for a
  ``map[string]any`` and is handed a ``map[string]string``);
- **directories** (:func:`scan_dirs`): ``.json`` and ``.yaml`` files of
  each directory in name order, not recursing; a device defined in a later
  directory replaces the earlier one; one defined twice in the same
  directory is an error of both files and is left out entirely (even where a
  later directory defines it too, as the library does); a directory that
  cannot be listed ends the scan, as in the library;
- **resolving** (:func:`merge`, :func:`apply`): a device's edits are its
  spec's ``containerEdits`` followed by its own; several devices are merged
  as ``InjectDevices`` merges them, each spec's edits once, before its first
  device's, then applied as CDI applies them to a container: a variable set
  again keeps its first place and takes the last value; a node or mount for
  a container path given again replaces the earlier one (and moves to the
  end); mounts then sorted by depth, stably.

``tests/plugins/generic/test_cdi_crosscheck.py`` compares all of it with the Go
library, through ``interop/cdi``, on a corpus and on generated specs.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

from nomad_device.plugins.generic.yamlsubset import Map, Node, Scalar, Seq, YamlError, parse

__all__ = [
    "HOOK_NAMES",
    "SPEC_VERSIONS",
    "Applied",
    "Catalog",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "Hook",
    "HostNode",
    "IntelRdt",
    "Mount",
    "NetDevice",
    "RawSpec",
    "Spec",
    "SpecError",
    "apply",
    "cgroup_access",
    "check_edits",
    "decode_spec",
    "fill_missing_info",
    "merge",
    "parse_kind",
    "qualified_name",
    "read_spec",
    "scan_dirs",
    "spec_extension",
    "validate_spec",
]

#: Known spec versions, newest first, as the library lists them.
SPEC_VERSIONS: Final = (
    "1.1.0", "1.0.0", "0.8.0", "0.7.0", "0.6.0", "0.5.0", "0.4.0", "0.3.0", "0.2.0", "0.1.0",
)  # fmt: skip
#: The earliest version the library reads (0.1.0 and 0.2.0 are known but always too old).
EARLIEST: Final = "0.3.0"
#: OCI hook names CDI accepts.
HOOK_NAMES: Final = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
#: Spec files larger than this are not read (the library has no limit: this plugin
#: holds every spec in memory at once).
MAX_SPEC_BYTES: Final = 16 << 20
NO_PERMISSIONS: Final = "none"

_INT64: Final = 1 << 63
_UINT64: Final = 1 << 64
_UINT32_MAX: Final = (1 << 32) - 1
_YAML_FLOAT: Final = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DOT_FLOAT: Final = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?")
_TRUE: Final = frozenset({"y", "Y", "yes", "Yes", "YES", "on", "On", "ON"})
_FALSE: Final = frozenset({"n", "N", "no", "No", "NO", "off", "Off", "OFF"})
_RESOLVED: Final[dict[str, object]] = {
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_ALNUM: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_LETTERS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class SpecError(ValueError):
    """Why a spec is not read. ``unsupported``: the library might read it, this plugin
    does not (YAML outside :mod:`.yamlsubset`'s subset, a spec too large)."""

    def __init__(self, problem: str, *, unsupported: bool = False) -> None:
        super().__init__(problem)
        self.unsupported = unsupported


# --------------------------------------------------------------------- the spec, as data


@dataclass(frozen=True)
class DeviceNode:
    path: str
    host_path: str = ""
    type: str = ""
    major: int = 0
    minor: int = 0
    file_mode: int | None = None
    permissions: str = ""
    uid: int | None = None
    gid: int | None = None

    @property
    def host(self) -> str:
        """The host node: ``hostPath``, else the container path (as CDI fills it in)."""
        return self.host_path or self.path


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str = ""

    @functools.cached_property
    def read_only(self) -> bool:
        """Whether the last of ``ro`` and ``rw`` in the options is ``ro`` (as mount(8))."""
        flags = [o for o in self.options if o in ("ro", "rw")]
        return bool(flags) and flags[-1] == "ro"


@dataclass(frozen=True)
class Hook:
    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None

    def describe(self) -> str:
        """``nvidia-cdi-hook update-ldcache``: the program and its subcommand, if any."""
        program = os.path.basename(self.path) or self.path
        rest = self.args[1:] if self.args else ()
        if rest and not rest[0].startswith("-"):
            return f"{program} {rest[0]}"
        return program


@dataclass(frozen=True)
class IntelRdt:
    clos_id: str = ""
    l3_cache_schema: str = ""
    mem_bw_schema: str = ""
    schemata: tuple[str, ...] | None = None  # None: absent (an empty list needs 1.1.0)
    enable_monitoring: bool = False


@dataclass(frozen=True)
class NetDevice:
    host_interface_name: str
    name: str


@dataclass(frozen=True)
class ContainerEdits:
    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    net_devices: tuple[NetDevice, ...] = ()
    hooks: tuple[Hook, ...] = ()
    mounts: tuple[Mount, ...] = ()
    intel_rdt: IntelRdt | None = None
    additional_gids: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.env
            or self.device_nodes
            or self.hooks
            or self.mounts
            or self.additional_gids
            or self.intel_rdt is not None
            or self.net_devices
        )

    def append(self, other: ContainerEdits) -> ContainerEdits:
        """``other`` after these, as the library's ``ContainerEdits.Append``."""
        return ContainerEdits(
            self.env + other.env,
            self.device_nodes + other.device_nodes,
            self.net_devices + other.net_devices,
            self.hooks + other.hooks,
            self.mounts + other.mounts,
            other.intel_rdt if other.intel_rdt is not None else self.intel_rdt,
            self.additional_gids + other.additional_gids,
        )


@dataclass(frozen=True)
class RawDevice:
    name: str = ""
    annotations: Mapping[str, str] | None = None
    edits: ContainerEdits = ContainerEdits()


@dataclass(frozen=True)
class RawSpec:
    """A spec as decoded, before validation."""

    version: str = ""
    kind: str = ""
    annotations: Mapping[str, str] | None = None
    devices: tuple[RawDevice, ...] = ()
    edits: ContainerEdits = ContainerEdits()


@dataclass(frozen=True)
class Device:
    """One device of a valid spec; the spec's own edits and annotations ride along."""

    name: str
    kind: str
    spec_path: str
    edits: ContainerEdits
    spec_edits: ContainerEdits
    annotations: Mapping[str, str] = field(default_factory=dict)
    spec_annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        return qualified_name(self.kind, self.name)

    @property
    def resolved(self) -> ContainerEdits:
        """What this device alone brings: its spec's edits, then its own."""
        return self.spec_edits.append(self.edits)


@dataclass(frozen=True)
class Spec:
    path: str
    priority: int
    version: str
    kind: str
    devices: Mapping[str, Device]


def qualified_name(kind: str, name: str) -> str:
    """``nvidia.com/gpu=0``."""
    return f"{kind}={name}"


def parse_kind(kind: str) -> tuple[str, str]:
    """(vendor, class) of ``vendor/class``; ("", kind) without a ``/`` or with an empty half."""
    vendor, sep, cls = kind.partition("/")
    if not sep or not vendor or not cls:
        return "", kind
    return vendor, cls


# ------------------------------------------------------------------------------ decoding

T = TypeVar("T")


def _where(node: Node) -> str:
    return f"line {node.line}: "


def _shown(node: Node) -> str:
    if isinstance(node, Seq):
        return "!!seq"
    if isinstance(node, Map):
        return "!!map"
    text = node.value if len(node.value) <= 10 else node.value[:7] + "..."
    return f"!!{_tag(node)} `{text}`"


def _tag(node: Scalar) -> str:
    if not node.plain:
        return "str"
    value = _resolve(node.value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "str"


def _type_error(node: Node, target: str) -> SpecError:
    return SpecError(f"{_where(node)}cannot unmarshal {_shown(node)} into {target}")


_DIGITS: Final = {2: frozenset("01"), 8: frozenset("01234567"), 10: frozenset("0123456789"),
                  16: frozenset("0123456789abcdefABCDEF")}  # fmt: skip


def _go_int(text: str) -> int | None:
    """``strconv.ParseInt(text, 0, 64)``'s digits without its range: a sign, then a
    ``0x``, ``0o``, ``0b`` or ``0`` (octal) prefix, then digits of that base."""
    sign = 1
    if text.startswith(("+", "-")):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    base = 10
    prefix = text[:2].lower()
    if prefix in ("0x", "0o", "0b"):
        base, text = {"0x": 16, "0o": 8, "0b": 2}[prefix], text[2:]
    elif len(text) > 1 and text[0] == "0":
        base, text = 8, text[1:]
    if not text or not set(text) <= _DIGITS[base]:
        return None
    return sign * int(text, base)


def _resolve(text: str) -> object:
    """A plain scalar as go-yaml v3 resolves it: None (null), bool, int, float or str.
    Timestamps are left as strings: nothing here wants one, and no timestamp is a
    number."""
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in _RESOLVED:
        return _RESOLVED[text]
    first = text[0]
    if first == ".":
        return float(text) if _DOT_FLOAT.fullmatch(text) else text
    if first not in "+-0123456789":
        return text
    plain = text.replace("_", "")
    number = _go_int(plain)
    if number is not None:
        if -_INT64 <= number < _INT64:
            return number
        if 0 <= number < _UINT64 and plain[:1] not in "+-":
            return number
    if _YAML_FLOAT.fullmatch(plain):
        value = float(plain)
        if math.isfinite(value):
            return value
    return text


def _integer(node: Node, target: str, low: int, high: int) -> int | None:
    """A number for an integer field (None: null), as go-yaml converts into it."""
    if not isinstance(node, Scalar):
        raise _type_error(node, target)
    if node.is_null:
        return None
    value = _resolve(node.value) if node.plain else node.value
    if isinstance(value, (bool, str)):
        raise _type_error(node, target)
    if isinstance(value, float):
        if math.isnan(value) or value == math.inf:
            raise _type_error(node, target)
        unsigned = low == 0
        if not (-1 < value < _UINT64 if unsigned else -_INT64 < value < _INT64):
            raise SpecError(
                f"{_where(node)}{node.value!r} converts to {target} in a way Go leaves to the"
                " platform",
                unsupported=True,
            )
        value = math.trunc(value)
    assert isinstance(value, int)
    if not low <= value <= high:
        raise _type_error(node, target)
    return value


def _text(node: Node, target: str = "string") -> str:
    if not isinstance(node, Scalar):
        raise _type_error(node, target)
    return "" if node.is_null else node.value


def _bool(node: Node) -> bool:
    if not isinstance(node, Scalar):
        raise _type_error(node, "bool")
    if node.is_null:
        return False
    value = _resolve(node.value) if node.plain else node.value
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _TRUE | _FALSE:
        return value in _TRUE
    raise _type_error(node, "bool")


def _no_merge(key: Scalar) -> None:
    if key.plain and key.value == "<<":
        raise SpecError(
            f"line {key.line}: a merge key ('<<') (outside the YAML this plugin reads)",
            unsupported=True,
        )


def _check_keys(node: Map) -> None:
    seen: dict[str, int] = {}
    for key, _ in node.pairs:
        if key.value in seen:
            raise SpecError(
                f"line {key.line}: mapping key {key.value!r} already defined at line"
                f" {seen[key.value]}"
            )
        seen[key.value] = key.line


def _fields(node: Node, target: str, known: Iterable[str]) -> dict[str, Node] | None:
    """A mapping decoded into a struct: its fields by key (None for null), checked as
    go-yaml checks with ``KnownFields``; a null key is ignored, as go-yaml ignores it."""
    if isinstance(node, Scalar) and node.is_null:
        return None
    if not isinstance(node, Map):
        raise _type_error(node, target)
    _check_keys(node)
    names = set(known)
    out: dict[str, Node] = {}
    for key, value in node.pairs:
        _no_merge(key)
        if key.is_null:
            continue
        if key.value not in names:
            raise SpecError(f"line {key.line}: field {key.value} not found in type {target}")
        out[key.value] = value
    return out


def _list(node: Node, target: str, item: Callable[[Node], T], nulls: str) -> tuple[T, ...] | None:
    """A sequence (None for null). A null entry is ``nulls``: "drop" (go-yaml drops it
    from a list of values) or "refuse" (a list of pointers keeps a nil, which every
    check of CDI's refuses, or dereferences and panics on)."""
    if isinstance(node, Scalar) and node.is_null:
        return None
    if not isinstance(node, Seq):
        raise _type_error(node, target)
    out = []
    for entry in node.items:
        if isinstance(entry, Scalar) and entry.is_null:
            if nulls == "refuse":
                raise SpecError(f"{_where(entry)}a null entry in {target}")
            continue
        out.append(item(entry))
    return tuple(out)


def _strings(node: Node) -> tuple[str, ...] | None:
    return _list(node, "[]string", _text, "drop")


def _string_map(node: Node) -> dict[str, str] | None:
    if isinstance(node, Scalar) and node.is_null:
        return None
    if not isinstance(node, Map):
        raise _type_error(node, "map[string]string")
    _check_keys(node)
    out: dict[str, str] = {}
    for key, value in node.pairs:
        _no_merge(key)
        if key.is_null:
            continue
        out[key.value] = _text(value)
    return out


def _device_node(node: Node) -> DeviceNode:
    target = "specs.DeviceNode"
    keys = ("path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid")
    got = _fields(node, target, keys) or {}
    integer = (
        ("major", "int64", -_INT64, _INT64 - 1), ("minor", "int64", -_INT64, _INT64 - 1),
        ("fileMode", "fs.FileMode", 0, _UINT32_MAX), ("uid", "uint32", 0, _UINT32_MAX),
        ("gid", "uint32", 0, _UINT32_MAX),
    )  # fmt: skip
    numbers = {k: _integer(got[k], t, lo, hi) if k in got else None for k, t, lo, hi in integer}
    return DeviceNode(
        path=_text(got["path"]) if "path" in got else "",
        host_path=_text(got["hostPath"]) if "hostPath" in got else "",
        type=_text(got["type"]) if "type" in got else "",
        major=numbers["major"] or 0,
        minor=numbers["minor"] or 0,
        file_mode=numbers["fileMode"],
        permissions=_text(got["permissions"]) if "permissions" in got else "",
        uid=numbers["uid"],
        gid=numbers["gid"],
    )


def _mount(node: Node) -> Mount:
    got = _fields(node, "specs.Mount", ("hostPath", "containerPath", "options", "type")) or {}
    return Mount(
        host_path=_text(got["hostPath"]) if "hostPath" in got else "",
        container_path=_text(got["containerPath"]) if "containerPath" in got else "",
        options=(_strings(got["options"]) or ()) if "options" in got else (),
        type=_text(got["type"]) if "type" in got else "",
    )


def _hook(node: Node) -> Hook:
    got = _fields(node, "specs.Hook", ("hookName", "path", "args", "env", "timeout")) or {}
    return Hook(
        hook_name=_text(got["hookName"]) if "hookName" in got else "",
        path=_text(got["path"]) if "path" in got else "",
        args=(_strings(got["args"]) or ()) if "args" in got else (),
        env=(_strings(got["env"]) or ()) if "env" in got else (),
        timeout=_integer(got["timeout"], "int", -_INT64, _INT64 - 1) if "timeout" in got else None,
    )


def _intel_rdt(node: Node) -> IntelRdt | None:
    keys = ("closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring")
    got = _fields(node, "specs.IntelRdt", keys)
    if got is None:
        return None
    return IntelRdt(
        clos_id=_text(got["closID"]) if "closID" in got else "",
        l3_cache_schema=_text(got["l3CacheSchema"]) if "l3CacheSchema" in got else "",
        mem_bw_schema=_text(got["memBwSchema"]) if "memBwSchema" in got else "",
        schemata=_strings(got["schemata"]) if "schemata" in got else None,
        enable_monitoring=_bool(got["enableMonitoring"]) if "enableMonitoring" in got else False,
    )


def _net_device(node: Node) -> NetDevice:
    got = _fields(node, "specs.LinuxNetDevice", ("hostInterfaceName", "name")) or {}
    return NetDevice(
        host_interface_name=_text(got["hostInterfaceName"]) if "hostInterfaceName" in got else "",
        name=_text(got["name"]) if "name" in got else "",
    )


def _gid(node: Node) -> int:
    value = _integer(node, "uint32", 0, _UINT32_MAX)
    return 0 if value is None else value


def _edits(node: Node) -> ContainerEdits:
    keys = ("env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt", "additionalGids")
    got = _fields(node, "specs.ContainerEdits", keys)
    if got is None:
        return ContainerEdits()

    def items(key: str, target: str, item: Callable[[Node], T]) -> tuple[T, ...]:
        if key not in got:
            return ()
        return _list(got[key], target, item, "refuse") or ()

    gids = got.get("additionalGids")
    return ContainerEdits(
        env=(_strings(got["env"]) or ()) if "env" in got else (),
        device_nodes=items("deviceNodes", "[]*specs.DeviceNode", _device_node),
        net_devices=items("netDevices", "[]*specs.LinuxNetDevice", _net_device),
        hooks=items("hooks", "[]*specs.Hook", _hook),
        mounts=items("mounts", "[]*specs.Mount", _mount),
        intel_rdt=_intel_rdt(got["intelRdt"]) if "intelRdt" in got else None,
        additional_gids=(_list(gids, "[]uint32", _gid, "drop") or ()) if gids is not None else (),
    )


def _raw_device(node: Node) -> RawDevice:
    got = _fields(node, "specs.Device", ("name", "annotations", "containerEdits")) or {}
    return RawDevice(
        name=_text(got["name"]) if "name" in got else "",
        annotations=_string_map(got["annotations"]) if "annotations" in got else None,
        edits=_edits(got["containerEdits"]) if "containerEdits" in got else ContainerEdits(),
    )


def decode_spec(data: bytes) -> RawSpec:
    """The spec in ``data`` (YAML or JSON), decoded as the library's ``ParseSpec`` does."""
    try:
        document = parse(data)
    except YamlError as exc:
        raise SpecError(
            f"failed to unmarshal CDI Spec: {exc}", unsupported=exc.unsupported
        ) from None
    if document is None:
        raise SpecError("failed to unmarshal CDI Spec: EOF (no document)")
    keys = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
    got = _fields(document, "specs.Spec", keys)
    if got is None:
        raise SpecError("no Spec data")
    devices = (
        _list(got["devices"], "[]specs.Device", _raw_device, "drop") if "devices" in got else ()
    )
    return RawSpec(
        version=_text(got["cdiVersion"]) if "cdiVersion" in got else "",
        kind=_text(got["kind"]) if "kind" in got else "",
        annotations=_string_map(got["annotations"]) if "annotations" in got else None,
        devices=devices or (),
        edits=_edits(got["containerEdits"]) if "containerEdits" in got else ContainerEdits(),
    )


# ---------------------------------------------------------------------------- validation


def _required_version(spec: RawSpec) -> str:
    """The oldest version that has every feature the spec uses."""
    every = (spec.edits, *(d.edits for d in spec.devices))
    if any(
        (
            e.intel_rdt is not None
            and (e.intel_rdt.schemata is not None or e.intel_rdt.enable_monitoring)
        )
        or e.net_devices
        for e in every
    ):
        return "1.1.0"
    if any(e.intel_rdt is not None or e.additional_gids for e in every):
        return "0.7.0"
    _, sep, cls = spec.kind.partition("/")
    if spec.annotations or any(d.annotations for d in spec.devices) or (sep and "." in cls):
        return "0.6.0"
    if any(d.name[:1].isdigit() and d.name[:1].isascii() for d in spec.devices):
        return "0.5.0"
    # The library collects the devices' edits for these two by the address of its loop
    # variable, in a module built with Go 1.19's loop semantics: every entry is the last
    # device's edits. So only the spec's own and the last device's count.
    last = (spec.devices[-1].edits,) if spec.devices else ()
    if any(n.host_path for e in (*last, spec.edits) for n in e.device_nodes):
        return "0.5.0"
    if any(m.type for e in (*last, spec.edits) for m in e.mounts):
        return "0.4.0"
    return EARLIEST


def _check_version(spec: RawSpec) -> None:
    version = spec.version.removeprefix("v")
    if version not in SPEC_VERSIONS:
        raise SpecError(f"invalid version {spec.version!r}")
    needed = _required_version(spec)
    if SPEC_VERSIONS.index(needed) < SPEC_VERSIONS.index(version):
        raise SpecError(f"the spec version must be at least v{needed}")


def _name_problem(name: str, middle: frozenset[str], first: frozenset[str]) -> str | None:
    if not name:
        return "empty name"
    if name[0] not in first:
        return (
            f"{name!r} should start with a {'letter' if first is _LETTERS else 'letter or digit'}"
        )
    for ch in name[1:-1]:
        if ch not in _ALNUM and ch not in middle:
            return f"invalid character {ch!r} in name {name!r}"
    if len(name) > 1 and name[-1] not in _ALNUM:
        return f"{name!r} should end with a letter or digit"
    return None


def _check_vendor_class(vendor: str, cls: str) -> None:
    for what, value in (("vendor", vendor), ("class", cls)):
        problem = _name_problem(value, frozenset("_-."), _LETTERS)
        if problem:
            raise SpecError(f"invalid {what}. {problem}")


def _check_device_name(name: str) -> None:
    problem = _name_problem(name, frozenset("_-.:"), _ALNUM)
    if problem:
        raise SpecError(f"invalid device name: {problem}")


def _check_env(env: Sequence[str], what: str) -> None:
    for item in env:
        if item.find("=") <= 0:
            raise SpecError(f"{what}invalid environment variable {item!r}")


def check_edits(edits: ContainerEdits) -> None:
    _check_env(edits.env, "invalid container edits: ")
    for node in edits.device_nodes:
        if not node.path:
            raise SpecError("invalid (empty) device path")
        if node.type not in ("", "b", "c", "u", "p"):
            raise SpecError(f"device {node.path!r}: invalid type {node.type!r}")
        if node.major < 0 or node.minor < 0:
            raise SpecError(
                f"device {node.path!r}: invalid (negative) device number {node.major}:{node.minor}"
            )
        if node.permissions not in ("", NO_PERMISSIONS) and node.permissions.strip("rwm"):
            raise SpecError(f"device {node.path!r}: invalid permissions {node.permissions!r}")
    for hook in edits.hooks:
        if hook.hook_name not in HOOK_NAMES:
            raise SpecError(f"invalid hook name {hook.hook_name!r}")
        if not hook.path:
            raise SpecError(f"invalid hook {hook.hook_name!r} with empty path")
        _check_env(hook.env, f"invalid hook {hook.hook_name!r}: ")
    for mount in edits.mounts:
        if not mount.host_path:
            raise SpecError("invalid mount, empty host path")
        if not mount.container_path:
            raise SpecError("invalid mount, empty container path")
    rdt = edits.intel_rdt
    if rdt is not None and rdt.clos_id != "/":
        clos = rdt.clos_id
        if (
            len(clos.encode("utf-8", "surrogateescape")) >= 4096
            or clos in (".", "..")
            or ("/" in clos or "\n" in clos)
        ):
            raise SpecError("invalid ClosID")
    hosts: set[str] = set()
    names: set[str] = set()
    for net in edits.net_devices:
        if not net.host_interface_name:
            raise SpecError("invalid linux net device, empty HostInterfaceName")
        if not net.name:
            raise SpecError("invalid linux net device, empty Name")
        if net.host_interface_name in hosts:
            raise SpecError(
                f"invalid linux net device, duplicate HostInterfaceName {net.host_interface_name!r}"
            )
        if net.name in names:
            raise SpecError(f"invalid linux net device, duplicate Name {net.name!r}")
        hosts.add(net.host_interface_name)
        names.add(net.name)


def validate_spec(raw: RawSpec, path: str, priority: int) -> Spec:
    """The spec's devices, checked as the library's ``newSpec`` checks them."""
    _check_version(raw)
    vendor, cls = parse_kind(raw.kind)
    _check_vendor_class(vendor, cls)
    check_edits(raw.edits)
    devices: dict[str, Device] = {}
    for item in raw.devices:
        try:
            _check_device_name(item.name)
            if item.edits.empty:
                raise SpecError("invalid device, empty device edits")
            check_edits(item.edits)
        except SpecError as exc:
            raise SpecError(f"invalid CDI Spec: failed add device {item.name!r}: {exc}") from None
        if item.name in devices:
            raise SpecError(f"invalid CDI Spec: invalid spec, multiple device {item.name!r}")
        devices[item.name] = Device(
            item.name,
            raw.kind,
            path,
            item.edits,
            raw.edits,
            dict(item.annotations or {}),
            dict(raw.annotations or {}),
        )
    if not devices:
        raise SpecError("invalid CDI Spec: invalid spec, no devices")
    return Spec(path, priority, raw.version, raw.kind, devices)


def read_spec(data: bytes, path: str, priority: int) -> Spec:
    """Decode and validate one spec file's bytes."""
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"larger than {MAX_SPEC_BYTES >> 20} MiB", unsupported=True)
    return validate_spec(decode_spec(data), path, priority)


# --------------------------------------------------------------------------- directories


def spec_extension(name: str) -> str:
    """Go's ``filepath.Ext``: from the last dot (``.json`` for a file named ``.json``)."""
    dot = name.rfind(".")
    return name[dot:] if dot >= 0 else ""


def clean(path: str) -> str:
    """Go's ``filepath.Clean`` (``os.path.normpath`` keeps a leading ``//``)."""
    out = os.path.normpath(path)
    return "/" + out.lstrip("/") if out.startswith("//") else out


@dataclass
class Catalog:
    """What a set of spec directories defines, as the library's cache holds it."""

    devices: dict[str, Device] = field(default_factory=dict)  # by qualified name
    specs: dict[str, Spec] = field(default_factory=dict)  # by path: the specs read
    errors: dict[str, list[SpecError]] = field(default_factory=dict)  # by path
    dir_error: tuple[str, str] | None = None  # a directory that could not be listed


def scan_dirs(dirs: Sequence[str], load: Callable[[str, int], Spec]) -> Catalog:
    """Every spec file of ``dirs`` through ``load(path, priority)`` (which raises
    :class:`SpecError`), resolved into devices as the library's ``Cache.refresh``."""
    catalog = Catalog()
    conflicts: set[str] = set()
    holder: dict[str, int] = {}  # the priority of the spec each device comes from

    def error(path: str, problem: SpecError) -> None:
        catalog.errors.setdefault(path, []).append(problem)

    for priority, directory in enumerate(clean(d) for d in dirs):
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue
        except OSError as exc:
            catalog.dir_error = (directory, (exc.strerror or str(exc)).lower())
            break
        for entry in sorted(entries, key=lambda e: os.fsencode(e.name)):
            try:
                if entry.is_dir(follow_symlinks=False):
                    continue
            except OSError:
                pass
            if spec_extension(entry.name) not in (".json", ".yaml"):
                continue
            path = clean(os.path.join(directory, entry.name))
            try:
                spec = load(path, priority)
            except SpecError as exc:
                error(
                    path, SpecError(f"failed to load CDI Spec {exc}", unsupported=exc.unsupported)
                )
                continue
            catalog.specs[path] = spec
            for device in spec.devices.values():
                name = device.qualified
                old = catalog.devices.get(name)
                if old is not None:
                    old_priority = holder[name]
                    if priority == old_priority:
                        problem = SpecError(
                            f"conflicting device {name!r} (specs {path!r}, {old.spec_path!r})"
                        )
                        error(path, problem)
                        error(old.spec_path, problem)
                        conflicts.add(name)
                        continue
                    if priority < old_priority:
                        continue
                catalog.devices[name] = device
                holder[name] = priority
    for name in conflicts:
        catalog.devices.pop(name, None)
    return catalog


# ------------------------------------------------------------------------------ resolving


def merge(devices: Sequence[Device]) -> ContainerEdits:
    """The edits of several devices, as ``InjectDevices`` collects them: each spec's own
    edits once, before its first device's, then each device's."""
    out = ContainerEdits()
    seen: set[str] = set()
    for device in devices:
        if device.spec_path not in seen:
            seen.add(device.spec_path)
            out = out.append(device.spec_edits)
        out = out.append(device.edits)
    return out


@dataclass(frozen=True)
class Applied:
    """Edits as CDI applies them to a container, before anything is read from the host."""

    env: tuple[str, ...]
    device_nodes: tuple[DeviceNode, ...]
    mounts: tuple[Mount, ...]
    hooks: tuple[Hook, ...]
    intel_rdt: IntelRdt | None
    additional_gids: tuple[int, ...]
    net_devices: tuple[NetDevice, ...]

    def env_map(self) -> dict[str, str]:
        """The variables as a mapping, in CDI's order (names are unique after :func:`apply`)."""
        out: dict[str, str] = {}
        for item in self.env:
            key, _, value = item.partition("=")
            out[key] = value
        return out


def _mount_depth(mount: Mount) -> int:
    return clean(mount.container_path).count("/")


@functools.lru_cache(maxsize=1024)
def apply(edits: ContainerEdits) -> Applied:
    """``edits`` applied as the library applies them to an empty container spec
    (remembered: every scan applies each device's edits, which rarely change)."""
    env: dict[str, str] = {}
    for item in edits.env:
        env[item.partition("=")[0]] = item  # a key set again keeps its place
    nodes: dict[str, DeviceNode] = {}
    for node in edits.device_nodes:
        nodes.pop(node.path, None)  # replaced, and moved to the end
        nodes[node.path] = node
    mounts: dict[str, Mount] = {}
    for mount in edits.mounts:
        mounts.pop(mount.container_path, None)
        mounts[mount.container_path] = mount
    net: dict[str, NetDevice] = {}
    for device in edits.net_devices:
        net[device.host_interface_name] = device
    gids = dict.fromkeys(g for g in edits.additional_gids if g)
    return Applied(
        tuple(env.values()),
        tuple(nodes.values()),
        tuple(sorted(mounts.values(), key=_mount_depth)),
        edits.hooks,
        edits.intel_rdt,
        tuple(gids),
        tuple(net.values()),
    )


# ---------------------------------------------------------------------- the host's node


@dataclass(frozen=True)
class HostNode:
    """A device node with what CDI fills in from the host (``fillMissingInfo``)."""

    node: DeviceNode
    type: str
    major: int
    minor: int
    file_mode: int | None


_TYPE_OF_MODE: Final = ((stat.S_ISBLK, "b"), (stat.S_ISCHR, "c"), (stat.S_ISFIFO, "p"))


def fill_missing_info(node: DeviceNode, real: str | None = None) -> HostNode:
    """The node's type and numbers as CDI completes them from ``lstat`` of the host path
    (``real``: where that path is on this host, under a test's dev root); raises
    :class:`SpecError` where CDI refuses to inject it."""
    minimal = node.type != "" and (node.major != 0 or node.type == "p")
    host = real or node.host
    try:
        info = os.lstat(host)
    except OSError as exc:
        if minimal:
            return HostNode(node, node.type, node.major, node.minor, node.file_mode)
        reason = os.strerror(exc.errno or errno.ENOENT).lower()
        raise SpecError(f"failed to stat CDI host device {node.host!r}: {reason}") from None
    kind = next((t for test, t in _TYPE_OF_MODE if test(info.st_mode)), None)
    if kind is None:
        if minimal:
            return HostNode(node, node.type, node.major, node.minor, node.file_mode)
        raise SpecError(f"failed to stat CDI host device {node.host!r}: not a device node")
    mode = (
        node.file_mode
        if node.file_mode is not None
        else stat.S_IMODE(info.st_mode)
        | (info.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX))
    )
    if minimal:
        return HostNode(node, node.type, node.major, node.minor, mode)
    kind_wanted = node.type or kind
    if kind_wanted != kind:
        raise SpecError(
            f"CDI device ({node.path!r}, {node.host!r}), host type mismatch ({kind_wanted}, {kind})"
        )
    if kind == "p":
        return HostNode(node, kind, node.major, node.minor, mode)
    major, minor = node.major, node.minor
    if major == 0:
        major, minor = os.major(info.st_rdev), os.minor(info.st_rdev)
    return HostNode(node, kind, major, minor, mode)


def cgroup_access(node: DeviceNode) -> str:
    """The device cgroup access CDI grants a ``b`` or ``c`` node: its permissions, ``rwm``
    when none are given, nothing for ``none``."""
    if node.permissions == "":
        return "rwm"
    if node.permissions == NO_PERMISSIONS:
        return ""
    return node.permissions
