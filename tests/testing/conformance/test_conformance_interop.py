"""The conformance suite against the Go plugin built on the real go-plugin server."""

from __future__ import annotations

from pathlib import Path

import pytest

from nomad_device.testing.conformance import SuiteOptions, run_conformance

pytestmark = [pytest.mark.interop, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def goplugin(interop_bin: Path) -> str:
    return str(interop_bin / "goplugin")


def test_go_plugin_conforms(goplugin: str, tmp_path: Path) -> None:
    for name in ("alpha", "beta", "gamma"):
        (tmp_path / name).write_bytes(name.encode())
    report = run_conformance([goplugin], SuiteOptions(cwd=str(tmp_path)))
    # go-plugin gives a Go plugin every transport check for free; the plugin's
    # own code answers the rest.
    report.assert_ok(allow_warnings=False)
    assert report.plugin_name == "go-files"
    assert "3 device(s)" in report.result("device-groups-valid").summary
    assert report.result("reserve-unknown-id").summary == "refused with INVALID_ARGUMENT"
