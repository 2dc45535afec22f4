"""Put a plugin, the SDK and every dependency into one staging ``site`` tree.

Two sources, the same result (an importable tree plus ``*.dist-info``):

- ``env`` (default): copy the installed distributions from the environment that
  runs the builder, following ``Requires-Dist`` with its markers and extras. It
  is offline, takes seconds, and ships exactly the versions the plugin was
  tested with. Editable installs are copied from their source tree.
- ``pip``: ``pip install --target`` the same roots (a local project by its
  directory, anything else by ``name==version``), for builds from PyPI or a
  wheel directory (``--find-links``/``--no-index``).
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from nomad_device.interpreter import python_command

if TYPE_CHECKING:
    from packaging.requirements import Requirement

__all__ = [
    "BundleError",
    "Root",
    "collect_env",
    "collect_pip",
    "collect_wheels",
    "compile_with",
    "copy_module",
    "find_python",
    "glibc_needed",
    "manylinux_platforms",
]

#: The SDK's own distribution: every bundle carries it.
SDK_DIST = "nomad-device-sdk"


class BundleError(Exception):
    """A bundle cannot be built as asked; the message says what to change."""


@dataclass(frozen=True)
class Root:
    """A distribution to bundle with its dependencies (``name[extra,...]``)."""

    name: str
    extras: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, text: str) -> Root:
        req = _requirement(text)
        return cls(req.name, frozenset(req.extras))


def _packaging() -> None:
    try:
        import packaging.requirements  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the environment
        raise BundleError(
            "nomad-device-bundle needs the 'packaging' library: "
            "pip install 'nomad-device-sdk[bundle]'"
        ) from None


def _requirement(text: str) -> Requirement:
    _packaging()
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise BundleError(f"not a requirement: {text!r} ({exc})") from None


def _canonical(name: str) -> str:
    _packaging()
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def _distribution(name: str, wanted_by: str) -> md.Distribution:
    try:
        return md.distribution(name)
    except md.PackageNotFoundError:
        raise BundleError(
            f"{name} (needed by {wanted_by}) is not installed for {sys.executable}; "
            "install it there, or build with --pip"
        ) from None


def resolve(roots: Iterable[Root]) -> list[md.Distribution]:
    """The installed distributions ``roots`` need, following markers and extras."""
    found: dict[str, tuple[md.Distribution, set[str]]] = {}
    todo: list[tuple[Root, str]] = [(root, "the plugin") for root in roots]
    while todo:
        root, wanted_by = todo.pop()
        key = _canonical(root.name)
        known = found.get(key)
        if known is not None and root.extras <= known[1]:
            continue
        dist = known[0] if known else _distribution(root.name, wanted_by)
        extras = (known[1] if known else set()) | set(root.extras)
        found[key] = (dist, extras)
        for text in dist.requires or []:
            req = _requirement(text)
            if req.marker is not None and not any(
                req.marker.evaluate({"extra": extra}) for extra in sorted(extras | {""})
            ):
                continue
            dep = _distribution(req.name, dist.name)
            if req.specifier and not req.specifier.contains(dep.version, prereleases=True):
                raise BundleError(
                    f"{dist.name} needs {req}, but {dep.name} {dep.version} is installed"
                )
            todo.append((Root(req.name, frozenset(req.extras)), dist.name))
    return [dist for dist, _ in sorted(found.values(), key=lambda item: item[0].name.lower())]


def _editable(dist: md.Distribution) -> bool:
    text = dist.read_text("direct_url.json")
    if not text:
        return False
    try:
        return bool(json.loads(text).get("dir_info", {}).get("editable"))
    except (ValueError, AttributeError):
        return False


def _local_dir(dist: md.Distribution) -> str | None:
    """The project directory a distribution was installed from, if local."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        url = str(json.loads(text).get("url", ""))
    except (ValueError, AttributeError):
        return None
    if url.startswith("file://") and "dir_info" in json.loads(text):
        return url.removeprefix("file://")
    return None


def _skip(rel: PurePosixPath) -> bool:
    return rel.parts[0] == ".." or "__pycache__" in rel.parts or rel.suffix == ".pyc"


def _copy_file(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    if os.access(src, os.X_OK):
        dst.chmod(0o755)


def copy_module(name: str, site: Path) -> None:
    """Copy an importable top-level module or package (from wherever it is found)."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise BundleError(f"cannot find module {name!r} for {sys.executable}")
    locations = list(spec.submodule_search_locations or [])
    if locations:
        source = Path(locations[0])
        for path in sorted(source.rglob("*")):
            rel = PurePosixPath(path.relative_to(source).as_posix())
            if path.is_file() and not _skip(rel):
                _copy_file(path, site / name / rel)
    elif spec.origin and spec.origin.endswith(".py"):
        _copy_file(Path(spec.origin), site / Path(spec.origin).name)
    else:
        raise BundleError(f"module {name!r} at {spec.origin} is neither a package nor a .py file")


def _top_level(dist: md.Distribution) -> list[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return [line.strip() for line in text.splitlines() if line.strip()]
    return sorted(top for top, names in md.packages_distributions().items() if dist.name in names)


def _copy_dist(dist: md.Distribution, site: Path) -> None:
    files = dist.files
    if files is None:
        raise BundleError(f"{dist.name} has no RECORD of its files; reinstall it with pip")
    base = Path(str(dist.locate_file("")))
    editable = _editable(dist)
    for entry in files:
        rel = PurePosixPath(str(entry))
        if _skip(rel):
            continue
        if editable and not rel.parts[0].endswith(".dist-info"):
            continue  # the .pth/finder of an editable install points at the sources
        if rel.name in ("RECORD", "direct_url.json", "INSTALLER", "REQUESTED"):
            continue
        _copy_file(base / rel, site / rel)
    if editable:
        for top in _top_level(dist):
            copy_module(top, site)


def collect_env(roots: Sequence[Root], site: Path) -> list[md.Distribution]:
    """Copy ``roots`` and their dependencies from this environment into ``site``."""
    dists = resolve(roots)
    for dist in dists:
        _copy_dist(dist, site)
    return dists


def pip_spec(root: Root) -> str:
    """What pip installs for a root: a local project by its path, else the same version."""
    extras = f"[{','.join(sorted(root.extras))}]" if root.extras else ""
    try:
        dist = md.distribution(root.name)
    except md.PackageNotFoundError:
        return f"{root.name}{extras}"
    local = _local_dir(dist)
    if local is not None:
        return f"{local}{extras}"
    return f"{dist.name}{extras}=={dist.version}"


def collect_pip(
    roots: Sequence[Root],
    site: Path,
    requirements: Sequence[Path] = (),
    pip_args: Sequence[str] = (),
) -> None:
    """``pip install --target site`` the roots (and requirement files)."""
    command = [
        *python_command(isolated=False),
        "-m",
        "pip",
        "install",
        "--target",
        str(site),
        "--no-compile",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        "--prefer-binary",
        *pip_args,
        *(pip_spec(root) for root in roots),
    ]
    for path in requirements:
        command += ["-r", str(path)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BundleError(f"pip install failed ({done.returncode}):\n{done.stderr.strip()}")
    shutil.rmtree(site / "bin", ignore_errors=True)


def requirement_roots(path: Path) -> list[Root]:
    """The requirements of a requirements file, for the ``env`` source."""
    roots: list[Root] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            raise BundleError(
                f"{path}:{number}: pip options ({line.split()[0]}) need --pip; "
                "the default source copies installed packages by name"
            )
        req = _requirement(line)
        if req.marker is None or req.marker.evaluate():
            roots.append(Root(req.name, frozenset(req.extras)))
    return roots


#: glibc that each manylinux alias promises (PEP 600 names carry it in the tag).
_MANYLINUX_ALIASES = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _tag_glibc(platform: str) -> tuple[int, int] | None:
    for alias, version in _MANYLINUX_ALIASES.items():
        if platform.startswith(alias + "_"):
            return version
    if platform.startswith("manylinux_"):
        parts = platform.split("_")
        try:
            return int(parts[1]), int(parts[2])
        except (IndexError, ValueError):
            return None
    return None


def _build_glibc() -> tuple[int, int]:
    text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    major, minor = text.split()[1].split(".")[:2]
    return int(major), int(minor)


def glibc_needed(site: Path) -> tuple[int, int] | None:
    """The oldest glibc every bundled native wheel runs on (None: all pure Python).

    A wheel built here (``linux_*`` tag) is taken to need this machine's glibc.
    (The bundle's floor also counts the symbol versions its ELF files reference.)
    """
    needed: tuple[int, int] | None = None
    for wheel in sorted(site.glob("*.dist-info/WHEEL")):
        text = wheel.read_text()
        if "Root-Is-Purelib: true" in text:
            continue
        platforms = [
            line.split(":", 1)[1].strip().split("-")[-1]
            for line in text.splitlines()
            if line.startswith("Tag:")
        ]
        if any(p.startswith("musllinux") for p in platforms):
            raise BundleError(f"{wheel.parent.name}: musllinux wheels cannot run on glibc nodes")
        versions = [_tag_glibc(p) for p in platforms if p != "any"]
        if not versions:
            continue
        known = [v for v in versions if v is not None]
        version = min(known) if known else _build_glibc()
        needed = version if needed is None else max(needed, version)
    return needed


# -- native code for other Pythons and CPUs --------------------------------------------


def find_python(version: tuple[int, int]) -> Path:
    """A ``pythonX.Y`` on this machine, to compile bytecode for that version.

    PATH first, then pyenv's installations (newest patch release first).
    """
    if version == sys.version_info[:2]:
        return Path(getattr(sys, "_base_executable", sys.executable))
    name = f"python{version[0]}.{version[1]}"
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        found = Path(directory) / name
        # pyenv's shims are shell scripts that fail for a version not selected.
        if "shims" not in found.parts and found.is_file() and os.access(found, os.X_OK):
            return found
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    prefix = f"{version[0]}.{version[1]}."
    candidates = sorted(
        (
            p
            for p in root.glob(f"{prefix}*/bin/{name}")
            if p.parents[1].name[len(prefix) :].isdigit()
        ),
        key=lambda p: int(p.parents[1].name[len(prefix) :]),
        reverse=True,
    )
    if candidates:
        return candidates[0]
    raise BundleError(
        f"building for CPython {version[0]}.{version[1]} needs {name} on this machine "
        "(to compile its bytecode): put one on PATH"
    )


def compile_with(python: Path, tree: Path, ddir: str) -> None:
    """``unchecked-hash`` bytecode for ``tree`` by another interpreter (its own version's)."""
    command = [str(python), "-I", "-m", "compileall", "-q", "-q", "-d", ddir]
    command += ["--invalidation-mode", "unchecked-hash", str(tree)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):  # 1: a file that is not valid Python (left as is)
        raise BundleError(f"{python} -m compileall {tree} failed:\n{done.stderr[-2000:]}")


def manylinux_platforms(machine: str, glibc: tuple[int, int]) -> list[str]:
    """pip ``--platform`` tags of wheels that run on ``glibc`` (and newer) on ``machine``."""
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(glibc[1], 4, -1)]
    for alias, version in _MANYLINUX_ALIASES.items():
        if version <= glibc:
            tags.append(f"{alias}_{machine}")
    return tags


def _purelib(dist: md.Distribution) -> bool:
    text = dist.read_text("WHEEL") or ""
    return "Root-Is-Purelib: true" in text


def _unpack_wheel(wheel: Path, site: Path) -> None:
    """Install a wheel's files into ``site`` the way pip would for an import tree."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            parts = PurePosixPath(info.filename).parts
            if info.is_dir() or not parts or parts[0] == ".." or info.filename.startswith("/"):
                continue
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue  # scripts, headers, data: not importable
                parts = parts[2:]
            if parts[-1] in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
                continue
            dst = site.joinpath(*parts)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(archive.read(info))
            if (info.external_attr >> 16) & 0o111:
                dst.chmod(0o755)


def _wheel_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nomad-device-bundle" / "wheels"


def _download(
    dist: md.Distribution, python: tuple[int, int], platforms: Sequence[str], into: Path
) -> Path:
    """The wheel of ``dist`` (the installed version) for ``python`` on ``platforms``."""
    command = [
        *python_command(isolated=False),
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        f"{python[0]}.{python[1]}",
        *(f"--platform={p}" for p in platforms),
        "--dest",
        str(into),
        f"{dist.name}=={dist.version}",
    ]
    before = set(into.glob("*.whl"))
    # Offline from our own wheel cache first; PyPI (or pip's configured index) otherwise.
    cache = _wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    offline = subprocess.run(
        [*command, "--no-index", "--find-links", str(cache)], capture_output=True, text=True
    )
    if offline.returncode != 0:
        online = subprocess.run(command, capture_output=True, text=True, check=False)
        if online.returncode != 0:
            raise BundleError(
                f"no wheel of {dist.name} {dist.version} for CPython {python[0]}.{python[1]} on "
                f"{platforms[0]} or older: {online.stderr.strip()[-1500:]}"
            )
    new = sorted(set(into.glob("*.whl")) - before) or sorted(
        w for w in into.glob("*.whl") if _wheel_name(w) == _canonical(dist.name)
    )
    wheel = next(w for w in new if _wheel_name(w) == _canonical(dist.name))
    if not (cache / wheel.name).exists():
        shutil.copyfile(wheel, cache / wheel.name)
    return wheel


def _wheel_name(wheel: Path) -> str:
    return _canonical(wheel.name.split("-")[0])


def collect_wheels(
    roots: Sequence[Root],
    site: Path,
    abi_sites: dict[tuple[int, int], Path],
    *,
    machine: str,
    glibc: tuple[int, int],
) -> list[md.Distribution]:
    """The closure of ``roots`` for several Pythons and any CPU, from this environment's versions.

    Pure-Python distributions are copied from this environment into ``site``
    (every Python shares them); native ones are fetched as wheels of the same
    version for each Python in ``abi_sites`` and ``machine``, tagged for
    ``glibc`` or older. A wheel that serves every Python (abi3) goes to ``site``
    once; the others to their Python's directory.
    """
    dists = resolve(roots)
    platforms = manylinux_platforms(machine, glibc)
    with tempfile.TemporaryDirectory(prefix="nomad-device-wheels-") as tmp:
        for dist in dists:
            if _purelib(dist):
                _copy_dist(dist, site)
                continue
            wheels = {}
            for python in sorted(abi_sites):
                into = Path(tmp) / f"{python[0]}{python[1]}"
                into.mkdir(exist_ok=True)
                wheels[python] = _download(dist, python, platforms, into)
            if len({w.name for w in wheels.values()}) == 1:
                _unpack_wheel(next(iter(wheels.values())), site)
            else:
                for python, wheel in wheels.items():
                    _unpack_wheel(wheel, abi_sites[python])
    return dists
