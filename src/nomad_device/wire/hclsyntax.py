"""HCL syntax errors in an operator's words, not the parser's.

python-hcl2 parses with lark, whose errors name grammar terminals and tokens
(``Unexpected token Token('$END', '') at line 3, column 16``). An operator
needs the line and the mistake: an unterminated string, a missing ``=``, a
brace too many. :func:`explain` gets there in two steps:

1. a light scan of the text for what breaks everything after it -- a string,
   comment or heredoc that is never closed, braces or brackets that do not
   pair up -- because the parser only notices those much later, if at all;
2. otherwise, the parser's own position and what it expected there, mapped to
   the usual mistakes (a value missing after ``=``, a name followed by a value
   without ``=``, single quotes, ``:`` for ``=``, a list without commas ...).

Nothing here imports lark: the exception is read through its attributes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["explain"]

#: What the parser expects where a value must start.
_VALUE_START: Final = frozenset({"INT_LITERAL", "FLOAT_LITERAL", "LSQB", "HEREDOC_TEMPLATE"})
#: What the parser expects after a complete value (operators: never in a plain config).
_AFTER_VALUE: Final = frozenset({"DOUBLE_EQ", "DOUBLE_AMP", "DOUBLE_PIPE", "QMARK"})
_CLOSERS: Final = {"}": "{", "]": "[", ")": "("}
_OPENERS: Final = {v: k for k, v in _CLOSERS.items()}
_TERMINALS: Final = {
    "RBRACE": '"}"',
    "LBRACE": '"{"',
    "RSQB": '"]"',
    "LSQB": '"["',
    "RPAR": '")"',
    "LPAR": '"("',
    "COMMA": '","',
    "EQ": '"="',
    "COLON": '":"',
    "DBLQUOTE": "a string",
    "NAME": "a name",
    "$END": "the end of the file",
}
_TRAILING_NAME_RE: Final = re.compile(r"(?:^|\s)([A-Za-z_][\w-]*)\s*$")
_NAME_THEN_VALUE_RE: Final = re.compile(r'\s*([A-Za-z_][\w-]*)\s+("[^"]*"|[\w.-]+)\s*$')


def explain(exc: BaseException, text: str) -> tuple[int | None, str]:
    """The line (1-based, None if unknown) and a plain description of a syntax error."""
    scan = _scan(text)
    if scan.unterminated is not None:
        return scan.unterminated
    token = getattr(exc, "token", None)
    expected = {str(e) for e in getattr(exc, "expected", None) or ()}
    kind = str(getattr(token, "type", "")) if token is not None else ""
    value = str(token) if token is not None else ""
    line = _line_of(exc, text)
    if kind == "$END" and scan.unclosed is not None:
        return scan.unclosed
    if scan.stray is not None and (kind == "$END" or value.startswith(("}", "]", ")"))):
        return scan.stray
    if token is None:
        # The lexer could not even split the text into tokens.
        char = getattr(exc, "char", None)
        if isinstance(char, str) and char:
            return line, f"unexpected character {char!r}"
        return line, _first_line(exc)
    found = _found(kind, value)
    if value.startswith(";"):
        return line, 'unexpected ";": HCL ends an attribute at the end of the line'
    if expected & _AFTER_VALUE:
        return line, f"unexpected {found} after the value: put each attribute on a line of its own"
    if expected >= {"EQ", "LBRACE"} or expected == {"LBRACE"}:
        return _missing_equals(text, exc, line, kind, found)
    if expected & _VALUE_START:
        return _missing_value(line, value, found)
    if "RSQB" in expected and "COMMA" in expected:
        if kind == "RBRACE":
            return line, 'a list is not closed: "]" is missing before this "}"'
        return line, f'expected "," between list items, or "]" to end the list; found {found}'
    if expected == {"RPAR"}:
        return line, f'expected ")" to close the parenthesis; found {found}'
    if "NAME" in expected and "RBRACE" in expected:
        if value.startswith("="):
            return line, 'expected an attribute name before "="'
        return line, f'expected an attribute name, a block, or "}}" to end the block; found {found}'
    wanted = " or ".join(sorted(_TERMINALS[e] for e in expected if e in _TERMINALS))
    return line, f"unexpected {found}" + (f"; expected {wanted}" if wanted else "")


def _missing_equals(
    text: str, exc: BaseException, line: int | None, kind: str, found: str
) -> tuple[int | None, str]:
    """After a name: HCL wants ``=`` (an attribute) or labels and ``{`` (a block)."""
    if kind == "COLON":
        return line, 'expected "=" after the attribute name, not ":"'
    # `dir "/srv"` on its own line reads as the start of a block labelled "/srv";
    # the parser only complains at the next line. Point at the line that lacks "=".
    previous = _previous_line(text, _offset(exc))
    if previous is not None:
        number, content = previous
        match = _NAME_THEN_VALUE_RE.match(content) or _TRAILING_NAME_RE.search(content)
        if match and number != line:
            return number, f'expected "=" after the attribute name "{match.group(1)}"'
    return line, f'expected "=" after the attribute name (or "{{" to open a block); found {found}'


def _missing_value(line: int | None, value: str, found: str) -> tuple[int | None, str]:
    rest = value.lstrip(" \t")
    if not rest or rest.startswith(("\n", "\r", "}", "#", "//")):
        return line, 'expected a value after "="'
    if rest.startswith("="):
        return line, 'expected a value after "=", found a second "="'
    if rest.startswith("'"):
        return line, "strings take double quotes in HCL, not single quotes"
    return line, f'expected a value after "=" (a string, number, list or object); found {found}'


def _found(kind: str, value: str) -> str:
    if kind in _TERMINALS:
        return _TERMINALS[kind]
    word = value.strip().split(maxsplit=1)
    shown = word[0] if word else value
    if len(shown) > 20:
        shown = shown[:20] + "..."
    return f'"{shown}"' if shown else "a line break"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _offset(exc: BaseException) -> int | None:
    pos = getattr(exc, "pos_in_stream", None)
    if not isinstance(pos, int):
        token = getattr(exc, "token", None)
        pos = getattr(token, "start_pos", None)
    return pos if isinstance(pos, int) else None


def _line_of(exc: BaseException, text: str) -> int | None:
    pos = _offset(exc)
    if pos is not None and 0 <= pos <= len(text):
        return text.count("\n", 0, pos) + 1
    line = getattr(exc, "line", None)
    return line if isinstance(line, int) and line > 0 else None


def _previous_line(text: str, pos: int | None) -> tuple[int, str] | None:
    """The last line before ``pos`` that holds something other than blanks."""
    if pos is None:
        return None
    lines = text[:pos].split("\n")
    for index in range(len(lines) - 2, -1, -1):
        if lines[index].strip():
            return index + 1, lines[index]
    return None


# ------------------------------------------------------------------- the scan


@dataclass
class _Scan:
    #: A string, comment or heredoc that is never closed.
    unterminated: tuple[int, str] | None = None
    #: The innermost bracket still open at the end of the file.
    unclosed: tuple[int, str] | None = None
    #: The first closing bracket that closes nothing, or the wrong thing.
    stray: tuple[int, str] | None = None


def _scan(text: str) -> _Scan:
    """Strings, comments, heredocs and bracket pairs, as HCL's lexer sees them."""
    out = _Scan()
    stack: list[tuple[str, int]] = []
    line, i, n = 1, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            i += 1
        elif ch == '"':
            start = line
            i += 1
            depth = 0  # inside ${ ... } a quote does not end the string
            while i < n and (text[i] != '"' or depth):
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    break
                elif text.startswith("${", i):
                    depth += 1
                elif text[i] == "}" and depth:
                    depth -= 1
                i += 1
            if i >= n or text[i] == "\n":
                out.unterminated = (start, 'unterminated string: the closing " is missing')
                return out
            i += 1
        elif ch == "#" or text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                out.unterminated = (line, 'unterminated comment: "/*" is never closed by "*/"')
                return out
            line += text.count("\n", i, end)
            i = end + 2
        elif text.startswith("<<", i):
            match = re.compile(r"<<-?([A-Za-z_][\w-]*)[ \t]*\n").match(text, i)
            if match is None:
                i += 2
                continue
            marker = match.group(1)
            closing = re.compile(rf"^[ \t]*{re.escape(marker)}[ \t]*$", re.M).search(
                text, match.end()
            )
            if closing is None:
                out.unterminated = (
                    line,
                    f'unterminated heredoc: no line holds just "{marker}" to end it',
                )
                return out
            line += text.count("\n", i, closing.end())
            i = closing.end()
        elif ch in "{[(":
            stack.append((ch, line))
            i += 1
        elif ch in _CLOSERS:
            if (not stack or stack[-1][0] != _CLOSERS[ch]) and out.stray is None:
                if not stack:
                    out.stray = (line, f'unbalanced {_kind(ch)}: this "{ch}" closes nothing')
                else:
                    opener, where = stack[-1]
                    out.stray = (
                        line,
                        f'unbalanced {_kind(ch, opener)}: "{ch}" where the "{opener}" of line '
                        f'{where} is still open (a "{_OPENERS[opener]}" is missing)',
                    )
            elif stack:
                stack.pop()
            i += 1
        else:
            i += 1
    if stack:
        opener, where = stack[-1]
        out.unclosed = (
            where,
            f'unbalanced {_kind(opener)}: this "{opener}" is never closed '
            f'(a "{_OPENERS[opener]}" is missing)',
        )
    return out


def _kind(*chars: str) -> str:
    return "braces" if set(chars) <= {"{", "}"} else "brackets"
