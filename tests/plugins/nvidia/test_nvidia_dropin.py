"""Drop-in: an agent config written for the Go nomad-device-nvidia works unchanged.

The agent file is read the way the launcher (and Nomad) reads it
(``cli/agentfile.py``), decoded against the schema the plugin sends over the
wire (``wire/hcldec.py``), and the resulting bytes go to SetConfig.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.fakenvml import gpu, gpu_uuid
from support.nvidia import PLUGIN, Scenarios, devices, encode

from nomad_device.agentconfig import agentfile
from nomad_device.agentconfig.hcldec import compile_spec, decode
from nomad_device.agentconfig.hcldec import encode as encode_decoded
from nomad_device.host import CallError
from nomad_device.wire import hclspec

pytest.importorskip("hcl2")

#: The agent configuration the Go plugin's README documents, with its file name.
GO_AGENT = """
plugin_dir = "/opt/nomad/plugins"

plugin "nomad-device-nvidia" {
  config {
    enabled            = true
    ignored_gpu_ids    = ["GPU-00000000-fa6e-4c1d-8e2b-5f0a9c3d7e00"]
    fingerprint_period = "5s"
  }
}
"""

#: The Go plugin's schema for its three settings, node for node.
GO_SPEC = {
    "enabled": hclspec.Default(hclspec.Attr("enabled", "bool", False), hclspec.Literal("true")),
    "ignored_gpu_ids": hclspec.Default(
        hclspec.Attr("ignored_gpu_ids", "list(string)", False), hclspec.Literal("[]")
    ),
    "fingerprint_period": hclspec.Default(
        hclspec.Attr("fingerprint_period", "string", False), hclspec.Literal('"1m"')
    ),
}


def agent_bytes(schema: Any, text: str) -> bytes:
    block = agentfile.parse_agent_text(text, "agent.hcl").select(
        ["/opt/nomad/plugins/nomad-device-nvidia"], None
    )
    decoded = decode(compile_spec(schema), block.config)
    assert decoded.ok, decoded.diagnostics
    return encode_decoded(decoded)


def test_the_go_settings_have_the_go_schema(launch: Any) -> None:
    schema = launch(PLUGIN).client.schema()
    assert isinstance(schema, hclspec.Object)
    for name, spec in GO_SPEC.items():
        assert schema.attributes[name] == spec


def test_a_go_agent_config_is_accepted_and_applied(scenario: Scenarios, launch: Any) -> None:
    live = scenario({"gpus": [gpu(0), gpu(1)]})
    plugin = launch(PLUGIN, env=live.env())
    schema = plugin.client.schema()
    plugin.client.set_config(agent_bytes(schema, GO_AGENT))
    with plugin.client.fingerprint() as stream:
        assert list(devices(stream.next(timeout=20))) == [gpu_uuid(1)]
    (line,) = plugin.wait_for_log(lambda e: e.message == "config set" and e.level == "info")
    assert line.fields["fingerprint_period"] == "5s"
    assert line.fields["ignored_gpu_ids"] == [gpu_uuid(0)]


def test_no_config_block_means_the_go_defaults(scenario: Scenarios, launch: Any) -> None:
    plugin = launch(PLUGIN, env=scenario({"gpus": [gpu(0)]}).env())
    schema = plugin.client.schema()
    plugin.client.set_config(agent_bytes(schema, 'plugin "nomad-device-nvidia" {}\n'))
    (line,) = plugin.wait_for_log(lambda e: e.message == "config set" and e.level == "info")
    assert line.fields["enabled"] is True
    assert line.fields["ignored_gpu_ids"] == []
    assert line.fields["fingerprint_period"] == "1m0s"
    assert line.fields["share"] == 1
    assert line.fields["ignored_xids"] == [13, 31, 43, 45, 68, 109]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"fingerprint_period": "5 minutes"},
            'failed to parse fingerprint period "5 minutes": time: unknown unit " minutes" '
            'in duration "5 minutes"',
        ),
        ({"fingerprint_period": "0s"}, 'fingerprint period "0s" must be greater than zero'),
        ({"share": 0}, "share must be from 1 to 10000, got 0"),
        # Each instance is a device Nomad stores: a billion would exhaust memory.
        ({"share": 1_000_000_000}, "share must be from 1 to 10000, got 1000000000"),
        ({"recovery_quiet_period": "soon"}, 'failed to parse recovery_quiet_period "soon"'),
        ({"dev_root": "dev"}, 'dev_root must be an absolute path, got "dev"'),
    ],
)
def test_bad_settings_are_refused_precisely(
    launch: Any, settings: dict[str, Any], message: str
) -> None:
    plugin = launch(PLUGIN)
    with pytest.raises(CallError) as refused:
        plugin.client.set_config(encode(settings))
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert message in refused.value.details


def test_the_console_script_is_the_plugin(launch: Any) -> None:
    script = Path(sys.executable).parent / "nomad-device-nvidia"
    assert script.exists(), "the package is not installed: pip install -e ."
    assert launch([str(script)]).client.info().name == "nvidia-gpu"
