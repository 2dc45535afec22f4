"""The interpreter a bundle can bring: CPython built for an old glibc, for x86_64 and aarch64.

A node then needs only its kernel and a glibc not older than :data:`GLIBC`
(plus the C++ runtime, ``libstdc++.so.6`` and ``libgcc_s.so.1``, that every
manylinux wheel assumes), the way a Go plugin needs nothing of the node.

The recipe:

- **Sources** from Debian's archive, fetched with ``apt-get source`` under a
  private apt configuration (the node's own apt setup is left alone; the
  mirror is the one this machine's apt uses), and checked against the SHA-256
  pinned below: CPython, libffi (for ``ctypes``) and zlib (for the bundle's
  own unpacking).
- **Compiler:** ``zig cc`` from PyPI's ``ziglang`` wheel, which links against
  stubs of any glibc version for any CPU: ``-target aarch64-linux-gnu.2.17``
  cross-compiles on an x86_64 machine with no sysroot, and the floor is a
  compiler flag rather than whatever the build machine has. (Building in a
  chroot of an old distribution would need one chroot per CPU and an emulated
  compiler for arm64; carrying the build machine's own CPython would set the
  floor at its glibc, 2.36 on Debian 12.)
- **Build:** every extension module static (``MODULE_BUILDTYPE=static``), so
  the interpreter is one file that imports its standard library from a zip
  before anything is unpacked; no OpenSSL, sqlite, Tk, readline or lzma (a
  device plugin needs none: hashlib falls back to its own SHA-2); the launcher
  (``native/launcher.c``) replaces CPython's ``main``.
- **Cache:** ``$NOMAD_DEVICE_BUNDLE_RUNTIMES`` or
  ``~/.cache/nomad-device-bundle/runtimes/<machine>-<inputs hash>/``, keyed by
  every input (sources, zig version, launcher, recipe), so a build happens
  once per machine and recipe; an aarch64 build reuses the x86_64 one as its
  build Python.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nomad_device.bundle.collect import BundleError, compile_with

__all__ = ["GLIBC", "PYTHON", "Runtime", "apt_mirror", "build_runtime", "runtime_for"]

#: The glibc the interpreter is linked for: manylinux2014's, the oldest any wheel is built for.
GLIBC = (2, 17)

#: Bumped whenever the recipe below changes what it builds.
RECIPE = 1

#: Debian source packages: (package, version, upstream tarball, its SHA-256).
SOURCES = {
    "python": (
        "python3.13",
        "3.13.5",
        "python3.13_3.13.5.orig.tar.xz",
        "93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640",
    ),
    "libffi": (
        "libffi",
        "3.4.8",
        "libffi_3.4.8.orig.tar.gz",
        "cbb7f0b3b095dc506387ec1e35b891bfb4891d05b90a495bc69a10f2293f80ff",
    ),
    "zlib": (
        "zlib",
        "1.3.1",
        "zlib_1.3.dfsg+really1.3.1.orig.tar.gz",
        "60dd315c07f616887caa029408308a018ace66e3d142726a97db164b3b8f69fb",
    ),
}

#: The Debian suite whose source index lists those packages.
SUITE = "trixie"

#: The CPython minor version the runtime is.
PYTHON = (3, 13)

#: Parts of the standard library no device plugin imports (tests, GUIs, installers).
_LIB_SKIP = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "__phello__",
    "turtle.py",
    "pydoc_data",
    "sqlite3",
    "dbm",
    "curses",
    "venv",
}

#: Extension modules left out: they need libraries a device plugin has no use for.
_NOT_BUILT = (
    "_lzma",
    "_bz2",
    "_sqlite3",
    "_ssl",
    "_hashlib",
    "_tkinter",
    "_curses",
    "_curses_panel",
    "readline",
    "_dbm",
    "_gdbm",
    "_uuid",
)

_LAUNCHER = Path(__file__).with_name("native") / "launcher.c"


@dataclass(frozen=True)
class Runtime:
    """A built interpreter: the launcher to put first in a bundle, and its library."""

    root: Path
    machine: str
    python: tuple[int, int, int]
    glibc: tuple[int, int]

    @property
    def launcher(self) -> Path:
        return self.root / "launcher"

    @property
    def stdlib(self) -> Path:
        return self.root / "lib" / f"python{self.python[0]}.{self.python[1]}"

    @property
    def build_python(self) -> Path | None:
        """A stock ``python3.X`` of this version that runs on the build machine, if this is one."""
        path = self.root / "bin" / f"python{self.python[0]}.{self.python[1]}"
        return path if path.exists() and self.machine == os.uname().machine else None

    @classmethod
    def load(cls, root: Path) -> Runtime:
        try:
            info = json.loads((root / "runtime.json").read_text())
        except (OSError, ValueError) as exc:
            raise BundleError(f"{root} is not a built runtime: {exc}") from None
        python = (int(info["python"][0]), int(info["python"][1]), int(info["python"][2]))
        glibc = (int(info["glibc"][0]), int(info["glibc"][1]))
        return cls(root, str(info["machine"]), python, glibc)


def _zig() -> Path:
    spec = importlib.util.find_spec("ziglang")
    if spec is None or not spec.submodule_search_locations:
        raise BundleError(
            "building the bundled interpreter needs zig: pip install 'nomad-device-sdk[runtime]' "
            "(PyPI's ziglang)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "zig"


def _zig_version(zig: Path) -> str:
    done = subprocess.run([str(zig), "version"], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _home() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nomad-device-bundle"


def _key(machine: str, zig_version: str) -> str:
    """Every input of a build (bump RECIPE when the steps change): equal keys, equal builds."""
    inputs = [RECIPE, machine, GLIBC, SOURCES, zig_version, sorted(_NOT_BUILT), sorted(_LIB_SKIP)]
    digest = hashlib.sha256(json.dumps(inputs).encode())
    digest.update(_LAUNCHER.read_bytes())
    python = SOURCES["python"][1]
    return f"{machine}-cpython{python}-glibc{GLIBC[0]}.{GLIBC[1]}-{digest.hexdigest()[:12]}"


def apt_mirror() -> str:
    """The Debian mirror this machine's apt fetches from (deb822 or one-line sources)."""
    places = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for place in places:
        try:
            text = place.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if place.suffix == ".sources" and line.startswith("URIs:"):
                for uri in words[1:]:
                    if not uri.rstrip("/").endswith("-security"):
                        return uri.rstrip("/")
            elif words[:1] == ["deb"]:
                uris = [w for w in words[1:] if "://" in w]
                if uris and not uris[0].rstrip("/").endswith("-security"):
                    return uris[0].rstrip("/")
    raise BundleError("no Debian mirror in /etc/apt: cannot fetch the interpreter's sources")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_sources(into: Path) -> dict[str, Path]:
    """The pinned source tarballs, from Debian's archive through apt (cached in ``into``)."""
    into.mkdir(parents=True, exist_ok=True)
    wanted = {name: into / tarball for name, (_, _, tarball, _) in SOURCES.items()}
    missing = [
        name
        for name, path in wanted.items()
        if not path.exists() or _sha256(path) != SOURCES[name][3]
    ]
    if missing:
        with tempfile.TemporaryDirectory(prefix="nomad-device-apt-") as tmp:
            apt = Path(tmp)
            for part in ("lists/partial", "cache/archives/partial", "dl"):
                (apt / part).mkdir(parents=True)
            keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
            (apt / "sources.list").write_text(
                f"deb-src [signed-by={keyring}] {apt_mirror()} {SUITE} main\n"
            )
            options = [
                f"-oDir::Etc::SourceList={apt / 'sources.list'}",
                "-oDir::Etc::SourceParts=/nonexistent",
                f"-oDir::State::Lists={apt / 'lists'}",
                f"-oDir::Cache={apt / 'cache'}",
                "-oDir::State::status=/dev/null",
                "-oDebug::NoLocking=1",
                "-oAPT::Sandbox::User=root",
                "-q",
            ]
            _run(["apt-get", *options, "update"], apt, "apt-get update (Debian source index)")
            for name in missing:
                package, _, tarball, _ = SOURCES[name]
                # Only the upstream tarball matters: a Debian revision's own files
                # missing from a mirror (a 404 on its .dsc) must not stop the build.
                done = subprocess.run(
                    ["apt-get", *options, "source", "--download-only", package],
                    cwd=apt / "dl",
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if not (apt / "dl" / tarball).exists():
                    raise BundleError(
                        f"apt-get source {package} brought no {tarball}:\n{done.stdout[-1500:]}"
                        f"{done.stderr[-1500:]}"
                    )
                shutil.copyfile(apt / "dl" / tarball, wanted[name])
    for name, path in wanted.items():
        if _sha256(path) != SOURCES[name][3]:
            raise BundleError(
                f"{path.name} from Debian's archive does not match its pinned SHA-256: "
                f"the suite moved on; update SOURCES in {__file__}"
            )
    return wanted


def _run(command: Sequence[str], cwd: Path, what: str, env: dict[str, str] | None = None) -> None:
    log = cwd / f".{Path(command[0]).name}.log"
    with open(log, "ab") as out:
        done = subprocess.run(
            list(command), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise BundleError(f"{what} failed ({done.returncode}) in {cwd}:\n{tail}")


def _toolchain(zig: Path, machine: str, into: Path) -> dict[str, str]:
    """Wrappers that make ``zig cc`` look like a cross compiler to autoconf."""
    into.mkdir(parents=True, exist_ok=True)
    target = f"{machine}-linux-gnu.{GLIBC[0]}.{GLIBC[1]}"
    cc = into / f"{machine}-cc"
    # Build systems add a -target of their own (libtool does); ours wins.
    cc.write_text(
        "#!/bin/sh\n"
        "skip=0\n"
        'for a in "$@"; do\n'
        "  shift\n"
        "  if [ $skip = 1 ]; then skip=0; continue; fi\n"
        "  case $a in -target) skip=1; continue ;; --target=*) continue ;; esac\n"
        '  set -- "$@" "$a"\n'
        "done\n"
        f'exec "{zig}" cc -target {target} -Wno-date-time "$@"\n'
    )
    tools = {"CC": str(cc)}
    for tool in ("ar", "ranlib"):
        path = into / f"{machine}-{tool}"
        path.write_text(f'#!/bin/sh\nexec "{zig}" {tool} "$@"\n')
        tools[tool.upper()] = str(path)
    for path in into.iterdir():
        path.chmod(0o755)
    return tools


def _unpack(tarball: Path, into: Path) -> Path:
    shutil.unpack_archive(str(tarball), str(into))
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top


def _deps(sources: dict[str, Path], tools: dict[str, str], machine: str, work: Path) -> Path:
    prefix = work / "deps"
    env = {**os.environ, **tools, "CFLAGS": "-O2 -fPIC"}
    host = f"{machine}-linux-gnu"
    zlib = _unpack(sources["zlib"], work / "zlib")
    _run(
        ["./configure", "--static", f"--prefix={prefix}"],
        zlib,
        "zlib configure",
        {**env, "CHOST": host},
    )
    _run(["make", "-j2", "libz.a"], zlib, "zlib make", env)
    _run(["make", "install"], zlib, "zlib install", env)
    ffi = _unpack(sources["libffi"], work / "libffi")
    _run(["autoreconf", "-fi"], ffi, "libffi autoreconf (needs autoconf, automake, libtool)", env)
    _run(
        [
            "./configure",
            f"--host={host}",
            "--build=x86_64-linux-gnu",
            f"--prefix={prefix}",
            "--disable-shared",
            "--enable-static",
            "--disable-docs",
            "--disable-multi-os-directory",
        ],
        ffi,
        "libffi configure",
        env,
    )
    _run(["make", "-j2"], ffi, "libffi make", env)
    _run(["make", "install"], ffi, "libffi install", env)
    return prefix


def _python(
    sources: dict[str, Path],
    tools: dict[str, str],
    machine: str,
    deps: Path,
    work: Path,
    build_python: Path | None,
) -> Path:
    src = _unpack(sources["python"], work / "python")
    inc, lib = f"-I{deps}/include", f"-L{deps}/lib"
    env = {
        **os.environ,
        **tools,
        "MODULE_BUILDTYPE": "static",
        "OPT": "-DNDEBUG -O2 -Wall",  # no -g: the launcher is stripped anyway
        "CPPFLAGS": inc,
        "LDFLAGS": lib,
        "LIBFFI_CFLAGS": inc,
        "LIBFFI_LIBS": f"{lib} -lffi",
        "ZLIB_CFLAGS": inc,
        "ZLIB_LIBS": f"{lib} -lz",
        # Only our own libraries: never the build machine's pkg-config files.
        "PKG_CONFIG_LIBDIR": f"{deps}/lib/pkgconfig",
        **{f"py_cv_module_{name}": "n/a" for name in _NOT_BUILT},
    }
    command = [
        "./configure",
        f"--host={machine}-linux-gnu",
        "--build=x86_64-linux-gnu",
        "--prefix=/python",
        "--disable-shared",
        "--disable-test-modules",
        "--without-ensurepip",
        "--with-system-expat=no",
    ]
    if machine != os.uname().machine:
        if build_python is None:
            raise BundleError(f"cross-building CPython for {machine} needs a build Python")
        command += [
            f"--with-build-python={build_python}",
            # What configure would test by running a program, for Linux with glibc.
            "ac_cv_file__dev_ptmx=yes",
            "ac_cv_file__dev_ptc=no",
            "ac_cv_buggy_getaddrinfo=no",
        ]
    _run(command, src, "CPython configure", env)
    _run(["make", "-j2", "python"], src, "CPython make", env)
    launcher = src / "Programs" / "nomad_launcher.c"
    shutil.copyfile(_LAUNCHER, launcher)
    # Link the launcher exactly as the Makefile links python, with our main instead.
    _run(
        ["make", "Programs/nomad_launcher.o"],
        src,
        "compile the launcher",
        env,
    )
    link = subprocess.run(
        ["make", "-n", "-W", "Programs/python.o", "python"],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(part for part in link.splitlines() if "-o python " in part)
    line = line.replace("-o python ", "-o nomad-launcher -s ").replace(
        "Programs/python.o", "Programs/nomad_launcher.o"
    )
    _run(["sh", "-c", line], src, "link the launcher", env)
    return src


def _stage(src: Path, machine: str, stage: Path) -> None:
    version = f"{PYTHON[0]}.{PYTHON[1]}"
    lib = stage / "lib" / f"python{version}"
    shutil.copytree(
        src / "Lib",
        lib,
        ignore=lambda _dir, names: [
            n for n in names if n in _LIB_SKIP or n == "__pycache__" or n in ("tests", "idle_test")
        ],
    )
    for data in (src / "build").glob("lib.*/_sysconfigdata_*.py"):
        shutil.copyfile(data, lib / data.name)
    (lib / "lib-dynload").mkdir()
    shutil.copyfile(src / "nomad-launcher", stage / "launcher")
    (stage / "launcher").chmod(0o755)
    if machine == os.uname().machine:
        (stage / "bin").mkdir()
        shutil.copyfile(src / "python", stage / "bin" / f"python{version}")
        (stage / "bin" / f"python{version}").chmod(0o755)


def _precompile(stage: Path, python: Path) -> None:
    """Bytecode for the whole library, by a Python of the same version that runs here."""
    compile_with(python, stage / "lib" / f"python{PYTHON[0]}.{PYTHON[1]}", "stdlib")


def build_runtime(machine: str, *, log: bool = True) -> Runtime:
    """The runtime for ``machine``, built (several minutes) or found in the cache."""
    zig = _zig()
    key = _key(machine, _zig_version(zig))
    base = Path(os.environ.get("NOMAD_DEVICE_BUNDLE_RUNTIMES") or _home() / "runtimes")
    root = base / key
    if (root / "runtime.json").exists():
        return Runtime.load(root)
    build_python: Path | None = None
    if machine != os.uname().machine:
        native = build_runtime(os.uname().machine, log=log)
        build_python = native.build_python
    base.mkdir(parents=True, exist_ok=True)
    with open(base / f".{machine}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per machine at a time; the others wait
        if (root / "runtime.json").exists():
            return Runtime.load(root)
        return _build(machine, zig, root, base, build_python, log)


def _build(
    machine: str, zig: Path, root: Path, base: Path, build_python: Path | None, log: bool
) -> Runtime:
    start = time.monotonic()
    if log:
        print(
            f"nomad-device-bundle: building CPython {SOURCES['python'][1]} for {machine} "
            f"(glibc {GLIBC[0]}.{GLIBC[1]}), once: several minutes",
            file=sys.stderr,
        )
    sources = fetch_sources(_home() / "sources")
    with tempfile.TemporaryDirectory(prefix=f"build-{machine}-", dir=base) as tmp:
        work = Path(tmp)
        tools = _toolchain(zig, machine, work / "tc")
        deps = _deps(sources, tools, machine, work)
        src = _python(sources, tools, machine, deps, work, build_python)
        stage = work / "stage"
        stage.mkdir()
        _stage(src, machine, stage)
        _precompile(stage, build_python or stage / "bin" / f"python{PYTHON[0]}.{PYTHON[1]}")
        from nomad_device.bundle.elf import glibc_floor

        floor, _ = glibc_floor([stage / "launcher"])
        info = {
            "machine": machine,
            "python": [int(p) for p in SOURCES["python"][1].split(".")],
            "glibc": list(floor or GLIBC),
            "zig": _zig_version(zig),
            "recipe": RECIPE,
            "seconds": round(time.monotonic() - start),
        }
        (stage / "runtime.json").write_text(json.dumps(info, indent=2) + "\n")
        try:
            stage.rename(root)
        except OSError:
            if not (root / "runtime.json").exists():
                raise
    return Runtime.load(root)


def runtime_for(machine: str, path: Path | None = None) -> Runtime:
    """A given runtime directory (checked), or the cached build for ``machine``."""
    if path is None:
        return build_runtime(machine)
    runtime = Runtime.load(path)
    if runtime.machine != machine:
        raise BundleError(f"{path} is a runtime for {runtime.machine}, not {machine}")
    return runtime
