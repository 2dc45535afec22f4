"""HCL 1 syntax errors in an operator's words.

A Nomad agent reports a broken agent file with HCL 1's terse parser message
(``At 3:11: literal not terminated``). The launcher and the conformance suite
show that message unchanged -- it is what the agent's log will say -- and add
a hint saying what is probably wrong and what to write instead.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["hint"]

_AT: Final = re.compile(r"At (\d+):(\d+): (.*)\Z", re.DOTALL)
_TOKEN_TEXT: Final = re.compile(r"Unknown token: \S+ (\w+) (.*)\Z", re.DOTALL)


def _char_at(text: str, line: int, column: int) -> str:
    lines = text.split("\n")
    if not 1 <= line <= len(lines):
        return ""
    row = lines[line - 1]
    return row[column - 1] if 1 <= column <= len(row) else ""


def hint(message: str, text: str) -> str:
    """What to write instead, for HCL 1's ``message`` about ``text`` ('' if no idea)."""
    m = _AT.match(message)
    body = m.group(3) if m else message
    char = _char_at(text, int(m.group(1)), int(m.group(2))) if m else ""
    if body == "literal not terminated":
        return 'a string is missing its closing " (a quoted string ends on its own line)'
    if body.startswith("illegal char") and not body.startswith("illegal char escape"):
        if char == "'":
            return "strings take double quotes in HCL, not single ones"
        if char == ":":
            return 'write "name = value"; ":" separates keys from values only in JSON files'
        if char == ";":
            return "HCL ends a setting at the end of its line; leave out the ';'"
        return "this character has no meaning in HCL here"
    if body == "illegal char escape":
        return r"the escapes HCL reads are \n \t \r \" \\ \uNNNN and \UNNNNNNNN"
    if body.startswith("key '") and "expected start of object" in body:
        return (
            'a setting is written "name = value", a block "name { ... }" or "name "label" { ... }"'
        )
    if body.startswith("nested object expected"):
        return 'a block with labels takes braces, not "=": write name "label" { ... }'
    if body.startswith("Unknown token:"):
        token = _TOKEN_TEXT.search(body)
        kind, shown = (token.group(1), token.group(2)) if token else ("", "")
        if kind == "IDENT":
            if shown == "null":
                return "HCL 1 has no null: leave the setting out to get its default"
            return (
                f"values in an agent file are literals: quote the string ({shown!r} -> "
                f'"{shown}"); variables and expressions are not read here'
            )
        if kind in ("RBRACE", "RBRACK", "EOF"):
            return 'a value is missing after "="'
        if kind in ("SUB", "ADD"):
            return "arithmetic is not read in an agent file: write the number itself"
        return 'a value (a string, number, bool, list or block) belongs after "="'
    if body.startswith("expected: IDENT | STRING | ASSIGN | LBRACE got: "):
        got = body.rsplit(" ", 1)[-1]
        if got == "RBRACE":
            return 'this "}" closes nothing: count the braces above it'
        if got in ("ADD", "SUB"):
            return "arithmetic is not read in an agent file: write the number itself"
        return 'each setting is "name = value" on its own; two values follow each other here'
    if body == "no object keys found!":
        return 'a setting needs a name before "="'
    if body.startswith("expected: STRING got: "):
        return "in JSON every key is a quoted string; look for a stray or doubled comma"
    if body.startswith("error parsing list"):
        return 'list items are separated by commas: ["a", "b"]'
    if body.startswith("object expected closing RBRACE"):
        return 'a "{" is never closed: count the braces above this line'
    if body == "comment not terminated":
        return 'a "/*" comment has no closing "*/"'
    if body == "heredoc not terminated":
        return "no line holds only the heredoc's closing marker"
    if body == "illegal octal number":
        return "in HCL 1 a number starting with 0 is octal: leave out the leading zeros"
    if body == "numbers cannot start with 0":
        return "leave out the leading zeros"
    return ""
