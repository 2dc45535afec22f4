"""Agent-file syntax errors: the agent's own message, plus a hint in an operator's words.

The messages are HCL 1's, position included, exactly as a Nomad v2.0.5 agent
logs them when it refuses the file (the Go cross-check in
``tests/agentconfig/test_agent_config_crosscheck.py`` holds the reader to that).
"""

from __future__ import annotations

import pytest

from nomad_device.agentconfig import agentfile


def _body(*lines: str) -> str:
    inner = "".join(f"    {line}\n" for line in lines)
    return f'plugin "p" {{\n  config {{\n{inner}  }}\n}}\n'


#: The common mistakes: the text, what the agent says, and the start of our hint.
MISTAKES = [
    ("unterminated string", _body('dir = "/srv'), "At 3:16: literal not terminated", "a string"),
    (
        "unterminated at the end",
        'plugin "p" {\n  config {\n    dir = "/srv',
        "At 3:16: literal not terminated",
        "a string is missing its closing",
    ),
    (
        "no = after a name",
        _body('dir "/srv"'),
        "At 4:3: key 'dir \"/srv\"' expected start of object ('{') or assignment ('=')",
        'a setting is written "name = value"',
    ),
    (
        "no = before a word",
        _body("mode fast"),
        "At 4:3: key 'mode fast' expected start of object ('{') or assignment ('=')",
        'a setting is written "name = value"',
    ),
    (": for =", _body('dir: "/srv"'), "At 3:8: illegal char", 'write "name = value"'),
    (
        "no value",
        _body("dir ="),
        "At 6:2: object expected closing RBRACE got: EOF",
        'a "{" is never closed',
    ),
    ("two =", _body("a = = 1"), "At 3:9: Unknown token: 3:9 ASSIGN =", "a value (a string"),
    ("single quotes", _body("dir = '/srv'"), "At 3:11: illegal char", "strings take double"),
    ("no name", _body("= 1"), "At 3:5: no object keys found!", "a setting needs a name"),
    ("a semicolon", _body("a = 1;"), "At 3:10: illegal char", "HCL ends a setting"),
    (
        "junk after a value",
        _body("a = 1 2"),
        "At 3:11: expected: IDENT | STRING | ASSIGN | LBRACE got: NUMBER",
        "each setting is",
    ),
    (
        "no commas in a list",
        _body('tags = ["a" "b"]'),
        "At 3:17: error parsing list, expected comma or list end, got: STRING",
        "list items are separated by commas",
    ),
    (
        "a brace too few",
        'plugin "p" {\n  config {\n  }\n',
        "At 4:2: object expected closing RBRACE got: EOF",
        'a "{" is never closed',
    ),
    (
        "a brace too many",
        _body("a = 1") + "}\n",
        "At 6:1: expected: IDENT | STRING | ASSIGN | LBRACE got: RBRACE",
        'this "}" closes nothing',
    ),
    (
        "a comment never closed",
        'plugin "p" {\n  /* x {\n}\n',
        "At 4:1: comment not terminated",
        'a "/*" comment',
    ),
    (
        "a heredoc never closed",
        _body("a = <<EOT", "hi"),
        "At 7:1: heredoc not terminated",
        "no line holds only",
    ),
    (
        "a variable",
        _body("a = var.x"),
        "At 3:9: Unknown token: 3:9 IDENT var.x",
        "values in an agent file are literals",
    ),
    ("null", _body("a = null"), "At 3:9: Unknown token: 3:9 IDENT null", "HCL 1 has no null"),
    (
        "arithmetic",
        _body("a = 1 + 2"),
        "At 3:11: expected: IDENT | STRING | ASSIGN | LBRACE got: ADD",
        "arithmetic is not read",
    ),
    (
        "a label with =",
        _body('a "b" = 1'),
        "At 3:11: nested object expected: LBRACE got: ASSIGN",
        "a block with labels takes braces",
    ),
    ("a bad escape", _body('a = "\\q"'), "At 3:11: illegal char escape", "the escapes HCL reads"),
    ("octal", _body("a = 0159"), "At 3:13: illegal octal number", "in HCL 1 a number starting"),
    (
        "JSON: a doubled comma",
        '{"plugin": {"p": {"config": {"a": 1,, }}}}',
        "expected: STRING got: COMMA",
        "in JSON every key is a quoted string",
    ),
]


@pytest.mark.parametrize(
    ("text", "agent", "hint"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES]
)
def test_common_mistakes_get_the_agents_message_and_a_hint(
    text: str, agent: str, hint: str
) -> None:
    with pytest.raises(agentfile.ConfigFileError) as raised:
        agentfile.parse_agent_text(text, "agent.hcl")
    assert raised.value.agent == agent
    message = str(raised.value)
    first, _, rest = message.partition("\n")
    assert first.endswith(f"the agent refuses to start: {agent}")
    line = agent.split(":")[0].removeprefix("At ") if agent.startswith("At ") else ""
    assert first.startswith(f"agent.hcl:{line}:" if line else "agent.hcl: ")
    assert rest.startswith(f"  hint: {hint}")


def test_a_json_agent_file_is_read_as_json() -> None:
    with pytest.raises(agentfile.ConfigFileError) as raised:
        agentfile.parse_agent_text("{'plugin': 1}", "agent.json")
    assert raised.value.agent == "1:2: illegal char: '"
    assert "invalid JSON" in str(raised.value)


def test_a_string_the_agent_cannot_unquote_crashes_it() -> None:
    # HCL 1's JSON reader accepts "\ud800" and then panics unquoting it.
    with pytest.raises(agentfile.ConfigFileError) as raised:
        agentfile.parse_agent_text('{"plugin": {"p": {"config": {"a": "\\ud800"}}}}', "a.json")
    assert raised.value.crash
    assert "would crash" in str(raised.value)
