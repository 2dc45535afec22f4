"""The launcher's ``config`` on agent files, end to end: what a Nomad agent would do.

The issue 17 config decodes and is accepted; a config that would crash an agent
is refused with what to write; an unsafe schema is flagged before any config
is written; JSON agent files, duplicate plugin labels and repeated config
blocks are read as the agent reads them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgpack
from support import CONFORMANCE_PLUGINS
from support.launcher import run_cli

#: The plugin's file, whose name the agent matches to the plugin block's label.
GENERIC = [str(Path(sys.executable).with_name("nomad-device-generic"))]
UNSAFE = [sys.executable, str(CONFORMANCE_PLUGINS / "unsafe_schema.py")]

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


# -- a directory and several -c, as `nomad agent -config` reads them ------------------
#
# Each case below was also run through a real Nomad v2.0.5 agent by hand (a recording
# plugin in plugin_dir, -config=DIR or two -config paths): the agent's SetConfig bytes
# equalled the launcher's in every case, and it refused the broken file as here.

KVM_BLOCK = (
    'plugin "nomad-device-generic" {\n  config {\n    device "kvm" {\n'
    '      paths = ["/dev/kvm"]\n    }\n  }\n}\n'
)
SERIAL_BLOCK = (
    'plugin "nomad-device-generic" {\n  config {\n    device "serial" {\n'
    '      usb {\n        vendor_id = "1a86"\n      }\n    }\n  }\n}\n'
)


def _devices(*paths: str) -> list[str]:
    result = run_cli("config", "--json", *[a for p in paths for a in ("-c", p)], "--", *GENERIC)
    assert result.returncode == 0, result.stderr
    value = _config(result.stdout)["Config"]
    assert isinstance(value, dict)
    return sorted(value["device"])


def test_a_directory_is_read_in_name_order_and_a_later_config_replaces_an_earlier(
    tmp_path: Path,
) -> None:
    _write(tmp_path / "20-serial.hcl", SERIAL_BLOCK)
    _write(tmp_path / "10-kvm.hcl", KVM_BLOCK)
    result = run_cli("config", "--json", "-c", str(tmp_path), "--", *GENERIC)
    assert result.returncode == 0, result.stderr
    assert '20-serial.hcl:1: plugin "nomad-device-generic" replaces the config' in result.stderr
    assert _devices(str(tmp_path)) == ["serial"]


def test_a_directory_skips_what_the_agent_skips(tmp_path: Path) -> None:
    _write(tmp_path / "a.hcl", KVM_BLOCK)
    for name in ("b.hcl~", ".#c.hcl", "#d.hcl#", "notes.txt"):
        _write(tmp_path / name, "broken {{")
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub" / "e.hcl", "broken {{")
    assert _devices(str(tmp_path)) == ["kvm"]


def test_a_later_block_without_config_keeps_the_earlier_config_and_adds_its_args(
    tmp_path: Path,
) -> None:
    _write(tmp_path / "10.hcl", KVM_BLOCK)
    _write(tmp_path / "20.hcl", 'plugin "nomad-device-generic" {\n  config {}\n}\n')
    _write(tmp_path / "30.json", json.dumps({"plugin": {"nomad-device-generic": {"args": ["-v"]}}}))
    assert _devices(str(tmp_path)) == ["kvm"]
    from nomad_device.agentconfig.agentfile import parse_agent_file

    block = parse_agent_file(tmp_path).select([], "nomad-device-generic")
    assert block.args == ["-v"]
    assert block.origin == str(tmp_path / "10.hcl")


def test_several_config_paths_merge_in_the_order_given(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    _write(tmp_path / "d" / "serial.hcl", SERIAL_BLOCK)
    kvm = _write(tmp_path / "kvm.hcl", KVM_BLOCK)
    assert _devices(str(tmp_path / "d"), kvm) == ["kvm"]
    assert _devices(kvm, str(tmp_path / "d")) == ["serial"]


def test_a_broken_file_in_a_directory_is_named(tmp_path: Path) -> None:
    _write(tmp_path / "10.hcl", KVM_BLOCK)
    broken = _write(tmp_path / "20.hcl", 'plugin "nomad-device-generic" {\n  config {\n')
    result = run_cli("config", "-c", str(tmp_path), "--", *GENERIC)
    assert result.returncode == 1
    assert f"{broken}:3: invalid HCL, the agent refuses to start" in result.stderr


def test_an_error_in_a_merged_config_points_into_its_own_file(tmp_path: Path) -> None:
    _write(tmp_path / "10.hcl", KVM_BLOCK)
    late = _write(
        tmp_path / "20.hcl",
        'plugin "nomad-device-generic" {\n  config {\n    devices = {}\n  }\n}\n',
    )
    result = run_cli("config", "-c", str(tmp_path), "--", *GENERIC)
    assert result.returncode == 1
    assert f"{late}:3" in result.stderr
    assert 'No argument or block type is named "devices". Did you mean "device"?' in (result.stderr)


MISLABELED = """
plugin "nomad-device-generics" {
  config {
    device "kvm" {
      paths = ["/dev/kvm"]
    }
  }
}
"""
JOB = """
job "j" {
  group "g" {
    task "t" {
      resources {
        device "kvm" {}
      }
    }
  }
}
"""


def test_every_tool_takes_the_block_named_after_the_plugin_file(tmp_path: Path) -> None:
    # The agent matches the label to the file's name in plugin_dir and skips the rest
    # (one WARN, and the plugin runs with no devices): no tool may call this fine.
    agent = _write(tmp_path / "agent.hcl", MISLABELED)
    job = _write(tmp_path / "job.hcl", JOB)
    plugin = str(Path(sys.executable).with_name("nomad-device-generic"))
    conformance = str(Path(sys.executable).with_name("nomad-device-conformance"))
    said = f'{agent}: no block for nomad-device-generic; did you mean "nomad-device-generics"?'
    for args, code in [
        (["config", "--config", agent, plugin], 1),
        (["check", "-c", agent, job, plugin], 2),
    ]:
        result = run_cli(*args)
        assert result.returncode == code, (args, result.stderr)
        assert said in result.stderr
    result = subprocess.run(
        [conformance, "--config", agent, "--", plugin], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert said in result.stderr
