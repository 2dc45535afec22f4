"""Write a bundle file, in one of two shapes, and read back what it carries.

For the node's Python::

    #!/bin/sh                      finds a CPython the bundle carries code for and
    ...                            execs it on the bootstrap (or prints an hclog
    exit 1                         error and exits 1 if there is none)
    <zip: the payload>             unpacked once per payload hash into the cache
    <bootstrap.py, CONFIG filled>  read by offset from the file itself, with one
    <its code object per Python>   marshalled code object per carried Python

With its own interpreter::

    <ELF: CPython with our main>   native/launcher.c; the node's kernel runs it
    <zip: the payload>             the plugin, and the interpreter's library
    <zip: the boot zip>            encodings, the bootstrap and what it imports to
                                   unpack: the interpreter imports it from
                                   /proc/self/exe; it ends the file

The payload holds ``site/`` (pure-Python and abi3 code, every Python's
bytecode side by side), ``site-cpXY/`` per Python for version-specific native
code, and ``stdlib/`` with the bundled interpreter. Its SHA-256 (after a
format line) names the cache directory, and the bootstrap checks it before
unpacking.

Why not shiv or pex: both start the plugin from the zip through their own
bootstrap on every launch (read the archive's index, build ``sys.path``, run
``site``); a warm shiv zipapp of the same tree measured about 30 % more CPU to
its handshake and 3.3 MiB more memory than this format. Here a later launch
costs one small read of this file and a few system calls before the plugin's
own imports, from a plain directory of precompiled bytecode (see
docs/performance.md).
"""

from __future__ import annotations

import compileall
import contextlib
import hashlib
import io
import json
import marshal
import os
import py_compile
import re
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from nomad_device.bundle.collect import BundleError, compile_with, find_python
from nomad_device.bundle.elf import glibc_floor

if TYPE_CHECKING:
    from nomad_device.bundle.runtime import Runtime

__all__ = ["FORMAT", "contents", "read_config", "write_bundle"]

#: Bumped when the layout of the file or the cache changes (3: one directory per part).
FORMAT: Final = 3

#: The most ``--inspect`` reads of any one member of an untrusted bundle (its bootstrap,
#: a METADATA): enough for every header a distribution has, nothing a zip bomb can use.
READ_CAP: Final = 256 * 1024

Version = tuple[int, int]

_BOOTSTRAP = Path(__file__).with_name("bootstrap.py")
_CONFIG_LINE = re.compile(r"^CONFIG = \{\}  # type: .*$", re.MULTILINE)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_BOOT_MODULE = "_nomad_bundle_boot"

_PRELUDE = r"""#!/bin/sh
# {name} {version}: a Nomad device plugin bundled by nomad-device-bundle.
# This prelude finds CPython {wanted} (or $NOMAD_DEVICE_PYTHON) and runs the
# Python bootstrap stored at the end of this file, which unpacks the zip archive
# in its middle (the plugin, the SDK and their dependencies) once into a cache.
# It runs no other program, so that it can still report a missing Python, and
# it never looks in the working directory (PATH entries must be absolute).
set -f
py=${{NOMAD_DEVICE_PYTHON-}}
bad=
if [ -z "$py" ]; then
  IFS=:
  for name in {names} python3; do
    for dir in ${{PATH:-/usr/local/bin:/usr/bin:/bin}}; do
      case $dir in /*) ;; *) continue ;; esac
      if [ -f "$dir/$name" ] && [ -x "$dir/$name" ]; then
        py=$dir/$name
        break 2
      fi
    done
  done
  unset IFS
  why="no {names_or} or python3 on PATH"
else
  case $py in
    /*) why="NOMAD_DEVICE_PYTHON is not an executable file" ;;
    *) why="NOMAD_DEVICE_PYTHON is not an absolute path" bad=1 ;;
  esac
fi
if [ -z "$bad" ] && [ -n "$py" ] && [ -f "$py" ] && [ -x "$py" ]; then
  exec "$py" -I -S -c 'import sys;f=open(sys.argv[1],"rb");f.seek({offset:10d});'\
'c=f.read({length:10d});f.close();t={table}.get(sys.version_info[:2])'\
'if sys.implementation.name=="cpython"else None;'\
'exec(__import__("marshal").loads(c[t[0]:t[1]])if t else '\
'compile(c[:{split:10d}],sys.argv[1],"exec"))' "$0" "$@"
fi
esc() {{
  s=$1 out=
  while :; do
    case $s in *[\\\"]*) ;; *) break ;; esac
    pre=${{s%%[\\\"]*}}
    s=${{s#"$pre"}}
    case $s in \"*) out="$out$pre\\\"" ;; *) out="$out$pre\\\\" ;; esac
    s=${{s#?}}
  done
  printf '%s' "$out$s"
}}
ts=
for date in /usr/bin/date /bin/date; do
  [ -x "$date" ] && ts=$("$date" -u +%Y-%m-%dT%H:%M:%S.%6NZ 2>/dev/null) && break
done
case $ts in ????-??-??T??:??:??.??????Z) ;; *) ts=1970-01-01T00:00:00.000000Z ;; esac
msg="cannot start plugin bundle $(esc "$0"): $why ($(esc "${{py:-PATH=${{PATH-}}}}"));"
msg="$msg install Python {wanted} or set NOMAD_DEVICE_PYTHON to its path"
printf '{{"@level":"error","@message":"%s","@module":"nomad-device-bundle",'\
'"@timestamp":"%s"}}\n' "$msg" "$ts" >&2
exit 1
"""


def _either(names: list[str], last: str = "or") -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" {last} " + names[-1]


def _compile_tree(
    tree: Path, versions: list[Version], ddir: str, compilers: Mapping[Version, Path] = {}
) -> None:
    """Bytecode for every module, for each Python that imports ``tree``.

    The cache directory is immutable once published (its name is the content
    hash), so ``unchecked-hash`` pycs are exact, and no launch has to stat
    sources, compile, or write into the cache. Each Python's pycs carry its
    own tag (``x.cpython-312.pyc``), so several sit side by side.
    """
    for version in versions:
        if version == sys.version_info[:2]:
            compileall.compile_dir(
                str(tree),
                # A fixed name instead of the staging path keeps builds reproducible
                # (equal inputs, equal key); the import system puts the real path back.
                ddir=ddir,
                quiet=2,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                workers=1,
            )
            continue
        compile_with(compilers.get(version) or find_python(version), tree, ddir)


def _files(tree: Path) -> Iterator[Path]:
    yield from sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink())


def _sourceless(stdlib: Path, python: tuple[int, ...]) -> dict[str, Path]:
    """The interpreter's library as bytecode only: ``x.pyc`` where ``x.py`` was.

    Python imports such files without their sources (the embeddable Windows
    distribution ships its library so); it halves what a first launch writes.
    Tracebacks through the library show file and line, not the line's text.
    """
    tag = f".cpython-{python[0]}{python[1]}.pyc"
    found: dict[str, Path] = {}
    for path in _files(stdlib):
        rel = path.relative_to(stdlib)
        if rel.suffix == ".py":
            continue
        if rel.parent.name == "__pycache__":
            if not rel.name.endswith(tag):
                continue
            rel = rel.parent.parent / (rel.name[: -len(tag)] + ".pyc")
        found[rel.as_posix()] = path
    return found


_EXTENSION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\.(?:cpython-\d+[a-z]*-[^.]+|abi3)\.so$")


def _native_modules(tree: Path) -> list[str]:
    """The extension modules in ``tree``, as import names: what a node's Python must load.

    The bootstrap imports each of them when it proves a node's Python
    (bootstrap.prove), so that one that cannot load the bundle's wheels (another
    ABI, a broken build) is passed over before the plugin depends on it.
    """
    found = []
    for path in _files(tree):
        rel = path.relative_to(tree)
        match = _EXTENSION.match(rel.name)
        if match and all(part.isidentifier() for part in rel.parts[:-1]):
            found.append(".".join([*rel.parts[:-1], match[1]]))
    return sorted(found)


def _zip(trees: Mapping[str, Path], extra: Mapping[str, bytes | Path] = {}) -> bytes:
    """A deterministic zip of ``trees`` (each under its name) and ``extra``: sorted, fixed
    times and modes."""
    entries: list[tuple[str, Path | bytes]] = [(n, d) for n, d in extra.items()]
    for prefix, tree in trees.items():
        entries += [(f"{prefix}/{p.relative_to(tree).as_posix()}", p) for p in _files(tree)]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for name, data in sorted(entries, key=lambda item: item[0]):
            info = zipfile.ZipInfo(name.lstrip("/"), _ZIP_TIME)
            executable = isinstance(data, Path) and os.access(data, os.X_OK)
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            body = data.read_bytes() if isinstance(data, Path) else data
            archive.writestr(info, body, compresslevel=6)
    return buffer.getvalue()


def _bootstrap_source(config: dict[str, Any]) -> bytes:
    text = _BOOTSTRAP.read_text()
    filled, count = _CONFIG_LINE.subn(lambda _: f"CONFIG = {config!r}", text, count=1)
    if count != 1:
        raise RuntimeError("bootstrap.py has no CONFIG line to fill")
    return filled.encode()


_MARSHAL = (
    "import marshal,sys;src=sys.stdin.buffer.read();"
    "sys.stdout.buffer.write(marshal.dumps(compile(src,sys.argv[1],'exec',dont_inherit=True)))"
)


def _code_for(source: bytes, version: Version, name: str, python: Path | None = None) -> bytes:
    """The bootstrap's code object, marshalled by a Python of ``version`` (stable within it)."""
    if version == sys.version_info[:2] and python is None:
        return marshal.dumps(compile(source, name, "exec", dont_inherit=True))
    done = subprocess.run(
        [str(python or find_python(version)), "-I", "-S", "-c", _MARSHAL, name],
        input=source,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise BundleError(f"compiling the bootstrap for {version} failed: {done.stderr!r}")
    return done.stdout


def _pyc(source: bytes, name: str, python: Path | None, version: Version) -> bytes:
    """An unchecked-hash .pyc of ``source`` for ``version`` (what zipimport loads without a .py)."""
    from importlib.util import MAGIC_NUMBER, source_hash

    code = _code_for(source, version, name, python)
    if version == sys.version_info[:2] and python is None:
        magic = MAGIC_NUMBER
    else:
        done = subprocess.run(
            [
                str(python or find_python(version)),
                "-I",
                "-S",
                "-c",
                "import sys,importlib.util as u;sys.stdout.buffer.write(u.MAGIC_NUMBER)",
            ],
            capture_output=True,
            check=True,
        )
        magic = done.stdout
    # flags 0b01: hash-based, not checked; the hash is only informative here.
    return magic + (1).to_bytes(4, "little") + source_hash(source)[:8] + code


def _boot_modules(runtime: Runtime, python: Path) -> dict[str, bytes]:
    """The interpreter's library modules the bootstrap imports before anything is unpacked.

    Found by importing them in a Python of the same version and keeping every
    module it loaded from the library, so the list follows the bootstrap.
    """
    import ast

    tree = ast.parse(_BOOTSTRAP.read_text())
    names = sorted(
        {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        | {"encodings"}
    )
    script = (
        "import importlib,json,pkgutil,sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        "import encodings\n"
        "for m in pkgutil.iter_modules(encodings.__path__):\n"
        "    try: importlib.import_module('encodings.'+m.name)\n"
        "    except ImportError: pass  # a codec of a library left out (bz2, lzma)\n"
        "files = {getattr(m, '__file__', None) or '' for m in list(sys.modules.values())}\n"
        "print(json.dumps([sys._stdlib_dir, sorted(files)]))\n"
    )
    done = subprocess.run(
        [str(python), "-I", "-S", "-c", script], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BundleError(f"listing the bootstrap's modules failed: {done.stderr[-2000:]}")
    # Named relative to that Python's library, taken from the runtime's own (the same
    # version's bytecode: a foreign CPU's runtime is listed by the native one).
    own, files = json.loads(done.stdout)
    stdlib = own.rstrip("/") + "/"
    tag = f"cpython-{runtime.python[0]}{runtime.python[1]}"
    found: dict[str, bytes] = {}
    for path in files:
        if not path.startswith(stdlib) or not path.endswith(".py"):
            continue
        rel = Path(path[len(stdlib) :])
        pyc = runtime.stdlib / rel.parent / "__pycache__" / f"{rel.stem}.{tag}.pyc"
        if not pyc.exists():
            raise BundleError(f"{pyc} is missing: the runtime was not precompiled")
        found[(rel.parent / f"{rel.stem}.pyc").as_posix()] = pyc.read_bytes()
    if "encodings/__init__.pyc" not in found:
        raise BundleError(f"no encodings package found for the boot zip in {runtime.stdlib}")
    return found


def _write_file(output: Path, parts: list[bytes]) -> None:
    """Write ``output`` safely beside itself: a fresh private temporary, then one rename.

    ``mkstemp`` creates with ``O_EXCL|O_NOFOLLOW`` (never through a planted
    link, never over another file), ``fchmod`` sets the mode on that very
    file, and the rename replaces ``output`` (a link there is replaced, not
    followed): a node never runs a half-written bundle.
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as fh:
            for part in parts:
                fh.write(part)
            fh.flush()
            os.fchmod(fh.fileno(), 0o755)
            os.fsync(fh.fileno())
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _payload_digest(payload: bytes) -> str:
    digest = hashlib.sha256(f"nomad-device-bundle {FORMAT}\n".encode())
    digest.update(payload)
    return digest.hexdigest()


def write_bundle(
    site: Path,
    output: Path,
    *,
    name: str,
    version: str,
    kind: str,
    entry: str,
    glibc: tuple[int, int] | None,
    pythons: list[Version] | None = None,
    abi_sites: Mapping[Version, Path] | None = None,
    runtime: Runtime | None = None,
    machine: str | None = None,
) -> dict[str, Any]:
    """Compile, archive and write the bundle; return the config it carries.

    ``site`` is imported by every Python, ``abi_sites`` by one each; ``pythons``
    are the node Pythons the bundle may run on (default: this one, unless it
    brings ``runtime``, which runs it otherwise).
    """
    abi_sites = dict(abi_sites or {})
    if pythons is None:
        pythons = [] if runtime is not None else [sys.version_info[:2]]
    pythons = sorted(set(pythons))
    users = sorted(set(pythons) | ({runtime.python[:2]} if runtime else set()))
    if not users:
        raise BundleError("a bundle needs a node Python or a runtime to run on")
    machine = machine or (runtime.machine if runtime else os.uname().machine)
    compilers = {runtime.python[:2]: _runtime_compiler(runtime)} if runtime else {}
    _compile_tree(site, users, "bundle", compilers)
    for abi, tree in abi_sites.items():
        _compile_tree(tree, [abi], "bundle", compilers)
    trees: dict[str, Path] = {"site": site}
    trees.update({f"site-cp{a[0]}{a[1]}": t for a, t in sorted(abi_sites.items())})
    library: dict[str, bytes | Path] = {}
    if runtime is not None:
        library = {f"stdlib/{n}": p for n, p in _sourceless(runtime.stdlib, runtime.python).items()}
    payload = _zip(trees, library)
    elf_paths = [p for t in trees.values() for p in _files(t)]
    if runtime is not None:
        elf_paths.append(runtime.launcher)
    measured, infos = glibc_floor(elf_paths)
    bundled = {Path(path).name for path in infos}
    libraries = sorted(
        {lib for info in infos.values() for lib in info.needed}
        - bundled
        - {lib for lib in (n for i in infos.values() for n in i.needed) if _is_glibc(lib)}
    )
    floors = [v for v in (glibc, measured) if v is not None]
    sha = _payload_digest(payload)
    prefix = runtime.launcher.read_bytes() if runtime is not None else b""
    config: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "version": version,
        "kind": kind,
        "entry": entry,
        "machine": machine,
        "glibc": list(max(floors)) if floors else None,
        "pythons": [list(v) for v in pythons],
        "runtime": (
            {"python": list(runtime.python), "glibc": list(runtime.glibc)} if runtime else None
        ),
        "libraries": libraries,
        "site_dirs": sorted(trees, key=lambda d: (d == "site", d)),
        "native": {name: _native_modules(tree) for name, tree in sorted(trees.items())},
        "key": f"{name}-{sha[:16]}",
    }
    if runtime is None:
        names = [f"python{v[0]}.{v[1]}" for v in sorted(pythons, reverse=True)]
        wanted = _either([f"{v[0]}.{v[1]}" for v in pythons])
        fields = {"name": name, "version": version, "wanted": wanted, "names": " ".join(names)}
        fields["names_or"] = _either(names, ",") if len(names) > 1 else names[0]
        # The table's width depends only on how many Pythons there are.
        dummy = "{" + ",".join(f"({v[0]},{v[1]}):({0:10d},{0:10d})" for v in pythons) + "}"
        prelude_len = len(
            _PRELUDE.format(offset=0, length=0, split=0, table=dummy, **fields).encode()
        )
        config["payload"] = {"offset": prelude_len, "size": len(payload), "sha256": sha}
        source = _bootstrap_source(config)
        codes = [_code_for(source, v, "<nomad-device-bundle bootstrap>") for v in pythons]
        spans, at = [], len(source)
        for code in codes:
            spans.append((at, at + len(code)))
            at += len(code)
        table = (
            "{"
            + ",".join(
                f"({v[0]},{v[1]}):({a:10d},{b:10d})"
                for v, (a, b) in zip(pythons, spans, strict=True)
            )
            + "}"
        )
        prelude = _PRELUDE.format(
            offset=prelude_len + len(payload),
            length=at,
            split=len(source),
            table=table,
            **fields,
        ).encode()
        if len(prelude) != prelude_len:
            raise RuntimeError("prelude length depends on its fields")
        _write_file(output, [prelude, payload, source, *codes])
        return config
    config["payload"] = {"offset": len(prefix), "size": len(payload), "sha256": sha}
    source = _bootstrap_source(config)
    compiler = compilers[runtime.python[:2]]
    boot = _boot_modules(runtime, compiler)
    boot[f"{_BOOT_MODULE}.py"] = source
    boot[f"{_BOOT_MODULE}.pyc"] = _pyc(source, _BOOT_MODULE, compiler, runtime.python[:2])
    for v in pythons:
        # What the node's Python imports from this zip when the bundle hands over to it.
        boot[f"{_BOOT_MODULE}_{v[0]}{v[1]}.pyc"] = _pyc(source, _BOOT_MODULE, compilers.get(v), v)
    tail = _zip({}, boot)
    _write_file(output, [prefix, payload, tail])
    return config


def _runtime_compiler(runtime: Runtime) -> Path:
    """A Python of the runtime's version that runs here (the native build for a foreign one)."""
    if runtime.build_python is not None:
        return runtime.build_python
    from nomad_device.bundle.runtime import build_runtime

    native = build_runtime(os.uname().machine).build_python
    if native is None:  # pragma: no cover - a native runtime always has one
        raise BundleError("no native build of the runtime to compile its bytecode")
    return native


#: Libraries that are part of glibc itself (covered by the glibc floor).
_GLIBC_LIBS = (
    "libc.so",
    "libm.so",
    "libpthread.so",
    "libdl.so",
    "librt.so",
    "libutil.so",
    "ld-linux",
)


def _is_glibc(library: str) -> bool:
    return library.startswith(_GLIBC_LIBS)


def _is_elf(bundle: Path) -> bool:
    with open(bundle, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def _read_capped(source: IO[bytes], what: str) -> bytes:
    """At most :data:`READ_CAP` bytes of ``source``; more is refused, not read."""
    data = source.read(READ_CAP + 1)
    if len(data) > READ_CAP:
        raise ValueError(
            f"{what} is larger than {READ_CAP // 1024} KiB: not a bundle this tool made"
        )
    return data


def _bootstrap_text(bundle: Path) -> str:
    if _is_elf(bundle):
        try:
            with zipfile.ZipFile(bundle) as archive, archive.open(f"{_BOOT_MODULE}.py") as member:
                return _read_capped(member, f"{bundle}'s bootstrap").decode()
        except (zipfile.BadZipFile, KeyError):
            raise ValueError(f"{bundle} is not a nomad-device-bundle file") from None
    with open(bundle, "rb") as fh:
        head = fh.read(65536)
    found = re.search(rb"f\.seek\( *(\d+)\);.*?c\[: *(\d+)\]", head, re.DOTALL)
    if found is None:
        raise ValueError(f"{bundle} is not a nomad-device-bundle file")
    offset, split = int(found[1]), int(found[2])
    if split > READ_CAP:
        raise ValueError(f"{bundle}'s bootstrap is larger than {READ_CAP // 1024} KiB")
    with open(bundle, "rb") as fh:
        fh.seek(offset)
        return fh.read(split).decode(errors="replace")


def read_config(bundle: Path) -> dict[str, Any]:
    """The config a bundle carries (name, cache key, entry point, what it needs)."""
    import ast

    line = re.search(r"^CONFIG = (\{.*\})$", _bootstrap_text(bundle), re.MULTILINE)
    if line is None:
        raise ValueError(f"{bundle} carries no bundle config")
    try:
        config = ast.literal_eval(line[1])
    except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
        raise ValueError(f"{bundle} carries a bundle config that cannot be read") from None
    if not isinstance(config, dict):
        raise ValueError(f"{bundle} carries a bundle config that is not a dictionary")
    return config


class _Slice(io.RawIOBase):
    """A read-only window of an open file: the payload in the middle of a bundle, for zipfile
    (which then reads only the members it is asked for, never the whole payload)."""

    def __init__(self, fh: io.BufferedReader, offset: int, size: int) -> None:
        super().__init__()
        self._fh, self._offset, self._size, self._pos = fh, offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, min(self._size, base + pos))
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self._size - self._pos)
        if n <= 0:
            return 0
        self._fh.seek(self._offset + self._pos)
        got = self._fh.readinto(view[:n])
        self._pos += got
        return got


def _distribution(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, notes: list[str]
) -> tuple[str, str]:
    """Name and version from a METADATA's headers (its first :data:`READ_CAP` bytes)."""
    with archive.open(info) as member:
        head = member.read(READ_CAP)
    if info.file_size > READ_CAP:
        notes.append(
            f"{info.filename} is {info.file_size} bytes: read only its first {READ_CAP} for its "
            "name and version"
        )
    fields: dict[str, str] = {}
    for line in head.decode("utf-8", "replace").splitlines()[:50]:
        if not line.strip():
            break  # the headers end here; the description follows
        key, sep, value = line.partition(": ")
        if sep:
            fields.setdefault(key, value[:200])
    return fields.get("Name", info.filename.split("/")[1])[:200], fields.get("Version", "?")


def contents(bundle: Path) -> dict[str, Any]:
    """What a bundle carries, read from its payload: distributions, interpreter, native code.

    The bundle is not trusted: the payload is read through a window of the
    file (never whole), and of each METADATA only the first :data:`READ_CAP`
    bytes, whatever size it claims; what was cut short is listed in ``notes``.
    """
    config = read_config(bundle)
    spec = config["payload"]
    size = bundle.stat().st_size
    offset, length = int(spec["offset"]), int(spec["size"])
    if min(offset, length) < 0 or offset + length > size:
        raise ValueError(f"{bundle}'s payload ({offset}+{length}) lies outside its {size} bytes")
    dirs: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    with open(bundle, "rb") as fh, zipfile.ZipFile(_Slice(fh, offset, length)) as archive:
        for info in archive.infolist():
            top, _, rest = info.filename.partition("/")
            entry = dirs.setdefault(top, {"files": 0, "bytes": 0, "distributions": {}})
            entry["files"] += 1
            entry["bytes"] += info.file_size
            parts = rest.split("/")
            if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "METADATA":
                name, version = _distribution(archive, info, notes)
                entry["distributions"][name] = version
    needs: dict[str, Any] = {
        "machine": config["machine"],
        "glibc": config["glibc"],
        "libraries": config.get("libraries", []),
    }
    if config.get("pythons"):
        needs["python"] = [f"{v[0]}.{v[1]}" for v in config["pythons"]]
    report = {
        "bundle": str(bundle),
        "size": size,
        "config": config,
        "needs": needs,
        "carries": {
            top: {
                "files": entry["files"],
                "bytes": entry["bytes"],
                **({"distributions": entry["distributions"]} if entry["distributions"] else {}),
            }
            for top, entry in sorted(dirs.items())
        },
    }
    if notes:
        report["notes"] = notes
    if config.get("runtime"):
        runtime = config["runtime"]
        report["interpreter"] = "CPython {}.{}.{} (bundled; glibc {}.{} or newer)".format(
            *runtime["python"], *runtime["glibc"]
        )
    return report
