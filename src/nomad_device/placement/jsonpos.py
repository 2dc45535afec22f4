"""JSON with the line of every value, so bad input can be reported as ``file:line: field``.

Python's ``json`` keeps no positions. This small reader does, and reads fields
the way Go's ``encoding/json`` matches struct fields: an exact key first, else
one that is equal ignoring case. :func:`read_input` reads the file (or stdin)
that the ``check`` command's readers parse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["JSONError", "Located", "from_plain", "parse"]


class JSONError(ValueError):
    """Invalid JSON; the message has ``line:column``."""


@dataclass
class Located:
    """A JSON value with the line it starts on; containers hold ``Located`` children."""

    value: Any
    line: int

    @property
    def kind(self) -> str:
        v = self.value
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "a bool"
        if isinstance(v, int | float):
            return "a number"
        if isinstance(v, str):
            return "a string"
        if isinstance(v, list):
            return "a list"
        return "an object"

    def get(self, name: str) -> Located | None:
        """The field ``name`` as Go's ``encoding/json`` finds it (case-insensitive fallback)."""
        if not isinstance(self.value, dict):
            return None
        found = self.value.get(name)
        if found is not None:
            return found  # type: ignore[no-any-return]
        folded = name.casefold()
        last = None
        for key, val in self.value.items():
            if key.casefold() == folded:
                last = val
        return last

    def plain(self) -> Any:
        v = self.value
        if isinstance(v, dict):
            return {k: x.plain() for k, x in v.items()}
        if isinstance(v, list):
            return [x.plain() for x in v]
        return v


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1
        self.line_start = 0
        self.decoder = json.JSONDecoder()

    def fail(self, message: str) -> JSONError:
        col = self.pos - self.line_start + 1
        return JSONError(f"{self.line}:{col}: {message}")

    def skip(self) -> None:
        text = self.text
        while self.pos < len(text) and text[self.pos] in " \t\r\n":
            if text[self.pos] == "\n":
                self.line += 1
                self.line_start = self.pos + 1
            self.pos += 1

    def value(self) -> Located:
        self.skip()
        if self.pos >= len(self.text):
            raise self.fail("unexpected end of JSON")
        ch = self.text[self.pos]
        line = self.line
        if ch == "{":
            return self.obj(line)
        if ch == "[":
            return self.arr(line)
        try:
            val, end = self.decoder.raw_decode(self.text, self.pos)
        except json.JSONDecodeError as exc:
            raise self.fail(exc.msg) from None
        except ValueError:  # Python converts no integer of more than 4,300 digits
            raise self.fail("a number too long to read") from None
        if isinstance(val, dict | list):  # pragma: no cover - handled above
            raise self.fail("unexpected container")
        if isinstance(val, float) and val != val:
            raise self.fail("NaN is not JSON")
        chunk = self.text[self.pos : end]
        if chunk in ("NaN", "Infinity", "-Infinity"):
            raise self.fail(f"{chunk} is not JSON")
        self.pos = end
        return Located(val, line)

    def obj(self, line: int) -> Located:
        self.pos += 1
        out: dict[str, Located] = {}
        self.skip()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return Located(out, line)
        while True:
            self.skip()
            if not self.text.startswith('"', self.pos):
                raise self.fail("expected a quoted key")
            key = self.value().value
            self.skip()
            if not self.text.startswith(":", self.pos):
                raise self.fail("expected ':' after a key")
            self.pos += 1
            out[key] = self.value()
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("}", self.pos):
                self.pos += 1
                return Located(out, line)
            raise self.fail("expected ',' or '}'")

    def arr(self, line: int) -> Located:
        self.pos += 1
        out: list[Located] = []
        self.skip()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return Located(out, line)
        while True:
            out.append(self.value())
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return Located(out, line)
            raise self.fail("expected ',' or ']'")


def read_input(path: str, error: type[Exception]) -> tuple[str, str]:
    """The text of file ``path`` (``-``: stdin) and its name for messages; ``error`` if unread."""
    if path == "-":
        import sys

        return sys.stdin.read(), "<stdin>"
    try:
        return Path(path).read_text(encoding="utf-8"), path
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None


def parse(text: str) -> Located:
    """Parse one JSON document; raise :class:`JSONError` with line and column."""
    reader = _Reader(text)
    try:
        result = reader.value()
    except RecursionError:
        raise reader.fail("nested too deeply to read") from None
    reader.skip()
    if reader.pos != len(text):
        raise reader.fail("extra data after the JSON value")
    return result


def from_plain(value: Any) -> Located:
    """Already decoded JSON as :class:`Located` values with no line (0), for the readers
    that name fields in their messages when no line is worth keeping (one-line API answers)."""
    if isinstance(value, dict):
        return Located({k: from_plain(v) for k, v in value.items()}, 0)
    if isinstance(value, list):
        return Located([from_plain(v) for v in value], 0)
    return Located(value, 0)
