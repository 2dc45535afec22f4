"""Terminal output shared by threads: plain lines, a live region, and a REPL prompt.

Streams (fingerprint, stats) and the plugin's log lines arrive on other threads
while the main thread may be showing a ``--watch`` view or waiting at the REPL
prompt. Every write goes through :class:`Console`, which on a terminal

- redraws a *live region* (the latest fingerprint) in place, keeping log lines
  above it, and
- in the REPL clears the prompt line (``\\r`` + erase line), prints, then draws
  the prompt again with whatever the user has typed so far.

When stdout is not a terminal no escape codes are written at all.

Nothing that is not printable reaches the terminal unless the launcher wrote
it: the renderers escape what plugins and devices supply
(:func:`~nomad_device.display.printable`), and every line written here is
escaped again, sparing only line breaks, tabs and, where colour is on, the colour
codes of :class:`~nomad_device.cli.render.Style`. JSON output is written as
it is (``raw``): it keeps the true strings, in JSON's own escapes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Final, TextIO

from nomad_device.cli.render import Style
from nomad_device.display import printable

__all__ = ["Console"]

_ERASE_LINE = "\r\x1b[K"

#: What Style writes: Select Graphic Rendition (colour, bold, dim, reset).
_STYLE_CODE: Final = re.compile(r"(\x1b\[[0-9;]*m)")


def shown(text: str, colour: bool) -> str:
    """``text`` as it may reach a terminal: line breaks and tabs kept, Style's
    codes kept where ``colour`` is on, anything else that is not printable escaped."""
    pieces = _STYLE_CODE.split(text) if colour and "\x1b" in text else [text]
    return "".join(
        piece if i % 2 else "\n".join(printable(line, tabs=True) for line in piece.split("\n"))
        for i, piece in enumerate(pieces)
    )


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed
        return False


class Console:
    """Serialises output from all threads; see the module docs."""

    def __init__(self, out: TextIO, err: TextIO, style: Style, err_style: Style) -> None:
        self.out = out
        self.err = err
        self.style = style
        self.err_style = err_style
        self.terminal = _isatty(out)
        # Either style's codes may go to either stream (a warning in the output's style).
        self._colour = style.enabled or err_style.enabled
        self._lock = threading.RLock()
        self._live_text: str | None = None
        self._live_lines = 0
        self._prompt: str | None = None
        self._line_buffer: Callable[[], str] = lambda: ""

    # -- REPL prompt ----------------------------------------------------------

    def set_prompt(self, prompt: str | None, line_buffer: Callable[[], str] | None = None) -> None:
        """While a prompt is set, output is printed above it and the prompt redrawn."""
        with self._lock:
            self._prompt = prompt
            if line_buffer is not None:
                self._line_buffer = line_buffer

    # -- writing ------------------------------------------------------------------

    def print(self, text: str = "", *, raw: bool = False) -> None:
        """A line (or block) on stdout; ``raw``: as it is (JSON, which escapes its own)."""
        self._emit(self.out, text if raw else shown(text, self._colour))

    def error(self, text: str) -> None:
        self._emit(self.err, shown(text, self._colour))

    def log(self, text: str) -> None:
        self._emit(self.err, shown(text, self._colour))

    def _emit(self, stream: TextIO, text: str) -> None:
        with self._lock:
            self._before()
            try:
                stream.write(text + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed pipe must not take the launcher down
            self._after()

    def _before(self) -> None:
        if not self.terminal:
            return
        if self._live_lines:
            self._safe_write(f"\x1b[{self._live_lines}A\r\x1b[J")
        elif self._prompt is not None:
            self._safe_write(_ERASE_LINE)

    def _after(self) -> None:
        if not self.terminal:
            return
        if self._live_text is not None:
            self._draw_live()
        elif self._prompt is not None:
            self._safe_write(self._prompt + self._line_buffer())

    def _safe_write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):
            pass

    # -- live region -------------------------------------------------------------

    def live(self, text: str) -> None:
        """Show ``text`` in place of the previous live text (a terminal), else print it."""
        with self._lock:
            text = shown(text, self._colour)
            if not self.terminal:
                self._emit(self.out, text)
                return
            if self._live_lines:
                self._safe_write(f"\x1b[{self._live_lines}A\r\x1b[J")
            self._live_text = text
            self._draw_live()

    def _draw_live(self) -> None:
        text = self._live_text or ""
        self._safe_write(text + "\n")
        self._live_lines = text.count("\n") + 1

    def end_live(self) -> None:
        """Leave the live text on screen and go back to plain output."""
        with self._lock:
            self._live_text = None
            self._live_lines = 0
