"""The conformance suite against deliberately broken fixture plugins and good plugins.

Every fixture in ``tests/support/plugins/conformance/`` is broken in exactly one way; the suite must
report that breakage under the right check, and every other check must come
out exactly as it does for the correct control plugin (``_widgets.py`` there).
The runs are independent subprocess sessions, so they run concurrently: the suite
counts its time bounds in each plugin's own time, so runs that share the machine
(with each other, or with anything else on a busy one) do not change a verdict.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import CONFORMANCE_PLUGINS, SDK_PLUGIN

from nomad_device.testing.conformance import (
    CHECKS,
    ConformanceError,
    ConformanceReport,
    Status,
    SuiteOptions,
    run_conformance,
)

FIXTURES = CONFORMANCE_PLUGINS

PASS, FAIL, WARN, SKIP = Status.PASS, Status.FAIL, Status.WARN, Status.SKIP

# The first test that asks for the reports makes all eighteen runs: about 20 s on a quiet
# two-core machine, minutes on a busy one.
pytestmark = pytest.mark.timeout(600)

#: For each fixture: the checks that must not pass, with their status and a
#: phrase the finding must contain. Every other check must pass.
EXPECTED: dict[str, dict[str, tuple[Status, str]]] = {
    "_widgets": {},
    "ends_stream": {"fingerprint-stream-open": (FAIL, "the stream ended")},
    "stdout_banner": {
        "handshake": (FAIL, "before the handshake"),
        # The banner is printed before serve() can check the cookie, too.
        "cookie-refusal": (FAIL, "wrote to stdout"),
    },
    "stdout_chatter": {"stdout-quiet": (WARN, "after the handshake")},
    # Dies of a ModuleNotFoundError at import: exit 1 and text on stderr are no refusal.
    "dies_at_import": {
        "cookie-refusal": (FAIL, "crashed (ModuleNotFoundError: No module named"),
        "handshake": (FAIL, "crashed before its handshake: ModuleNotFoundError"),
        "hclog-stderr": (FAIL, "not hclog JSON"),
        **{
            c.id: (SKIP, "did not start")
            for c in CHECKS
            if c.id not in ("cookie-refusal", "handshake", "hclog-stderr")
        },
    },
    "slow_shutdown": {"shutdown": (FAIL, "Nomad sends SIGKILL")},
    "plain_logs": {"hclog-stderr": (FAIL, "not hclog JSON")},
    "invalid_group": {"device-groups-valid": (FAIL, "Nomad would drop all devices")},
    "no_first_fingerprint": {
        "first-fingerprint": (FAIL, "no message within"),
        "device-groups-valid": (SKIP, "no fingerprint message"),
        "stats-interval": (SKIP, "only after the first fingerprint"),
        "stats-stream-open": (SKIP, "only after the first fingerprint"),
        "stable-ids": (SKIP, "no fingerprint"),
    },
    "crash_on_unknown": {
        "reserve-unknown-id": (FAIL, "did not survive"),
        "reserve-empty": (SKIP, "no longer running"),
        "sigint-ignored": (SKIP, "no longer running"),
        "shutdown": (SKIP, "already exited (status 3)"),
    },
    "unstable_ids": {"stable-ids": (FAIL, "disappeared")},
    "dies_on_sigint": {
        "sigint-ignored": (FAIL, "on SIGINT"),
        "shutdown": (SKIP, "already exited"),
    },
    "stats_flood": {"stats-interval": (FAIL, "interval 0 must mean 1 s")},
    "bad_version": {"plugin-info": (FAIL, "does not parse as a version")},
    # Not broken: a blocking sync watch() must not freeze the plugin.
    "sync_watch": {},
    "unsafe_schema": {"schema-safe": (FAIL, "a Nomad agent crashes on some configs: slot.names")},
}

#: Evidence that pins the finding down further.
EVIDENCE: dict[str, tuple[str, str]] = {
    "ends_stream": ("fingerprint-stream-open", "1 message(s) before the end"),
    "stdout_banner": ("handshake", "widget plugin 1.0.0 starting"),
    "dies_at_import": ("handshake", "ModuleNotFoundError: No module named 'widgets_driver"),
    "stdout_chatter": ("stdout-quiet", "detected 2 widgets"),
    "slow_shutdown": ("shutdown", "forced after"),
    "plain_logs": ("hclog-stderr", "widgets: configured"),
    "invalid_group": ("device-groups-valid", "device vendor must be specified"),
    "crash_on_unknown": ("reserve-unknown-id", "exited with status 3"),
    "unstable_ids": ("stable-ids", "before only: acme/widget/w1000"),
    "bad_version": ("plugin-info", "'latest'"),
    # The failing config is printed, ready to try on an agent.
    "unsafe_schema": ("schema-safe", '    slot "a" {\n      names = ["x"]\n    }\n    slot "b" {'),
}


def _fixture(name: str) -> list[str]:
    return [sys.executable, str(FIXTURES / f"{name}.py")]


def _needs_config_json() -> Mapping[str, object]:
    return {"dir": "/srv/widgets"}


#: The control run's bound for each call and the first fingerprint: far above what a
#: good plugin needs on any machine, so that a run that outlasts it waited for a timeout.
CONTROL_TIMEOUT = 60.0

RUNS: dict[str, tuple[list[str], SuiteOptions]] = {
    **{name: (_fixture(name), SuiteOptions()) for name in EXPECTED},
    "_widgets": (_fixture("_widgets"), SuiteOptions(timeout=CONTROL_TIMEOUT)),
    "needs_config": (_fixture("needs_config"), SuiteOptions()),
    "needs_config+json": (_fixture("needs_config"), SuiteOptions(config_json=_needs_config_json())),
    "sdk_plugin": ([sys.executable, str(SDK_PLUGIN)], SuiteOptions()),
    "sdk_plugin_async": ([sys.executable, str(SDK_PLUGIN), "async"], SuiteOptions()),
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ConformanceReport]:
    """Every run above, six at a time (each is mostly waiting on its plugin)."""
    runs = dict(RUNS)
    example_dir = tmp_path_factory.mktemp("example-devices")
    for name in ("alpha", "beta"):
        (example_dir / name).write_text(name)
    runs["example"] = (
        [sys.executable, "-m", "nomad_device.plugins.example"],
        SuiteOptions(cwd=str(example_dir)),
    )
    with ThreadPoolExecutor(6) as pool:
        futures = {
            name: pool.submit(run_conformance, command, options)
            for name, (command, options) in runs.items()
        }
        return {name: future.result() for name, future in futures.items()}


def _statuses(report: ConformanceReport) -> dict[str, Status]:
    return {r.id: r.status for r in report.results}


def test_every_fixture_is_covered() -> None:
    on_disk = {p.stem for p in FIXTURES.glob("*.py")}
    assert on_disk == set(EXPECTED) | {"needs_config"}


def test_reports_hold_every_check_in_order(reports: dict[str, ConformanceReport]) -> None:
    for report in reports.values():
        assert [r.id for r in report.results] == [c.id for c in CHECKS]


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_fixture_is_caught_with_the_right_finding(
    fixture: str, reports: dict[str, ConformanceReport]
) -> None:
    report = reports[fixture]
    expected = EXPECTED[fixture]
    want = {c.id: expected.get(c.id, (PASS, ""))[0] for c in CHECKS}
    assert _statuses(report) == want, report.render()
    for check_id, (_, phrase) in expected.items():
        assert phrase in report.result(check_id).summary, report.render()
    if fixture in EVIDENCE:
        check_id, phrase = EVIDENCE[fixture]
        evidence = "\n".join(report.result(check_id).evidence)
        assert phrase in evidence, report.render()
    assert report.ok == all(status is not FAIL for status, _ in expected.values())


@pytest.mark.parametrize("fixture", sorted(f for f in EXPECTED if EXPECTED[f]))
def test_findings_explain_why_and_how(fixture: str, reports: dict[str, ConformanceReport]) -> None:
    text = reports[fixture].render()
    for check_id, (status, _) in EXPECTED[fixture].items():
        if status in (FAIL, WARN):
            result = reports[fixture].result(check_id)
            assert f"why: {result.check.why[:40]}" in " ".join(text.split())
            assert f"fix: {result.fix[:40]}" in " ".join(text.split())


def test_a_crash_gets_advice_about_the_crash(reports: dict[str, ConformanceReport]) -> None:
    """Not the general fix about banners and print(): what is wrong is an exception."""
    for check_id in ("cookie-refusal", "handshake"):
        result = reports["dies_at_import"].result(check_id)
        assert result.fix != result.check.fix
        assert "died of a Python exception" in result.fix
        assert "A module is missing" in result.fix
        assert "banner" not in result.fix and "print()" not in result.fix
    report = reports["dies_at_import"].to_dict()
    fixes = {r["id"]: r["fix"] for r in report["results"]}
    assert "A module is missing" in fixes["handshake"]
    # A banner printed before the handshake still gets the general advice.
    banner = reports["stdout_banner"].result("handshake")
    assert banner.fix == banner.check.fix


def test_control_plugin_conforms(reports: dict[str, ConformanceReport]) -> None:
    report = reports["_widgets"]
    report.assert_ok(allow_warnings=False)
    assert report.plugin_name == "fixture-widgets"
    assert "CONFORMS" in report.render()


@pytest.mark.parametrize("name", ["sdk_plugin", "sdk_plugin_async"])
def test_sdk_test_plugins_pass(name: str, reports: dict[str, ConformanceReport]) -> None:
    report = reports[name]
    report.assert_ok(allow_warnings=False)
    assert not [r for r in report.results if r.status is SKIP], report.render()


def test_example_plugin_passes(reports: dict[str, ConformanceReport]) -> None:
    report = reports["example"]
    report.assert_ok(allow_warnings=False)
    assert report.plugin_name == "example-fs-device"
    assert "2 device(s)" in report.result("device-groups-valid").summary


def test_required_config_is_reported_as_info_not_failure(
    reports: dict[str, ConformanceReport],
) -> None:
    report = reports["needs_config"]
    assert report.ok, report.render()
    result = report.result("set-config")
    assert result.status is SKIP
    assert "--config-json" in result.summary
    assert result.evidence == (
        'required: Missing required argument: The argument "dir" is required, but no '
        "definition was found.",
    )
    skipped = {r.id for r in report.results if r.status is SKIP}
    assert "first-fingerprint" in skipped and "stable-ids" in skipped
    # What needs no config still ran.
    for check_id in ("handshake", "plugin-info", "sigint-ignored", "shutdown", "hclog-stderr"):
        assert report.status_of(check_id) is PASS


def test_config_json_lets_the_rest_run(reports: dict[str, ConformanceReport]) -> None:
    report = reports["needs_config+json"]
    report.assert_ok(allow_warnings=False)
    assert report.result("set-config").summary == "the given JSON config accepted (twice)"


def test_assert_ok_raises_with_the_rendered_report(reports: dict[str, ConformanceReport]) -> None:
    with pytest.raises(ConformanceError) as raised:
        reports["ends_stream"].assert_ok()
    assert "FAIL  fingerprint-stream-open" in str(raised.value)
    with pytest.raises(ConformanceError):
        reports["stdout_chatter"].assert_ok(allow_warnings=False)
    reports["stdout_chatter"].assert_ok()


def test_json_report_round_trips(reports: dict[str, ConformanceReport]) -> None:
    import json

    data = json.loads(reports["slow_shutdown"].to_json())
    assert data["ok"] is False
    assert data["plugin"] == {"name": "fixture-widgets", "version": "1.0.0"}
    by_id = {r["id"]: r for r in data["results"]}
    assert by_id["shutdown"]["status"] == "fail"
    assert by_id["shutdown"]["why"].startswith("Nomad kills a plugin")
    assert data["counts"] == {"pass": 18, "fail": 1, "warn": 0, "skip": 0}


def test_suite_waits_for_events_not_timeouts(reports: dict[str, ConformanceReport]) -> None:
    # For a good plugin every wait ends on what it waits for (a line, a message, an exit):
    # the whole run is over before a single one of its timeouts could have run out.
    assert reports["_widgets"].seconds < CONTROL_TIMEOUT


def test_unstartable_command_fails_cleanly(tmp_path: Path) -> None:
    report = run_conformance([str(tmp_path / "no-such-plugin")], SuiteOptions(timeout=2))
    assert not report.ok
    assert report.status_of("handshake") is FAIL
    assert "cannot start" in report.result("handshake").summary
    assert report.status_of("cookie-refusal") is FAIL
    skipped = {r.id for r in report.results if r.status is SKIP}
    assert skipped == {c.id for c in CHECKS} - {"cookie-refusal", "handshake"}


def test_plugin_exiting_before_handshake(tmp_path: Path) -> None:
    script = tmp_path / "dies.py"
    script.write_text("import sys\nsys.stderr.write('boom\\n')\nsys.exit(4)\n")
    report = run_conformance([sys.executable, str(script)], SuiteOptions(timeout=2))
    handshake = report.result("handshake")
    assert handshake.status is FAIL
    assert "exited (status 4)" in handshake.summary
    assert "stderr: boom" in handshake.evidence
    assert report.status_of("hclog-stderr") is FAIL


def test_sync_blocking_watch_plugin_conforms(reports: dict[str, ConformanceReport]) -> None:
    report = reports["sync_watch"]
    report.assert_ok(allow_warnings=False)
    assert not [r for r in report.results if r.status is SKIP], report.render()
