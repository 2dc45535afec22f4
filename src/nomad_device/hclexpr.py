"""HCL 2's expression syntax, read once for spec literals, templates and job files.

A schema's ``Literal`` (:mod:`nomad_device.wire.hclspec`), an agent's templates
(:mod:`nomad_device.agentconfig.hcltemplate`) and a job file's escapes
(:mod:`nomad_device.placement.jobspec`) each give the syntax their own meaning.
A tree is tuples of a kind, an offset (an operation's is its operator's) and:
``number``/``string``/``name``/``key`` (a bare object key) text (a string's body,
escapes unread); ``call`` name, args, expand; ``unary`` op, x; ``binary`` op, a, b;
``cond`` c, a, b; ``tuple`` items; ``object`` [(key, value)]; ``index`` x, key
(``x.0`` too); ``attr`` x, name. ``for`` expressions and splats are refused, and
trees deeper than :data:`MAX_DEPTH`, which their readers walk recursively.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final, cast

__all__ = [
    "MAX_DEPTH",
    "Construct",
    "EscapeError",
    "Node",
    "ParseError",
    "parse",
    "read_escape",
    "unescape",
    "walk",
]

#: How deep a tree may nest (brackets, calls, operations): far beyond any config, and
#: well inside Python's recursion limit for the readers that walk it.
MAX_DEPTH: Final = 100

Node = tuple[object, ...]


class ParseError(ValueError):
    """Text that is no HCL expression; ``offset`` is where reading stopped."""

    def __init__(self, problem: str, offset: int) -> None:
        super().__init__(problem)
        self.problem = problem
        self.offset = offset


class Construct(ParseError):
    """Valid HCL this reader does not read (a ``for`` expression, a splat)."""


class EscapeError(ValueError):
    """A backslash sequence HCL 2 does not know, or a \\u that names no character."""


_ESCAPES: Final = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}


def read_escape(text: str, i: int) -> tuple[str, int]:
    """The character HCL 2's escape at ``text[i]`` (a backslash) stands for, and the index
    after it; :class:`EscapeError` saying what is wrong otherwise."""
    esc = text[i + 1 : i + 2]
    if esc in _ESCAPES:
        return _ESCAPES[esc], i + 2
    if esc in ("u", "U"):
        width = 4 if esc == "u" else 8
        digits = text[i + 2 : i + 2 + width]
        if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise EscapeError(f"\\{esc} needs {width} hex digits")
        code = int(digits, 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise EscapeError("escape is not a valid Unicode character")
        return chr(code), i + 2 + width
    raise EscapeError(f"invalid escape \\{esc}")


def unescape(text: str) -> str:
    """HCL 2's escapes in a quoted string's literal text resolved (:class:`EscapeError`)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "\\":
            out.append(text[i])
            i += 1
            continue
        char, i = read_escape(text, i)
        out.append(char)
    return "".join(out)


# ------------------------------------------------------------------------ tokens

_TOKEN: Final = re.compile(
    r"""(?P<space>[ \t\r]+)
    | (?P<comment>\#[^\n]*|//[^\n]*|/\*.*?\*/)
    | (?P<newline>\n)
    | (?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_-]*)
    | (?P<heredoc><<-?[A-Za-z_])
    | (?P<op>\.\.\.|==|!=|<=|>=|&&|\|\||[-+*/%<>!?:=,.()\[\]{}])""",
    re.VERBOSE | re.DOTALL,
)

_Token = tuple[str, str, int]


_STRING: Final = re.compile(r'"(?:[^"\\\n]|\\[^\n])*"')


def _string_end(text: str, start: int) -> int:
    """The index after the quote that closes the string opened at ``start``."""
    m = _STRING.match(text, start)
    if m is not None:
        return m.end()
    newline = text.find("\n", start)
    if newline < 0:
        raise ParseError("unterminated string", start)
    raise ParseError("quoted strings cannot span lines", newline)


def _tokens(text: str, comments: bool) -> list[_Token]:
    out: list[_Token] = []
    i = 0
    while i < len(text):
        if text[i] == '"':
            end = _string_end(text, i)
            out.append(("string", text[i + 1 : end - 1], i))
            i = end
            continue
        m = _TOKEN.match(text, i)
        if m is None or m.lastgroup is None:
            raise ParseError(f"unexpected character {text[i]!r}", i)
        kind = m.lastgroup
        if kind == "comment" and not comments:
            raise ParseError("a comment", i)
        if kind == "heredoc":
            raise ParseError("heredoc strings are not supported; use a quoted string", i)
        if kind not in ("space", "comment"):
            out.append((kind, m.group(), i))
        i = m.end()
    out.append(("end", "", len(text)))
    return out


# ------------------------------------------------------------------------ parsing

#: Binary operators by precedence, lowest first; all associate to the left.
_LEVEL: Final = {
    op: level
    for level, ops in enumerate(
        (("||",), ("&&",), ("==", "!="), ("<", ">", "<=", ">="), ("+", "-"), ("*", "/", "%"))
    )
    for op in ops
}


def parse(text: str, *, comments: bool = True) -> Node:
    """The tree of one expression (the whole text); :class:`ParseError` otherwise."""
    node = _Parser(_tokens(text, comments)).whole()
    if max(depth for _, depth in walk(node)) > MAX_DEPTH:
        raise ParseError(f"the expression nests deeper than {MAX_DEPTH} levels", 0)
    return node


def walk(root: Node) -> Iterator[tuple[Node, int]]:
    """Every node with its depth, parents first, left to right, without recursing."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        kind = node[0]
        if kind == "object":
            parts = [p for pair in cast(list[tuple[Node, Node]], node[2]) for p in pair]
        elif kind in ("call", "tuple"):
            parts = cast(list[Node], node[3 if kind == "call" else 2])
        else:
            parts = [n for n in node[2:] if isinstance(n, tuple)]
        stack.extend((part, depth + 1) for part in reversed(parts))


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def ahead(self, pos: int) -> int:
        while self.tokens[pos][0] == "newline":
            pos += 1
        return pos

    def peek(self, *, newlines: bool = False) -> _Token:
        return self.tokens[self.pos if newlines else self.ahead(self.pos)]

    def take(self, *, newlines: bool = False) -> _Token:
        if not newlines:
            self.pos = self.ahead(self.pos)
        tok = self.tokens[self.pos]
        self.pos += tok[0] != "end"
        return tok

    def is_op(self, *ops: str) -> bool:
        kind, text, _ = self.peek()
        return kind == "op" and text in ops

    def expect(self, op: str, context: str) -> None:
        kind, text, at = self.take()
        if kind != "op" or text != op:
            raise ParseError(f"expected {op!r} {context}", at)

    def whole(self) -> Node:
        node = self.expr()
        kind, text, at = self.peek()
        if kind != "end":
            raise ParseError(f"unexpected {text!r} after the value", at)
        return node

    def expr(self) -> Node:
        if self.depth >= MAX_DEPTH:
            raise ParseError(f"the expression nests deeper than {MAX_DEPTH} levels", self.peek()[2])
        self.depth += 1
        try:
            node = self.binary(0)
            if not self.is_op("?"):
                return node
            at = self.take()[2]
            yes = self.expr()
            self.expect(":", "in a conditional")
            return ("cond", at, node, yes, self.expr())
        finally:
            self.depth -= 1

    def binary(self, lowest: int) -> Node:
        """Operators of precedence ``lowest`` and above, by precedence climbing."""
        left = self.unary()
        while True:
            kind, op, at = self.peek()
            level = _LEVEL.get(op, -1) if kind == "op" else -1
            if level < lowest:
                return left
            self.take()
            left = ("binary", at, op, left, self.binary(level + 1))

    def unary(self) -> Node:
        prefixes = []
        while self.is_op("-", "!"):
            prefixes.append(self.take())
        node = self.postfix()
        for _, op, at in reversed(prefixes):
            node = ("unary", at, op, node)
        return node

    def postfix(self) -> Node:
        node = self.primary()
        while self.is_op("[", "."):
            _, op, at = self.take()
            if op == "[":
                if self.is_op("*"):
                    raise Construct("a splat expression ([*])", at)
                key = self.expr()
                self.expect("]", "to close '['")
                node = ("index", at, node, key)
                continue
            kind, text, where = self.take()
            if kind == "ident":
                node = ("attr", at, node, text)
            elif kind == "number" and text.isdigit():  # the legacy index form: x.0
                node = ("index", at, node, ("number", where, text))
            elif text == "*":
                raise Construct("a splat expression (.*)", at)
            elif kind == "end":
                raise ParseError("unexpected character '.'", at)
            else:
                raise Construct(f"unexpected {text!r}", where)
        return node

    def primary(self) -> Node:
        kind, text, at = self.take()
        if kind in ("number", "string"):
            return (kind, at, text)
        if kind == "ident":
            if text == "for":
                raise Construct("a for expression", at)
            if not self.is_op("("):
                return ("name", at, text)
            self.take()
            args, expand = self.items(")", "a call", expand=True)
            return ("call", at, text, args, expand)
        if kind == "op" and text == "(":
            inner = self.expr()
            self.expect(")", "to close '('")
            return inner
        if kind == "op" and text == "[":
            if self.peek()[1] == "for":
                raise Construct("a for expression", at)
            return ("tuple", at, self.items("]", "a list")[0])
        if kind == "op" and text == "{":
            return self.object(at)
        if kind == "end":
            raise ParseError("a value is required", at)
        raise ParseError(f"unexpected {text!r}", at)

    def items(self, close: str, what: str, *, expand: bool = False) -> tuple[list[Node], bool]:
        out: list[Node] = []
        expanded = False
        while not self.is_op(close):
            out.append(self.expr())
            if expand and self.is_op("..."):
                self.take()
                expanded = True
            if not self.is_op(","):
                break
            self.take()
        kind, text, at = self.take()
        if kind != "op" or text != close:
            raise ParseError(f"expected ',' or {close!r} in {what}", at)
        return out, expanded

    def object(self, start: int) -> Node:
        if self.peek()[1] == "for":
            raise Construct("a for expression", start)
        pairs: list[tuple[Node, Node]] = []
        while not self.is_op("}"):
            kind, text, at = self.peek()
            following = self.tokens[self.ahead(self.ahead(self.pos) + 1)]
            if kind == "ident" and following[1] in ("=", ":"):
                self.take()
                key: Node = ("key", at, text)
            else:
                key = self.expr()
            kind, text, at = self.take()
            if kind != "op" or text not in ("=", ":"):
                raise ParseError("expected '=' or ':' after an object key", at)
            pairs.append((key, self.expr()))
            kind, text, at = self.peek(newlines=True)
            if kind == "newline" or (kind == "op" and text == ","):
                self.take(newlines=True)
            elif not (kind == "op" and text == "}"):
                raise ParseError("expected ',', a new line or '}' after an object item", at)
        self.take()
        return ("object", start, pairs)
