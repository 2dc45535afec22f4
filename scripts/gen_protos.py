#!/usr/bin/env python3
"""Regenerate the Python modules for ``src/nomad_device/proto/*.proto``.

Usage::

    python scripts/gen_protos.py          # rewrite the generated files in place
    python scripts/gen_protos.py --check  # exit 1 if they are out of date

Both modes run ``grpc_tools.protoc`` into a scratch directory first, producing
``*_pb2.py``, ``*_pb2_grpc.py`` and their ``.pyi`` stubs (via mypy-protobuf).
The default mode then copies changed files into the package and deletes
generated files whose ``.proto`` no longer exists; ``--check`` only compares
bytes and reports stale, missing and extra files.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PROTO_PACKAGE = Path("nomad_device") / "proto"
PROTO_DIR = SRC / PROTO_PACKAGE
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def grpc_tools_include() -> Path:
    """Return the directory holding the bundled ``google/protobuf/*.proto``."""
    spec = importlib.util.find_spec("grpc_tools")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: grpc_tools not found; install the dev extras (grpcio-tools)")
    return Path(spec.submodule_search_locations[0]).resolve() / "_proto"


def plugin_path(name: str) -> Path:
    """Locate a protoc plugin installed next to the running interpreter."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise SystemExit(f"error: {path} not found; install the dev extras (mypy-protobuf)")
    return path


def proto_sources() -> list[Path]:
    """All ``.proto`` files of the package, in a stable order."""
    return sorted(PROTO_DIR.glob("*.proto"))


def is_generated(name: str) -> bool:
    return name.endswith(GENERATED_SUFFIXES)


def generated_files(directory: Path) -> dict[str, bytes]:
    """Map file name to contents for every generated module in ``directory``."""
    if not directory.is_dir():
        return {}
    return {
        path.name: path.read_bytes()
        for path in sorted(directory.iterdir())
        if path.is_file() and is_generated(path.name)
    }


def run_protoc(out_dir: Path) -> None:
    """Generate every module for the package's ``.proto`` files into ``out_dir``."""
    sources = proto_sources()
    if not sources:
        raise SystemExit(f"error: no .proto files in {PROTO_DIR}")
    command: list[str] = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={SRC}",
        f"--proto_path={grpc_tools_include()}",
        f"--plugin=protoc-gen-mypy={plugin_path('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={plugin_path('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *(str(path) for path in sources),
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"error: protoc failed with exit code {result.returncode}")


def compare(fresh: dict[str, bytes], current: dict[str, bytes]) -> list[tuple[str, str]]:
    """List ``(problem, file name)`` pairs where ``current`` differs from ``fresh``."""
    problems: list[tuple[str, str]] = []
    for name in sorted(fresh.keys() | current.keys()):
        if name not in current:
            problems.append(("missing", name))
        elif name not in fresh:
            problems.append(("extra", name))
        elif fresh[name] != current[name]:
            problems.append(("stale", name))
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write anything; exit 1 if the generated files are out of date",
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gen_protos_") as tmp:
        run_protoc(Path(tmp))
        fresh = generated_files(Path(tmp) / PROTO_PACKAGE)

    current = generated_files(PROTO_DIR)
    problems = compare(fresh, current)
    shown = PROTO_DIR.relative_to(ROOT)

    if args.check:
        if not problems:
            print(f"{len(fresh)} generated files in {shown} are up to date")
            return 0
        for problem, name in problems:
            print(f"{problem}: {shown / name}")
        print("run `make protos` to regenerate", file=sys.stderr)
        return 1

    for problem, name in problems:
        target = PROTO_DIR / name
        if problem == "extra":
            target.unlink()
        else:
            target.write_bytes(fresh[name])
        print(f"{'removed' if problem == 'extra' else 'wrote'} {shown / name}")
    print(f"{len(fresh)} generated files in {shown}, {len(problems)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
