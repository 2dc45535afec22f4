"""What a new author needs is written down, and what the docs name exists.

The tutorial and docs/testing.md explain how a config field becomes required,
how ``configure()`` refuses a value, the conformance fixture's arguments, the
Go-style formatters and why Reserve cannot track use; these tests keep the
names they cite honest.
"""

from __future__ import annotations

import dataclasses
import re

from support import ROOT

from nomad_device import golang
from nomad_device.proto import device_pb2
from nomad_device.testing.conformance import SuiteOptions

DOCS = ROOT / "docs"
TUTORIAL = (DOCS / "tutorial.md").read_text()
TESTING = (DOCS / "testing.md").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_required_fields_and_refusing_a_value_are_explained() -> None:
    for text in (_flat(TUTORIAL), _flat(TESTING)):
        assert "**without a default**" in text
        assert "`X | None`" in text
        assert "raising `InvalidArgument`" in text
        assert "INVALID_ARGUMENT" in text and "INTERNAL" in text


def test_the_fixtures_config_arguments_are_those_of_suite_options() -> None:
    section = _flat(TESTING.split("### In pytest", 1)[1].split("```", 1)[0])
    documented = set(re.findall(r"`(\w+)=`", section))
    assert documented == {f.name for f in dataclasses.fields(SuiteOptions)}


def test_the_go_formatters_named_in_the_docs_exist() -> None:
    text = TUTORIAL + TESTING
    for name in ("format_duration", "quote", "parse_duration"):
        assert f"`{name}(" in text
        assert name in golang.__all__


def test_reserve_has_no_counterpart_on_the_wire() -> None:
    """The tutorial says Nomad never tells a plugin that a reservation ended."""
    assert "Nomad never says when one ends" in TUTORIAL
    service = device_pb2.DESCRIPTOR.services_by_name["DevicePlugin"]
    assert sorted(m.name for m in service.methods) == ["Fingerprint", "Reserve", "Stats"]
