"""schema-safe and set-config on the deliberately unsafe fixture, with an agent file."""

from __future__ import annotations

import sys
from pathlib import Path

from support import CONFORMANCE_PLUGINS

from nomad_device.agentconfig import setconfig
from nomad_device.testing.conformance import SuiteOptions, run_conformance
from nomad_device.wire import hclspec

FIXTURE = CONFORMANCE_PLUGINS / "unsafe_schema.py"
COMMAND = [sys.executable, str(FIXTURE)]


def test_an_agent_file_that_would_crash_the_agent_fails_set_config(tmp_path: Path) -> None:
    agent = tmp_path / "agent.hcl"
    agent.write_text(
        'plugin "unsafe_schema" {\n  config {\n    slot "a" {}\n    slot "b" {\n'
        '      names = ["x"]\n    }\n  }\n}\n'
    )
    report = run_conformance(COMMAND, SuiteOptions(config_file=agent))
    summary = " ".join(report.result("set-config").summary.split())
    assert report.result("set-config").status.value == "fail"
    assert "a Nomad agent given this config would crash" in summary
    assert 'Write names = [] in slot "a"' in summary
    # The suite's own example of the crash, from the evidence, crashes the decoder too.
    evidence = report.result("schema-safe").evidence
    config = next(e for e in evidence if e.startswith("this agent config crashes")).split("\n", 1)[
        1
    ]
    spec = hclspec.from_proto(hclspec.to_proto(_spec()))
    assert setconfig.from_agent_text(config, spec, "unsafe_schema").outcome == "panic"


def test_the_same_schema_with_every_slot_set_alike_passes_set_config(tmp_path: Path) -> None:
    agent = tmp_path / "agent.hcl"
    agent.write_text(
        'plugin "unsafe_schema" {\n  config {\n    slot "a" {\n      names = []\n    }\n'
        '    slot "b" {\n      names = ["x"]\n    }\n  }\n}\n'
    )
    report = run_conformance(COMMAND, SuiteOptions(config_file=agent))
    assert report.result("set-config").status.value == "pass"
    assert report.result("schema-safe").status.value == "fail"  # the schema is still unsafe


def _spec() -> hclspec.Spec:
    sys.path.insert(0, str(FIXTURE.parent))
    try:
        import unsafe_schema

        spec: hclspec.Spec = unsafe_schema.SPEC
        return spec
    finally:
        sys.path.remove(str(FIXTURE.parent))
