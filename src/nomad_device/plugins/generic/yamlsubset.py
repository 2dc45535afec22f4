"""A small, strict reader for the YAML that CDI specs are written in.

CDI's reference library reads every spec, ``.json`` or ``.yaml``, with
go-yaml v3. This module reads the part of YAML that specs use, into a tree
that keeps what go-yaml's decoding looks at (plain or quoted, the text, the
line), so that :mod:`.cdi` can decode it as go-yaml decodes into CDI's Go
types. Why not a YAML library: the project's runtime dependencies stay few,
and a general YAML 1.1 library (PyYAML) resolves scalars by other rules than
go-yaml v3 (``yes``, ``0755``, ``1:20``), so it would need as much care as
this and still differ at the edges. ``docs/plugins/generic.md`` (CDI) says
what is read.

Read: block mappings and sequences (a sequence at its key's indentation
too), flow mappings and sequences over several lines (JSON), plain scalars
on one line, single- and double-quoted scalars on one line with every
escape go-yaml knows, comments, ``---`` and ``...``, a BOM, CRLF line ends.
Only the first document counts, as go-yaml's ``Decoder.Decode`` reads only
the first.

Two kinds of refusal, both :class:`YamlError`: text that is not YAML, which
go-yaml refuses too; and YAML outside this subset (anchors, aliases, tags,
block scalars, multi-line plain or quoted scalars, complex keys, tabs in
block context, directives ...), ``unsupported=True``, which go-yaml might
accept. A spec that uses them is skipped with the reason, never guessed at.
``tests/plugins/generic/test_cdi_crosscheck.py`` holds both against go-yaml on a
corpus and on generated specs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["Map", "Node", "Scalar", "Seq", "YamlError", "parse"]

#: The longest simple key go-yaml accepts (libyaml's limit, in characters).
MAX_KEY: Final = 1024
#: Line breaks besides LF and CRLF, and a BOM past the start.
_UNSUPPORTED_CHARACTERS: Final = ("\r", "\x85", "\u2028", "\u2029", "\ufeff")
_ESCAPES: Final = {
    "0": "\x00", "a": "\x07", "b": "\x08", "t": "\t", "\t": "\t", "n": "\n", "v": "\x0b",
    "f": "\x0c", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "'": "'", "\\": "\\",
    "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029",
}  # fmt: skip
_HEX_ESCAPES: Final = {"x": 2, "u": 4, "U": 8}
_HEX: Final = frozenset("0123456789abcdefABCDEF")
#: Characters that cannot start a plain scalar (``-``, ``?`` and ``:`` can, before a
#: non-blank: they are checked apart).
_INDICATORS: Final = frozenset(",[]{}#&*!|>'\"%@`")
_FLOW_ENDS: Final = frozenset(",[]{}")


class YamlError(ValueError):
    """Why a text was not read. ``unsupported``: valid YAML, perhaps, but outside the
    subset this module reads (go-yaml may accept it); otherwise not YAML at all."""

    def __init__(self, line: int, problem: str, *, unsupported: bool = False) -> None:
        self.line = line
        self.problem = problem
        self.unsupported = unsupported
        where = f"line {line}: " if line > 0 else ""
        suffix = " (outside the YAML this plugin reads)" if unsupported else ""
        super().__init__(f"{where}{problem}{suffix}")


@dataclass(frozen=True, slots=True)
class Scalar:
    """``plain``: written without quotes, so go-yaml resolves it (``~`` is null,
    ``0x10`` a number); a quoted scalar is always a string."""

    value: str
    plain: bool
    line: int

    @property
    def is_null(self) -> bool:
        return self.plain and self.value in ("", "~", "null", "Null", "NULL")


@dataclass(frozen=True, slots=True)
class Seq:
    items: tuple[Node, ...]
    line: int


@dataclass(frozen=True, slots=True)
class Map:
    pairs: tuple[tuple[Scalar, Node], ...]
    line: int


Node = Scalar | Seq | Map


def parse(data: bytes) -> Node | None:
    """The first document of ``data`` (UTF-8); None when it holds none (only comments).

    Raises :class:`YamlError`. Characters go-yaml's reader refuses (control
    characters, invalid UTF-8) are errors where the document has them; after it,
    where go-yaml may never read, they make the text unsupported instead.
    """
    text = data.decode("utf-8", "surrogateescape").removeprefix("\ufeff")
    bad = _first_bad(text)
    parser = _Parser(text)
    try:
        node = parser.document()
    except YamlError as exc:
        if bad is not None and bad[0] <= exc.line:
            raise YamlError(*bad) from None
        raise
    if bad is not None:
        if bad[0] <= parser.row:
            raise YamlError(*bad)
        raise YamlError(bad[0], bad[1] + " after the first document", unsupported=True)
    return node


#: Characters go-yaml's reader refuses; a lone surrogate stands for a byte that is not UTF-8.
_BAD: Final = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
#: What ends a plain scalar of block context (or makes it one this module does not read).
_BLOCK_STOP: Final = re.compile(r"\t|:(?=[ \t]|$)| #")
#: The same in a flow collection.
_FLOW_STOP: Final = re.compile(r"[,\[\]{}]|:|[ \t]#")


def _first_bad(text: str) -> tuple[int, str] | None:
    """The line and description of the first character go-yaml's reader refuses."""
    found = _BAD.search(text)
    if found is None:
        return None
    line = text.count("\n", 0, found.start()) + 1
    ch = found.group()
    if 0xDC80 <= ord(ch) <= 0xDCFF:
        return line, "invalid UTF-8"
    return line, f"control character {ch!r} (go-yaml allows none)"


class _Parser:
    """Recursive descent over lines; block functions return at the start of the next
    content line (``self.col`` is its indentation), or at the end of the document."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.replace("\r\n", "\n").split("\n")
        self.row = 0
        self.col = 0
        self.ended = False  # a document marker or the end of the text was reached

    # -- errors and positions ---------------------------------------------------------

    def fail(self, problem: str) -> YamlError:
        return YamlError(self.row + 1, problem)

    def unsupported(self, problem: str) -> YamlError:
        return YamlError(self.row + 1, problem, unsupported=True)

    @property
    def line(self) -> str:
        return self.lines[self.row] if self.row < len(self.lines) else ""

    def ch(self, ahead: int = 0) -> str:
        """The character at the cursor (``"\\n"`` at a line's end, ``""`` past the text)."""
        if self.row >= len(self.lines):
            return ""
        line, at = self.lines[self.row], self.col + ahead
        if at < len(line):
            return line[at]
        return "\n" if self.row + 1 < len(self.lines) else ""

    def blank_at(self, ahead: int) -> bool:
        """Space, tab, line end or end of text (go-yaml's ``is_blankz``)."""
        return self.ch(ahead) in (" ", "\t", "\n", "")

    # -- the document ---------------------------------------------------------------------

    def document(self) -> Node | None:
        self._check_characters()
        started = False
        while self.row < len(self.lines):
            stripped = self.line.strip(" ")
            if not stripped or stripped.startswith("#"):
                self.row += 1
                continue
            if self.line.startswith("%"):
                raise self.unsupported("a directive")
            if self._marker("---"):
                if started:
                    break
                started = True
                rest = self.line[3:].strip(" \t")
                if rest and not rest.startswith("#"):
                    raise self.unsupported("content on the '---' line")
                self.row += 1
                continue
            if self._marker("..."):
                if not started:
                    raise self.unsupported("'...' before any document")
                break
            break
        self.col = 0
        indent = self.next_content()
        if indent < 0:
            return Scalar("", True, self.row + 1) if started else None
        node = self.block_node(-1)
        if not self.ended:
            raise self.fail("unexpected content after the document's top-level node")
        return node

    def _check_characters(self) -> None:
        """Line breaks other than LF and CRLF (which go-yaml honours) and BOMs inside the
        text (which it skips at a line's start only) are not read here."""
        for row, line in enumerate(self.lines):
            for ch in _UNSUPPORTED_CHARACTERS:
                if ch in line:
                    raise YamlError(row + 1, f"the character {ch!r}", unsupported=True)

    def _marker(self, mark: str) -> bool:
        line = self.line
        return line.startswith(mark) and (len(line) == 3 or line[3] in " \t")

    def next_content(self) -> int:
        """Move to the next line with content (past blank and comment lines, from the end
        of the current one); its indentation, or -1 at the end of the document."""
        if self.col > 0:
            self.row += 1
        self.col = 0
        while self.row < len(self.lines):
            line = self.line
            if self._marker("---") or self._marker("..."):
                self.ended = True
                return -1
            content = line.lstrip(" ")
            if content.startswith("\t") or (content.strip(" \t") == "" and "\t" in content):
                raise self.unsupported("a tab in indentation")
            if content and not content.startswith("#"):
                self.col = len(line) - len(content)
                return self.col
            self.row += 1
        self.ended = True
        return -1

    def indent_now(self) -> int:
        return -1 if self.ended else self.col

    # -- block context ----------------------------------------------------------------------

    def seq_entry(self) -> bool:
        return self.ch() == "-" and self.blank_at(1)

    def block_node(self, parent: int) -> Node:
        """The node at the cursor (the first content of a line, indented past ``parent``)."""
        indent = self.col
        if self.seq_entry():
            return self.block_seq(indent)
        if self.key_ahead():
            return self.block_map(indent)
        node = self.inline_value()
        self.end_of_line()
        if self.next_content() > parent:
            raise self.unsupported("a scalar continued on a more indented line")
        return node

    def block_map(self, indent: int) -> Map:
        pairs: list[tuple[Scalar, Node]] = []
        line = self.row + 1
        while True:
            key = self.key()
            self.skip_spaces()
            if self.ch() in ("\n", "", "#"):
                nxt = self.next_content()
                if nxt > indent:
                    value: Node = self.block_node(indent)
                elif nxt == indent and self.seq_entry():
                    value = self.block_seq(indent)
                else:
                    value = Scalar("", True, key.line)
            else:
                if self.seq_entry():
                    raise self.fail("block sequence entries are not allowed in this context")
                value = self.inline_value()
                self.end_of_line()
                if self.next_content() > indent:
                    raise self.unsupported("a value continued on a more indented line")
            pairs.append((key, value))
            nxt = self.indent_now()
            if nxt < indent:
                return Map(tuple(pairs), line)
            if nxt > indent:
                raise self.unsupported("a line indented deeper than its mapping's keys")
            if self.seq_entry():
                raise self.fail("did not find expected key")

    def block_seq(self, indent: int) -> Seq:
        items: list[Node] = []
        line = self.row + 1
        while True:
            self.col += 1  # the "-"
            self.skip_spaces()
            if self.ch() in ("\n", "", "#"):
                nxt = self.next_content()
                items.append(self.block_node(indent) if nxt > indent else Scalar("", True, line))
            else:
                column = self.col
                if self.seq_entry():
                    items.append(self.block_seq(column))
                elif self.key_ahead():
                    items.append(self.block_map(column))
                else:
                    items.append(self.inline_value())
                    self.end_of_line()
                    self.next_content()
                if self.indent_now() > indent:
                    raise self.unsupported("a line indented deeper than its sequence's entries")
            if self.indent_now() != indent or not self.seq_entry():
                return Seq(tuple(items), line)

    def skip_spaces(self) -> None:
        line, col = self.line, self.col
        while col < len(line) and line[col] == " ":
            col += 1
        self.col = col
        if col < len(line) and line[col] == "\t":
            raise self.unsupported("a tab in block context")

    def end_of_line(self) -> None:
        """After a value: only spaces and a comment may follow on its line."""
        start = self.col
        self.skip_spaces()
        ch = self.ch()
        if ch == "#" and self.col > start:
            self.col = len(self.line)
            return
        if ch in ("\n", ""):
            return
        if ch == "#":
            raise self.unsupported("a comment not preceded by a space")
        if ch == ":":
            raise self.unsupported("a complex key")
        raise self.fail(f"unexpected {ch!r} after a value")

    # -- keys --------------------------------------------------------------------------------

    def key_ahead(self) -> bool:
        """Whether a ``key:`` starts at the cursor (which does not move)."""
        line = self.line
        if self.col < len(line) and line[self.col] not in "\"'?":
            # A plain key: what plain_block stops at must be a ":" (the common case,
            # decided without raising).
            stop = _BLOCK_STOP.search(line, self.col)
            if stop is None or stop.group() != ":" or stop.start() == self.col:
                return False
            if line[self.col] in _INDICATORS or (
                line[self.col] in "-:" and self.col + 1 < len(line) and line[self.col + 1] in " \t"
            ):
                return False
            return stop.start() - self.col <= MAX_KEY
        row, col = self.row, self.col
        try:
            self.key()
        except YamlError:
            return False
        finally:
            self.row, self.col = row, col
        return True

    def key(self) -> Scalar:
        """A simple key and its ``:``; raises when there is none."""
        line = self.row + 1
        start = self.col
        ch = self.ch()
        if ch in ('"', "'"):
            key = self.quoted()
            self.skip_spaces()
        elif ch == "?" and self.blank_at(1):
            raise self.unsupported("a complex key ('? ')")
        else:
            text = self.plain_block(key=True)
            key = Scalar(text, True, line)
        if self.ch() != ":" or not self.blank_at(1):
            raise self.fail("could not find expected ':'")
        if self.col - start > MAX_KEY:
            raise self.unsupported(f"a key longer than {MAX_KEY} characters")
        self.col += 1
        return key

    # -- scalars -------------------------------------------------------------------------------

    def inline_value(self) -> Node:
        ch = self.ch()
        if ch in ("[", "{"):
            return self.flow_node()
        if ch in ('"', "'"):
            return self.quoted()
        return Scalar(self.plain_block(key=False), True, self.row + 1)

    def plain_start(self, flow: bool) -> None:
        ch = self.ch()
        if ch in _INDICATORS or (ch in "-?:" and self.blank_at(1)):
            what = {"&": "an anchor", "*": "an alias", "!": "a tag", "|": "a block scalar",
                    ">": "a block scalar"}.get(ch, f"a node starting with {ch!r}")  # fmt: skip
            raise self.unsupported(what)
        if flow and ch in "?:":
            raise self.unsupported(f"a plain scalar starting with {ch!r} in a flow collection")

    def plain_block(self, key: bool) -> str:
        """A plain scalar of block context, to the line's end, a comment or (for a key) a
        ``:`` before a blank."""
        self.plain_start(flow=False)
        line, start = self.line, self.col
        stop = _BLOCK_STOP.search(line, start)
        end = len(line) if stop is None else stop.start()
        if stop is not None and stop.group() == "\t":
            raise self.unsupported("a tab in block context")
        if stop is not None and stop.group() == ":" and not key:
            self.col = end
            raise self.fail("mapping values are not allowed in this context")
        text = line[start:end].rstrip(" ")
        self.col = start + len(text)
        if key:
            while self.ch() == " ":
                self.col += 1
        return text

    def quoted(self) -> Scalar:
        """A single- or double-quoted scalar, on one line."""
        quote, line_no = self.ch(), self.row + 1
        line = self.line
        at = self.col + 1
        out: list[str] = []
        while True:
            if at >= len(line):
                raise self.unsupported("a quoted scalar over several lines")
            ch = line[at]
            if ch == quote:
                if quote == "'" and line[at + 1 : at + 2] == "'":
                    out.append("'")
                    at += 2
                    continue
                break
            if quote == '"' and ch == "\\":
                at = self._escape(line, at, out)
                continue
            out.append(ch)
            at += 1
        self.col = at + 1
        return Scalar("".join(out), False, line_no)

    def _escape(self, line: str, at: int, out: list[str]) -> int:
        if at + 1 >= len(line):
            raise self.unsupported("a double-quoted scalar continued on the next line")
        code = line[at + 1]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            return at + 2
        width = _HEX_ESCAPES.get(code)
        if width is None:
            raise self.fail(f"found unknown escape character {code!r}")
        digits = line[at + 2 : at + 2 + width]
        if len(digits) != width or not set(digits) <= _HEX:
            raise self.fail("did not find expected hexdecimal number")
        value = int(digits, 16)
        if 0xD800 <= value <= 0xDFFF or value > 0x10FFFF:
            raise self.fail("found invalid Unicode character escape code")
        out.append(chr(value))
        return at + 2 + width

    # -- flow context ---------------------------------------------------------------------------

    def skip_flow(self) -> bool:
        """Past spaces, tabs, line ends and comments; whether a line end was crossed."""
        crossed = False
        while True:
            ch = self.ch()
            if ch in (" ", "\t"):
                self.col += 1
            elif ch == "\n":
                self.row += 1
                self.col = 0
                crossed = True
                if self._marker("---") or self._marker("..."):
                    raise self.unsupported("a document marker inside a flow collection")
            elif ch == "#":
                before = self.line[self.col - 1] if self.col > 0 else " "
                if before not in " \t":
                    raise self.unsupported("a comment not preceded by a space")
                self.col = len(self.line)
            elif ch == "":
                raise self.fail("the text ends inside a flow collection")
            else:
                return crossed

    def flow_node(self) -> Node:
        self.skip_flow()
        ch = self.ch()
        if ch == "[":
            return self.flow_seq()
        if ch == "{":
            return self.flow_map()
        if ch in ('"', "'"):
            return self.quoted()
        if ch in _FLOW_ENDS or ch == ":":
            raise self.unsupported(f"an empty entry before {ch!r} in a flow collection")
        if ch == "-" and self.blank_at(1):
            raise self.fail("block sequence entries are not allowed in a flow collection")
        return self.plain_flow()

    def plain_flow(self) -> Scalar:
        self.plain_start(flow=True)
        line, start, line_no = self.line, self.col, self.row + 1
        stop = _FLOW_STOP.search(line, start)
        end = len(line) if stop is None else stop.start()
        inside = end + 1 < len(line) and line[end + 1] not in " \t"
        if stop is not None and stop.group() == ":" and inside:
            raise self.unsupported("a ':' inside a plain scalar of a flow collection")
        text = line[start:end].rstrip(" \t")
        self.col = start + len(text)
        return Scalar(text, True, line_no)

    def after_flow_item(self, closing: str) -> bool:
        """After an entry: True at ``,`` (consumed), False at the closing bracket."""
        crossed = self.skip_flow()
        ch = self.ch()
        if ch == ",":
            self.col += 1
            return True
        if ch == closing:
            return False
        if crossed:
            raise self.unsupported("a plain scalar continued on the next line")
        raise self.fail(f"did not find expected ',' or {closing!r}")

    def flow_seq(self) -> Seq:
        line = self.row + 1
        self.col += 1
        items: list[Node] = []
        while True:
            self.skip_flow()
            if self.ch() == "]":
                self.col += 1
                return Seq(tuple(items), line)
            items.append(self.flow_node())
            self.skip_flow()
            if self.ch() == ":":
                raise self.unsupported("a key: value pair inside a flow sequence")
            if not self.after_flow_item("]"):
                self.col += 1
                return Seq(tuple(items), line)

    def flow_map(self) -> Map:
        line = self.row + 1
        self.col += 1
        pairs: list[tuple[Scalar, Node]] = []
        while True:
            self.skip_flow()
            ch = self.ch()
            if ch == "}":
                self.col += 1
                return Map(tuple(pairs), line)
            if ch in ("[", "{") or (ch == "?" and self.blank_at(1)):
                raise self.unsupported("a complex key in a flow mapping")
            key = self.flow_node()
            assert isinstance(key, Scalar)
            self.skip_flow()
            if self.ch() != ":":
                raise self.unsupported("a flow mapping key without a value")
            self.col += 1
            self.skip_flow()
            empty = self.ch() in (",", "}")
            value = Scalar("", True, self.row + 1) if empty else self.flow_node()
            pairs.append((key, value))
            if not self.after_flow_item("}"):
                self.col += 1
                return Map(tuple(pairs), line)
