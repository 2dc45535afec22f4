"""``nomad-device-bundle``: one executable file to drop into a Nomad ``plugin_dir``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from nomad_device.bundle.archive import contents
from nomad_device.bundle.build import INTERPRETERS, build_bundle, ready_made_plugins, resolve_target
from nomad_device.bundle.collect import BundleError, Root
from nomad_device.bundle.elf import MACHINES

__all__ = ["main"]

_EPILOG = """\
targets:
  nomad-device-example          an installed console script
  mypkg.plugin:GpuPlugin        a DevicePlugin class (or a function that serves)
  ./my_plugin.py                a plugin file; add -r requirements.txt for its needs

examples:
  nomad-device-bundle nomad-device-example -o /opt/nomad/plugins/nomad-device-example
  nomad-device-bundle --ready-made --output-dir dist
  nomad-device-bundle --inspect dist/nomad-device-example

By default the bundle runs on the node's CPython (the same minor version, or
those given with --python) with a glibc at least as new as its native code
needs; --interpreter bundled or auto brings CPython itself, so a node needs
only its kernel and glibc 2.17 or newer. See docs/deploy.md.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nomad-device-bundle",
        description="Build one executable file holding a device plugin, the SDK and every "
        "dependency, to copy into a Nomad client's plugin_dir.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", nargs="?", help="console script, module:attr or plugin .py file")
    parser.add_argument("-o", "--output", type=Path, help="bundle file (default: dist/<name>)")
    parser.add_argument("--name", help="plugin name for the cache (default: the file name)")
    parser.add_argument(
        "-r",
        "--requirement",
        action="append",
        type=Path,
        default=[],
        help="requirements file of the plugin (repeatable)",
    )
    parser.add_argument(
        "--with",
        dest="with_",
        action="append",
        default=[],
        metavar="DIST",
        help="another distribution to carry, e.g. 'pyudev' (repeatable)",
    )
    parser.add_argument(
        "--pip",
        action="store_true",
        help="install with pip from PyPI (or --find-links) instead of copying this environment",
    )
    parser.add_argument("--find-links", metavar="DIR", help="with --pip: a wheel directory")
    parser.add_argument("--no-index", action="store_true", help="with --pip: do not use PyPI")
    parser.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="with --pip: pass ARG to pip install, e.g. --pip-arg=--platform=manylinux_2_28_x86_64",
    )
    parser.add_argument(
        "--ready-made",
        action="store_true",
        help="bundle every ready-made plugin of the SDK into --output-dir",
    )
    parser.add_argument("--output-dir", type=Path, default=Path("dist"))
    parser.add_argument(
        "--interpreter",
        choices=INTERPRETERS,
        default="node",
        help="node: the node's CPython runs it (default); bundled: it brings its own; "
        "auto: the node's when it fits, else its own",
    )
    parser.add_argument(
        "--python",
        dest="pythons",
        action="append",
        type=_version,
        metavar="X.Y",
        help="a node CPython to carry code for (repeatable; default: this one, or every "
        "supported one with --interpreter auto)",
    )
    parser.add_argument(
        "--machine",
        choices=sorted(MACHINES),
        help="the nodes' CPU (default: this machine's)",
    )
    parser.add_argument(
        "--glibc",
        type=_version,
        metavar="X.Y",
        help="the oldest glibc the nodes have: native wheels are fetched for it "
        "(default with an interpreter: 2.17)",
    )
    parser.add_argument(
        "--runtime", type=Path, metavar="DIR", help="a built interpreter (default: build or reuse)"
    )
    parser.add_argument(
        "--inspect",
        metavar="BUNDLE",
        type=Path,
        help="print what a bundle carries and what it needs of a node",
    )
    return parser


def _version(text: str) -> tuple[int, int]:
    try:
        major, minor = (int(p) for p in text.split("."))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not X.Y") from None
    return major, minor


def _build_one(args: argparse.Namespace, target_text: str, output: Path | None) -> None:
    target = resolve_target(target_text, [Root.parse(w) for w in args.with_])
    output = output or args.output_dir / target.name
    pip_args: list[str] = []
    if args.find_links:
        pip_args += ["--find-links", args.find_links]
    if args.no_index:
        pip_args.append("--no-index")
    pip_args += args.pip_arg
    if pip_args and not args.pip:
        raise BundleError("--find-links, --no-index and --pip-arg need --pip")
    config = build_bundle(
        target,
        output,
        source="pip" if args.pip else "env",
        requirements=args.requirement,
        pip_args=pip_args,
        name=args.name,
        interpreter=args.interpreter,
        pythons=args.pythons,
        machine=args.machine,
        glibc=args.glibc,
        runtime_dir=args.runtime,
    )
    size = output.stat().st_size / 2**20
    print(f"{output}: {config['name']} {config['version']}, {size:.1f} MiB, key {config['key']}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.inspect is not None:
            print(json.dumps(contents(args.inspect), indent=2, sort_keys=True))
        elif args.ready_made:
            if args.target or args.output:
                raise BundleError("--ready-made builds every plugin: give only --output-dir")
            names = ready_made_plugins()
            if not names:
                raise BundleError("no ready-made plugin scripts are installed")
            for name in names:
                _build_one(args, name, args.output_dir / name)
        elif args.target:
            _build_one(args, args.target, args.output)
        else:
            _parser().error("give a target, --ready-made or --inspect")
    except (BundleError, ValueError, OSError) as exc:
        print(f"nomad-device-bundle: {exc}", file=sys.stderr)
        return 1
    return 0


def _entry() -> None:  # pragma: no cover - the console script
    raise SystemExit(main())
