"""HCL syntax errors in an operator's words (wire/hclsyntax.py), through the agent-file reader."""

from __future__ import annotations

import pytest

from nomad_device.cli import hclconfig


def _body(*lines: str) -> str:
    inner = "".join(f"    {line}\n" for line in lines)
    return f'plugin "p" {{\n  config {{\n{inner}  }}\n}}\n'


#: The common mistakes: the text, the line blamed and the start of the message.
MISTAKES = [
    (
        "unterminated string",
        _body('dir = "/srv'),
        3,
        'unterminated string: the closing " is missing',
    ),
    (
        "unterminated at the end",
        'plugin "p" {\n  config {\n    dir = "/srv',
        3,
        "unterminated string",
    ),
    ("left open before the next", _body('dir = "/srv', 'other = "x"'), 3, "unterminated string"),
    ("no = after a name", _body('dir "/srv"'), 3, 'expected "=" after the attribute name "dir"'),
    ("no = before a word", _body("mode fast"), 3, 'expected "=" after the attribute name "mode"'),
    ("a name alone", _body("a = 1 b"), 3, 'expected "=" after the attribute name "b"'),
    (": for =", _body('dir: "/srv"'), 3, 'expected "=" after the attribute name, not ":"'),
    ("no value", _body("dir ="), 3, 'expected a value after "="'),
    ("two =", _body("a = = 1"), 3, 'expected a value after "=", found a second "="'),
    ("single quotes", _body("dir = '/srv'"), 3, "strings take double quotes in HCL, not single"),
    ("no name", _body("= 1"), 3, 'expected an attribute name before "="'),
    ("a semicolon", _body("a = 1;"), 3, 'unexpected ";": HCL ends an attribute at the end of'),
    ("junk after a value", _body("a = 1 2"), 3, 'expected an attribute name, a block, or "}"'),
    (
        "no commas in a list",
        _body('tags = ["a" "b"]'),
        3,
        'expected "," between list items, or "]"',
    ),
    ("a list never closed", _body('tags = ["a", "b"'), 4, 'unbalanced brackets: "}" where the "["'),
    ("a list closed by }", _body('tags = ["a"}'), 3, 'unbalanced brackets: "}" where the "[" of'),
    ("a brace too few", 'plugin "p" {\n  config {\n  }\n', 1, 'unbalanced braces: this "{" is'),
    ("a brace too many", _body("a = 1") + "}\n", 6, 'unbalanced braces: this "}" closes nothing'),
    ("an object never closed", _body("o = { a = 1"), 1, 'unbalanced braces: this "{" is never'),
    ("a comment never closed", 'plugin "p" {\n  /* x {\n}\n', 2, 'unterminated comment: "/*" is'),
    ("a heredoc never closed", _body("a = <<EOT", "hi"), 3, "unterminated heredoc: no line holds"),
    ("a parenthesis left open", _body("a = (1"), 4, 'unbalanced brackets: "}" where the "(" of'),
]


@pytest.mark.parametrize(
    ("text", "line", "message"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES]
)
def test_common_mistakes_in_an_operators_words(text: str, line: int, message: str) -> None:
    with pytest.raises(hclconfig.ConfigFileError) as failed:
        hclconfig.parse_agent_text(text, "agent.hcl")
    assert str(failed.value).startswith(f"agent.hcl:{line}: invalid HCL: {message}"), str(
        failed.value
    )


AGENT = """\
data_dir = "/opt/nomad"

plugin "nomad-device-example" {
  args = ["-v"]
  config {
    dir         = "/srv/devices"   # a comment
    list_period = "5s"
    limits {
      max = 3
    }
    tags = ["a", "b"]
    note = <<EOT
hello
EOT
  }
}
"""


def test_no_message_shows_the_parsers_internals() -> None:
    """Every cut of a valid file that does not parse gets a line and plain words."""
    hclconfig.parse_agent_text(AGENT)
    for cut in range(1, len(AGENT)):
        text = AGENT[:cut]
        try:
            hclconfig.parse_agent_text(text, "agent.hcl")
        except hclconfig.ConfigFileError as exc:
            message = str(exc)
            assert message.startswith("agent.hcl:") and not message.startswith("agent.hcl:?")
            for internal in ("Token(", "$END", "STRING_CHARS", "RBRACE", "Expected one of"):
                assert internal not in message, (cut, message)
