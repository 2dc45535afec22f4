"""HCL 2's expression syntax, read once for spec literals, templates and job files."""

from __future__ import annotations

import pytest

from nomad_device.hclexpr import (
    MAX_DEPTH,
    Construct,
    EscapeError,
    ParseError,
    parse,
    read_escape,
    unescape,
)


def test_a_tree_keeps_kinds_offsets_and_precedence() -> None:
    assert parse('f(1, "a")[0].b + 2 * -x') == (
        "binary",
        15,
        "+",
        (
            "attr",
            12,
            (
                "index",
                9,
                ("call", 0, "f", [("number", 2, "1"), ("string", 5, "a")], False),
                ("number", 10, "0"),
            ),
            "b",
        ),
        ("binary", 19, "*", ("number", 17, "2"), ("unary", 21, "-", ("name", 22, "x"))),
    )


def test_objects_take_names_or_expressions_as_keys_and_lines_as_separators() -> None:
    assert parse('{a = 1\n "b": [2,], (c) = 3}') == (
        "object",
        0,
        [
            (("key", 1, "a"), ("number", 5, "1")),
            (("string", 8, "b"), ("tuple", 13, [("number", 14, "2")])),
            (("name", 20, "c"), ("number", 25, "3")),
        ],
    )
    with pytest.raises(ParseError, match="expected ',', a new line or '}'"):
        parse("{a = 1 b = 2}")


@pytest.mark.parametrize(
    ("text", "what"),
    [("[for x in y: x]", "a for expression"), ("x[*]", "splat"), ("x.*", "splat")],
)
def test_what_no_reader_reads_is_a_construct(text: str, what: str) -> None:
    with pytest.raises(Construct, match=what):
        parse(text)


def test_comments_can_be_refused() -> None:
    assert parse("1 /* one */") == ("number", 0, "1")
    with pytest.raises(ParseError, match="a comment"):
        parse("1 /* one */", comments=False)


@pytest.mark.parametrize(
    "text",
    [
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        "f(" * 100_000,
        "1" + "+1" * 1_500,
        "-" * 100_000 + "1",
        "a ? b : " * 5_000 + "c",
        "x" + "[0]" * 1_000,
    ],
)
def test_nesting_past_the_limit_is_refused_saying_so(text: str) -> None:
    # Each of these once ended in a RecursionError; now a refusal naming the limit.
    with pytest.raises(ParseError, match=f"nests deeper than {MAX_DEPTH} levels"):
        parse(text)


def test_nesting_up_to_the_limit_is_read() -> None:
    depth = MAX_DEPTH - 1
    assert parse("[" * depth + "]" * depth)[0] == "tuple"
    assert parse("1" + "+1" * (MAX_DEPTH - 2))[0] == "binary"


def test_escapes() -> None:
    assert unescape(r"a\tb\"\u00e9\U0001F600") == 'a\tb"é😀'
    assert read_escape(r"x\n", 1) == ("\n", 3)
    for bad, message in [(r"\q", "invalid escape"), (r"\u12", "4 hex"), (r"\uD800", "Unicode")]:
        with pytest.raises(EscapeError, match=message):
            unescape(bad)
