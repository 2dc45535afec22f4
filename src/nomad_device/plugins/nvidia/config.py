"""The ``plugin "nomad-device-nvidia" { config { ... } }`` block.

The first three settings are the Go plugin's, with its types and defaults, so
an agent config written for ``nomad-device-nvidia`` works unchanged. The rest
are new; each has a default that keeps the Go plugin's behaviour where it had
one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from nomad_device.errors import InvalidArgument
from nomad_device.golang import GoDurationError, format_duration, parse_duration, quote
from nomad_device.plugin.nomadapi import NomadConfig
from nomad_device.plugins.sharing import MAX_SHARE

__all__ = ["DEFAULT_IGNORED_XIDS", "NvidiaConfig", "Settings", "settings_from"]

#: Application-caused XIDs that NVIDIA's Kubernetes device plugin does not
#: count against a GPU: the GPU is fine, a program on it misbehaved.
DEFAULT_IGNORED_XIDS: Final = (13, 31, 43, 45, 68, 109)


#: Lists whose defaults the schema spells out (``[]``), as the Go plugin's does.
_GO_LITERAL: Final = {"hcl_default": True}


@dataclass(frozen=True)
class NvidiaConfig:
    """The config block, and the schema: the Go plugin's three settings with
    its types and default literals, node for node, then the new ones."""

    enabled: bool = True
    ignored_gpu_ids: list[str] = field(default_factory=list, metadata=_GO_LITERAL)
    fingerprint_period: str = "1m"
    share: int = 1
    ignored_xids: list[int] = field(
        default_factory=lambda: list(DEFAULT_IGNORED_XIDS), metadata=_GO_LITERAL
    )
    recovery_quiet_period: str = "5m"
    temperature_limit: int = 0
    dev_root: str = "/dev"
    proc_root: str = "/proc"
    reset_on_release: bool = False
    nomad: NomadConfig | None = None


@dataclass(frozen=True)
class Settings:
    """The config checked and in the units the plugin works in."""

    enabled: bool = True
    ignored_gpu_ids: frozenset[str] = frozenset()
    period: float = 60.0
    period_text: str = "1m0s"
    share: int = 1
    ignored_xids: frozenset[int] = frozenset(DEFAULT_IGNORED_XIDS)
    quiet_period: float = 300.0
    temperature_limit: int = 0
    dev_root: str = "/dev"
    proc_root: str = "/proc"
    reset_on_release: bool = False


def _duration(name: str, text: str, allow_zero: bool) -> int:
    try:
        ns = parse_duration(text)
    except GoDurationError as exc:
        # The Go plugin's wording for fingerprint_period, reused for the new setting.
        raise InvalidArgument(f"failed to parse {name} {quote(text)}: {exc}") from None
    if ns < 0 or (ns == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "greater than zero"
        raise InvalidArgument(f"{name} {quote(text)} must be {bound}")
    return ns


def settings_from(config: NvidiaConfig) -> Settings:
    """Check a decoded config; raise InvalidArgument naming the setting."""
    period_ns = _duration("fingerprint period", config.fingerprint_period, allow_zero=False)
    quiet_ns = _duration("recovery_quiet_period", config.recovery_quiet_period, allow_zero=True)
    if not 1 <= config.share <= MAX_SHARE:
        raise InvalidArgument(f"share must be from 1 to {MAX_SHARE}, got {config.share}")
    bad = [xid for xid in config.ignored_xids if xid < 1]
    if bad:
        raise InvalidArgument(f"ignored_xids: XIDs are positive numbers, got {bad[0]}")
    if config.temperature_limit < 0:
        raise InvalidArgument(
            f"temperature_limit must be 0 (off) or degrees Celsius, got {config.temperature_limit}"
        )
    for name, root in (("dev_root", config.dev_root), ("proc_root", config.proc_root)):
        if not root.startswith("/"):
            raise InvalidArgument(f"{name} must be an absolute path, got {quote(root)}")
    if config.reset_on_release and config.nomad is None:
        raise InvalidArgument(
            "reset_on_release needs the nomad block: the plugin learns that an allocation"
            " ended from the local agent's API (nomad { } takes NOMAD_ADDR and NOMAD_TOKEN)"
        )
    if config.reset_on_release and config.share > 1:
        raise InvalidArgument(
            "reset_on_release cannot be used with share > 1: a shared GPU is used by several"
            " tasks at once, so it is never free between them"
        )
    return Settings(
        enabled=config.enabled,
        ignored_gpu_ids=frozenset(config.ignored_gpu_ids),
        period=period_ns / 1e9,
        period_text=format_duration(period_ns),
        share=config.share,
        ignored_xids=frozenset(config.ignored_xids),
        quiet_period=quiet_ns / 1e9,
        temperature_limit=config.temperature_limit,
        dev_root=config.dev_root.rstrip("/") or "/",
        proc_root=config.proc_root.rstrip("/") or "/",
        reset_on_release=config.reset_on_release,
    )
