"""The probe runner's parts on their own: reasons, failures that must not escape, closing.

The attacks over the wire are in test_generic_probes.py.
"""

from __future__ import annotations

import logging

import pytest

from nomad_device.plugins.generic import probes
from nomad_device.plugins.generic.config import ProbeSpec
from nomad_device.plugins.generic.plugin import GenericDevicePlugin
from nomad_device.plugins.generic.probes import (
    ProbeProcesses,
    Prober,
    ProbeTarget,
    clean_reason,
    run_probe,
)
from nomad_device.plugins.generic.roots import Roots


def _target(*command: str, timeout: float = 10.0) -> ProbeTarget:
    return ProbeTarget(ProbeSpec(command, timeout, 30.0), {"GENERIC_DEVICE_ID": "x"})


def test_no_probe_failure_escapes_as_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NUL that skipped validation, or a bug below run_probe: a verdict, never a raise
    (a raise once ended watch(), and inotify and uevents with it)."""
    result = run_probe(_target("sh", "-c", "true\x00"), ProbeProcesses())
    assert (result.ok, result.reason) == (False, "probe sh could not start: embedded null byte")

    def broken(*args: object) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(probes, "run_probe", broken)
    prober = Prober(GenericDevicePlugin(Roots()), lambda: None, logging.getLogger("test"))
    result = prober._run(_target("true"))
    assert (result.ok, result.reason) == (False, "probe failed to run: RuntimeError: boom")


def test_no_probe_starts_once_closed() -> None:
    processes = ProbeProcesses()
    processes.close()
    result = run_probe(_target("true"), processes)
    assert (result.ok, result.reason) == (False, "the plugin is stopping")


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (b"\n\n  token not inserted  \nmore\n", "token not inserted"),
        (b"\x1b[31mred\x1b[0m text", "red text"),
        (b"\x1b]0;window title\x07visible", "visible"),
        (b"a\tb\x00c\x7fd\xc2\x9be", "a bcde"),  # NUL, DEL, C1 CSI: gone; tab: a space
        (b"first\xc2\x85second", "first"),  # NEL ends a line
        (b"\xe2\x80\xaeevil\xe2\x80\x8b", "evil"),  # bidi override, zero-width space
        (b"\xff\xfe bytes", "\ufffd\ufffd bytes"),
        (b"y" * 500, "y" * 199 + "…"),
        (b"\x1b[2J\n\x07\n", ""),
    ],
)
def test_reasons_are_cleaned(output: bytes, reason: str) -> None:
    assert clean_reason(output) == reason


def test_a_reaper_that_cannot_run_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python without ctypes, say: the reaper's own last words are the reason."""
    monkeypatch.setattr(probes, "REAPER", "import sys; print('Traceback ...'); print('no ctypes')")
    result = run_probe(_target("true"), ProbeProcesses())
    assert (result.ok, result.reason) == (False, "probe true could not be run: no ctypes")


def test_a_probe_that_closes_its_output_still_times_out() -> None:
    result = run_probe(
        _target("sh", "-c", "exec >/dev/null 2>&1; sleep 30", timeout=0.5), ProbeProcesses()
    )
    assert (result.ok, result.reason) == (False, "probe timed out after 0.5s")
