"""HCL 1, the syntax a Nomad agent reads its config files with.

A Nomad agent parses its files with HashiCorp's HCL 1 (Nomad pins its own fork,
``v1.0.1-nomad-1``): native syntax, or JSON when the first non-space character
is ``{``. Both produce one tree of object lists, items with one or more keys,
lists and literal tokens; the JSON reader then *flattens* objects whose every
value is an object into items with several keys, as if they had been written
as labelled blocks. This module reproduces both readers and the flattening, so
that the launcher and the conformance suite see an agent file exactly as the
agent does -- including where it refuses one, with the agent's own message
(``At 3:11: literal not terminated``) -- rather than through an HCL 2 parser,
which accepts and rejects different files.

The quirks kept on purpose, because the agent has them: the scanner reports
only its last error; a JSON object's closing token is whatever follows its
last item; booleans and nested lists inside JSON lists are dropped; JSON
``null`` is an empty string; a few malformed inputs make the agent panic
(:class:`HCL1Panic`) instead of refusing.
"""

from __future__ import annotations

import enum
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias, TypeVar

__all__ = [
    "MAX_NESTING",
    "HCL1Error",
    "HCL1Limit",
    "HCL1Panic",
    "ListType",
    "LiteralType",
    "Node",
    "ObjectItem",
    "ObjectKey",
    "ObjectList",
    "ObjectType",
    "Pos",
    "Tok",
    "Token",
    "filter_items",
    "is_json",
    "parse",
    "token_value",
]


_N = TypeVar("_N")


class HCL1Error(ValueError):
    """The file does not parse; the text is HCL 1's own (``At 3:11: ...``)."""


#: How deep the reader follows objects, lists and the keys of one item: far beyond any
#: agent file, and inside Python's recursion limit for every step that walks the tree.
MAX_NESTING = 100


class HCL1Limit(ValueError):
    """A file nested past :data:`MAX_NESTING`: the agent may read it; this reader does not."""


class HCL1Panic(RuntimeError):
    """HCL 1 would panic on this input: a Nomad agent given the file crashes."""


class Tok(enum.Enum):
    """Token types; ``COLON`` and ``NULL`` occur in JSON only."""

    ILLEGAL = "ILLEGAL"
    EOF = "EOF"
    COMMENT = "COMMENT"
    IDENT = "IDENT"
    NUMBER = "NUMBER"
    FLOAT = "FLOAT"
    BOOL = "BOOL"
    STRING = "STRING"
    HEREDOC = "HEREDOC"
    NULL = "NULL"
    LBRACK = "LBRACK"
    LBRACE = "LBRACE"
    COMMA = "COMMA"
    PERIOD = "PERIOD"
    COLON = "COLON"
    RBRACK = "RBRACK"
    RBRACE = "RBRACE"
    ASSIGN = "ASSIGN"
    ADD = "ADD"
    SUB = "SUB"


@dataclass(frozen=True)
class Pos:
    """A position; line 0 is "no position" (JSON tokens carry none into the tree)."""

    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        return f"{self.line}:{self.column}" if self.line > 0 else "-"


@dataclass(frozen=True)
class Token:
    type: Tok
    text: str
    pos: Pos = Pos()
    json: bool = False

    def __str__(self) -> str:
        """Go's ``Token.String`` (what ``%+v`` prints in a few error messages)."""
        return f"{self.pos} {self.type.value} {self.text}"


@dataclass
class ObjectKey:
    token: Token


@dataclass
class LiteralType:
    token: Token

    @property
    def pos(self) -> Pos:
        return self.token.pos


@dataclass
class ListType:
    items: list[Node] = field(default_factory=list)
    pos: Pos = Pos()


@dataclass
class ObjectList:
    items: list[ObjectItem] = field(default_factory=list)

    @property
    def pos(self) -> Pos:
        if not self.items:
            return Pos()
        return self.items[0].pos


@dataclass
class ObjectType:
    list: ObjectList
    pos: Pos = Pos()


@dataclass
class ObjectItem:
    keys: list[ObjectKey]
    val: Node | None = None

    @property
    def pos(self) -> Pos:
        return self.keys[0].token.pos if self.keys else Pos()


Node: TypeAlias = ObjectList | ObjectItem | ObjectType | ListType | LiteralType


def is_json(text: str) -> bool:
    """Whether HCL 1 reads ``text`` as JSON: its first non-space character is ``{``."""
    for ch in text:
        if ch.isspace():
            continue
        return ch == "{"
    return False


def parse(text: str) -> ObjectList:
    """The file's root object list; raises :class:`HCL1Error` or :class:`HCL1Panic`."""
    if is_json(text):
        return _JsonParser(text).parse()
    return _Parser(text.replace("\r\n", "\n")).parse()


def filter_items(items: list[ObjectItem], key: str) -> list[ObjectItem]:
    """The items whose first key is ``key`` (compared case-insensitively, as HCL 1
    does), with that key taken off."""
    out = []
    for item in items:
        if not item.keys:
            continue
        if not _equal_fold(token_value(item.keys[0].token), key):  # type: ignore[arg-type]
            continue
        out.append(ObjectItem(item.keys[1:], item.val))
    return out


def _equal_fold(a: str, b: str) -> bool:
    return a == b or a.casefold() == b.casefold()


# ------------------------------------------------------------------- values


def token_value(tok: Token) -> object:
    """What HCL 1 reads a literal token as (its ``Token.Value``); raises
    :class:`HCL1Panic` where HCL 1 panics (a string it cannot unquote)."""
    if tok.type is Tok.BOOL:
        return tok.text == "true"
    if tok.type is Tok.IDENT:
        return tok.text
    if tok.type is Tok.HEREDOC:
        return _unindent_heredoc(tok.text)
    if tok.type is Tok.STRING:
        if tok.text == "":  # a JSON null
            return ""
        unquote = _go_unquote if tok.json else _hcl_unquote
        try:
            return unquote(tok.text)
        except ValueError:
            raise HCL1Panic(f"unquote {tok.text} err: invalid syntax") from None
    raise HCL1Panic(f"unimplemented Value for type: {tok.type.value}")


def _unindent_heredoc(text: str) -> str:
    idx = text.index("\n")
    if text[2] != "-":
        return text[idx + 1 : len(text) - idx + 1]
    lines = text[idx + 1 : len(text) - idx + 2].split("\n")
    prefix = lines[-1]
    if not all(line.startswith(prefix) for line in lines):
        return text[idx + 1 : len(text) - idx + 1].rstrip(" \t")
    return "\n".join([*(line[len(prefix) :] for line in lines[:-1]), ""])


_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
}


def _unquote_char(s: str, i: int, *, strict_runes: bool) -> tuple[str, int]:
    """One character of a Go-style quoted string at ``s[i]``; ValueError if invalid.

    ``\\x`` escapes give one byte each, kept as a surrogate-escaped character so
    that the text can become the exact bytes later.
    """
    c = s[i]
    if c == '"':
        raise ValueError
    if c != "\\":
        return c, i + 1
    if i + 1 >= len(s):
        raise ValueError
    e = s[i + 1]
    i += 2
    if e in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[e], i
    if e in "xuU":
        n = {"x": 2, "u": 4, "U": 8}[e]
        digits = s[i : i + n]
        if len(digits) < n or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise ValueError
        v = int(digits, 16)
        if e == "x":
            return _byte_char(v), i + n
        if v > 0x10FFFF:
            raise ValueError
        if 0xD800 <= v <= 0xDFFF:
            if strict_runes:
                raise ValueError
            return "\ufffd", i + n  # Go encodes a surrogate as the replacement rune
        return chr(v), i + n
    if e in "01234567":
        digits = s[i : i + 2]
        if len(digits) < 2 or any(d not in "01234567" for d in digits):
            raise ValueError
        v = int(e + digits, 8)
        if v > 255:
            raise ValueError
        return _byte_char(v), i + 2
    if e == '"':
        return '"', i
    raise ValueError


def _byte_char(v: int) -> str:
    return chr(v) if v < 0x80 else (b"%c" % v).decode("utf-8", "surrogateescape")


def _go_unquote(text: str) -> str:
    """Go's ``strconv.Unquote`` for a double-quoted literal (JSON strings)."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise ValueError
    s = text[1:-1]
    if "\n" in s:
        raise ValueError
    out: list[str] = []
    i = 0
    while i < len(s):
        ch, i = _unquote_char(s, i, strict_runes=True)
        out.append(ch)
    return "".join(out)


def _hcl_unquote(text: str) -> str:
    """HCL 1's own unquoting: like Go's, but ``${ ... }`` is copied as written."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise ValueError
    s = text[1:-1]
    if "$" not in s and "{" not in s and "\n" in s:
        raise ValueError
    if "\\" not in s and '"' not in s and "$" not in s:
        return s
    out: list[str] = []
    i = 0
    while i < len(s):
        if s[i] == "$" and i + 1 < len(s) and s[i + 1] == "{":
            out.append("${")
            i += 2
            depth = 1
            while i < len(s) and depth > 0:
                ch = s[i]
                if "\udc80" <= ch <= "\udcff":
                    raise ValueError  # invalid UTF-8 inside an interpolation
                out.append(ch)
                i += 1
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
            if depth != 0:
                raise ValueError
            continue
        if s[i] == "\n":
            raise ValueError
        ch, i = _unquote_char(s, i, strict_runes=False)
        out.append(ch)
    return "".join(out)


# ------------------------------------------------------------------ scanning

_EOF = ""


def _is_letter(ch: str) -> bool:
    if not ch:
        return False
    if "a" <= ch <= "z" or "A" <= ch <= "Z" or ch == "_":
        return True
    return ord(ch) >= 0x80 and unicodedata.category(ch).startswith("L")


def _is_digit(ch: str) -> bool:
    if not ch:
        return False
    return "0" <= ch <= "9" or (ord(ch) >= 0x80 and unicodedata.category(ch) == "Nd")


def _is_decimal(ch: str) -> bool:
    return bool(ch) and "0" <= ch <= "9"


def _is_hex(ch: str) -> bool:
    return bool(ch) and ch in "0123456789abcdefABCDEF"


def _digit_val(ch: str) -> int:
    if _is_hex(ch):
        return int(ch, 16)
    return 16


_PUNCT = {
    "[": Tok.LBRACK,
    "]": Tok.RBRACK,
    "{": Tok.LBRACE,
    "}": Tok.RBRACE,
    ",": Tok.COMMA,
    "=": Tok.ASSIGN,
    "+": Tok.ADD,
}

_JSON_PUNCT = {
    "[": Tok.LBRACK,
    "]": Tok.RBRACK,
    "{": Tok.LBRACE,
    "}": Tok.RBRACE,
    ",": Tok.COMMA,
    ":": Tok.COLON,
}


class _ScannerBase:
    """The rune reader both scanners share, with Go's position bookkeeping.

    The source is a str; bytes that were not UTF-8 arrive as surrogate escapes
    and read as Go's ``RuneError``.
    """

    def __init__(self, src: str, on_error: Callable[[Pos, str], None]) -> None:
        self.src = src
        self.i = 0  # next character to read
        self.line, self.column = 1, 0
        self.prev: tuple[int, int, int] = (0, 1, 0)
        self.last_len = 0
        self.last_line_len = 0
        self.unreadable = True  # bytes.Buffer.UnreadRune would fail now
        self.tok_start = 0
        self.on_error = on_error

    def _read(self) -> str:
        """bytes.Buffer.ReadRune with the scanner's position update; '' at EOF."""
        if self.i >= len(self.src):
            self.column += 1
            self.last_len = 0
            self.unreadable = True
            return _EOF
        ch = self.src[self.i]
        self.prev = (self.i, self.line, self.column)
        self.i += 1
        self.column += 1
        self.last_len = 1
        self.unreadable = False
        return ch

    def unread(self) -> None:
        if self.unreadable:
            raise HCL1Panic(
                "bytes.Buffer: UnreadRune: previous operation was not a successful ReadRune"
            )
        self.i, self.line, self.column = self.prev
        self.unreadable = True

    def peek(self) -> str:
        self.unreadable = True
        return self.src[self.i] if self.i < len(self.src) else _EOF

    def recent_position(self) -> Pos:
        if self.column > 0:
            return Pos(self.line, self.column)
        if self.last_line_len > 0:
            return Pos(self.line - 1, self.last_line_len)
        return Pos(1, 1)

    def err(self, msg: str) -> None:
        self.on_error(self.recent_position(), msg)

    def newline(self, ch: str) -> None:
        if ch == "\n":
            self.line += 1
            self.last_line_len = self.column
            self.column = 0

    def start_token(self) -> Pos:
        self.tok_start = self.i - self.last_len
        if self.column > 0:
            return Pos(self.line, self.column)
        return Pos(self.line - 1, self.last_line_len)

    def scan_mantissa(self, ch: str) -> str:
        scanned = False
        while _is_decimal(ch):
            ch = self.next()
            scanned = True
        if scanned and ch != _EOF:
            self.unread()
        return ch

    def scan_fraction(self, ch: str) -> str:
        if ch == ".":
            ch = self.peek()
            ch = self.scan_mantissa(ch)
        return ch

    def scan_exponent(self, ch: str) -> str:
        if ch in ("e", "E"):
            ch = self.next()
            if ch in ("-", "+"):
                ch = self.next()
            ch = self.scan_mantissa(ch)
        return ch

    def float_tail(self, ch: str) -> bool:
        """After a number's digits: whether an exponent or a fraction follows (read it)."""
        if ch in ("e", "E"):
            self.scan_exponent(ch)
            return True
        if ch == ".":
            ch = self.scan_fraction(ch)
            if ch in ("e", "E"):
                self.scan_exponent(self.next())
            return True
        return False

    def scan_decimal(self, ch: str) -> Tok:
        """A number that starts with the digit ``ch``: its digits, then any float tail."""
        self.scan_mantissa(ch)
        ch = self.next()
        if self.float_tail(ch):
            return Tok.FLOAT
        if ch != _EOF:
            self.unread()
        return Tok.NUMBER

    #: Characters an identifier may hold after its first (HCL 1 allows "." too).
    ident_extra = "-"
    #: Inside "${ ... }" a quote does not end a native string, nor a newline.
    braces_hide_quotes = False

    def scan_identifier(self) -> str:
        offs = self.i - self.last_len
        ch = self.next()
        while _is_letter(ch) or _is_digit(ch) or (ch != _EOF and ch in self.ident_extra):
            ch = self.next()
        if ch != _EOF:
            self.unread()
        return self.src[offs : self.i]

    def scan_string(self) -> None:
        braces = 0
        hide = self.braces_hide_quotes
        while True:
            ch = self.next()
            if (ch == "\n" and (braces == 0 or not hide)) or ch == _EOF:
                self.err("literal not terminated")
                return
            if ch == '"' and (braces == 0 or not hide):
                break
            if braces == 0 and ch == "$" and self.peek() == "{":
                braces += 1
                self.next()
            elif braces > 0 and ch == "{":
                braces += 1
            if braces > 0 and ch == "}":
                braces -= 1
            if ch == "\\":
                self.scan_escape()

    def scan_escape(self) -> str:
        ch = self.next()
        if ch in ("a", "b", "f", "n", "r", "t", "v", "\\", '"'):
            pass
        elif ch in "01234567" and ch:
            ch = self.scan_digits(ch, 8, 3)
        elif ch == "x":
            ch = self.scan_digits(self.next(), 16, 2)
        elif ch == "u":
            ch = self.scan_digits(self.next(), 16, 4)
        elif ch == "U":
            ch = self.scan_digits(self.next(), 16, 8)
        else:
            self.err("illegal char escape")
        return ch

    #: The tokens of one character.
    punct: ClassVar[Mapping[str, Tok]]

    def scan(self) -> Token:
        """The next token; what only one of the syntaxes has, :meth:`scan_other` reads."""
        ch = self.next()
        while ch in (" ", "\t", "\n", "\r"):
            ch = self.next()
        pos = self.start_token()
        if _is_decimal(ch):
            tok = self.scan_number(ch)
        elif ch == _EOF:
            tok = Tok.EOF
        elif ch == '"':
            tok = Tok.STRING
            self.scan_string()
        elif ch == ".":
            tok = Tok.PERIOD
            ch = self.peek()
            if _is_decimal(ch):
                tok = Tok.FLOAT
                ch = self.scan_mantissa(ch)
                ch = self.scan_exponent(ch)
        elif ch in self.punct:
            tok = self.punct[ch]
        elif ch == "-" and _is_decimal(self.peek()):
            tok = self.scan_number(self.next())
        else:
            tok = self.scan_other(ch)
        text = self.src[self.tok_start : self.i] if self.tok_start >= 0 else ""
        self.tok_start = self.i
        return Token(tok, text, pos)

    def scan_other(self, ch: str) -> Tok:
        raise NotImplementedError

    def scan_number(self, ch: str) -> Tok:
        raise NotImplementedError

    def scan_digits(self, ch: str, base: int, n: int) -> str:
        raise NotImplementedError

    def next(self) -> str:
        raise NotImplementedError


class _Scanner(_ScannerBase):
    """HCL 1's native-syntax scanner."""

    punct = _PUNCT
    ident_extra = "-."
    braces_hide_quotes = True

    def next(self) -> str:
        ch = self._read()
        if ch == _EOF:
            return _EOF
        if "\udc80" <= ch <= "\udcff":
            self.err("illegal UTF-8 encoding")
            return "\ufffd"
        self.newline(ch)
        if ch == "\x00":
            self.err("unexpected null character (0x00)")
            return _EOF
        if ch == "\ue123":
            self.err("unicode code point U+E123 reserved for internal use")
            return "\ufffd"
        return ch

    def scan_other(self, ch: str) -> Tok:
        if _is_letter(ch):
            lit = self.scan_identifier()
            return Tok.BOOL if lit in ("true", "false") else Tok.IDENT
        if ch in ("#", "/"):
            self.scan_comment(ch)
            return Tok.COMMENT
        if ch == "<":
            self.scan_heredoc()
            return Tok.HEREDOC
        if ch == "-":
            return Tok.SUB
        self.err("illegal char")
        return Tok.ILLEGAL

    def scan_comment(self, ch: str) -> None:
        if ch == "#" or (ch == "/" and self.peek() != "*"):
            if ch == "/" and self.peek() != "/":
                self.err("expected '/' for comment")
                return
            ch = self.next()
            while ch != "\n" and ch != _EOF:
                ch = self.next()
            if ch != _EOF:
                self.unread()
            return
        if ch == "/":
            self.next()
            ch = self.next()
        while True:
            if ch == _EOF:
                self.err("comment not terminated")
                break
            ch0 = ch
            ch = self.next()
            if ch0 == "*" and ch == "/":
                break

    def scan_number(self, ch: str) -> Tok:
        if ch == "0":
            ch = self.next()
            if ch in ("x", "X"):
                ch = self.next()
                found = False
                while _is_hex(ch):
                    ch = self.next()
                    found = True
                if not found:
                    self.err("illegal hexadecimal number")
                if ch != _EOF:
                    self.unread()
                return Tok.NUMBER
            illegal_octal = False
            while _is_decimal(ch):
                ch = self.next()
                if ch in ("8", "9"):
                    illegal_octal = True
            if self.float_tail(ch):
                return Tok.FLOAT
            if illegal_octal:
                self.err("illegal octal number")
            if ch != _EOF:
                self.unread()
            return Tok.NUMBER
        return self.scan_decimal(ch)

    def scan_heredoc(self) -> None:
        if self.next() != "<":
            self.err("heredoc expected second '<', didn't see it")
            return
        offs = self.i
        ch = self.next()
        if ch == "-":
            ch = self.next()
        while _is_letter(ch) or _is_digit(ch):
            ch = self.next()
        if ch == _EOF:
            self.err("heredoc not terminated")
            return
        if ch == "\r" and self.peek() == "\n":
            ch = self.next()
        if ch != "\n":
            self.err("invalid characters in heredoc anchor")
            return
        ident = self.src[offs : self.i - self.last_len]
        if ident in ("", "-"):
            self.err("zero-length heredoc anchor")
            return
        anchor = ident[1:] if ident.startswith("-") else ident
        line_start = self.i
        while True:
            ch = self.next()
            if ch == "\n":
                line = self.src[line_start : self.i - self.last_len]
                if len(line) >= len(ident) and _heredoc_anchor(line, anchor):
                    break
                line_start = self.i
            if ch == _EOF:
                self.err("heredoc not terminated")
                return

    def scan_digits(self, ch: str, base: int, n: int) -> str:
        start = n
        while n > 0 and _digit_val(ch) < base:
            ch = self.next()
            if ch == _EOF:
                break
            n -= 1
        if n > 0:
            self.err("illegal char escape")
        if n != start and ch != _EOF:
            self.unread()
        return ch


def _heredoc_anchor(line: str, anchor: str) -> bool:
    """``^[[:space:]]*ANCHOR\\r*\\z``, as HCL 1's regular expression tests a line."""
    stripped = line.lstrip(" \t\n\v\f\r")
    if not stripped.startswith(anchor):
        return False
    return stripped[len(anchor) :].strip("\r") == ""


class _JsonScanner(_ScannerBase):
    """HCL 1's JSON scanner."""

    punct = _JSON_PUNCT

    def next(self) -> str:
        ch = self._read()
        if ch == _EOF:
            return _EOF
        if "\udc80" <= ch <= "\udcff":
            self.err("illegal UTF-8 encoding")
            return "\ufffd"
        self.newline(ch)
        return ch

    def scan_other(self, ch: str) -> Tok:
        if _is_letter(ch):
            lit = self.scan_identifier()
            if lit in ("true", "false"):
                return Tok.BOOL
            if lit == "null":
                return Tok.NULL
            self.err("illegal char")
        elif ch == "-":
            self.err("illegal char")
        else:
            self.err("illegal char: " + ch)
        return Tok.ILLEGAL

    def scan_number(self, ch: str) -> Tok:
        zero = ch == "0"
        before = (self.line, self.column, self.i)
        tok = self.scan_decimal(ch)
        if tok is Tok.NUMBER and zero and before != (self.line, self.column, self.i):
            self.err("numbers cannot start with 0")
        return tok

    def scan_digits(self, ch: str, base: int, n: int) -> str:
        while n > 0 and _digit_val(ch) < base:
            ch = self.next()
            n -= 1
        if n > 0:
            self.err("illegal char escape")
        self.unread()
        return ch


# ------------------------------------------------------------------- parsing


class _EofToken(Exception):
    """HCL 1's ``errEofToken``: the input ended where an item could start."""

    def __str__(self) -> str:
        return "EOF token found"


class _PosError(Exception):
    def __init__(self, pos: Pos, message: str) -> None:
        super().__init__(f"At {pos}: {message}")


def _check_nesting(depth: int, pos: Pos) -> None:
    if depth > MAX_NESTING:
        raise HCL1Limit(
            f"At {pos}: nested deeper than {MAX_NESTING} levels (objects, lists and the "
            "keys of one item)"
        )


def _nested(method: Callable[[Any], _N]) -> Callable[[Any], _N]:
    """A parser's method for an object or a list, one level of nesting deeper."""

    def counted(parser: Any) -> _N:
        _check_nesting(parser.depth + 1, parser.tok.pos)
        parser.depth += 1
        try:
            return method(parser)
        finally:
            parser.depth -= 1

    return counted


class _Parser:
    """HCL 1's native-syntax parser (comments are read and dropped)."""

    def __init__(self, src: str) -> None:
        self.scan_error: str | None = None
        self.sc = _Scanner(src, self._on_error)
        self.tok = Token(Tok.ILLEGAL, "")
        self.buffered = False
        self.depth = 0

    def _on_error(self, pos: Pos, msg: str) -> None:
        self.scan_error = f"At {pos}: {msg}"  # the scanner's last error wins

    def parse(self) -> ObjectList:
        node, error = self.object_list(in_object=False)
        if self.scan_error is not None:
            raise HCL1Error(self.scan_error)
        if error is not None:
            raise HCL1Error(str(error))
        return node

    def scan(self) -> Token:
        if self.buffered:
            self.buffered = False
            return self.tok
        self.tok = self.sc.scan()
        while self.tok.type is Tok.COMMENT:
            self.tok = self.sc.scan()
        return self.tok

    def unscan(self) -> None:
        self.buffered = True

    def object_list(self, *, in_object: bool) -> tuple[ObjectList, Exception | None]:
        """The items up to ``}`` (or the end), and the error that stopped them, if any."""
        node = ObjectList()
        while True:
            if in_object:
                tok = self.scan()
                self.unscan()
                if tok.type is Tok.RBRACE:
                    break
            try:
                item = self.object_item()
            except _EofToken:
                break
            except _PosError as exc:
                return node, exc
            node.items.append(item)
            tok = self.scan()
            if tok.type is not Tok.COMMA:
                self.unscan()
        return node, None

    def object_item(self) -> ObjectItem:
        keys, error = self.object_key()
        if keys and isinstance(error, _EofToken):
            error = None
        if keys and error is not None and self.tok.type is Tok.RBRACE:
            error = None
            self.tok = Token(Tok.EOF, self.tok.text, self.tok.pos, self.tok.json)
        if error is not None:
            raise error
        _check_nesting(self.depth + len(keys), keys[0].token.pos if keys else self.tok.pos)
        item = ObjectItem(keys)
        if self.tok.type is Tok.ASSIGN:
            item.val = self.object()
        elif self.tok.type is Tok.LBRACE:
            item.val = self.object_type()
        else:
            shown = " ".join(k.token.text for k in keys)
            raise _PosError(
                self.tok.pos,
                f"key '{shown}' expected start of object ('{{') or assignment ('=')",
            )
        self.scan()  # HCL 1 looks ahead here for a comment on the same line
        self.unscan()
        return item

    def object_key(self) -> tuple[list[ObjectKey], Exception | None]:
        keys: list[ObjectKey] = []
        while True:
            tok = self.scan()
            if tok.type is Tok.EOF:
                return keys, _EofToken()
            if tok.type is Tok.ASSIGN:
                if len(keys) > 1:
                    return [], _PosError(
                        tok.pos, f"nested object expected: LBRACE got: {tok.type.value}"
                    )
                if not keys:
                    return [], _PosError(tok.pos, "no object keys found!")
                return keys, None
            if tok.type is Tok.LBRACE:
                if not keys:
                    return keys, _PosError(
                        tok.pos, f"expected: IDENT | STRING got: {tok.type.value}"
                    )
                return keys, None
            if tok.type in (Tok.IDENT, Tok.STRING):
                keys.append(ObjectKey(tok))
                continue
            if tok.type is Tok.ILLEGAL:
                return keys, _PosError(tok.pos, "illegal character")
            return keys, _PosError(
                tok.pos, f"expected: IDENT | STRING | ASSIGN | LBRACE got: {tok.type.value}"
            )

    def object(self) -> Node:
        tok = self.scan()
        if tok.type in (Tok.NUMBER, Tok.FLOAT, Tok.BOOL, Tok.STRING, Tok.HEREDOC):
            return LiteralType(tok)
        if tok.type is Tok.LBRACE:
            return self.object_type()
        if tok.type is Tok.LBRACK:
            return self.list_type()
        if tok.type is Tok.EOF:
            raise _EofToken()
        raise _PosError(tok.pos, f"Unknown token: {tok}")

    @_nested
    def object_type(self) -> ObjectType:
        start = self.tok.pos
        items, error = self.object_list(in_object=True)
        if error is not None and self.tok.type is not Tok.RBRACE:
            raise error
        tok = self.scan()
        if tok.type is not Tok.RBRACE:
            raise _PosError(tok.pos, f"object expected closing RBRACE got: {tok.type.value}")
        return ObjectType(items, start)

    @_nested
    def list_type(self) -> ListType:
        node = ListType(pos=self.tok.pos)
        need_comma = False
        while True:
            tok = self.scan()
            if need_comma and tok.type not in (Tok.COMMA, Tok.RBRACK):
                raise _PosError(
                    tok.pos,
                    f"error parsing list, expected comma or list end, got: {tok.type.value}",
                )
            if tok.type in (Tok.BOOL, Tok.NUMBER, Tok.FLOAT, Tok.STRING, Tok.HEREDOC):
                node.items.append(LiteralType(tok))
                need_comma = True
            elif tok.type is Tok.COMMA:
                self.scan()  # the same look-ahead for a comment
                self.unscan()
                need_comma = False
            elif tok.type is Tok.LBRACE:
                try:
                    node.items.append(self.object_type())
                except (_PosError, _EofToken) as exc:
                    raise _PosError(
                        tok.pos, f"error while trying to parse object within list: {exc}"
                    ) from None
                need_comma = True
            elif tok.type is Tok.LBRACK:
                try:
                    node.items.append(self.list_type())
                except (_PosError, _EofToken) as exc:
                    raise _PosError(
                        tok.pos, f"error while trying to parse list within list: {exc}"
                    ) from None
            elif tok.type is Tok.RBRACK:
                return node
            else:
                raise _PosError(tok.pos, f"unexpected token while parsing list: {tok.type.value}")


class _JsonError(Exception):
    """A JSON parse error (HCL 1's JSON parser adds no position to its own)."""


class _JsonParser:
    """HCL 1's JSON parser, then the flattening into HCL-like items."""

    def __init__(self, src: str) -> None:
        self.scan_error: str | None = None
        self.sc = _JsonScanner(src, self._on_error)
        self.tok = Token(Tok.ILLEGAL, "")
        self.depth = 0

    def _on_error(self, pos: Pos, msg: str) -> None:
        self.scan_error = f"{pos}: {msg}"

    def parse(self) -> ObjectList:
        # Whatever follows the root object is never read.
        try:
            obj: ObjectType | None = self.object()
            failure = None
        except (_JsonError, _EofToken) as exc:
            obj, failure = None, str(exc)
        if self.scan_error is not None:
            raise HCL1Error(self.scan_error)
        if obj is None:
            raise HCL1Error(failure or "EOF token found")
        _flatten(obj.list)
        return obj.list

    def scan(self) -> Token:
        self.tok = self.sc.scan()
        return self.tok

    @staticmethod
    def hcl_token(tok: Token) -> Token:
        """The token as it enters the tree: without its position; null as ""."""
        if tok.type is Tok.NULL:
            return Token(Tok.STRING, "")
        return Token(tok.type, tok.text, Pos(), json=tok.type is Tok.STRING)

    def object_list(self) -> tuple[ObjectList, Exception | None]:
        node = ObjectList()
        while True:
            try:
                item = self.object_item()
            except _EofToken:
                break
            except _JsonError as exc:
                return node, exc
            node.items.append(item)
            # The token after an item is consumed whatever it is: a comma goes
            # on, anything else closes the object.
            if self.scan().type is not Tok.COMMA:
                break
        return node, None

    def object_item(self) -> ObjectItem:
        keys = self.object_key()
        _check_nesting(self.depth + len(keys), self.tok.pos)
        item = ObjectItem(keys)
        if self.tok.type is Tok.COLON:
            item.val = self.object_value()
        return item

    def object_key(self) -> list[ObjectKey]:
        keys: list[ObjectKey] = []
        while True:
            tok = self.scan()
            if tok.type is Tok.EOF:
                raise _EofToken()
            if tok.type is Tok.STRING:
                keys.append(ObjectKey(self.hcl_token(tok)))
                continue
            if tok.type is Tok.COLON:
                if not keys:
                    raise _JsonError(f"expected: STRING got: {tok.type.value}")
                return keys
            if tok.type is Tok.ILLEGAL:
                raise _JsonError("illegal")
            raise _JsonError(f"expected: STRING got: {tok.type.value}")

    def object_value(self) -> Node:
        tok = self.scan()
        if tok.type in (Tok.NUMBER, Tok.FLOAT, Tok.BOOL, Tok.NULL, Tok.STRING):
            return LiteralType(self.hcl_token(tok))
        if tok.type is Tok.LBRACE:
            return self.object_type()
        if tok.type is Tok.LBRACK:
            return self.list_type()
        if tok.type is Tok.EOF:
            raise _EofToken()
        raise _JsonError(f"Expected object value, got unknown token: {tok}")

    def object(self) -> ObjectType:
        tok = self.scan()
        if tok.type is Tok.LBRACE:
            return self.object_type()
        if tok.type is Tok.EOF:
            raise _EofToken()
        raise _JsonError(f"Expected object, got unknown token: {tok}")

    @_nested
    def object_type(self) -> ObjectType:
        items, error = self.object_list()
        if error is not None and self.tok.type is not Tok.RBRACE:
            raise error
        return ObjectType(items)

    @_nested
    def list_type(self) -> ListType:
        node = ListType()
        while True:
            tok = self.scan()
            if tok.type in (Tok.NUMBER, Tok.FLOAT, Tok.STRING):
                node.items.append(LiteralType(self.hcl_token(tok)))
            elif tok.type is Tok.COMMA:
                continue
            elif tok.type is Tok.LBRACE:
                node.items.append(self.object_type())
            elif tok.type in (Tok.BOOL, Tok.LBRACK):
                continue  # HCL 1 drops these inside lists
            elif tok.type is Tok.RBRACK:
                return node
            else:
                raise _JsonError(f"unexpected token while parsing list: {tok.type.value}")


def _flatten(root: ObjectList) -> None:
    """HCL 1's JSON flattening, applied to every object list, outermost first."""

    def walk(node: Node | None) -> None:
        if node is None:
            return
        if isinstance(node, ObjectList):
            _flatten_list(node)
            for item in node.items:
                walk(item)
        elif isinstance(node, ObjectItem):
            walk(node.val)
        elif isinstance(node, ListType):
            for elem in node.items:
                walk(elem)
        elif isinstance(node, ObjectType):
            walk(node.list)

    walk(root)


def _flatten_list(lst: ObjectList) -> None:
    items: list[ObjectItem] = []
    frontier = list(lst.items)
    while frontier:
        item = frontier.pop()
        val = item.val
        if isinstance(val, ObjectType):
            subitems = val.list.items
            if not subitems or not all(isinstance(s.val, ObjectType) for s in subitems):
                items.append(item)
                continue
            for sub in subitems:
                frontier.append(ObjectItem([*item.keys, *sub.keys], sub.val))
        elif isinstance(val, ListType):
            if not val.items or not all(isinstance(e, ObjectType) for e in val.items):
                items.append(item)
                continue
            for elem in val.items:
                frontier.append(ObjectItem(item.keys, elem))
        else:
            items.append(item)
    items.reverse()
    lst.items = items
