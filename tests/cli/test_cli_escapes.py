"""Strings that devices supply are shown, never obeyed, by every human-readable output.

Issue 26: a USB product string with ``ESC ] 2;...`` (retitle the terminal) and
``ESC [2J`` (clear it) was written as it was by the launcher's fingerprint
table. The plugin here (``plugins/hostile_strings.py``) puts such text in an
attribute, a health description, a statistic, a reservation, a log line and
its version, over the real wire; the launcher, the REPL, ``check`` and the
conformance report must escape it, and JSON must keep it as it is.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import PLUGINS
from support.launcher import Terminal, cli_env, run_cli, terminals

from nomad_device.display import printable

PLUGIN = str(PLUGINS / "hostile_strings.py")
HOSTILE = "Stick\x1b]2;pwned\x07\x1b[2J\x1b[31m\x9b1m\u202eevil\tend"
SHOWN = printable(HOSTILE)
HOSTILE_ID = "stick1\x1b[2J\u202e"
#: What must never reach a terminal raw: the device's controls and its override.
#: (Its ``ESC [31m`` is the launcher's own red too: that it was escaped shows in
#: ``SHOWN`` being there whole.)
RAW = ("\x1b]", "\x1b[2J", "\x07", "\x9b", "\u202e")
#: The launcher's own colour codes (Style), the only escape sequences it may write.
OWN_STYLE = re.compile(r"\x1b\[(?:0|1|2|3[1236])m")


def _no_raw(text: str) -> None:
    found = [seq for seq in RAW if seq in text]
    assert not found, f"raw {found!r} in {text!r}"


def test_printable_escapes_what_a_terminal_would_obey() -> None:
    assert SHOWN == "Stick\\x1b]2;pwned\\x07\\x1b[2J\\x1b[31m\\x9b1m\\u202eevil\\tend"
    assert printable("Grüße, 東京 \\x1b ok") == "Grüße, 東京 \\x1b ok"  # printable: as is
    assert printable("a\nb\tc", lines=True) == "a\nb\\tc"
    assert printable("\U000e0001\udcff") == "\\U000e0001\\udcff"


@pytest.mark.parametrize("colour", ["never", "always"])
def test_the_fingerprint_table_and_the_relayed_log_escape_device_strings(colour: str) -> None:
    result = run_cli("fingerprint", "--color", colour, PLUGIN)
    assert result.returncode == 0, result.stderr
    for text in (result.stdout, result.stderr):
        _no_raw(text)
        assert not OWN_STYLE.sub("", text).count("\x1b"), text  # only the launcher's colours
    plain = OWN_STYLE.sub("", result.stdout)
    assert f"product  {SHOWN}" in plain
    assert re.search(rf"stick0 +unhealthy +{re.escape(SHOWN)}\n", plain)
    assert re.search(rf"{re.escape(printable(HOSTILE_ID))} +healthy", plain)
    assert f"found {SHOWN}" in OWN_STYLE.sub("", result.stderr)  # the plugin's log line


def test_json_keeps_the_true_string() -> None:
    result = run_cli("fingerprint", "--json", PLUGIN)
    assert result.returncode == 0, result.stderr
    (group,) = json.loads(result.stdout)
    assert group["Attributes"]["product"]["String"] == HOSTILE
    assert group["Instances"][0]["HealthDescription"] == HOSTILE


def test_stats_reserve_and_info_escape_device_strings() -> None:
    stats = run_cli("stats", "--count", "1", PLUGIN)
    assert stats.returncode == 0, stats.stderr
    _no_raw(stats.stdout)
    assert f"product={SHOWN}" in stats.stdout
    reserve = run_cli("reserve", PLUGIN, "stick0")
    assert reserve.returncode == 0, reserve.stderr
    _no_raw(reserve.stdout)
    assert f"ACME_PRODUCT={SHOWN}" in reserve.stdout
    info = run_cli("info", PLUGIN, env=cli_env(HOSTILE_VERSION="1"))
    _no_raw(info.stdout + info.stderr)
    assert f"Version       {SHOWN}" in info.stdout


@pytest.fixture
def terminal() -> Iterator[type[Terminal]]:
    with terminals() as factory:
        yield factory


def test_the_repl_on_a_terminal_escapes_device_strings(terminal: type[Terminal]) -> None:
    env = cli_env()
    env.pop("NO_COLOR")  # a terminal: colour on, as an operator sees it
    term = terminal([PLUGIN], env)
    term.expect(r"> $")
    term.send("fingerprint()\r")
    term.expect(r"stick0 .*unhealthy")
    term.send("exit()\r")
    assert term.wait() == 0
    shown = term.raw.decode()
    _no_raw(shown)
    assert SHOWN in shown


def test_check_escapes_what_a_device_supplied(tmp_path: Path) -> None:
    job = tmp_path / "job.hcl"
    job.write_text(
        'job "j" {\n  group "g" {\n    task "t" {\n      resources {\n'
        '        device "acme/usb/stick" {\n          count = 1\n'
        '          affinity {\n            attribute = "${device.attr.product}"\n'
        f"            value     = {json.dumps(HOSTILE)}\n"
        "            weight    = 50\n          }\n        }\n      }\n    }\n  }\n}\n"
    )
    for colour in ("never", "always"):
        result = run_cli("check", "--color", colour, str(job), PLUGIN)
        assert result.returncode in (0, 1), result.stderr
        _no_raw(result.stdout)
        assert f"acme/usb/stick [{printable(HOSTILE_ID)}]" in result.stdout  # the pick


def test_the_conformance_report_escapes_what_the_plugin_supplied() -> None:
    script = Path(sys.executable).with_name("nomad-device-conformance")
    command = (
        [str(script)]
        if script.is_file()
        else [sys.executable, "-m", "nomad_device.testing.conformance.cli"]
    )
    env = {**os.environ, "HOSTILE_VERSION": "1"}
    text = subprocess.run(
        [*command, "--", sys.executable, PLUGIN],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    _no_raw(text.stdout)
    assert f"plugin: hostile-strings {printable(HOSTILE, tabs=True)}" in text.stdout
    report = subprocess.run(
        [*command, "--json", "--", sys.executable, PLUGIN],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert json.loads(report.stdout)["plugin"]["version"] == HOSTILE
