"""``nomad-device-conformance``: arguments, output formats and exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
from support import CONFORMANCE_PLUGINS, SDK_PLUGIN

from nomad_device.testing.conformance.cli import main

# Each test runs the whole conformance suite, in-process or as the console script.
pytestmark = pytest.mark.slow

FIXTURES = CONFORMANCE_PLUGINS
SCRIPT = Path(sys.executable).parent / "nomad-device-conformance"


def _fixture(name: str) -> list[str]:
    return [sys.executable, str(FIXTURES / f"{name}.py")]


def test_console_script_passes_a_good_plugin() -> None:
    done = subprocess.run(
        [str(SCRIPT), "--", *_fixture("_widgets")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Nomad device plugin conformance: ")
    assert "  PASS  handshake" in done.stdout
    assert done.stdout.rstrip().endswith("CONFORMS")
    assert done.stderr == ""


def test_failure_exits_1_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--json", "--window", "1", "--", *_fixture("ends_stream")])
    assert code == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    failed = [r["id"] for r in data["results"] if r["status"] == "fail"]
    assert failed == ["fingerprint-stream-open"]


def test_warnings_do_not_fail(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--window", "1", "--", *_fixture("stdout_chatter")])
    out = capsys.readouterr().out
    assert code == 0
    assert "  WARN  stdout-quiet" in out
    assert "why: After the handshake line Nomad reads stdout only to throw it away" in out


def test_config_json_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"dir": "/srv/widgets", "widgets": 3}')
    code = main(["--window", "1", "--config-json", f"@{config}", "--", *_fixture("needs_config")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "the given JSON config accepted (twice)" in out


def test_config_msgpack_hex_is_sent_as_is(capsys: pytest.CaptureFixture[str]) -> None:
    raw = msgpack.packb({"dir": "/srv", "widgets": 2})
    code = main(
        ["--window", "1", "--config-msgpack-hex", raw.hex(), "--", *_fixture("needs_config")]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "the given config bytes accepted (twice)" in out


def test_bad_config_json_is_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["--window", "1", "--config-json", '{"dri": "/x"}', "--", *_fixture("needs_config")]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert 'No argument or block type is named "dri". Did you mean "dir"?' in " ".join(out.split())


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "give the plugin command after --"),
        (["--"], "give the plugin command after --"),
        (["--timeout", "0", "--", "x"], "--timeout must be positive"),
        (["--config-msgpack-hex", "zz", "--", "x"], "--config-msgpack-hex"),
        (["--config-json", "@/nonexistent/config.json", "--", "x"], "--config-json"),
        (["--config-json", "{}", "--config-msgpack-hex", "80", "--", "x"], "not allowed with"),
        (["--config", "a.hcl", "--config-json", "{}", "--", "x"], "not allowed with"),
        (["--plugin-name", "p", "--", "x"], "--plugin-name chooses a block of --config"),
        (["--config", "/nonexistent/agent.hcl", "--", "x"], "/nonexistent/agent.hcl: cannot read"),
        # No prefix of an option stands for another: --conf is no --config-json.
        (["--conf", "{}", "--", "x"], "unrecognized arguments"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_plugin_arguments_after_the_separator_are_not_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # "--json" after "--" belongs to the plugin command, not to us.
    code = main(["--timeout", "2", "--", sys.executable, "-c", "pass", "--json"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("Nomad device plugin conformance: ")
    assert "-c pass --json" in out.splitlines()[0]


# ------------------------------------------------------------- config from agent HCL

AGENT = """
data_dir = "/opt/nomad"

plugin "nomad-device-example" {
  config {
    dir = "/srv/devices"
  }
}

plugin "needs_config" {
  config {
    dir     = "/srv/widgets"
    widgets = 3
  }
}
"""


@pytest.mark.parametrize("flag", ["--config", "-c"])
def test_config_from_an_agent_file(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The block is chosen by the script's name (needs_config.py), as the launcher does."""
    agent = tmp_path / "agent.hcl"
    agent.write_text(AGENT)
    code = main(["--window", "1", flag, str(agent), "--", *_fixture("needs_config")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f'the config from plugin "needs_config" in {agent} accepted (twice)' in " ".join(
        out.split()
    )
    assert "0 skipped" in out


def test_plugin_name_chooses_the_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agent = tmp_path / "agent.hcl"
    agent.write_text(AGENT.replace('plugin "needs_config"', 'plugin "widgets"'))
    argv = ["--window", "1", "--config", str(agent), "--", *_fixture("needs_config")]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    said = 'no block for needs_config.py or needs_config; found "nomad-device-example", "widgets"'
    assert said in capsys.readouterr().err
    assert main(["--plugin-name", "widgets", *argv]) == 0, capsys.readouterr().out


def test_a_blocks_args_are_used_when_the_command_has_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = tmp_path / "agent.hcl"
    agent.write_text('plugin "sdk_plugin" {\n  args = ["async"]\n}\n')
    command = [sys.executable, str(SDK_PLUGIN)]
    code = main(["--window", "1", "--config", str(agent), "--", *command])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "plugin: sdk-test-async" in out
    assert main(["--window", "1", "--config", str(agent), "--", *command, "sync"]) == 0
    assert "plugin: sdk-test 1.2.3" in capsys.readouterr().out  # its own args win


def test_a_config_the_schema_refuses_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = tmp_path / "agent.hcl"
    agent.write_text('plugin "needs_config" {\n  config {\n    dri = "/x"\n  }\n}\n')
    code = main(["--window", "1", "--config", str(agent), "--", *_fixture("needs_config")])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1
    assert "FAIL set-config" in out
    assert "does not fit the schema (2 problem(s))" in out
    assert f'{agent}:3: Invalid label: No argument or block type is named "dri".' in out
    assert f'{agent}:2: Missing required argument: The argument "dir" is required' in out


# ---------------------------------------------------------- skipped checks and --strict


def test_required_settings_are_named_without_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--window", "1", "--", *_fixture("needs_config")])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert "the plugin needs operator config to run: 'dir' is required and has no default" in out


def test_skips_are_counted_in_the_verdict_and_fail_with_strict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--window", "1", "--", *_fixture("needs_config")]) == 0
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.endswith("CONFORMS ONLY IN PART: 9 of 19 checks skipped, which prove nothing")
    assert main(["--strict", "--window", "1", "--", *_fixture("needs_config")]) == 1
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.endswith("DOES NOT CONFORM: 9 of 19 checks skipped (--strict)")
    assert main(["--strict", "--json", "--window", "1", "--", *_fixture("needs_config")]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False


def test_strict_passes_a_complete_run(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--strict", "--window", "1", "--", *_fixture("_widgets")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.rstrip().endswith("0 skipped in " + out.rstrip().split(" skipped in ")[1])
    assert out.rstrip().endswith("-- CONFORMS")


def test_an_hcl_syntax_error_is_a_usage_error_in_plain_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = tmp_path / "agent.hcl"
    agent.write_text('plugin "needs_config" {\n  config {\n    dir = "/srv\n  }\n}\n')
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(agent), "--", *_fixture("needs_config")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    # The agent's own message (HCL 1's), then what to do about it.
    assert (
        f"{agent}:3: invalid HCL, the agent refuses to start: At 3:16: literal not terminated"
        in err
    )
    assert 'hint: a string is missing its closing "' in err
