"""The suite's pure parts: Nomad's group validation, version parsing, schema walks, reports."""

from __future__ import annotations

import json

import pytest

from nomad_device.proto import attribute_pb2, device_pb2
from nomad_device.testing.conformance import (
    CHECKS,
    CheckResult,
    ConformanceError,
    ConformanceReport,
    Status,
)
from nomad_device.testing.conformance.checks import check
from nomad_device.testing.conformance.runner import (
    _STRICT_SEMVER_RE,
    _VERSION_RE,
    _group_problems,
    _literal_problems,
)
from nomad_device.wire import hclspec as h


def _group(**attributes: attribute_pb2.Attribute) -> device_pb2.DeviceGroup:
    return device_pb2.DeviceGroup(
        vendor="acme",
        device_type="gpu",
        device_name="g1",
        devices=[device_pb2.DetectedDevice(ID="0", healthy=True)],
        attributes=attributes,
    )


def test_valid_group_has_no_problems() -> None:
    group = _group(
        memory=attribute_pb2.Attribute(int_val=4, unit="GiB"),
        clock=attribute_pb2.Attribute(float_val=1.5, unit="GHz"),
        model=attribute_pb2.Attribute(string_val="x"),
        ecc=attribute_pb2.Attribute(bool_val=True),
    )
    assert _group_problems(group) == []


def test_group_problems_in_nomads_words() -> None:
    group = _group(
        a=attribute_pb2.Attribute(int_val=1, unit="furlongs"),
        b=attribute_pb2.Attribute(string_val="x", unit="MiB"),
        c=attribute_pb2.Attribute(unit="MiB"),
    )
    group.vendor = ""
    group.devices.append(device_pb2.DetectedDevice(ID=""))
    assert _group_problems(group) == [
        "device vendor must be specified",
        "device 1: device ID must be specified",
        "device attribute 'a' invalid: unrecognized unit 'furlongs'",
        "device attribute 'b' invalid: unit can not be specified on a boolean or string attribute",
        "device attribute 'c' invalid: no attribute value set",
    ]


@pytest.mark.parametrize(
    "version, parses, strict",
    [
        ("0.1.0", True, True),
        ("v0.1.0", True, True),
        ("1.2.3-beta.1+build.5", True, True),
        ("1.2", True, False),
        ("2", True, False),
        ("latest", False, False),
        ("", False, False),
        ("1.2.3 final", False, False),
    ],
)
def test_version_parsing(version: str, parses: bool, strict: bool) -> None:
    assert bool(_VERSION_RE.fullmatch(version)) is parses
    assert bool(_STRICT_SEMVER_RE.fullmatch(version)) is strict


def test_literal_problems_anywhere_in_the_tree() -> None:
    spec = h.Object(
        {
            "ok": h.Default(h.Attr("ok", "list(string)"), h.Literal('["a"]')),
            "bad": h.Block(
                "bad",
                h.Object(
                    {
                        "x": h.Default(h.Attr("x", "string"), h.Literal("upper(x)")),
                        "y": h.Attr("y", "strin"),
                    }
                ),
            ),
        }
    )
    problems = list(_literal_problems(spec))
    assert len(problems) == 2
    assert problems[0].startswith("literal 'upper(x)'")
    assert problems[1].startswith("y: type 'strin'")


def _report(*statuses: Status) -> ConformanceReport:
    results = tuple(
        CheckResult(c, s, f"summary of {c.id}", (f"evidence of {c.id}",))
        for c, s in zip(CHECKS, statuses, strict=False)
    )
    return ConformanceReport(("./plugin", "--flag"), results, 1.25, "p", "1.0.0")


def test_render_shows_findings_with_why_and_fix() -> None:
    report = _report(Status.PASS, Status.FAIL, Status.WARN, Status.SKIP)
    text = report.render()
    lines = text.splitlines()
    assert lines[0] == "Nomad device plugin conformance: ./plugin --flag"
    assert lines[1] == "plugin: p 1.0.0"
    assert "evidence of cookie-refusal" not in text  # passes show no evidence...
    assert "evidence of cookie-refusal" in report.render(verbose=True)  # ...unless asked
    for finding in ("handshake", "stdout-quiet"):
        assert f"- evidence of {finding}" in text
        assert "why: " + check(finding).why[:30] in " ".join(text.split())
        assert "fix: " + check(finding).fix[:30] in " ".join(text.split())
    assert lines[-1] == (
        "4 checks: 1 passed, 1 failed, 1 warning(s), 1 skipped in 1.2 s -- DOES NOT CONFORM"
    )
    assert all(len(line) <= 100 for line in lines)


def test_json_and_accessors() -> None:
    report = _report(Status.PASS, Status.WARN)
    assert report.ok
    assert [r.id for r in report.warnings] == ["handshake"]
    assert report.status_of("cookie-refusal") is Status.PASS
    with pytest.raises(KeyError):
        report.result("no-such-check")
    data = json.loads(report.to_json())
    assert data["counts"] == {"pass": 1, "fail": 0, "warn": 1, "skip": 0}
    assert data["results"][1]["section"] == "2"


def test_every_check_is_documented() -> None:
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids)) == 19
    for c in CHECKS:
        assert c.title and c.why.endswith(".") and c.fix.endswith((".", ")"))
        assert c.section in {"2", "3", "4", "5", "6"}


def test_the_verdict_counts_skipped_checks() -> None:
    half = _report(*([Status.PASS] * 9 + [Status.SKIP] * 9))
    assert half.ok and not half.complete
    assert half.passes() and not half.passes(strict=True)
    last = half.render().splitlines()[-1]
    assert last.endswith("-- CONFORMS ONLY IN PART: 9 of 18 checks skipped, which prove nothing")
    assert (
        half.render(strict=True)
        .splitlines()[-1]
        .endswith("-- DOES NOT CONFORM: 9 of 18 checks skipped (--strict)")
    )
    data = json.loads(half.to_json(strict=True))
    assert (data["ok"], data["complete"], data["strict"]) == (False, False, True)
    assert json.loads(half.to_json())["ok"] is True
    half.assert_ok()
    with pytest.raises(ConformanceError, match="DOES NOT CONFORM: 9 of 18"):
        half.assert_ok(strict=True)
    full = _report(*([Status.PASS] * 18))
    assert full.render(strict=True).splitlines()[-1].endswith("-- CONFORMS")
    full.assert_ok(strict=True)


def test_python_crash_is_read_from_stderr() -> None:
    from nomad_device.testing.conformance.launch import python_crash

    chained = [
        "Traceback (most recent call last):",
        '  File "p.py", line 3, in <module>',
        "    import yaml",
        "ModuleNotFoundError: No module named 'yaml'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "p.py", line 5, in <module>',
        "    raise RuntimeError('no yaml')",
        "RuntimeError: no yaml",
    ]
    assert python_crash(chained) == "RuntimeError: no yaml"
    syntax = [
        "Traceback (most recent call last):",
        '  File "p.py", line 2',
        "    def f(:",
        "          ^",
        "SyntaxError: invalid syntax",
    ]
    assert python_crash(syntax) == "SyntaxError: invalid syntax"
    # The SDK's own record of an exception before serving (install_early_excepthook).
    record = json.dumps(
        {
            "@level": "error",
            "@message": "plugin failed to start: OSError: no config",
            "@module": "python",
            "@timestamp": "2026-12-01T08:16:50.299525Z",
            "error": "OSError: no config",
            "traceback": "Traceback (most recent call last):\n ...",
        }
    )
    assert python_crash([record]) == "OSError: no config"
    calm = [
        json.dumps({"@level": "error", "@message": "not configured", "@timestamp": "x"}),
        "a plain line",
        "  an indented one",
    ]
    assert python_crash(calm) is None
