"""Reading agent-style config files: plugin blocks, args, bare config, errors, the extra."""

from __future__ import annotations

import builtins
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from nomad_device.agentconfig import agentfile
from nomad_device.agentconfig.hcldec import JValue

AGENT = """
data_dir = "/opt/nomad"

client {
  enabled = true
}

plugin "nomad-device-example" {
  args = ["-v", "--fast"]
  config {
    dir = "/srv/devices"
  }
}

plugin "other" {
  config = {
    dir = "/elsewhere"
  }
}
"""


def plain(value: JValue | None) -> object:
    if value is None:
        return None
    if value.kind == "object":
        return {p.name: plain(p.value) for p in value.props}
    if value.kind == "array":
        return [plain(i) for i in value.items]
    return value.value


def test_selects_the_block_named_after_the_executable() -> None:
    agent = agentfile.parse_agent_text(AGENT, "agent.hcl")
    block = agent.select(["/usr/lib/nomad/plugins/nomad-device-example"], None)
    assert block.name == "nomad-device-example"
    assert block.args == ["-v", "--fast"]
    assert plain(block.config) == {"dir": "/srv/devices"}


def test_selects_by_name_and_accepts_config_as_an_attribute() -> None:
    block = agentfile.parse_agent_text(AGENT, "agent.hcl").select(["x"], "other")
    assert plain(block.config) == {"dir": "/elsewhere"}
    assert block.args is None


def test_ambiguous_or_unknown_plugin_blocks_are_errors() -> None:
    agent = agentfile.parse_agent_text(AGENT, "agent.hcl")
    with pytest.raises(agentfile.ConfigFileError, match="choose one with --plugin-name"):
        agent.select(["./mystery"], None)
    with pytest.raises(agentfile.ConfigFileError, match="no plugin block named 'nope'"):
        agent.select(["./mystery"], "nope")


def test_a_single_block_named_otherwise_is_not_taken() -> None:
    # The agent skips it (one WARN) and starts the plugin with no config: so do we not.
    text = 'plugin "nomad-device-generics" {\n  config {\n    dir = "/x"\n  }\n}\n'
    agent = agentfile.parse_agent_text(text, "agent.hcl")
    with pytest.raises(agentfile.ConfigFileError) as refused:
        agent.select(["/opt/nomad/plugins/nomad-device-generic"], None)
    assert str(refused.value).startswith(
        'agent.hcl: no block for nomad-device-generic; did you mean "nomad-device-generics"?'
    )
    assert agent.select(["./nomad-device-generic"], "nomad-device-generics").name


def test_bare_config_block() -> None:
    block = agentfile.parse_agent_text('config {\n  dir = "/x"\n}\n').select(["./p"], None)
    assert block.name is None
    assert plain(block.config) == {"dir": "/x"}


def test_plugin_block_without_config_means_defaults() -> None:
    block = agentfile.parse_agent_text('plugin "p" {\n  args = ["a"]\n}\n').select(["p"], None)
    assert block.config is None
    assert block.args == ["a"]


def test_a_file_without_plugin_or_config_is_an_error() -> None:
    with pytest.raises(agentfile.ConfigFileError, match="neither a plugin"):
        agentfile.parse_agent_text('data_dir = "/x"\n', "agent.hcl").select(["p"], None)


def test_hcl1_shapes_blocks_as_lists() -> None:
    text = """
    config {
      one { a = 1 }
      one { a = 2 }
      obj = { b = { c = 3 } }
      lst = [{ d = { e = 4 } }]
      lab "x" "y" { f = 5 }
    }
    """
    block = agentfile.parse_agent_text(text).select(["p"], None)
    assert plain(block.config) == {
        "one": [{"a": 1}, {"a": 2}],
        "obj": [{"b": [{"c": 3}]}],
        "lst": [{"d": [{"e": 4}]}],
        "lab": [{"x": [{"y": [{"f": 5}]}]}],
    }


def test_lines_are_kept_for_messages() -> None:
    text = 'plugin "p" {\n  config {\n    a = 1\n    b {\n    }\n  }\n}\n'
    config = agentfile.parse_agent_text(text).select(["p"], None).config
    assert config is not None
    assert [(p.name, p.where.line) for p in config.props] == [("a", 3), ("b", 4)]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("a = b", r"agent\.hcl:3: invalid HCL.*At 3:9: Unknown token: 3:9 IDENT b"),
        ('a = upper("x")', r"agent\.hcl:3: .*At 3:9: Unknown token: 3:9 IDENT upper"),
        ("a = 1 + 2", r"agent\.hcl:3: .*got: ADD"),
        (
            "a = 99999999999999999999",
            r"agent\.hcl: the agent refuses to start: failed to decode HCL file: "
            r'strconv\.ParseInt: parsing "99999999999999999999": value out of range',
        ),
        ('a = "\\q"', r"agent\.hcl:3: .*At 3:11: illegal char escape"),
    ],
)
def test_what_the_agent_refuses_is_reported_with_its_message(body: str, message: str) -> None:
    text = f'plugin "p" {{\n  config {{\n    {body}\n  }}\n}}\n'
    with pytest.raises(agentfile.ConfigFileError, match=message):
        agentfile.parse_agent_text(text, "agent.hcl")


def test_hcl1_reads_what_hcl2_would_not() -> None:
    # Quoted keys, hex and octal numbers, dotted names and "1." are all HCL 1.
    text = 'config {\n  "my-key" = 0x10\n  oct = 017\n  a.b = 1.\n  t = true\n}\n'
    block = agentfile.parse_agent_text(text).select(["p"], None)
    assert plain(block.config) == {"my-key": 16, "oct": 15, "a.b": Decimal("1.0"), "t": True}


def test_repeated_keys_merge_as_hcl1_merges_them() -> None:
    # Lists and blocks add up; a later scalar replaces an earlier one, read as the
    # earlier one's Go type ("5" stays a string; a word where a number was fails).
    text = 'config {\n  l = [1]\n  l = [2]\n  s = "x"\n  s = 5\n  b { x = 1 }\n  b { x = 2 }\n}\n'
    block = agentfile.parse_agent_text(text).select(["p"], None)
    assert plain(block.config) == {"l": [1, 2], "s": "5", "b": [{"x": 1}, {"x": 2}]}
    with pytest.raises(agentfile.ConfigFileError, match=r'ParseInt: parsing "x": invalid syntax'):
        agentfile.parse_agent_text('config {\n  n = 1\n  n = "x"\n}\n')


def test_repeated_config_blocks_merge_key_by_key() -> None:
    text = (
        'plugin "p" {\n  config {\n    a = "1"\n    l = ["x"]\n  }\n'
        '  config {\n    a = "2"\n    b = true\n    l = ["y"]\n  }\n}\n'
    )
    block = agentfile.parse_agent_text(text).select(["p"], None)
    assert plain(block.config) == {"a": "2", "l": ["x", "y"], "b": True}


def test_a_second_plugin_block_with_the_same_label_replaces_the_first_whole() -> None:
    text = (
        'plugin "p" {\n  args = ["-v"]\n  config {\n    a = 1\n    b = 2\n  }\n}\n'
        'plugin "p" {\n  config {\n    a = 3\n  }\n}\n'
    )
    agent = agentfile.parse_agent_text(text, "agent.hcl")
    block = agent.select(["p"], None)
    assert (block.args, plain(block.config), block.line, block.shadowed) == (None, {"a": 3}, 8, [1])
    assert agent.warnings == [
        'agent.hcl:1: plugin "p" is given again at line 8; the agent uses only the last '
        "block, whole"
    ]


def test_keys_a_plugin_block_does_not_know_are_ignored_by_the_agent_with_a_warning() -> None:
    agent = agentfile.parse_agent_text('plugin "p" {\n  arg = ["x"]\n}\n', "agent.hcl")
    assert agent.select(["p"], None).args is None
    assert agent.warnings == [
        'agent.hcl:1: plugin "p": the agent ignores "arg" (did you mean "args"?)'
    ]
    # HCL 1 reads numbers in args as their text.
    agent = agentfile.parse_agent_text('plugin "p" {\n  args = [1, true]\n}\n', "agent.hcl")
    assert agent.select(["p"], None).args == ["1", "true"]


# ------------------------------------------------------------ JSON agent files

NESTED_JSON = '{"plugin": {"p": {"config": {"device": {"kvm": {"paths": ["/dev/kvm"]}}}}}}'


def test_a_json_agent_file_in_the_list_of_objects_form() -> None:
    text = (
        '{"plugin": [{"p": [{"args": ["-v"], "config": [{"device": [{"kvm": [{"share": 4}]}]}]}]}]}'
    )
    block = agentfile.parse_agent_text(text, "agent.json").select(["p"], None)
    assert block.args == ["-v"]
    assert plain(block.config) == {"device": [{"kvm": [{"share": 4}]}]}


def test_a_json_agent_file_with_a_flat_config_in_the_nested_object_form() -> None:
    text = '{"plugin": {"p": {"config": {"dir": "/srv", "n": 1.5, "off": null}}}}'
    block = agentfile.parse_agent_text(text, "agent.json").select(["p"], None)
    # JSON's null reads as an empty string in HCL 1.
    assert plain(block.config) == {"dir": "/srv", "n": Decimal("1.5"), "off": ""}


def test_nested_objects_in_a_json_agent_file_are_read_as_labels_and_refused() -> None:
    with pytest.raises(agentfile.ConfigFileError) as raised:
        agentfile.parse_agent_text(NESTED_JSON, "agent.json")
    assert raised.value.agent == "unexpected keys device, kvm"
    assert str(raised.value).startswith(
        "agent.json: the agent refuses to start: unexpected keys device, kvm\n  hint: "
    )
    assert '"device": [{"kvm": [{"paths": ["/dev/kvm"]}]}]' in str(raised.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(agentfile.ConfigFileError, match="cannot read"):
        agentfile.parse_agent_file(tmp_path / "nope.hcl")


def test_json_config() -> None:
    assert plain(agentfile.load_json_config('{"a": [1, {"b": null}]}')) == {"a": [1, {"b": None}]}
    with pytest.raises(agentfile.ConfigFileError, match="must be a JSON object"):
        agentfile.load_json_config("[1]")
    with pytest.raises(agentfile.ConfigFileError, match="invalid JSON"):
        agentfile.load_json_config("{")


def test_json_config_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"dir": "/x"}')
    assert plain(agentfile.load_json_config(f"@{path}")) == {"dir": "/x"}


def test_agent_files_need_no_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # HCL 1 is the SDK's own reader; python-hcl2 (the cli extra) is for job files only.
    real_import = builtins.__import__

    def fake_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "hcl2" or name.startswith("hcl2."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    assert plain(agentfile.parse_agent_text("config {\n a = 1\n}\n").select([], None).config) == {
        "a": 1
    }


# ------------------------------------------------------- which block is the plugin's

MULTI = """
plugin "license_seats" {
  config {
    seats = 3
  }
}

plugin "nomad-device-example" {
  config {
    dir = "/srv/devices"
  }
}
"""


@pytest.mark.parametrize(
    "command",
    [
        # The launcher runs a .py file that is not executable with this Python.
        ["/usr/bin/python3", "/home/me/license_seats.py"],
        ["/venv/bin/python3.11", "-u", "license_seats.py", "--flag"],
        ["python", "-X", "dev", "./license_seats.py"],
        ["./license_seats.py"],
        ["/opt/nomad/plugins/license_seats"],
        ["python3", "-m", "license_seats"],
    ],
)
def test_a_python_plugin_gets_the_block_named_after_its_script(command: list[str]) -> None:
    block = agentfile.parse_agent_text(MULTI, "multi.hcl").select(command, None)
    assert block.name == "license_seats"
    assert plain(block.config) == {"seats": 3}


def test_the_exact_file_name_wins_over_the_name_without_py() -> None:
    text = MULTI + 'plugin "license_seats.py" {\n  config {\n    seats = 9\n  }\n}\n'
    block = agentfile.parse_agent_text(text).select(["python3", "license_seats.py"], None)
    assert block.name == "license_seats.py"
    # A block named after the file without .py is not taken for a file without it.
    block = agentfile.parse_agent_text(text).select(["./license_seats"], None)
    assert block.name == "license_seats"


def test_an_ambiguous_python_plugin_names_the_script_not_the_interpreter() -> None:
    agent = agentfile.parse_agent_text(MULTI, "multi.hcl")
    with pytest.raises(agentfile.ConfigFileError) as failed:
        agent.select(["/usr/bin/python3", "other.py"], None)
    assert 'no block for other.py or other; found "license_seats", "nomad-device-example"' in (
        str(failed.value)
    )
    assert "python3" not in str(failed.value)


def test_nomad_strips_exe_from_the_file_name() -> None:
    block = agentfile.parse_agent_text(MULTI).select([r"nomad-device-example.exe"], None)
    assert block.name == "nomad-device-example"
