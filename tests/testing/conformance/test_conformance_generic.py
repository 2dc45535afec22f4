"""The conformance suite against nomad-device-generic, with and without devices."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nomad_device.testing.conformance import ConformanceReport, SuiteOptions, run_conformance

COMMAND = [sys.executable, "-m", "nomad_device.plugins.generic"]

#: An agent's config body as JSON: /dev/null and /dev/zero are on every Linux
#: machine and open to every user, so this runs anywhere.
CONFIG = {
    "fingerprint_period": "1s",
    "device": {
        "null": {"paths": ["/dev/null"], "share": 2},
        "zero": {"paths": ["/dev/zero"], "permissions": "r"},
        "absent": {"paths": ["/dev/no-such-device*"]},
    },
}


@pytest.fixture(scope="module")
def reports() -> dict[str, ConformanceReport]:
    runs = {"configured": SuiteOptions(config_json=CONFIG), "defaults": SuiteOptions()}
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(run_conformance, COMMAND, o) for name, o in runs.items()}
        return {name: future.result() for name, future in futures.items()}


def test_generic_plugin_conforms_with_devices(reports: dict[str, ConformanceReport]) -> None:
    report = reports["configured"]
    report.assert_ok(allow_warnings=False)
    assert report.plugin_name == "generic-device"
    assert "3 device(s)" in report.result("device-groups-valid").summary
    assert report.result("reserve-unknown-id").summary == "refused with INVALID_ARGUMENT"


def test_generic_plugin_conforms_without_config(reports: dict[str, ConformanceReport]) -> None:
    reports["defaults"].assert_ok()


#: The agent file from issue 17: a USB serial adapter beside /dev/kvm. Before the
#: SDK stopped giving list settings literal defaults, a real v2.0.5 agent panicked
#: on it (``inconsistent map element types``) in either order.
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


ISSUE_17_KVM_FIRST = """
plugin "nomad-device-generic" {
  config {
    device "kvm" {
      paths = ["/dev/kvm"]
      share = 4
    }
    device "serial" {
      usb {
        vendor_id  = "1a86"
        product_id = "7523"
      }
    }
  }
}
"""


@pytest.mark.parametrize("text", [ISSUE_17, ISSUE_17_KVM_FIRST], ids=["serial first", "kvm first"])
def test_the_issue_17_agent_file_conforms(text: str, tmp_path: Path) -> None:
    agent = tmp_path / "agent.hcl"
    agent.write_text(text)
    report = run_conformance(
        COMMAND, SuiteOptions(config_file=agent, plugin_name="nomad-device-generic")
    )
    report.assert_ok()
    assert report.result("schema-safe").status.value == "pass"
    assert "accepted" in report.result("set-config").summary


def test_an_agent_config_directory_conforms_with_the_block_the_agent_uses(
    tmp_path: Path,
) -> None:
    """``-config=DIR``: files in name order, a later block's config replacing an earlier."""
    (tmp_path / "10-old.hcl").write_text(
        'plugin "nomad-device-generic" {\n  config {\n    devices = {}\n  }\n}\n'
    )
    (tmp_path / "20-issue17.hcl").write_text(ISSUE_17)
    (tmp_path / "30-editor.hcl~").write_text("broken {{")
    report = run_conformance(
        COMMAND, SuiteOptions(config_file=[tmp_path], plugin_name="nomad-device-generic")
    )
    report.assert_ok()
    summary = report.result("set-config").summary
    assert "accepted" in summary
    assert "20-issue17.hcl" in summary
