"""The interactive session: the Go launcher's commands, with output that keeps the prompt.

Commands (parentheses optional, arguments quoted or bare)::

    fingerprint()          stop_fingerprint()
    stats([interval])      stop_stats()
    reserve(id1, id2, ...) info()  schema()  config()  help()  exit()

Fingerprint and stats messages arrive on their own threads and are printed
above the prompt, which is then drawn again with what has been typed so far.
If the plugin dies, the session ends at once with the reason.
"""

from __future__ import annotations

import argparse
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from nomad_device.cli import render
from nomad_device.cli.parsing import parse_interval
from nomad_device.cli.session import PluginDied, StreamEnded, StreamPump
from nomad_device.display import printable
from nomad_device.host import CallError, Stream

if TYPE_CHECKING:
    from nomad_device.cli.commands import App, Opened

__all__ = ["Repl", "parse_command"]

PROMPT: Final = "> "
COMMANDS: Final = (
    "fingerprint",
    "stop_fingerprint",
    "stats",
    "stop_stats",
    "reserve",
    "info",
    "schema",
    "config",
    "help",
    "exit",
)
_CALL_RE: Final = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*;?\s*\Z", re.DOTALL)


def parse_command(line: str) -> tuple[str, list[str]]:
    """``reserve("a", b)`` -> ``("reserve", ["a", "b"])``; raises ValueError."""
    text = line.strip()
    match = _CALL_RE.match(text)
    if match is None:
        head, _, rest = text.partition(" ")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", head) or "(" in text:
            raise ValueError(f"cannot read {text!r}; commands look like reserve(id1, id2)")
        return head, _split_args(rest, bare=True)
    name, inner = match.group(1), match.group(2)
    return name, _split_args(inner or "", bare=False)


def _split_args(text: str, *, bare: bool) -> list[str]:
    args: list[str] = []
    current: list[str] = []
    quote = ""
    started = False
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and i + 1 < len(text):
                current.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = ""
            else:
                current.append(ch)
        elif ch in "\"'":
            quote = ch
            started = True
        elif ch == "," or (bare and ch.isspace()):
            if started or current:
                args.append("".join(current).strip() if not started else "".join(current))
            current, started = [], False
        elif ch.isspace() and not current:
            pass
        else:
            current.append(ch)
        i += 1
    if quote:
        raise ValueError("unterminated quote")
    if started or "".join(current).strip():
        args.append("".join(current) if started else "".join(current).strip())
    return args


class _Feed:
    """A running stream printed above the prompt."""

    def __init__(
        self,
        name: str,
        stream: Stream[object],
        show: Callable[[int, object], None],
        failed: Callable[[str, BaseException], None],
    ) -> None:
        self.name = name
        self.stream = stream
        self.stopped = False
        self._show = show
        self._failed = failed
        self.thread = threading.Thread(target=self._run, name=f"repl-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        number = 0
        try:
            for message in self.stream:
                number += 1
                self._show(number, message)
            if not self.stopped:
                self._failed(self.name, EOFError(f"the plugin ended the {self.name} stream"))
        except CallError as exc:
            if not self.stopped:
                self._failed(self.name, exc)

    def stop(self) -> None:
        self.stopped = True
        self.stream.cancel()


class Repl:
    """Reads commands until exit(), end of input, Ctrl-C or the plugin's death."""

    def __init__(self, app: App, opened: Opened) -> None:
        self.app = app
        self.opened = opened
        self.console = app.console
        self.style = app.style
        self.feeds: dict[str, _Feed] = {}
        self.stopping = False
        self._readline: object | None = None
        #: Set once the plugin has sent a fingerprint in this session.
        self.fingerprinted = threading.Event()

    # -- setup -------------------------------------------------------------------

    def _setup_readline(self) -> Callable[[], str]:
        try:
            import readline
        except ImportError:
            return lambda: ""

        def complete(text: str, state: int) -> str | None:
            options = [c + "(" for c in COMMANDS if c.startswith(text)]
            return options[state] if state < len(options) else None

        readline.set_completer(complete)
        readline.parse_and_bind("tab: complete")
        self._readline = readline
        return readline.get_line_buffer

    def _watch_plugin(self) -> None:
        process = self.opened.client.process.process
        if process is None:
            return

        def wait() -> None:
            code = process.wait()
            if not self.stopping:
                self.stopping = True
                message = self.opened.session.describe_exit(code)
                self.app.guard.raise_in_main(PluginDied(message))

        threading.Thread(target=wait, name="repl-plugin-watch", daemon=True).start()

    # -- loop -----------------------------------------------------------------------

    def run(self) -> int:
        buffer = self._setup_readline()
        info = self.opened.info
        self.console.print(
            self.style.bold(f"{info.name} {info.version}")
            + self.style.dim(f"  (pid {self.opened.client.process.pid})")
        )
        self.console.print(
            "Available commands are: fingerprint(), stop_fingerprint(), stats(), stop_stats(), "
            "reserve(id1, id2, ...), info(), schema(), config(), help(), exit()"
        )
        self._watch_plugin()
        try:
            while True:
                self.console.set_prompt(PROMPT, buffer)
                try:
                    line = input(PROMPT)
                except EOFError:
                    self.console.set_prompt(None)
                    self.console.print()
                    return 0
                self.console.set_prompt(None)
                if not line.strip():
                    continue
                if not self.execute(line):
                    return 0
        except PluginDied as exc:
            self._quiet_down()
            self.console.print()
            self.console.error(self.style.red("error: ") + printable(str(exc), lines=True))
            return 1
        except BaseException:
            self._quiet_down()
            self.console.print()
            raise
        finally:
            self._quiet_down()

    def _quiet_down(self) -> None:
        """Stop the feeds before the prompt goes, so nothing prints after the last line."""
        self.stopping = True
        for feed in list(self.feeds.values()):
            feed.stop()
        self.feeds.clear()
        self.console.set_prompt(None)

    def execute(self, line: str) -> bool:
        """Run one command line; False means leave the session."""
        try:
            name, args = parse_command(line)
        except ValueError as exc:
            self.console.error(f"> {exc}")
            return True
        if name in ("exit", "quit"):
            return False
        handler = getattr(self, "do_" + name, None)
        if handler is None:
            self.console.error(f'> Unknown command "{line.strip()}"; try help()')
            return True
        try:
            handler(args)
        except CallError as exc:
            if self.opened.session.crashed(exc) is None:  # else the watcher explains
                details = printable(exc.details, lines=True)  # the plugin's words
                self.console.error(f"> {name}: {exc.code.name}: {details}")
        except ValueError as exc:
            self.console.error(f"> {name}: {printable(str(exc), lines=True)}")
        return True

    # -- commands ---------------------------------------------------------------------

    def do_help(self, args: list[str]) -> None:
        self.console.print(
            "fingerprint()          stream the devices (every change is printed)\n"
            "stop_fingerprint()     stop that stream\n"
            "stats([interval])      stream statistics, every interval (default 1s)\n"
            "stop_stats()           stop that stream\n"
            "reserve(id1, id2, ...) ask how a task gets these devices\n"
            "info() schema() config()  plugin info, config schema, the config sent\n"
            "exit()                 kill the plugin and leave (also Ctrl-D)"
        )

    def do_info(self, args: list[str]) -> None:
        from nomad_device.cli.commands import info_problems

        info = self.opened.client.info()
        self.console.print(render.render_info(info, self.style, info_problems(info)))

    def do_schema(self, args: list[str]) -> None:
        if self.opened.spec is None:
            self.console.print(self.style.dim("(no config schema)"))
        else:
            self.console.print(render.render_schema(self.opened.spec, self.style))

    def do_config(self, args: list[str]) -> None:
        decoded = self.opened.decoded
        if decoded is None:
            self.console.print(self.style.dim("(no config schema: nothing was sent)"))
            return
        self.console.print("config = " + render.render_config_value(decoded.value, decoded.type))
        self.console.print(self.style.dim("msgpack: " + self.opened.config_bytes.hex()))

    def _failed(self, name: str, exc: BaseException) -> None:
        self.feeds.pop(name, None)
        detail = printable(
            f"{exc.code.name}: {exc.details}" if isinstance(exc, CallError) else str(exc),
            lines=True,
        )
        self.console.error(self.style.red(f"> {name}: stream failed: ") + detail)

    def _header(self, name: str, number: int) -> str:
        return self.style.cyan(f"> {name} #{number}") + self.style.dim(
            "  " + time.strftime("%H:%M:%S")
        )

    def do_fingerprint(self, args: list[str]) -> None:
        if "fingerprint" in self.feeds:
            self.console.print("> fingerprint is already running")
            return

        def show(number: int, groups: object) -> None:
            assert isinstance(groups, list)
            self.fingerprinted.set()
            self.console.print(
                self._header("fingerprint", number)
                + "\n"
                + render.render_groups(groups, self.style)
            )

        stream = self.opened.client.fingerprint()
        self.feeds["fingerprint"] = _Feed("fingerprint", stream, show, self._failed)  # type: ignore[arg-type]

    def do_stop_fingerprint(self, args: list[str]) -> None:
        feed = self.feeds.pop("fingerprint", None)
        if feed is not None:
            feed.stop()
            self.console.print("> fingerprint stopped")

    def _ensure_fingerprinted(self) -> None:
        """Wait for a first fingerprint if there was none yet.

        A Nomad client calls Reserve and Stats only for a plugin that has sent
        one; a plugin may well answer from what it last detected (the example
        does), so asking earlier would get "unknown device".
        """
        if self.fingerprinted.is_set():
            return
        timeout = self.app.opts.timeout
        if "fingerprint" in self.feeds:
            if not self.fingerprinted.wait(timeout):
                raise ValueError(f"no fingerprint within {timeout:g}s")
            return
        pump = StreamPump(self.opened.client.fingerprint(), "fingerprint")
        try:
            pump.get(timeout)
        except (TimeoutError, StreamEnded) as exc:
            raise ValueError(str(exc)) from None
        finally:
            pump.cancel()
        self.fingerprinted.set()

    def do_stats(self, args: list[str]) -> None:
        if "stats" in self.feeds:
            self.console.print("> stats is already running")
            return
        try:
            interval = parse_interval(args[0]) if args else 1.0
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"bad interval: {exc}") from None
        self._ensure_fingerprinted()

        def show(number: int, groups: object) -> None:
            assert isinstance(groups, list)
            self.console.print(
                self._header("stats", number) + "\n" + render.render_stats(groups, self.style)
            )

        stream = self.opened.client.stats(interval)
        self.feeds["stats"] = _Feed("stats", stream, show, self._failed)  # type: ignore[arg-type]

    def do_stop_stats(self, args: list[str]) -> None:
        feed = self.feeds.pop("stats", None)
        if feed is not None:
            feed.stop()
            self.console.print("> stats stopped")

    def do_reserve(self, args: list[str]) -> None:
        if not args:
            self.console.error("> reserve needs device IDs: reserve(id1, id2, ...)")
            return
        self._ensure_fingerprinted()
        reservation = self.opened.client.reserve(args)
        self.console.print(
            self.style.cyan(f"> reserve({', '.join(args)})")
            + "\n"
            + render.render_reservation(reservation, self.style)
        )
