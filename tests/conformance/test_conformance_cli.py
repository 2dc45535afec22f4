"""``nomad-device-conformance``: arguments, output formats and exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from nomad_device.testing.conformance.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
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
