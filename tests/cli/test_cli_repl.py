"""The interactive session on a pseudo-terminal, as a person would use it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import SDK_PLUGIN
from support.launcher import (
    MISBEHAVING,
    Terminal,
    cli_env,
    launcher_command,
    need_example,
    read_pid,
    run_cli,
    terminals,
    wait_gone,
)

from nomad_device.cli.repl import parse_command


@pytest.fixture
def terminal() -> Iterator[type[Terminal]]:
    with terminals() as factory:
        yield factory


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("fingerprint()", ("fingerprint", [])),
        ("  stats( 2s )  ", ("stats", ["2s"])),
        ('reserve("a", "b")', ("reserve", ["a", "b"])),
        ("reserve(a, b)", ("reserve", ["a", "b"])),
        ("reserve('a b', \"c,d\")", ("reserve", ["a b", "c,d"])),
        ("reserve a b", ("reserve", ["a", "b"])),
        ("exit", ("exit", [])),
    ],
)
def test_command_parsing(line: str, expected: tuple[str, list[str]]) -> None:
    assert parse_command(line) == expected


def test_bad_command_lines() -> None:
    with pytest.raises(ValueError):
        parse_command("reserve(a")
    with pytest.raises(ValueError):
        parse_command('reserve("a)')


def test_a_session(tmp_path: Path, terminal: type[Terminal]) -> None:
    pid_file = tmp_path / "pid"
    term = terminal([str(MISBEHAVING)], cli_env(LAUNCHER_TEST_PID_FILE=str(pid_file)))
    term.expect(r"Available commands are: fingerprint\(\), stop_fingerprint\(\)")
    pid = read_pid(pid_file)
    term.expect(r"> $")

    term.send("fingerprint()\r")
    term.expect(r"> fingerprint #1 .*\nsdk/test/widget  \(2 devices, 2 healthy\)")
    term.expect(r"dev1  healthy")

    mark = len(term.plain)
    term.send('reserve("dev0", dev1)\r')
    term.expect(r"SDK_DEVICES=dev0,dev1", start=mark)

    # Stream output while something is half typed: the line is cleared, the
    # output printed, and the prompt drawn again with the typed text.
    term.send("stats(0.2)\r")
    term.expect(r"> stats #1")
    term.send("stop_st")
    before = len(term.raw)
    term.expect(r"> stats #3", start=len(term.plain))
    fresh = term.raw[before:].decode()
    assert "\r\x1b[K" in fresh
    assert "> stop_st" in fresh
    term.send("ats()\r")
    term.expect(r"> stats stopped")

    term.send("bogus(1)\r")
    term.expect(r'> Unknown command "bogus\(1\)"; try help\(\)')
    term.send("exit()\r")
    assert term.wait() == 0
    assert wait_gone(pid)


def test_ctrl_c_leaves_no_plugin_behind(tmp_path: Path, terminal: type[Terminal]) -> None:
    pid_file = tmp_path / "pid"
    term = terminal([str(MISBEHAVING)], cli_env(LAUNCHER_TEST_PID_FILE=str(pid_file)))
    term.expect(r"Available commands")
    pid = read_pid(pid_file)
    term.send("stats(0.2)\r")
    term.expect(r"> stats #2")
    term.send("\x03")  # Ctrl-C: SIGINT to the launcher and the plugin; the plugin ignores it
    assert term.wait() == 130
    term.expect(r"interrupted \(SIGINT\); the plugin was stopped")
    assert wait_gone(pid)


def test_the_session_ends_when_the_plugin_dies(tmp_path: Path, terminal: type[Terminal]) -> None:
    pid_file = tmp_path / "pid"
    term = terminal(
        [str(MISBEHAVING)],
        cli_env(LAUNCHER_TEST_MODE="crash", LAUNCHER_TEST_PID_FILE=str(pid_file)),
    )
    term.expect(r"Available commands")
    pid = read_pid(pid_file)
    term.send("reserve(dev0)\r")
    assert term.wait() == 1  # a session that outlived its plugin would run out wait()'s 20 s
    term.expect(r"error: the plugin exited unexpectedly \(exit status 7\)")
    assert wait_gone(pid)


def test_end_of_input_leaves_cleanly(terminal: type[Terminal]) -> None:
    term = terminal(["repl", str(SDK_PLUGIN)], cli_env())
    term.expect(r"Available commands")
    term.expect(r"> $")
    term.send("\x04")  # Ctrl-D
    assert term.wait() == 0


def test_piped_commands_get_plain_output() -> None:
    result = subprocess.run(
        [*launcher_command(), "--", str(SDK_PLUGIN)],
        input="info()\nreserve(dev0)\nconfig()\nstats(soon)\n",
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout
    assert "Name          sdk-test" in result.stdout
    assert "SDK_DEVICES=dev0" in result.stdout
    assert "  devices = 2" in result.stdout
    assert "> stats: bad interval:" in result.stderr


def test_watch_redraws_in_place_on_a_terminal(tmp_path: Path, terminal: type[Terminal]) -> None:
    need_example()
    from nomad_device.plugins.example.demo import prepare_demo_dir

    directory = prepare_demo_dir(tmp_path / "devices")
    config = f'{{"dir": "{directory}", "list_period": "200ms"}}'
    term = terminal(
        ["fingerprint", "--watch", "--config-json", config, "nomad-device-example"], cli_env()
    )
    term.expect(r"fingerprint #1 at .*Ctrl-C to stop")
    term.expect(r"device03  healthy")
    (directory / "device04").write_text("x")
    before = len(term.raw)
    term.expect(r"fingerprint #2 at", start=len(term.plain))
    term.expect(r"device04  healthy")
    redraw = term.raw[before:].decode()
    assert "A\r\x1b[J" in redraw  # cursor up over the old view, clear, draw anew
    term.send("\x03")
    assert term.wait() == 130


def test_reserve_and_stats_wait_for_a_first_fingerprint(tmp_path: Path) -> None:
    # Nomad reserves only after a fingerprint; the example answers from what it last
    # detected, so a reserve() typed first used to get "unknown device".
    need_example()
    (tmp_path / "dev").write_text("x")
    config = json.dumps({"dir": str(tmp_path)})
    result = run_cli(
        "--config-json", config, "nomad-device-example", input='reserve("dev")\nstats()\nexit()\n'
    )
    assert result.returncode == 0, result.stderr
    assert f"{tmp_path}/dev  /tmp/task-mounts/dev  rw" in result.stdout
    assert "unknown device" not in result.stderr
