"""The suite's time bounds count the plugin's own time: a busy host does not fail a good plugin.

A plugin made to share one CPU with two spinning processes (pinned there, so the
starving does not depend on what else the machine runs) takes several times its
own time on the wall clock; the suite must not call it slow for that. A plugin
that is slow by itself (here: it sleeps) must still be found. The bounds are
lowered to 2 s so that the test is quick; the suite's are 5 s and 10 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import CONFORMANCE_PLUGINS

from nomad_device.testing.conformance import Status, SuiteOptions, clock, transport
from nomad_device.testing.conformance.launch import Launch
from nomad_device.testing.conformance.suite import Suite

FIXTURES = CONFORMANCE_PLUGINS
CPU = max(os.sched_getaffinity(0))
#: CPU time the starved plugin spends before it serves (or refuses to, without the cookie).
BURN = 0.5
BOUND = 2.0

_SPIN = f"import os\nos.sched_setaffinity(0, {{{CPU}}})\nprint(flush=True)\nwhile True: pass"

_STARVED = f"""import os, time
os.sched_setaffinity(0, {{{CPU}}})
end = time.process_time() + {BURN}
while time.process_time() < end:
    pass
"""
_SLEEPS = f"import time\ntime.sleep({BOUND + 0.5})\n"
_SERVE = f"""import sys
sys.path.insert(0, {str(FIXTURES)!r})
from _widgets import WidgetPlugin, serve_with
serve_with(WidgetPlugin())
"""


@pytest.fixture
def spinners() -> Iterator[None]:
    """Three processes spinning on ``CPU``: the plugin and its cookie run get a fifth of it
    each, so the starved plugin's wall time is well past the bound (at two, on a quiet
    machine it once came in at 1.98 s)."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE) for _ in range(3)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            proc.stdout.readline()  # pinned, and spinning from now on
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _run(script: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Suite, Launch]:
    """The cookie refusal and a launch to the handshake, side by side as the runner does."""
    monkeypatch.setattr(transport, "SLOW_START", BOUND)
    monkeypatch.setattr(transport, "COOKIE_TIMEOUT", BOUND)
    command = [sys.executable, str(script)]
    suite = Suite(command, SuiteOptions())
    launch = Launch(command, suite.options)
    cookie = threading.Thread(target=transport.cookie_refusal, args=(suite,))
    cookie.start()
    try:
        transport.handshake(suite, launch, launch.start())
    finally:
        cookie.join()
        launch.close()
    return suite, launch


def test_a_starved_plugin_is_not_called_slow(
    spinners: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # However busy this machine is besides, the own time is not to be cut short by the
    # safety net that bounds a starved run.
    monkeypatch.setattr(clock, "STRETCH", 1000.0)
    script = tmp_path / "starved.py"
    script.write_text(_STARVED + _SERVE)
    suite, launch = _run(script, monkeypatch)
    assert launch.handshake_seconds is not None and launch.handshake_own_seconds is not None
    # The starving worked: on the wall clock the plugin was slower than the bound...
    assert launch.handshake_seconds > BOUND
    # ...but not in its own time.
    assert launch.handshake_own_seconds < BOUND
    handshake = suite.results["handshake"]
    assert handshake.status is Status.PASS, handshake
    assert any("waiting for a CPU" in line for line in handshake.evidence), handshake
    assert suite.results["cookie-refusal"].status is Status.PASS, suite.results["cookie-refusal"]


def test_a_plugin_slow_by_itself_is_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "sleeps.py"
    script.write_text(_SLEEPS + _SERVE)
    suite, _ = _run(script, monkeypatch)
    handshake = suite.results["handshake"]
    assert handshake.status is Status.WARN, handshake
    assert "of the plugin's own time" in handshake.summary
    cookie = suite.results["cookie-refusal"]
    assert cookie.status is Status.FAIL, cookie
    assert "still running after 2 s" in cookie.summary
