"""The ``config { ... }`` block of nomad-device-generic, and its validation.

The operator writes one labelled ``device "<label>" { ... }`` block per kind of
device. The dataclasses below are the schema Nomad shows and decodes against
(through :mod:`nomad_device.config`); :func:`settings_from` checks what the
schema cannot (hex IDs, permission letters, clashing groups) and turns the
blocks into :class:`Kind` values the scanning code uses. Every message names
the block and the field, as in ``device "kvm": permissions: "rwx" is not a
subset of "rwm"``.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final

from nomad_device.errors import InvalidArgument
from nomad_device.model import UNITS, Attribute
from nomad_device.plugin.nomadapi import NomadConfig
from nomad_device.plugins.sharing import MAX_SHARE

__all__ = [
    "DEFAULT_SPEC_DIRS",
    "DEFAULT_VENDOR",
    "CdiBlock",
    "CdiMatcher",
    "DeviceBlock",
    "GenericConfig",
    "Kind",
    "PciBlock",
    "PciMatcher",
    "ProbeBlock",
    "ProbeSpec",
    "ReleaseBlock",
    "Settings",
    "UsbBlock",
    "UsbMatcher",
    "env_prefix",
    "format_config_path",
    "parse_attribute",
    "settings_from",
]

#: The group vendor when a block does not set one: jobs ask ``device "generic/kvm"``.
DEFAULT_VENDOR: Final = "generic"
#: The letters of a device cgroup rule: read, write, mknod.
CGROUP_LETTERS: Final = "rwm"
#: Device cgroup permissions when a block sets none.
DEFAULT_PERMISSIONS: Final = "rw"
#: CDI's own spec directories: static specs, then generated ones (which take precedence).
DEFAULT_SPEC_DIRS: Final = ("/etc/cdi", "/var/run/cdi")


@dataclass(frozen=True)
class UsbBlock:
    """``usb { ... }``: a USB device matches when every given field matches.

    IDs are hex, as ``lsusb`` prints them (``1a86``); strings compare exactly.
    """

    vendor_id: str = ""
    product_id: str = ""
    serial: str = ""
    manufacturer: str = ""
    product: str = ""


@dataclass(frozen=True)
class PciBlock:
    """``pci { ... }``: a PCI function matches when every given field matches.

    IDs are hex as ``lspci -nn`` prints them (``1002``); ``class`` is a prefix of
    the six-digit class code (``"03"`` display, ``"0302"`` 3D controller, ``"12"``
    processing accelerator) or ``value/mask``; ``address`` a glob over the
    function's address (``0000:3b:*``). A function bound to no driver matches a
    block that names one (and is unhealthy for it); one bound to another
    driver does not.
    """

    vendor_id: str = ""
    device_id: str = ""
    class_code: str = field(default="", metadata={"hcl": "class"})
    subsystem_vendor_id: str = ""
    subsystem_device_id: str = ""
    driver: str = ""
    address: str = ""


@dataclass(frozen=True)
class ProbeBlock:
    """``probe { ... }``: a command whose exit status is the device's health.

    It runs with ``/`` as its working directory and a small environment:
    ``PATH``, ``LANG``, the ``GENERIC_DEVICE_*`` variables and ``env``.
    """

    command: list[str]
    timeout: timedelta = timedelta(seconds=5)
    interval: timedelta = timedelta(seconds=30)
    env: dict[str, str] = field(default_factory=dict, metadata={"hcl_block": True})


@dataclass(frozen=True)
class ReleaseBlock:
    """``release { ... }``: a command that cleans a device after the allocation holding
    it ended, before Nomad may give it to another task (needs the ``nomad`` block).

    It runs as a probe does (see :class:`ProbeBlock`), with
    ``GENERIC_DEVICE_ALLOC_ID`` naming the allocation too; the device is
    unhealthy until it exits 0.
    """

    command: list[str]
    timeout: timedelta = timedelta(minutes=5)
    env: dict[str, str] = field(default_factory=dict, metadata={"hcl_block": True})


@dataclass(frozen=True)
class CdiBlock:
    """``cdi { ... }``: the devices CDI spec files describe (``nvidia-ctk cdi generate``...).

    ``kind`` (``"nvidia.com/gpu"``) and ``devices`` (CDI device names) take globs;
    ``hooks`` says what becomes of a device whose spec needs edits Nomad cannot
    make (hooks, ``intelRdt``, ``additionalGids``, ``netDevices``): ``"refuse"``
    reports it unhealthy, ``"skip"`` offers it without them.
    """

    kind: str
    devices: list[str] | None = None
    spec_dirs: list[str] | None = None
    hooks: str = "refuse"


@dataclass(frozen=True)
class DeviceBlock:
    """``device "<label>" { ... }``: one kind of device, one group in Nomad."""

    # Unset: "generic", or a cdi block's kind's vendor ("nvidia.com").
    vendor: str | None = None
    type: str | None = None
    name: str | None = None
    # The lists of strings are optional without a default (None: empty): a Nomad
    # agent fills an absent attribute's literal default ``[]`` in as an empty
    # *tuple*, and the map of device blocks then holds objects of two types (a
    # block that sets ``paths`` beside one that does not), which makes go-cty
    # panic and the agent die. An absent optional attribute is a typed null.
    paths: list[str] | None = None
    usb: list[UsbBlock] = field(default_factory=list)
    pci: list[PciBlock] = field(default_factory=list)
    cdi: CdiBlock | None = None
    # Which of a matched PCI or USB device's own nodes it brings (all when empty):
    # names ("renderD*") or paths under /dev ("dri/renderD*").
    nodes: list[str] | None = None
    # Paths (globs) every device of the block brings besides its own (/dev/kfd).
    companions: list[str] | None = None
    # A PCIe link trained below its maximum speed or width makes a device unhealthy.
    require_full_link: bool = False
    share: int = 1
    # Unset: "rw" for device nodes, read-only for bind mounts (a mount is
    # writable only when "w" is asked for in so many words).
    permissions: str | None = None
    task_path: str | None = None
    # Blocks (``env { KEY = "value" }``), not map attributes: a Nomad agent file
    # reads ``env = { ... }`` as a list holding one object.
    env: dict[str, str] = field(default_factory=dict, metadata={"hcl_block": True})
    attributes: dict[str, str] = field(default_factory=dict, metadata={"hcl_block": True})
    probe: ProbeBlock | None = None
    group_per_device: bool = False
    max_watches: int = 256
    release: ReleaseBlock | None = None


@dataclass(frozen=True)
class GenericConfig:
    """The plugin's ``config`` block."""

    device: dict[str, DeviceBlock] = field(default_factory=dict)
    fingerprint_period: timedelta = timedelta(seconds=30)
    vanished_grace: timedelta = timedelta(minutes=5)
    # How long a PCI function stays unhealthy after its AER error counters last rose.
    recovery_quiet_period: timedelta = timedelta(minutes=5)
    # The local agent's API: which allocation holds each device, and when it ends.
    nomad: NomadConfig | None = None


# ----------------------------------------------------------------- validated form


@dataclass(frozen=True)
class UsbMatcher:
    """A validated ``usb`` block; ``None`` fields match anything."""

    vendor_id: int | None
    product_id: int | None
    serial: str | None
    manufacturer: str | None
    product: str | None

    def matches(
        self, vendor_id: int, product_id: int, serial: str, manufacturer: str, product: str
    ) -> bool:
        return (
            (self.vendor_id is None or self.vendor_id == vendor_id)
            and (self.product_id is None or self.product_id == product_id)
            and (self.serial is None or self.serial == serial)
            and (self.manufacturer is None or self.manufacturer == manufacturer)
            and (self.product is None or self.product == product)
        )


@dataclass(frozen=True)
class PciMatcher:
    """A validated ``pci`` block; ``None`` fields match anything."""

    vendor_id: int | None = None
    device_id: int | None = None
    class_value: int = 0
    class_mask: int = 0  # 0: any class
    subsystem_vendor_id: int | None = None
    subsystem_device_id: int | None = None
    driver: str | None = None
    address: str | None = None  # a glob, lower case

    def identity_matches(
        self,
        address: str,
        ids: tuple[int, int, int | None, int | None],
        class_code: int,
    ) -> bool:
        """Everything but the driver: the address, IDs and class."""
        vendor, device, sub_vendor, sub_device = ids
        return (
            (self.vendor_id is None or self.vendor_id == vendor)
            and (self.device_id is None or self.device_id == device)
            and (class_code & self.class_mask) == self.class_value
            and (self.subsystem_vendor_id is None or self.subsystem_vendor_id == sub_vendor)
            and (self.subsystem_device_id is None or self.subsystem_device_id == sub_device)
            and (self.address is None or fnmatch.fnmatchcase(address, self.address))
        )

    def driver_matches(self, driver: str | None) -> bool:
        """No driver asked for, the one asked for, or none bound yet (unhealthy, but ours)."""
        return self.driver is None or driver is None or driver == self.driver


@dataclass(frozen=True)
class CdiMatcher:
    """A validated ``cdi`` block."""

    kind: str  # a glob over spec kinds
    devices: tuple[str, ...]  # globs over device names; () matches every one
    spec_dirs: tuple[str, ...]
    skip_hooks: bool  # hooks = "skip"

    def matches(self, kind: str, name: str) -> bool:
        if not fnmatch.fnmatchcase(kind, self.kind):
            return False
        return not self.devices or any(fnmatch.fnmatchcase(name, g) for g in self.devices)


@dataclass(frozen=True)
class ProbeSpec:
    command: tuple[str, ...]
    timeout: float
    interval: float
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Kind:
    """One validated device block."""

    label: str
    vendor: str
    type: str
    name: str
    paths: tuple[str, ...]
    usb: tuple[UsbMatcher, ...]
    share: int
    permissions: str  # for device nodes
    writable_mounts: bool  # "w" asked for explicitly: mounts are read-write
    task_path: str | None
    env: Mapping[str, str]
    attributes: Mapping[str, Attribute]
    probe: ProbeSpec | None
    group_per_device: bool
    max_watches: int = 256
    pci: tuple[PciMatcher, ...] = ()
    nodes: tuple[str, ...] = ()
    companions: tuple[str, ...] = ()
    require_full_link: bool = False
    # The release command; its interval is unused.
    release: ProbeSpec | None = None
    cdi: CdiMatcher | None = None

    @property
    def patterns(self) -> tuple[str, ...]:
        """Every glob the block names: what its matches may lie under (:mod:`.trust`)."""
        return self.paths + self.companions

    @property
    def key(self) -> str:
        return f"{self.vendor}/{self.type}/{self.name}"

    @property
    def env_prefix(self) -> str:
        return env_prefix(self.label)


@dataclass(frozen=True)
class Settings:
    kinds: tuple[Kind, ...]
    period: float
    vanished_grace: float
    recovery_quiet: float = 300.0


# ----------------------------------------------------------------------- helpers

_HEX_ID: Final = re.compile(r"[0-9a-fA-F]{4}")
_HEX_ID_FIXABLE: Final = re.compile(r"(?:0[xX])?([0-9a-fA-F]{1,4})")
_HEX_CLASS: Final = re.compile(r"(?:0[xX])?([0-9a-fA-F]{1,6})")
_CLASS_BITS: Final = 24
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_ENV: Final = re.compile(r"[^A-Za-z0-9]+")
_INT: Final = re.compile(r"[+-]?[0-9]+")
_FLOAT: Final = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_GO_BOOLS: Final = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}
# Longest first, as Nomad tries them: "MiB/s" before "B/s"-less "MiB".
_UNITS_BY_LENGTH: Final = tuple(sorted(UNITS, key=lambda u: (-len(u), u)))
_INT64: Final = 1 << 63
#: A CDI kind, globs allowed: one "/" between the vendor and the class.
_CDI_KIND: Final = re.compile(r"[A-Za-z0-9_.*?\[\]!-]+/[A-Za-z0-9_.*?\[\]!-]+")
_GLOB: Final = re.compile(r"[*?\[]")


def env_prefix(label: str) -> str:
    """``GENERIC_USB_SERIAL_`` for the block ``device "usb-serial"``."""
    return f"GENERIC_{_NOT_ENV.sub('_', label).strip('_').upper()}_"


def format_config_path(path: Sequence[str | int]) -> str:
    """``device "kvm": probe.timeout`` for the path (device, kvm, probe, timeout)."""
    if len(path) >= 2 and path[0] == "device" and isinstance(path[1], str):
        rest = _dotted(path[2:])
        return f"device {_q(path[1])}" + (f": {rest}" if rest else "")
    return _dotted(path) or "config"


def _dotted(path: Sequence[str | int]) -> str:
    out = ""
    for step in path:
        if isinstance(step, int):
            out += f"[{step}]"
        else:
            out += f".{step}" if out else step
    return out


def _q(text: str) -> str:
    """A value quoted as HCL would print it."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def parse_attribute(text: str) -> Attribute:
    """A static attribute, read as Nomad reads attribute strings.

    ``"4 GiB"`` is the integer 4 in GiB, ``"1.5"`` a float, ``"true"`` a bool;
    anything else stays a string. Units are the ones Nomad compares (longest
    suffix first, as Nomad matches them). Infinities and NaN stay strings: they
    compare with nothing.
    """
    unit = ""
    numeric = text
    if text and text[-1].isalpha():
        for candidate in _UNITS_BY_LENGTH:
            if text.endswith(candidate):
                unit = candidate
                numeric = text[: -len(candidate)].strip()
                break
    if _INT.fullmatch(numeric):
        value = int(numeric)
        if -_INT64 <= value < _INT64:
            return Attribute(value, unit)
    if _FLOAT.fullmatch(numeric):
        number = float(numeric)
        if math.isfinite(number):
            return Attribute(number, unit)
    if text in _GO_BOOLS:
        return Attribute(_GO_BOOLS[text])
    return Attribute(text)


class _Problems:
    """Collects every problem in the config, so one SetConfig reports them all."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, label: str, where: str, problem: str) -> None:
        path = format_config_path(("device", label, *([where] if where else [])))
        self.items.append(f"{path}: {problem}")

    def raise_if_any(self) -> None:
        if self.items:
            raise InvalidArgument("; ".join(self.items))


def _hex_id(raw: str, bus: str, label: str, where: str, problems: _Problems) -> int | None:
    """A USB or PCI ID: exactly four hex digits, as ``lsusb`` / ``lspci -nn`` print them.

    Nothing else, so that the message and what is accepted agree: ``0x1af4``
    or ``1af`` is refused with the four digits it stands for.
    """
    if raw == "":
        return None
    if _HEX_ID.fullmatch(raw) is None:
        tool, example = ("lsusb", "1a86") if bus == "USB" else ("lspci -nn", "1002")
        fixable = _HEX_ID_FIXABLE.fullmatch(raw)
        hint = (
            f'four hex digits: "{fixable.group(1).lower().rjust(4, "0")}"'
            if fixable is not None
            else f'four hex digits, e.g. "{example}"'
        )
        problems.add(
            label, where, f"{_q(raw)} is not a {bus} ID in hex as {tool} prints it ({hint})"
        )
        return None
    return int(raw, 16)


def _pci_class(raw: str, label: str, where: str, problems: _Problems) -> tuple[int, int]:
    """(value, mask) over the 24-bit class code; (0, 0) matches every class."""
    if raw == "":
        return 0, 0
    value_text, slash, mask_text = raw.partition("/")
    value = _HEX_CLASS.fullmatch(value_text)
    mask = _HEX_CLASS.fullmatch(mask_text) if slash else None
    if slash and value is not None and mask is not None:
        bits = int(mask.group(1), 16)
        return int(value.group(1), 16) & bits, bits
    if not slash and value is not None and len(value.group(1)) in (2, 4, 6):
        digits = value.group(1)
        shift = _CLASS_BITS - 4 * len(digits)
        return int(digits, 16) << shift, ((1 << (4 * len(digits))) - 1) << shift
    problems.add(
        label,
        where,
        f"{_q(raw)} is not a PCI class: give 2, 4 or 6 hex digits of the class code"
        ' (class, subclass, interface: "03", "0302", "030200") or value/mask ("030000/ff0000")',
    )
    return 0, 0


def _pci_matcher(block: PciBlock, label: str, where: str, problems: _Problems) -> PciMatcher:
    given = [
        block.vendor_id, block.device_id, block.class_code, block.subsystem_vendor_id,
        block.subsystem_device_id, block.driver, block.address,
    ]  # fmt: skip
    if not any(given):
        problems.add(
            label,
            where,
            "set at least one of vendor_id, device_id, class, subsystem_vendor_id,"
            " subsystem_device_id, driver, address",
        )
    value, mask = _pci_class(block.class_code, label, f"{where}.class", problems)

    def pci_id(name: str) -> int | None:
        return _hex_id(getattr(block, name), "PCI", label, f"{where}.{name}", problems)

    return PciMatcher(
        vendor_id=pci_id("vendor_id"),
        device_id=pci_id("device_id"),
        class_value=value,
        class_mask=mask,
        subsystem_vendor_id=pci_id("subsystem_vendor_id"),
        subsystem_device_id=pci_id("subsystem_device_id"),
        driver=block.driver or None,
        address=block.address.lower() or None,
    )


def _seconds(delta: timedelta) -> float:
    return delta.total_seconds()


def _cdi_matcher(block: DeviceBlock, label: str, problems: _Problems) -> CdiMatcher | None:
    cdi = block.cdi
    if cdi is None:
        return None
    if not _CDI_KIND.fullmatch(cdi.kind):
        problems.add(
            label,
            "cdi.kind",
            f'{_q(cdi.kind)} is not a CDI kind: "vendor/class", as in "nvidia.com/gpu"'
            ' (globs allowed: "nvidia.com/*")',
        )
    for i, pattern in enumerate(cdi.devices or []):
        if not pattern or "\x00" in pattern:
            problems.add(label, f"cdi.devices[{i}]", f"{_q(pattern)} is not a device name or glob")
    if cdi.spec_dirs is not None and not cdi.spec_dirs:
        problems.add(label, "cdi.spec_dirs", "give at least one directory (or leave it unset)")
    for i, directory in enumerate(cdi.spec_dirs or []):
        if not directory.startswith("/") or "\x00" in directory:
            problems.add(label, f"cdi.spec_dirs[{i}]", f"{_q(directory)} is not an absolute path")
    if cdi.hooks not in ("refuse", "skip"):
        problems.add(label, "cdi.hooks", f'{_q(cdi.hooks)} must be "refuse" or "skip"')
    others = {
        "paths": bool(block.paths), "usb": bool(block.usb), "pci": bool(block.pci),
        "nodes": bool(block.nodes), "companions": bool(block.companions),
        "permissions": block.permissions is not None, "task_path": block.task_path is not None,
        "require_full_link": block.require_full_link,
    }  # fmt: skip
    for key, given in others.items():
        if given:
            problems.add(
                label,
                key,
                "cannot be combined with a cdi block: the spec says what each device brings"
                " (give the CDI devices a block of their own)",
            )
    return CdiMatcher(
        kind=cdi.kind,
        devices=tuple(cdi.devices or ()),
        spec_dirs=tuple(cdi.spec_dirs) if cdi.spec_dirs else DEFAULT_SPEC_DIRS,
        skip_hooks=cdi.hooks == "skip",
    )


def _kind(label: str, block: DeviceBlock, problems: _Problems) -> Kind:
    if not label.strip():
        problems.add(label, "", "the label must not be empty")
    cdi = _cdi_matcher(block, label, problems)
    # A cdi block's group is named after its kind ("nvidia.com/gpu": vendor "nvidia.com",
    # type "gpu"), where the kind has no wildcard there.
    cdi_vendor, _, cdi_class = (cdi.kind if cdi is not None else "").partition("/")
    vendor = block.vendor
    if vendor is None:
        vendor = cdi_vendor if cdi_vendor and not _GLOB.search(cdi_vendor) else DEFAULT_VENDOR
    if not vendor:
        problems.add(label, "vendor", "must not be empty")
    elif "/" in vendor:
        problems.add(label, "vendor", f"{_q(vendor)} must not contain /")
    dtype = block.type
    source = ""
    if dtype is None and cdi_class and not _GLOB.search(cdi_class):
        dtype = cdi_class
    elif dtype is None:
        dtype = label
        source = " (taken from the block's label; set type)"
    if not dtype:
        problems.add(label, "type", "must not be empty")
    elif "/" in dtype:
        problems.add(label, "type", f"{_q(dtype)} must not contain /{source}")
    name = label if block.name is None else block.name
    if not name:
        problems.add(label, "name", "must not be empty")

    paths, nodes = block.paths or [], block.nodes or []
    companions = block.companions or []
    if not paths and not block.usb and not block.pci and block.cdi is None:
        problems.add(
            label,
            "",
            "give paths, usb or pci blocks (or several), or a cdi block: this block matches"
            " nothing",
        )
    for key, patterns in (("paths", paths), ("companions", companions)):
        for i, pattern in enumerate(patterns):
            if not pattern.startswith("/"):
                problems.add(label, f"{key}[{i}]", f"{_q(pattern)} is not an absolute path")
            elif "\x00" in pattern:
                problems.add(label, f"{key}[{i}]", "must not contain a NUL character")
    for i, pattern in enumerate(nodes):
        if not pattern.strip("/") or "\x00" in pattern:
            problems.add(
                label,
                f"nodes[{i}]",
                f'{_q(pattern)} is not a node name or a path under /dev (e.g. "renderD*")',
            )
    if nodes and not block.pci and not block.usb and block.cdi is None:
        problems.add(
            label, "nodes", "filters the nodes of pci and usb matches; this block has none"
        )
    pci = tuple(
        _pci_matcher(item, label, f"pci[{i}]", problems) for i, item in enumerate(block.pci)
    )

    matchers: list[UsbMatcher] = []
    for i, usb in enumerate(block.usb):
        where = f"usb[{i}]"
        vendor_id = _hex_id(usb.vendor_id, "USB", label, f"{where}.vendor_id", problems)
        product_id = _hex_id(usb.product_id, "USB", label, f"{where}.product_id", problems)
        given = [usb.vendor_id, usb.product_id, usb.serial, usb.manufacturer, usb.product]
        if not any(given):
            problems.add(
                label,
                where,
                "set at least one of vendor_id, product_id, serial, manufacturer, product",
            )
        matchers.append(
            UsbMatcher(
                vendor_id,
                product_id,
                usb.serial or None,
                usb.manufacturer or None,
                usb.product or None,
            )
        )

    if block.share < 1:
        problems.add(label, "share", f"must be at least 1, got {block.share}")
    elif block.share > MAX_SHARE:
        problems.add(label, "share", f"must be at most {MAX_SHARE}, got {block.share}")

    letters = DEFAULT_PERMISSIONS if block.permissions is None else block.permissions
    if not letters:
        problems.add(label, "permissions", '"" grants nothing; use letters of "rwm", e.g. "rw"')
    elif not set(letters) <= set(CGROUP_LETTERS):
        problems.add(label, "permissions", f"{_q(letters)} is not a subset of {_q(CGROUP_LETTERS)}")
    permissions = "".join(c for c in CGROUP_LETTERS if c in letters)

    if block.max_watches < 1:
        problems.add(label, "max_watches", f"must be at least 1, got {block.max_watches}")

    if block.task_path is not None and not block.task_path.startswith("/"):
        problems.add(label, "task_path", f"{_q(block.task_path)} is not an absolute path")

    _check_env(block.env, label, "env", problems)
    attributes: dict[str, Attribute] = {}
    for key, text in block.attributes.items():
        if not key:
            problems.add(label, "attributes", "an attribute name must not be empty")
        attributes[key] = parse_attribute(text)

    probe: ProbeSpec | None = None
    if block.probe is not None:
        command = tuple(block.probe.command)
        if not command or not command[0]:
            problems.add(label, "probe.command", "must name a program to run")
        for i, argument in enumerate(command):
            if "\x00" in argument:  # exec cannot pass it: the probe could never run
                problems.add(label, f"probe.command[{i}]", "must not contain a NUL character")
        timeout, interval = _seconds(block.probe.timeout), _seconds(block.probe.interval)
        if timeout <= 0:
            problems.add(label, "probe.timeout", "must be greater than zero")
        if interval <= 0:
            problems.add(label, "probe.interval", "must be greater than zero")
        _check_env(block.probe.env, label, "probe.env", problems)
        probe = ProbeSpec(command, timeout, interval, dict(block.probe.env))

    release: ProbeSpec | None = None
    if block.release is not None:
        command = tuple(block.release.command)
        if not command or not command[0]:
            problems.add(label, "release.command", "must name a program to run")
        for i, argument in enumerate(command):
            if "\x00" in argument:
                problems.add(label, f"release.command[{i}]", "must not contain a NUL character")
        timeout = _seconds(block.release.timeout)
        if timeout <= 0:
            problems.add(label, "release.timeout", "must be greater than zero")
        _check_env(block.release.env, label, "release.env", problems)
        if block.share > 1:
            problems.add(
                label,
                "release",
                "cannot clean a shared device (share > 1): its instances are used side by"
                " side, so it is never free between tenants",
            )
        release = ProbeSpec(command, timeout, 0.0, dict(block.release.env))

    return Kind(
        label=label,
        vendor=vendor,
        type=dtype,
        name=name,
        paths=tuple(paths),
        usb=tuple(matchers),
        share=block.share,
        permissions=permissions,
        writable_mounts=block.permissions is not None and "w" in block.permissions,
        task_path=block.task_path,
        env=dict(block.env),
        attributes=attributes,
        probe=probe,
        group_per_device=block.group_per_device,
        max_watches=block.max_watches,
        pci=pci,
        nodes=tuple(nodes),
        companions=tuple(companions),
        require_full_link=block.require_full_link,
        release=release,
        cdi=cdi,
    )


def _check_env(env: Mapping[str, str], label: str, where: str, problems: _Problems) -> None:
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key):
            problems.add(label, where, f"{_q(key)} is not a valid environment variable name")
        elif "\x00" in value:
            problems.add(label, where, f"{key}: must not contain a NUL character")


def settings_from(config: GenericConfig) -> Settings:
    """Validate the decoded config; raise :class:`InvalidArgument` listing every problem."""
    problems = _Problems()
    kinds = [_kind(label, block, problems) for label, block in sorted(config.device.items())]
    groups: dict[str, str] = {}
    prefixes: dict[str, str] = {}
    for kind in kinds:
        other = groups.setdefault(kind.key, kind.label)
        if other != kind.label:
            problems.add(
                kind.label,
                "",
                f"its group {_q(kind.key)} is already the group of device {_q(other)};"
                " set type or name to tell them apart",
            )
        other = prefixes.setdefault(kind.env_prefix, kind.label)
        if other != kind.label:
            problems.add(
                kind.label,
                "",
                f"its environment variables ({kind.env_prefix}*) would be those of"
                f" device {_q(other)}; choose labels that differ in more than punctuation",
            )
    period = _seconds(config.fingerprint_period)
    if period <= 0:
        problems.items.append("fingerprint_period: must be greater than zero")
    grace = _seconds(config.vanished_grace)
    if grace < 0:
        problems.items.append("vanished_grace: must not be negative")
    quiet = _seconds(config.recovery_quiet_period)
    if quiet < 0:
        problems.items.append("recovery_quiet_period: must not be negative")
    if config.nomad is None:
        for kind in kinds:
            if kind.release is not None:
                problems.add(
                    kind.label,
                    "release",
                    "needs the nomad block: the plugin learns that an allocation ended from"
                    " the local agent's API (nomad { } takes NOMAD_ADDR and NOMAD_TOKEN)",
                )
    problems.raise_if_any()
    return Settings(tuple(kinds), period, grace, quiet)
