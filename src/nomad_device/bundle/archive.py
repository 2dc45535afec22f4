"""Write a bundle file: a shell prelude, the Python bootstrap, then a zip archive.

::

    #!/bin/sh                      finds CPython X.Y and execs it on the bootstrap
    ...                            (prints an hclog error and exits 1 if none)
    exit 1
    <bootstrap.py, CONFIG filled>  read by offset from the file itself
    <zip of the site tree>         unpacked once per content hash into the cache

Why not shiv or pex: both start the plugin from the zip through their own
bootstrap on every launch (read the archive's index, build ``sys.path``, run
``site``); a warm shiv zipapp of the same tree measured about 30 % more CPU to
its handshake and 3.3 MiB more memory than this format.
Here a later launch costs one small read of this file and two system calls
before the plugin's own imports, from a plain directory of precompiled bytecode
(see docs/performance.md).
"""

from __future__ import annotations

import compileall
import hashlib
import io
import json
import marshal
import os
import py_compile
import re
import stat
import sys
import zipfile
from pathlib import Path
from typing import Any, Final

__all__ = ["FORMAT", "read_config", "write_bundle"]

#: Bumped when the layout of the file or the cache changes.
FORMAT: Final = 1

_BOOTSTRAP = Path(__file__).with_name("bootstrap.py")
_CONFIG_LINE = re.compile(r"^CONFIG = \{\}  # type: .*$", re.MULTILINE)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)

_PRELUDE = r"""#!/bin/sh
# {name} {version}: a Nomad device plugin bundled by nomad-device-bundle.
# This prelude finds CPython {major}.{minor} (or $NOMAD_DEVICE_PYTHON) and runs the
# Python bootstrap stored below it, which unpacks the zip archive at the end of
# this file (the plugin, the SDK and their dependencies) once into a cache.
# It runs no other program, so that it can still report a missing Python.
set -f
py=${{NOMAD_DEVICE_PYTHON-}}
if [ -z "$py" ]; then
  IFS=:
  for name in python{major}.{minor} python3; do
    for dir in ${{PATH:-/usr/local/bin:/usr/bin:/bin}}; do
      if [ -f "${{dir:-.}}/$name" ] && [ -x "${{dir:-.}}/$name" ]; then
        py=${{dir:-.}}/$name
        break 2
      fi
    done
  done
  unset IFS
  why="no python{major}.{minor} or python3 on PATH"
else
  why="NOMAD_DEVICE_PYTHON is not an executable file"
fi
if [ -n "$py" ] && [ -f "$py" ] && [ -x "$py" ]; then
  exec "$py" -I -S -c 'import sys;f=open(sys.argv[1],"rb");f.seek({offset:8d});'\
'c=f.read({length:8d});f.close();exec(__import__("marshal").loads(c[{split:8d}:])'\
'if sys.version_info[:2]==({major},{minor})and sys.implementation.name=="cpython"else '\
'compile(c[:{split:8d}],sys.argv[1],"exec"))' "$0" "$@"
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
msg="$msg install Python {major}.{minor} or set NOMAD_DEVICE_PYTHON to its path"
printf '{{"@level":"error","@message":"%s","@module":"nomad-device-bundle",'\
'"@timestamp":"%s"}}\n' "$msg" "$ts" >&2
exit 1
"""


def _precompile(site: Path) -> None:
    """Bytecode for every module, valid without checking the sources.

    The cache directory is immutable once published (its name is the content
    hash), so ``unchecked-hash`` pycs are exact, and no launch has to stat
    sources, compile, or write into the cache.
    """
    compileall.compile_dir(
        str(site),
        # A fixed name instead of the staging path keeps builds reproducible
        # (equal inputs, equal key); the import system puts the real path back.
        ddir="bundle",
        quiet=2,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        workers=1,
    )


def _zip(site: Path) -> bytes:
    """A deterministic zip of ``site``: sorted names, fixed times, normalised modes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for path in sorted(p for p in site.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(path.relative_to(site).as_posix(), _ZIP_TIME)
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes(), compresslevel=6)
    return buffer.getvalue()


def _python_section(config: dict[str, Any]) -> tuple[bytes, bytes]:
    """The bootstrap as source (for any Python) and as this Python's code object.

    The right Python loads the code object (marshal is stable within a minor
    version, as .pyc files are) and skips compiling the source on every
    launch; any other Python compiles the source, whose first act is to say
    it is the wrong one.
    """
    text = _BOOTSTRAP.read_text()
    filled, count = _CONFIG_LINE.subn(lambda _: f"CONFIG = {config!r}", text, count=1)
    if count != 1:
        raise RuntimeError("bootstrap.py has no CONFIG line to fill")
    source = filled.encode()
    code = compile(source, "<nomad-device-bundle bootstrap>", "exec", dont_inherit=True)
    return source, marshal.dumps(code)


def write_bundle(
    site: Path,
    output: Path,
    *,
    name: str,
    version: str,
    kind: str,
    entry: str,
    glibc: tuple[int, int] | None,
) -> dict[str, Any]:
    """Compile, archive and write the bundle; return the config it carries."""
    _precompile(site)
    payload = _zip(site)
    config: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "version": version,
        "kind": kind,
        "entry": entry,
        "python": list(sys.version_info[:2]),
        "machine": os.uname().machine,
        "glibc": list(glibc) if glibc else None,
    }
    digest = hashlib.sha256(payload)
    digest.update(json.dumps(config, sort_keys=True).encode())
    digest.update(_BOOTSTRAP.read_bytes())
    config["key"] = f"{name}-{digest.hexdigest()[:16]}"
    source, code = _python_section(config)
    python = source + code
    fields = {
        "name": name,
        "version": version,
        "major": sys.version_info[0],
        "minor": sys.version_info[1],
        "length": len(python),
        "split": len(source),
    }
    offset = len(_PRELUDE.format(offset=0, **fields).encode())
    prelude = _PRELUDE.format(offset=offset, **fields).encode()
    if len(prelude) != offset:
        raise RuntimeError("prelude length depends on its offset field")
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.partial")
    with open(partial, "wb") as fh:
        fh.write(prelude + python + b"\n" + payload)
    partial.chmod(0o755)
    # Replaced in one step: a node never runs a half-written bundle.
    partial.replace(output)
    return config


def read_config(bundle: Path) -> dict[str, Any]:
    """The config a bundle carries (name, cache key, entry point, Python it needs)."""
    import ast

    with open(bundle, "rb") as fh:
        head = fh.read(65536)
    found = re.search(
        rb"f\.seek\( *(\d+)\);.*?c=f\.read\( *(\d+)\).*?c\[: *(\d+)\]", head, re.DOTALL
    )
    if found is None:
        raise ValueError(f"{bundle} is not a nomad-device-bundle file")
    offset, split = int(found[1]), int(found[3])
    with open(bundle, "rb") as fh:
        fh.seek(offset)
        section = fh.read(split).decode()
    line = re.search(r"^CONFIG = (\{.*\})$", section, re.MULTILINE)
    if line is None:
        raise ValueError(f"{bundle} carries no bundle config")
    config: dict[str, Any] = ast.literal_eval(line[1])
    return config
