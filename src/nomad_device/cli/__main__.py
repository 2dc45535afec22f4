"""``nomad-device-launcher``: drive any Nomad device plugin from the command line.

Usage::

    nomad-device-launcher [OPTIONS] COMMAND [OPTIONS] PLUGIN [ARGS...]
    nomad-device-launcher [OPTIONS] COMMAND [OPTIONS] [IDS...] -- PLUGIN [ARGS...]

Without a COMMAND the interactive session (``repl``) starts. See docs/launcher.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Final, TextIO

from nomad_device.cli.console import Console
from nomad_device.cli.parsing import parse_count as _count
from nomad_device.cli.parsing import parse_interval
from nomad_device.cli.parsing import parse_interval as _seconds
from nomad_device.cli.process import Interrupted, PluginNotFound, SignalGuard, resolve_command
from nomad_device.cli.render import Style, color_wanted
from nomad_device.display import printable

__all__ = ["build_parser", "main", "parse_interval"]

COMMANDS: Final = {
    "repl": "interactive session: fingerprint(), stats(), reserve(...) (the default)",
    "info": "show the plugin's PluginInfo and whether Nomad would accept it",
    "schema": "show the plugin's config schema as an HCL-like tree",
    "config": "decode the config as Nomad would and show the bytes SetConfig gets",
    "fingerprint": "show the devices (once, or live with --watch)",
    "stats": "show device statistics (--interval, --count)",
    "reserve": "reserve device IDs and show how a task would get them",
    "demo": "run nomad-device-example on a demo directory",
    "check": "will a job get its devices? Nomad's placement, explained (JOB then a source)",
}
#: Options taking a value, so the default command can be found before parsing.
_VALUE_OPTIONS: Final = frozenset(
    {
        "--config",
        "-c",
        "--config-json",
        "--plugin-name",
        "--start-timeout",
        "--color",
        "--interval",
        "--count",
        "--timeout",
        "--node",
        "-var",
        "--var",
        "-var-file",
        "--var-file",
    }
)
_EPILOG: Final = """\
The plugin comes last: its path (or a name on PATH) and arguments, or everything
after "--". A .py file that is not executable runs with this Python.

examples:
  nomad-device-launcher info ./my-plugin
  nomad-device-launcher fingerprint --config agent.hcl --watch nomad-device-example
  nomad-device-launcher stats --interval 2s --count 3 --json -- python plugin.py -v
  nomad-device-launcher reserve dev1 dev2 -- ./my-plugin
  nomad-device-launcher ./my-plugin            (interactive session)
  nomad-device-launcher demo
  nomad-device-launcher check job.hcl --nomad   (will the job get its devices?)
"""


def _common(suppress: bool) -> argparse.ArgumentParser:
    """Options every command takes, before or after its name."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("common options")
    source = g.add_mutually_exclusive_group()
    source.add_argument(
        "-c",
        "--config",
        metavar="PATH",
        dest="config_file",
        action="append",
        default=default(None),
        help='agent-style HCL or JSON: plugin "<name>" { args = [...] config { ... } }, '
        "or a bare config { ... }; a directory reads its .hcl and .json files, and "
        "several -c merge in order, as nomad agent -config does",
    )
    source.add_argument(
        "--config-json",
        metavar="JSON",
        default=default(None),
        help="the config body as a JSON object, or @FILE to read one",
    )
    g.add_argument(
        "--plugin-name",
        metavar="NAME",
        default=default(None),
        help="which plugin block of --config to use (default: the one named after the "
        "plugin's file, or the only one)",
    )
    g.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print JSON shaped like Nomad's (NodeResources.Devices, DeviceStats)",
    )
    g.add_argument(
        "--start-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=default(60.0),
        help="how long the plugin has to complete the go-plugin handshake (default 60)",
    )
    g.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default(0),
        help="show the plugin's debug logs (-vv: trace)",
    )
    g.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="show only the plugin's warnings and errors",
    )
    g.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default=default("auto"),
        help="colour output (auto: on a terminal unless NO_COLOR is set)",
    )
    g.add_argument(
        "--no-color",
        dest="color",
        action="store_const",
        const="never",
        default=argparse.SUPPRESS,
        help="same as --color never",
    )
    return p


class _Version(argparse.Action):
    """``--version``, reading the installed version only when asked (importlib.metadata
    costs every other command some 30 ms of start-up)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            release = version("nomad-device-sdk")
        except PackageNotFoundError:
            release = "unknown"
        sys.stdout.write(f"{parser.prog} {release}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nomad-device-launcher",
        description="Launch a Nomad device plugin as a Nomad client would, and drive it.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common(suppress=False)],
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = _common(suppress=True)
    for name, text in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text, parents=[common])
        if name == "demo":
            p.add_argument("--keep", action="store_true", help="keep the demo directory")
            p.add_argument(
                "--timeout", type=_seconds, default=30.0, help="wait for each step (seconds)"
            )
            continue
        if name == "check":
            from nomad_device.cli.check.cli import add_arguments

            add_arguments(p)
            continue
        if name == "reserve":
            p.add_argument(
                "args",
                nargs="*",
                metavar="ID|PLUGIN",
                help="PLUGIN ID... or ID... -- PLUGIN [ARGS...]",
            )
        else:
            p.add_argument(
                "args", nargs="*", metavar="PLUGIN [ARGS]", help="the plugin and its arguments"
            )
        if name in ("fingerprint", "stats", "reserve", "repl"):
            p.add_argument(
                "--timeout",
                type=_seconds,
                default=50.0,
                metavar="SECONDS",
                help="wait this long for the first fingerprint (Nomad waits 50s)",
            )
        if name == "fingerprint":
            p.add_argument("-w", "--watch", action="store_true", help="keep showing changes")
        if name == "stats":
            p.add_argument(
                "--interval",
                type=parse_interval,
                default=1.0,
                metavar="DURATION",
                help="collection interval sent to the plugin, e.g. 1s or 500ms (default 1s)",
            )
            p.add_argument(
                "--count",
                type=_count,
                default=1,
                metavar="N",
                help="stop after N collections; 0 means until Ctrl-C (default 1)",
            )
    return parser


def _split_argv(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Split at the first ``--``: launcher arguments, then the plugin command."""
    args = list(argv)
    if "--" in args:
        at = args.index("--")
        return args[:at], args[at + 1 :]
    return args, None


def _with_default_command(head: list[str], tail: list[str] | None) -> list[str] | None:
    """Insert ``repl`` when no command is named; None when there is nothing to do."""
    i = 0
    while i < len(head):
        token = head[i]
        if token in ("-h", "--help", "--version"):
            return head
        if token.startswith("-"):
            i += 2 if token in _VALUE_OPTIONS else 1
            continue
        if token in COMMANDS:
            return head
        return [*head[:i], "repl", *head[i:]]
    if tail is not None:
        return [*head, "repl"]
    return None


def main(
    argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Entry point of the console script; returns the exit status."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    head, tail = _split_argv(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    routed = _with_default_command(head, tail)
    if routed is None:
        parser.print_help(err)
        return 2
    try:
        ns, extra = parser.parse_known_args(routed)
        if extra and (ns.command != "check" or extra[0].startswith("-")):
            # check's plugin may follow its options (check JOB -c agent.hcl PLUGIN ARGS);
            # anything else left over is what argparse would have refused.
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else 2
    if extra:
        ns.args = [*ns.args, *extra]

    from nomad_device.cli.commands import App, Failure, Options

    positional: list[str] = list(getattr(ns, "args", []) or [])
    ids: list[str] = []
    job: str | None = None
    if ns.command == "check" and positional:
        job, positional = positional[0], positional[1:]
    if ns.command == "demo":
        plugin: list[str] = []
    elif tail is not None:
        plugin = tail
        if ns.command == "reserve":
            ids = positional
        elif positional:
            err.write(f"{parser.prog}: error: unexpected {positional[0]!r} before --\n")
            return 2
    else:
        plugin = positional[:1]
        if ns.command == "reserve":
            ids = positional[1:]
        else:
            plugin = positional
    args_given = len(plugin) > 1
    if plugin:
        try:
            plugin = resolve_command(plugin)
        except PluginNotFound as exc:
            err.write(f"error: {exc}\n")
            return 1

    level = "info"
    if ns.quiet:
        level = "warn"
    elif ns.verbose >= 2:
        level = "trace"
    elif ns.verbose == 1:
        level = "debug"
    opts = Options(
        command=ns.command,
        plugin=plugin,
        plugin_args_given=args_given,
        ids=ids,
        config_file=ns.config_file,
        config_json=ns.config_json,
        plugin_name=ns.plugin_name,
        json=ns.json,
        watch=getattr(ns, "watch", False),
        interval=getattr(ns, "interval", 1.0),
        count=getattr(ns, "count", 1),
        timeout=getattr(ns, "timeout", 50.0),
        start_timeout=ns.start_timeout,
        log_level=level,
        color=ns.color,
        keep=getattr(ns, "keep", False),
        job=job,
        node_file=getattr(ns, "node", None),
        nomad=getattr(ns, "nomad", False),
        variables=getattr(ns, "var", None) or [],
        var_files=getattr(ns, "var_file", None) or [],
        enterprise=getattr(ns, "enterprise", False),
    )
    console = Console(
        out, err, Style(color_wanted(out, opts.color)), Style(color_wanted(err, opts.color))
    )
    guard = SignalGuard()
    guard.install()
    app = App(opts, console, guard)
    try:
        return app.run()
    except Failure as exc:
        console.end_live()
        console.error(console.err_style.red("error: ") + printable(str(exc), lines=True))
        return exc.code
    except Interrupted as exc:
        console.end_live()
        stopped = "; the plugin was stopped" if app.session is not None else ""
        console.error(f"interrupted ({exc}){stopped}")
        return exc.exit_code
    except KeyboardInterrupt:
        console.end_live()
        console.error("interrupted")
        return 130
    finally:
        guard.restore()


if __name__ == "__main__":
    sys.exit(main())
