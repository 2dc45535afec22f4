"""Decoding plugin config against its schema with Nomad's rules (pure logic, no plugin)."""

from __future__ import annotations

import pytest
from support.agentgen import TEMPLATED

from nomad_device.agentconfig import agentfile
from nomad_device.agentconfig.hcldec import (
    Decoded,
    SchemaError,
    compile_spec,
    decode,
    encode,
    from_python,
)
from nomad_device.wire import cty
from nomad_device.wire.hclspec import (
    Array,
    Attr,
    Block,
    BlockAttrs,
    BlockList,
    BlockMap,
    BlockSet,
    Default,
    Literal,
    Object,
    Spec,
)


def with_default(name: str, type_: str, literal: str) -> Default:
    return Default(Attr(name, type_), Literal(literal))


EXAMPLE = Object(
    {
        "dir": with_default("dir", "string", '"."'),
        "list_period": with_default("list_period", "string", '"5s"'),
        "unhealthy_perm": with_default("unhealthy_perm", "string", '"-rwxrwxrwx"'),
    }
)


def decode_hcl(spec: Spec, body: str, origin: str = "agent.hcl") -> Decoded:
    text = f'plugin "p" {{\n  config {{\n{body}\n  }}\n}}\n'
    block = agentfile.parse_agent_text(text, origin).select(["p"], None)
    return decode(compile_spec(spec), block.config)


def errors(decoded: Decoded, origin: str = "agent.hcl") -> list[str]:
    return [d.render(origin) for d in decoded.diagnostics]


def one_error(decoded: Decoded) -> str:
    found = errors(decoded)
    assert len(found) == 1, found
    return found[0]


# ------------------------------------------------------------------ defaults


def test_defaults_come_from_the_literals() -> None:
    decoded = decode(compile_spec(EXAMPLE), None)
    assert decoded.ok
    assert decoded.value == {"dir": ".", "list_period": "5s", "unhealthy_perm": "-rwxrwxrwx"}


def test_given_values_replace_defaults() -> None:
    decoded = decode_hcl(EXAMPLE, 'dir = "/srv"')
    assert decoded.value == {"dir": "/srv", "list_period": "5s", "unhealthy_perm": "-rwxrwxrwx"}


def test_json_null_takes_the_default() -> None:
    decoded = decode(compile_spec(EXAMPLE), from_python({"dir": None}))
    assert decoded.ok
    assert decoded.value["dir"] == "."  # type: ignore[index]


def test_hcl_null_is_refused_as_the_agent_refuses_it() -> None:
    # HCL 1 has no null: the agent's parser stops at the word, and so do we.
    with pytest.raises(agentfile.ConfigFileError) as raised:
        decode_hcl(EXAMPLE, "    dir = null")
    message = str(raised.value)
    assert message.startswith("agent.hcl:3: invalid HCL, the agent refuses to start: At 3:11: ")
    assert "Unknown token: 3:11 IDENT null" in message
    assert "hint: HCL 1 has no null: leave the setting out to get its default" in message


def test_a_literal_default_keeps_its_own_type() -> None:
    # hcldec does not convert a Default's literal: a number literal for a string
    # attribute travels as a number.
    spec = Object({"n": with_default("n", "string", "5")})
    decoded = decode(compile_spec(spec), None)
    assert decoded.value == {"n": 5}
    assert decoded.type == cty.Object({"n": cty.NUMBER})
    assert encode(decoded) == bytes.fromhex("81 a1 6e 05")


def test_absent_optional_attribute_is_null() -> None:
    spec = Object({"name": Attr("name", "string"), "tags": Attr("tags", "list(string)")})
    decoded = decode(compile_spec(spec), None)
    assert decoded.value == {"name": None, "tags": None}
    assert encode(decoded) == bytes.fromhex("82 a4 6e616d65 c0 a4 74616773 c0")


def test_implied_attribute_names_come_from_the_object_keys() -> None:
    spec = Object({"speed": Attr("", "number")})
    assert decode_hcl(spec, "speed = 3").value == {"speed": 3}


# --------------------------------------------------------------- conversions


@pytest.mark.parametrize(
    ("type_", "hcl", "expected"),
    [
        ("number", '"3"', 3),
        ("number", '"2.5"', 2.5),
        ("number", '"1e3"', 1000),
        ("string", "5", "5"),
        ("string", "2.5", "2.5"),
        ("string", "1e21", "1000000000000000000000"),
        ("string", "true", "true"),
        ("bool", '"true"', True),
        ("bool", '"0"', False),
        ("list(number)", '["1", 2]', [1, 2]),
        ("list(string)", "[1, true]", ["1", "true"]),
        ("set(string)", '["b", "a", "b"]', ["b", "a", "b"]),
        ("list(any)", '["a", 1]', ["a", "1"]),
        ("tuple([string, number])", '[1, "2"]', ["1", 2]),
        ("any", '"x"', "x"),
    ],
)
def test_attribute_values_convert_like_go_cty(type_: str, hcl: str, expected: object) -> None:
    decoded = decode_hcl(Object({"v": Attr("v", type_)}), f"v = {hcl}")
    assert decoded.ok, errors(decoded)
    assert decoded.value == {"v": expected}


@pytest.mark.parametrize(
    ("type_", "hcl", "message"),
    [
        ("number", '"abc"', "a number is required"),
        ("bool", '"yes"', "a bool is required"),
        ("bool", '"True"', 'a bool is required; to convert from string, use lowercase "true"'),
        ("bool", "1", "bool required, but have number"),
        ("number", "true", "number required, but have bool"),
        ("string", "[1]", "string required, but have tuple"),
        ("list(number)", "5", "list of number required, but have number"),
        ("map(number)", "[1]", "map of number required"),
        ("list(number)", "[[1]]", "element 0: number required, but have tuple"),
        ("list(any)", "[1, true]", "all list elements must have the same type"),
    ],
)
def test_conversion_errors_use_go_ctys_words(type_: str, hcl: str, message: str) -> None:
    decoded = decode_hcl(Object({"v": Attr("v", type_)}), f"    v = {hcl}")
    assert one_error(decoded) == (
        f'agent.hcl:3: Incorrect attribute value type: Inappropriate value for attribute "v": '
        f"{message}."
    )


def test_a_map_attribute_cannot_be_set_from_an_agent_file() -> None:
    # HCL 1 (the agent's parser) reads `m = { ... }` as a list of one object, so
    # Nomad refuses it for a map attribute; the launcher says so and explains.
    decoded = decode_hcl(Object({"m": Attr("m", "map(string)")}), '    m = { a = "b" }')
    message = one_error(decoded)
    assert message.startswith(
        'agent.hcl:3: Incorrect attribute value type: Inappropriate value for attribute "m": '
        "map of string required."
    )
    assert "hint: Nomad's agent configuration reads" in message


def test_an_any_attribute_gets_the_list_hcl1_makes_of_an_object() -> None:
    decoded = decode_hcl(Object({"m": Attr("m", "any")}), "m = { a = 1 }")
    assert decoded.value == {"m": [{"a": 1}]}
    assert encode(decoded) == bytes.fromhex("81 a1 6d 91 81 a1 61 01")


def test_objects_inside_lists_stay_objects() -> None:
    spec = Object({"l": Attr("l", "list(object({a = number}))")})
    decoded = decode_hcl(spec, 'l = [{ a = "1" }, { a = 2 }]')
    assert decoded.ok, errors(decoded)
    assert decoded.value == {"l": [{"a": 1}, {"a": 2}]}


def test_a_repeated_attribute_keeps_the_last_value() -> None:
    decoded = decode_hcl(Object({"v": Attr("v", "number")}), "v = 1\nv = 2")
    assert decoded.value == {"v": 2}


def test_repeated_list_attributes_add_up_as_in_hcl1() -> None:
    decoded = decode_hcl(Object({"v": Attr("v", "list(number)")}), "v = [1]\nv = [2, 3]")
    assert decoded.value == {"v": [1, 2, 3]}


# ------------------------------------------------------------------ required


def test_missing_required_argument() -> None:
    spec = Object({"token": Attr("token", "string", required=True)})
    assert one_error(decode_hcl(spec, "")) == (
        'agent.hcl:2: Missing required argument: The argument "token" is required, but no '
        "definition was found."
    )


def test_missing_required_argument_without_any_config() -> None:
    spec = Object({"token": Attr("token", "string", required=True)})
    decoded = decode(compile_spec(spec), None)
    assert [d.text() for d in decoded.diagnostics] == [
        'Missing required argument: The argument "token" is required, but no definition was found.'
    ]


# ------------------------------------------------------------------- unknown


def test_unknown_keys_are_rejected_in_nomads_words() -> None:
    decoded = decode_hcl(EXAMPLE, '    dri = "/srv"\n    colour = "red"')
    assert errors(decoded) == [
        'agent.hcl:3: Invalid label: No argument or block type is named "dri". Did you mean "dir"?',
        'agent.hcl:4: Invalid label: No argument or block type is named "colour".',
    ]


def test_unknown_blocks_are_rejected_too() -> None:
    decoded = decode_hcl(EXAMPLE, "    extra {\n      a = 1\n    }")
    assert errors(decoded) == [
        'agent.hcl:3: Invalid label: No argument or block type is named "extra".'
    ]


def test_comment_keys_are_ignored_in_json_bodies() -> None:
    decoded = decode(compile_spec(EXAMPLE), from_python({"//": "a note", "dir": "/x"}))
    assert decoded.ok


# -------------------------------------------------------------------- blocks

LIMITS = Object(
    {
        "limits": Block(
            "limits",
            Object(
                {
                    "max": Attr("max", "number", required=True),
                    "mode": with_default("mode", "string", '"fast"'),
                }
            ),
        )
    }
)


def test_a_block_decodes_with_its_nested_spec() -> None:
    decoded = decode_hcl(LIMITS, "limits {\n  max = 3\n}")
    assert decoded.value == {"limits": {"max": 3, "mode": "fast"}}


def test_an_absent_block_is_null() -> None:
    assert decode_hcl(LIMITS, "").value == {"limits": None}


def test_errors_inside_blocks_point_at_their_line() -> None:
    decoded = decode_hcl(LIMITS, "    limits {\n      max = 3\n      speed = 1\n    }")
    assert errors(decoded) == [
        'agent.hcl:5: Invalid label: No argument or block type is named "speed".'
    ]


def test_duplicate_block() -> None:
    decoded = decode_hcl(
        LIMITS, "    limits {\n      max = 1\n    }\n    limits {\n      max = 2\n    }"
    )
    assert errors(decoded) == [
        'agent.hcl:6: Duplicate limits block: Only one block of type "limits" is allowed. '
        "Previous definition was at line 3."
    ]


def test_missing_required_block() -> None:
    spec = Object({"limits": Block("limits", Object({}), required=True)})
    assert one_error(decode_hcl(spec, "")) == (
        'agent.hcl:2: Missing limits block: A block of type "limits" is required here.'
    )


def test_a_block_given_as_a_string_is_refused() -> None:
    decoded = decode_hcl(LIMITS, '    limits = "big"')
    assert errors(decoded) == [
        "agent.hcl:3: Incorrect JSON value type: Either a JSON object or a JSON array is "
        'required, representing the contents of one or more "limits" blocks.'
    ]


RULES = Object({"rule": BlockList("rule", Object({"path": Attr("path", "string", True)}), 1, 2)})


def test_block_list() -> None:
    decoded = decode_hcl(RULES, 'rule {\n path = "/a"\n}\nrule {\n path = "/b"\n}')
    assert decoded.value == {"rule": [{"path": "/a"}, {"path": "/b"}]}


def test_block_list_bounds() -> None:
    assert one_error(decode_hcl(RULES, "")) == (
        'agent.hcl:2: Insufficient rule blocks: At least 1 "rule" blocks are required.'
    )
    body = "\n".join(f'    rule {{\n      path = "/{i}"\n    }}' for i in range(3))
    assert one_error(decode_hcl(RULES, body)) == (
        'agent.hcl:9: Too many rule blocks: No more than 2 "rule" blocks are allowed'
    )


def test_empty_block_list_is_an_empty_list() -> None:
    spec = Object({"rule": BlockList("rule", Object({"a": Attr("a", "string")}))})
    decoded = decode(compile_spec(spec), None)
    assert decoded.value == {"rule": []}
    assert encode(decoded) == bytes.fromhex("81 a4 72756c65 90")


def test_block_set_drops_duplicates_when_encoded() -> None:
    spec = Object({"tag": BlockSet("tag", Object({"v": Attr("v", "string")}))})
    decoded = decode_hcl(spec, 'tag {\n v = "b"\n}\ntag {\n v = "a"\n}\ntag {\n v = "b"\n}')
    assert decoded.type == cty.Object({"tag": cty.Set(cty.Object({"v": cty.STRING}))})
    # a set of two objects, in cty's order for them
    assert encode(decoded).startswith(bytes.fromhex("81 a3 746167 92"))


def test_block_map_with_labels() -> None:
    spec = Object(
        {"device": BlockMap("device", ["vendor", "model"], Object({"n": Attr("n", "number")}))}
    )
    body = 'device "acme" "x1" {\n n = 1\n}\ndevice "acme" "x2" {\n n = 2\n}'
    decoded = decode_hcl(spec, body)
    assert decoded.ok, errors(decoded)
    assert decoded.value == {"device": {"acme": {"x1": {"n": 1}, "x2": {"n": 2}}}}
    assert decoded.type == cty.Object({"device": cty.Map(cty.Map(cty.Object({"n": cty.NUMBER})))})


def test_block_map_duplicate_labels() -> None:
    spec = Object({"device": BlockMap("device", ["name"], Object({}))})
    decoded = decode_hcl(spec, '    device "a" {\n    }\n    device "a" {\n    }')
    assert errors(decoded) == [
        'agent.hcl:5: Duplicate device block: A block for device "a" was already defined. '
        "The device labels must be unique."
    ]


def test_block_attrs() -> None:
    spec = Object({"env": BlockAttrs("env", "string")})
    decoded = decode_hcl(spec, 'env {\n  A = "1"\n  B = 2\n}')
    assert decoded.value == {"env": {"A": "1", "B": "2"}}
    bad = decode_hcl(
        Object({"env": BlockAttrs("env", "number")}), '    env {\n      A = "x"\n    }'
    )
    assert errors(bad) == [
        'agent.hcl:4: Invalid attribute value: Invalid value for attribute of "env" block: '
        "a number is required."
    ]


def test_array_root_builds_a_tuple() -> None:
    spec = Array([Attr("a", "string"), Literal("1")])
    decoded = decode(compile_spec(spec), from_python({"a": "x"}))
    assert decoded.value == ["x", 1]
    assert decoded.type == cty.Tuple([cty.STRING, cty.NUMBER])


# ----------------------------------------------------------------- templates


def test_interpolation_is_refused_with_the_agents_message_and_the_line() -> None:
    # HCL 1 passes "${...}" through; the agent's JSON body evaluates it as a template
    # with functions but no variables.
    decoded = decode_hcl(EXAMPLE, '    dir = "${env.HOME}"')
    assert [d.text() for d in decoded.diagnostics] == [
        "Variables not allowed: Variables may not be used here."
    ]
    assert (
        decoded.diagnostics[0]
        .render("agent.hcl")
        .startswith("agent.hcl:3: Variables not allowed: Variables may not be used here.\n  hint: ")
    )


@pytest.mark.parametrize(
    ("body", "name", "value"),
    [
        ('label = "${upper("kvm")}"', "label", "KVM"),
        ('label = "x${lower("AB")}-${strlen("abc")}"', "label", "xab-3"),
        ('label = "${substr("abcdef", -2, -1)}"', "label", "ef"),
        ('label = "${substr("abcdef", -10, 2)}"', "label", "ab"),
        ('label = "${reverse("añb")}"', "label", "bña"),
        ('label = "${upper("é")}"', "label", "É"),
        ('label = "${coalesce(null, 1)}"', "label", "1"),
        (
            'label = "${jsonencode({b = [1.50, "<"], a = null})}"',
            "label",
            '{"a":null,"b":[1.5,"\\u003c"]}',
        ),
        ('label = "${true ? "yes" : 1}"', "label", "yes"),
        ('label = "${1 == "1"}"', "label", "false"),
        ('count = "${max(1, "7", 3)}"', "count", 7),
        ('count = "${int(-2.7) * 3 + abs(-1)}"', "count", -5),
        ('ratio = "${7 / 2}"', "ratio", 3.5),
        ('ratio = "${min(2.25, 10)}"', "ratio", 2.25),
        ('count = "${length(concat(["a"], ["b", "c"]))}"', "count", 3),
        (
            'paths = "${concat(["/dev/kvm"], ["/dev/net/tun"])}"',
            "paths",
            ["/dev/kvm", "/dev/net/tun"],
        ),
        ('paths = "${jsondecode("[\\"/dev/kvm\\"]")}"', "paths", ["/dev/kvm"]),
        ('env = "${{"x" = 1, b = true}}"', "env", {"x": "1", "b": "true"}),
        ('on = "${hasindex(["a"], 0) && !false}"', "on", True),
        ('label = "${["a", "b"][1]}${{a = "x"}.a}${[["q"]][0][0]}"', "label", "bxq"),
    ],
)
def test_templates_are_evaluated_as_the_agent_evaluates_them(
    body: str, name: str, value: object
) -> None:
    # Each was checked against the Go cross-check (interop/bin/agentcfg): same bytes.
    decoded = decode_hcl(TEMPLATED, body)
    assert not decoded.diagnostics, errors(decoded)
    assert decoded.value[name] == value  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "summary"),
    [
        ('label = "${nope("x")}"', "Call to unknown function"),
        ('label = "${upper(null)}"', "Invalid function argument"),
        ('label = "${upper("a", "b")}"', "Too many function arguments"),
        ('label = "${substr("abc", 1)}"', "Not enough function arguments"),
        ('label = "${max()}"', "Error in function call"),
        ('label = "${length("abc")}"', "Error in function call"),
        ('label = "${jsondecode("nope")}"', "Error in function call"),
        ('label = "a${null}b"', "Invalid template interpolation value"),
        ('label = "a${["x"]}b"', "Invalid template interpolation value"),
        ('label = "${false ? 1 : true}"', "Inconsistent conditional result types"),
        ('label = "${null ? 1 : 2}"', "Null condition"),
    ],
)
def test_a_failing_template_gets_the_agents_summary(body: str, summary: str) -> None:
    decoded = decode_hcl(TEMPLATED, body)
    assert [d.summary for d in decoded.diagnostics] == [summary]


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("${0.1 + 0.2}", "0.1, which go-cty rounds to 512 binary digits"),
        ("${1 / 3}", "its result is rounded by go-cty to 512 binary digits"),
        ("${7.5 % 2}", "the % operator with fractions"),
        ("${7 / 0}", "a division by zero"),
        ("${-0 * 1}", "a zero result whose sign go-cty keeps"),
        ("${[1][*]}", "a splat expression"),
        ("%{if true}x%{endif}", "a template directive"),
        ('${upper("ß")}', "upper() of 'ß', which Go maps by its own Unicode tables"),
        ('${strlen("x\\u0301")}', "part of a larger character"),
        ('${concat(jsondecode("[1]"), [for x in [1]: x])}', "a for expression"),
    ],
)
def test_what_the_launcher_cannot_reproduce_exactly_is_refused_saying_what(
    template: str, why: str
) -> None:
    # The agent accepts each of these; the launcher refuses rather than guess its result.
    decoded = decode_hcl(TEMPLATED, f'label = "{template}"')
    assert [d.summary for d in decoded.diagnostics] == ["Unsupported template"]
    assert why in decoded.diagnostics[0].detail, decoded.diagnostics[0].detail
    assert "Write the resulting value instead" in decoded.diagnostics[0].detail


def test_escaped_interpolation_is_literal_text() -> None:
    decoded = decode_hcl(EXAMPLE, 'dir = "/srv/$${name}"')
    assert decoded.value["dir"] == "/srv/${name}"  # type: ignore[index]


def test_json_strings_are_templates_too() -> None:
    decoded = decode(compile_spec(EXAMPLE), from_python({"dir": "${x}"}))
    assert [d.summary for d in decoded.diagnostics] == ["Variables not allowed"]
    decoded = decode(compile_spec(EXAMPLE), from_python({"dir": "$${x}"}))
    assert decoded.value["dir"] == "${x}"  # type: ignore[index]


def test_heredocs_and_escapes() -> None:
    spec = Object({"a": Attr("a", "string"), "b": Attr("b", "string"), "c": Attr("c", "string")})
    body = (
        'a = "tab\\tquote\\" \\u00e9"\n'
        "b = <<EOT\nline 1\nline 2\nEOT\n"
        "c = <<-EOT\n    x\n      y\n    EOT"
    )
    decoded = decode_hcl(spec, body)
    assert decoded.value == {"a": 'tab\tquote" é', "b": "line 1\nline 2\n", "c": "x\n  y\n"}


# ---------------------------------------------------------------------- json


def test_json_config_is_the_body_itself() -> None:
    spec = Object({"n": Attr("n", "number"), "limits": LIMITS.attributes["limits"]})
    decoded = decode(
        compile_spec(spec), agentfile.load_json_config('{"n": "7", "limits": {"max": 1}}')
    )
    assert decoded.value == {"n": 7, "limits": {"max": 1, "mode": "fast"}}


def test_json_errors_name_the_key_path() -> None:
    body = agentfile.load_json_config('{"limits": {"max": "x"}}')
    decoded = decode(compile_spec(LIMITS), body)
    assert [d.render("--config-json") for d in decoded.diagnostics] == [
        "--config-json: limits.max: Incorrect attribute value type: Inappropriate value for "
        'attribute "max": a number is required.'
    ]


def test_json_numbers_keep_full_precision() -> None:
    body = agentfile.load_json_config('{"n": 0.1000000000000000000001}')
    decoded = decode(compile_spec(Object({"n": Attr("n", "number")})), body)
    assert encode(decoded) == b"\x81\xa1n" + b"\xb8" + b"0.1000000000000000000001"


# -------------------------------------------------------------------- schema


def test_a_bad_type_expression_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        compile_spec(Object({"a": Attr("a", "strang")}))


def test_a_bad_literal_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        compile_spec(Object({"a": Default(Attr("a", "string"), Literal("nope("))}))
