"""``nomad-device-conformance``: check a device plugin executable against Nomad's expectations.

Usage::

    nomad-device-conformance [--json] [-c agent.hcl | --config-json JSON] [--strict]
                             [--timeout S] -- PLUGIN_CMD ARGS...

Exit status: 0 when no check failed (warnings and skips allowed, skips not with
``--strict``), 1 when one did, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]

EPILOG = """\
examples:
  nomad-device-conformance -- nomad-device-example
  nomad-device-conformance --config agent.hcl -- ./my-plugin
  nomad-device-conformance --config-json '{"dir": "/srv/devices"}' -- ./my-plugin -v
  nomad-device-conformance --strict --json -- python -m my_plugin > report.json

The config is what an operator would write in the plugin's config block: an
agent's HCL file (the plugin "<name>" block named after the plugin's file, as
the launcher picks it), or the block's body as JSON. Without one the plugin
gets the defaults-only config Nomad sends when no config block exists.
Exit status: 0 if no check failed, 1 if one did (or, with --strict, if one was
skipped), 2 for a usage error.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nomad-device-conformance",
        description="Check that a Nomad client will get along with a device plugin executable "
        "(Python or Go): handshake, RPC semantics, streams, logging, signals and shutdown.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # A prefix of one option must never be taken for another (--config vs --config-json).
        allow_abbrev=False,
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    config = parser.add_mutually_exclusive_group()
    config.add_argument(
        "-c",
        "--config",
        metavar="PATH",
        dest="config_file",
        action="append",
        help='agent-style HCL or JSON: plugin "<name>" { args = [...] config { ... } }, or a '
        "bare config { ... }; a directory, or several -c, as nomad agent -config reads them "
        "(as nomad-device-launcher reads it)",
    )
    config.add_argument(
        "--config-json",
        metavar="JSON",
        help="the plugin's config block as a JSON object (or @FILE to read it from a file)",
    )
    config.add_argument(
        "--config-msgpack-hex",
        metavar="HEX",
        help="raw SetConfig bytes (cty msgpack) in hex, sent as they are",
    )
    parser.add_argument(
        "--plugin-name",
        metavar="NAME",
        help="which plugin block of --config to use (default: the one named after the "
        "plugin's file, or the only one)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="bound for the first fingerprint and for each call (default: 5)",
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=20.0,
        metavar="S",
        help="how long to wait for the handshake (default: 20; Nomad waits 60)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=3.0,
        metavar="S",
        help="how long to watch the Fingerprint and Stats streams (default: 3)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="skipped checks fail the run too (use it in CI: a skipped check proves nothing)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show the evidence of passing checks too"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the plugin command, after --")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; returns the exit status (also used by the console script)."""
    parser = _parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("give the plugin command after --, e.g. -- ./my-plugin")
    for name in ("timeout", "start_timeout", "window"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")

    from nomad_device.testing.conformance.runner import SuiteOptions, run_conformance

    config_bytes: bytes | None = None
    config_json: str | None = None
    if args.config_msgpack_hex is not None:
        try:
            config_bytes = bytes.fromhex(args.config_msgpack_hex)
        except ValueError as exc:
            parser.error(f"--config-msgpack-hex: {exc}")
    if args.config_json is not None:
        config_json = args.config_json
        if config_json.startswith("@"):
            try:
                with open(config_json[1:], encoding="utf-8") as f:
                    config_json = f.read()
            except OSError as exc:
                parser.error(f"--config-json: {exc}")
    if args.plugin_name is not None and args.config_file is None:
        parser.error("--plugin-name chooses a block of --config: give --config too")
    options = SuiteOptions(
        config=config_bytes,
        config_json=config_json,
        timeout=args.timeout,
        start_timeout=args.start_timeout,
        open_window=args.window,
        config_file=args.config_file,
        plugin_name=args.plugin_name,
    )
    from nomad_device.agentconfig.agentfile import ConfigFileError

    try:
        report = run_conformance(command, options)
    except ConfigFileError as exc:
        parser.error(str(exc))
    strict = args.strict
    text = (
        report.to_json(strict=strict)
        if args.json
        else report.render(verbose=args.verbose, strict=strict)
    )
    try:
        print(text, flush=True)
    except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0 if report.passes(strict=strict) else 1


def _entry() -> None:  # pragma: no cover - `python -m` convenience
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    _entry()
