"""From a target (console script, ``module:Class``, plugin file) to a bundle file."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nomad_device.bundle.archive import write_bundle
from nomad_device.bundle.collect import (
    SDK_DIST,
    BundleError,
    Root,
    collect_env,
    collect_pip,
    collect_wheels,
    copy_module,
    glibc_needed,
    requirement_roots,
)
from nomad_device.bundle.elf import MACHINES
from nomad_device.bundle.runtime import GLIBC, runtime_for

__all__ = [
    "INTERPRETERS",
    "SCRIPT_MODULE",
    "SUPPORTED_PYTHONS",
    "Target",
    "build_bundle",
    "ready_made_plugins",
    "resolve_target",
]

#: The module name a bundled plugin file gets (it runs as ``__main__``).
SCRIPT_MODULE = "_bundle_plugin_main"


@dataclass(frozen=True)
class Target:
    """What a bundle runs, and which distributions it needs."""

    kind: str  # "call" (module:attr, a callable or a DevicePlugin class) or "script"
    entry: str  # module:attr, or SCRIPT_MODULE for a file
    name: str  # default file name
    version: str
    roots: tuple[Root, ...]
    loose_modules: tuple[str, ...] = ()  # importable here, but from no distribution
    script: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _console_script(name: str) -> md.EntryPoint | None:
    found = list(md.entry_points(group="console_scripts", name=name))
    return found[0] if found else None


def _check_entry(entry: str) -> None:
    """Import the entry point here, so that a typo fails the build, not the node."""
    from nomad_device.plugin.base import DevicePlugin

    module, _, attr = entry.partition(":")
    if not attr:
        raise BundleError(f"{entry!r}: give module:attr (a DevicePlugin class or a function)")
    try:
        obj: object = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise BundleError(f"cannot load {entry}: {exc}") from None
    if isinstance(obj, type) and not issubclass(obj, DevicePlugin):
        raise BundleError(f"{entry} is a class but not a DevicePlugin")
    if not callable(obj):
        raise BundleError(f"{entry} is neither a DevicePlugin class nor a function")


def _own_extra(dist: md.Distribution | None, script: str) -> frozenset[str]:
    """The extra named after a ready-made plugin (``nvidia`` for ``nomad-device-nvidia``).

    A ready-made plugin's optional dependencies (NVIDIA's binding) are the SDK
    extra that bears its name; its bundle must carry them, or it could not
    find its hardware on the node.
    """
    name = script.removeprefix("nomad-device-")
    if dist is None or name == script:
        return frozenset()
    provided = dist.metadata.get_all("Provides-Extra") or []
    return frozenset({name}) if name in provided else frozenset()


def _sdk_version() -> str:
    try:
        return md.version(SDK_DIST)
    except md.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


def resolve_target(text: str, with_roots: Sequence[Root] = ()) -> Target:
    """Read a target as a plugin file, a console script or ``module:attr``."""
    extra = tuple(with_roots)
    path = Path(text)
    if text.endswith(".py"):
        if not path.is_file():
            raise BundleError(f"no plugin file {text}")
        return Target(
            "script",
            SCRIPT_MODULE,
            path.stem.replace("_", "-"),
            _sdk_version(),
            (Root(SDK_DIST), *extra),
            script=path,
        )
    script = _console_script(text)
    if script is not None:
        _check_entry(script.value)
        dist = script.dist
        roots = (
            Root(dist.name if dist else SDK_DIST, _own_extra(dist, text)),
            Root(SDK_DIST),
            *extra,
        )
        return Target("call", script.value, text, dist.version if dist else _sdk_version(), roots)
    if ":" in text:
        _check_entry(text)
        module, _, attr = text.partition(":")
        top = module.split(".")[0]
        owners = md.packages_distributions().get(top, [])
        roots = (*(Root(d) for d in owners[:1]), Root(SDK_DIST), *extra)
        version = md.version(owners[0]) if owners else _sdk_version()
        loose = () if owners else (top,)
        name = attr.split(".")[-1].lower()
        return Target("call", text, name, version, roots, loose_modules=loose)
    raise BundleError(f"{text!r} is not a plugin file, an installed console script or module:attr")


#: The node Pythons a bundle that may use one carries code for: every CPython the SDK supports.
SUPPORTED_PYTHONS: tuple[tuple[int, int], ...] = ((3, 11), (3, 12), (3, 13))

#: How a bundle finds its interpreter (docs/deploy.md has the table).
INTERPRETERS = ("node", "bundled", "auto")


def build_bundle(
    target: Target,
    output: Path,
    *,
    source: str = "env",
    requirements: Sequence[Path] = (),
    pip_args: Sequence[str] = (),
    name: str | None = None,
    interpreter: str = "node",
    pythons: Sequence[tuple[int, int]] | None = None,
    machine: str | None = None,
    glibc: tuple[int, int] | None = None,
    runtime_dir: Path | None = None,
) -> dict[str, Any]:
    """Build ``output`` for ``target``; return the config it carries.

    ``interpreter``: ``node`` runs on the node's CPython (``pythons``, default
    this one); ``bundled`` brings its own and uses nothing of the node's;
    ``auto`` brings its own and uses the node's when it is one of ``pythons``
    (default: every supported CPython).
    """
    if interpreter not in INTERPRETERS:
        raise BundleError(f"unknown interpreter {interpreter!r} ({', '.join(INTERPRETERS)})")
    name = name or output.name
    here = os.uname().machine
    machine = machine or here
    if machine not in MACHINES:
        raise BundleError(f"unknown machine {machine!r} ({', '.join(MACHINES)})")
    runtime = runtime_for(machine, runtime_dir) if interpreter != "node" else None
    if interpreter == "bundled":
        node_pythons: list[tuple[int, int]] = []
    elif pythons:
        node_pythons = sorted(set(pythons))
    else:
        node_pythons = list(SUPPORTED_PYTHONS) if interpreter == "auto" else [sys.version_info[:2]]
    if any(v < (3, 11) for v in node_pythons):
        raise BundleError("the SDK needs CPython 3.11 or newer")
    abis = sorted(set(node_pythons) | ({runtime.python[:2]} if runtime else set()))
    # The default source copies this environment as it is: only for its own Python and CPU.
    as_installed = (
        abis == [sys.version_info[:2]] and machine == here and glibc is None and runtime is None
    )
    if source == "pip" and not as_installed:
        raise BundleError("--pip builds for this Python and CPU only; drop --interpreter/--python")
    roots = list(target.roots)
    with tempfile.TemporaryDirectory(prefix="nomad-device-bundle-") as tmp:
        site = Path(tmp) / "site"
        site.mkdir()
        abi_sites: dict[tuple[int, int], Path] = {}
        if source == "env":
            for path in requirements:
                roots += requirement_roots(path)
            if as_installed:
                collect_env(roots, site)
            else:
                for abi in abis:
                    abi_sites[abi] = Path(tmp) / f"site-cp{abi[0]}{abi[1]}"
                    abi_sites[abi].mkdir()
                floor = glibc or (runtime.glibc if runtime else GLIBC)
                collect_wheels(roots, site, abi_sites, machine=machine, glibc=floor)
        elif source == "pip":
            collect_pip(roots, site, requirements, pip_args)
        else:
            raise BundleError(f"unknown source {source!r} (env or pip)")
        for module in target.loose_modules:
            copy_module(module, site)
        if target.script is not None:
            shutil.copyfile(target.script, site / f"{SCRIPT_MODULE}.py")
        return write_bundle(
            site,
            output,
            name=name,
            version=target.version,
            kind=target.kind,
            entry=target.entry,
            glibc=glibc_needed(site) if as_installed else None,
            pythons=node_pythons,
            abi_sites={a: t for a, t in abi_sites.items() if any(t.iterdir())},
            runtime=runtime,
            machine=machine,
        )


def ready_made_plugins() -> list[str]:
    """The SDK's ready-made plugins: its ``nomad-device-*`` scripts under ``plugins/``.

    The launcher, the conformance suite and this builder are tools, not plugins;
    a plugin added under ``nomad_device.plugins`` is found without a list to edit.
    """
    try:
        dist = md.distribution(SDK_DIST)
    except md.PackageNotFoundError:
        raise BundleError(f"{SDK_DIST} is not installed; run make .venv/.installed") from None
    return sorted(
        ep.name
        for ep in dist.entry_points
        if ep.group == "console_scripts"
        and ep.name.startswith("nomad-device-")
        and ep.value.startswith("nomad_device.plugins.")
    )
