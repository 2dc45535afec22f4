"""The launcher's ``config`` on agent files, end to end: what a Nomad agent would do.

The issue 17 config decodes and is accepted; a config that would crash an agent
is refused with what to write; an unsafe schema is flagged before any config
is written; JSON agent files, duplicate plugin labels and repeated config
blocks are read as the agent reads them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgpack
from launcher_support import ROOT, run_cli

GENERIC = [sys.executable, "-m", "nomad_device.plugins.generic"]
UNSAFE = [sys.executable, str(ROOT / "tests" / "conformance" / "fixtures" / "unsafe_schema.py")]

ISSUE_17 = """
plugin "nomad-device-generic" {
  config {
    device "serial" {
      usb {
        vendor_id  = "1a86"
        product_id = "7523"
      }
    }
    device "kvm" {
      paths = ["/dev/kvm"]
      share = 4
    }
  }
}
"""


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _config(result_stdout: str) -> dict[str, object]:
    data: dict[str, object] = json.loads(result_stdout)
    return data


def test_the_issue_17_config_is_accepted_with_the_agents_bytes(tmp_path: Path) -> None:
    agent = _write(tmp_path / "agent.hcl", ISSUE_17)
    result = run_cli(
        "config",
        "--json",
        "--config",
        agent,
        "--plugin-name",
        "nomad-device-generic",
        "--",
        *GENERIC,
    )
    assert result.returncode == 0, result.stderr
    sent = msgpack.unpackb(bytes.fromhex(str(_config(result.stdout)["Msgpack"])), raw=False)
    assert sent["device"]["kvm"]["paths"] == ["/dev/kvm"]
    assert sent["device"]["serial"]["paths"] is None
    assert sent["device"]["serial"]["usb"][0]["vendor_id"] == "1a86"
    assert "can crash" not in result.stderr


def test_a_config_that_would_crash_the_agent_is_refused_with_what_to_write(
    tmp_path: Path,
) -> None:
    agent = _write(
        tmp_path / "agent.hcl",
        'plugin "unsafe_schema" {\n  config {\n    slot "a" {\n      names = ["x"]\n    }\n'
        '    slot "b" {}\n  }\n}\n',
    )
    result = run_cli("config", "--config", agent, "--", *UNSAFE)
    assert result.returncode == 1
    err = " ".join(result.stderr.split())
    assert "a Nomad agent given this config would crash" in err
    assert 'slot "a" and slot "b" decode to values of different types at names' in err
    assert 'Write names = [] in slot "b"' in err


def test_an_unsafe_schema_is_flagged_before_any_config_is_written() -> None:
    result = run_cli("info", "--", *UNSAFE)
    assert result.returncode == 0, result.stderr
    assert "warning: this plugin's schema can crash a Nomad agent on some configs: slot.names" in (
        result.stderr
    )
    assert 'slot "a" {\n      names = ["x"]\n    }\n    slot "b" {' in result.stderr
    assert "can crash" not in run_cli("info", "--", *GENERIC).stderr


def test_json_agent_files_in_hcl1s_forms(tmp_path: Path) -> None:
    listed = _write(
        tmp_path / "list.json",
        '{"plugin": [{"nomad-device-generic": [{"config": [{"device": '
        '[{"kvm": [{"paths": ["/dev/kvm"], "share": 4}]}]}]}]}]}',
    )
    result = run_cli("config", "--json", "--config", listed, "--", *GENERIC)
    assert result.returncode == 0, result.stderr
    nested = _write(
        tmp_path / "nested.json",
        '{"plugin": {"nomad-device-generic": {"config": {"device": '
        '{"kvm": {"paths": ["/dev/kvm"]}}}}}}',
    )
    result = run_cli("config", "--config", nested, "--", *GENERIC)
    assert result.returncode == 1
    assert "the agent refuses to start: unexpected keys device, kvm" in result.stderr


def test_the_last_plugin_block_with_a_label_is_used_whole(tmp_path: Path) -> None:
    agent = _write(
        tmp_path / "agent.hcl",
        'plugin "nomad-device-generic" {\n  config {\n    fingerprint_period = "1s"\n  }\n}\n'
        'plugin "nomad-device-generic" {\n  config {\n    vanished_grace = "1m"\n  }\n}\n',
    )
    result = run_cli("config", "--json", "--config", agent, "--", *GENERIC)
    assert result.returncode == 0, result.stderr
    assert "the agent uses only the last block, whole" in result.stderr
    value = _config(result.stdout)["Config"]
    assert isinstance(value, dict)
    assert (value["fingerprint_period"], value["vanished_grace"]) == ("30s", "1m")
