"""The launcher run as a user runs it: a subprocess per command, real plugin processes."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import SDK_PLUGIN
from support.launcher import (
    MISBEHAVING,
    cli_env,
    launcher_command,
    need_example,
    read_pid,
    run_cli,
    wait_gone,
)

SDK = str(SDK_PLUGIN)
PLUGIN_SCHEMA_HEX = (
    # devices=3, flaky=true, invalid_group=false, period_ms=100, stats_fail=false
    "85 a7 64657669636573 03 a5 666c616b79 c3 ad 696e76616c69645f67726f7570 c2"
    " a9 706572696f645f6d73 64 aa 73746174735f6661696c c2"
)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ----------------------------------------------------------------- commands


def test_info() -> None:
    result = run_cli("info", SDK)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "Name", "sdk-test", "Version", "1.2.3", "Type", "device", "API", "versions", "v0.1.0"
    ]  # fmt: skip


def test_info_json() -> None:
    result = run_cli("info", "--json", SDK)
    assert json.loads(result.stdout) == {
        "Name": "sdk-test",
        "PluginVersion": "1.2.3",
        "PluginApiVersions": ["v0.1.0"],
        "Type": "device",
    }


def test_schema_tree() -> None:
    result = run_cli("schema", SDK)
    assert result.returncode == 0, result.stderr
    lines = [line.split("#")[0].strip() for line in result.stdout.splitlines()]
    assert lines == [
        "config {",
        "devices = number",
        "flaky = bool",
        "invalid_group = bool",
        "period_ms = number",
        "stats_fail = bool",
        "}",
    ]
    assert "# default 100" in result.stdout


def test_schema_json_is_the_protobuf_spec() -> None:
    result = run_cli("schema", "--json", SDK)
    spec = json.loads(result.stdout)
    assert spec["object"]["attributes"]["devices"] == {
        "default": {
            "primary": {"Attr": {"name": "devices", "type": "number"}},
            "default": {"literal": {"value": "2"}},
        }
    }


def test_config_from_an_agent_file_is_encoded_byte_for_byte(tmp_path: Path) -> None:
    agent = write(
        tmp_path / "agent.hcl",
        'plugin "sdk_plugin.py" {\n  config {\n    devices = "3"\n    flaky = true\n  }\n}\n',
    )
    result = run_cli("config", "--json", "--config", str(agent), SDK)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert bytes.fromhex(report["Msgpack"]) == bytes.fromhex(PLUGIN_SCHEMA_HEX)
    assert report["Config"] == {
        "devices": 3,
        "flaky": True,
        "invalid_group": False,
        "period_ms": 100,
        "stats_fail": False,
    }


def test_config_human_view_shows_defaults_and_bytes() -> None:
    result = run_cli("config", SDK)
    assert result.returncode == 0, result.stderr
    assert "  devices = 2" in result.stdout
    assert "85 a7 64 65 76 69 63 65 73 02" in result.stdout
    assert "The plugin accepted this config." in result.stdout


def test_fingerprint_table() -> None:
    result = run_cli("fingerprint", SDK)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "sdk/test/widget  (2 devices, 2 healthy)"
    assert "  dev0  healthy" in result.stdout


def test_fingerprint_fails_when_the_plugin_dropped_a_group() -> None:
    # The plugin logs the group it leaves out (dropped=device_group); the launcher
    # still shows what was sent, but exits 1, in --json mode too.
    for extra in ([], ["--json"]):
        result = run_cli("fingerprint", *extra, "--config-json", '{"invalid_group": true}', SDK)
        assert result.returncode == 1, result.stderr
        assert "sdk/test/widget" in result.stdout or '"widget"' in result.stdout
        assert "unrecognized unit 'A': Nomad knows only KiB" in result.stderr
        assert result.stderr.rstrip().endswith(
            "error: the plugin left 1 invalid device group(s) out of its fingerprint "
            "(its log above says why); Nomad never sees them"
        )
    assert run_cli("fingerprint", SDK).returncode == 0


def test_fingerprint_json_is_node_resources_devices() -> None:
    result = run_cli("fingerprint", "--json", "--config-json", '{"devices": 1}', SDK)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {
            "Vendor": "sdk",
            "Type": "test",
            "Name": "widget",
            "Instances": [
                {"ID": "dev0", "Healthy": True, "HealthDescription": "", "Locality": None}
            ],
            "Attributes": {
                "memory": {"Int": 2, "Unit": "GiB"},
                "model": {"String": "w1", "Unit": ""},
            },
        }
    ]


def test_stats_stream_as_json_lines() -> None:
    result = run_cli("stats", "--json", "--count", "2", "--interval", "200ms", SDK)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        (group,) = json.loads(line)
        assert set(group) == {"Vendor", "Type", "Name", "InstanceStats"}
        assert group["InstanceStats"]["dev1"]["Summary"] == {"IntNumeratorVal": 1, "Unit": "ops"}
        assert group["InstanceStats"]["dev1"]["Timestamp"].endswith("Z")


def test_stats_table() -> None:
    result = run_cli("stats", SDK)
    assert result.returncode == 0, result.stderr
    assert "dev1    1 ops" in result.stdout


def test_reserve_with_plugin_after_double_dash() -> None:
    result = run_cli("reserve", "--json", "dev0", "dev1", "--", sys.executable, SDK)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "Envs": {"SDK_DEVICES": "dev0,dev1"},
        "Mounts": [
            {"TaskPath": "/dev/sdk/dev0", "HostPath": "/tmp/sdk/dev0", "ReadOnly": False},
            {"TaskPath": "/dev/sdk/dev1", "HostPath": "/tmp/sdk/dev1", "ReadOnly": False},
        ],
        "Devices": None,
    }


def test_reserve_warns_about_unknown_ids() -> None:
    result = run_cli("reserve", SDK, "dev0", "ghost")
    assert "not in the plugin's fingerprint: ghost" in result.stderr
    # Whether the plugin refuses unknown IDs is its own business; either way the
    # launcher reports what happened.
    if result.returncode == 0:
        assert "SDK_DEVICES=dev0,ghost" in result.stdout
    else:
        assert "error: Reserve failed: INVALID_ARGUMENT:" in result.stderr


def test_reserve_error_from_the_plugin() -> None:
    result = run_cli("reserve", SDK, "!raise")
    assert result.returncode == 1
    assert "Reserve failed:" in result.stderr


def test_plugin_block_args_are_passed(tmp_path: Path) -> None:
    agent = write(tmp_path / "agent.hcl", 'plugin "sdk_plugin" {\n  args = ["async"]\n}\n')
    result = run_cli("info", "--json", "--config", str(agent), SDK)
    assert json.loads(result.stdout)["Name"] == "sdk-test-async"


def test_a_py_plugin_gets_the_block_named_after_its_script(tmp_path: Path) -> None:
    """``license_seats.py`` (not executable: run with this Python) among two blocks."""
    script = tmp_path / "license_seats.py"
    script.write_text(SDK_PLUGIN.read_text())
    script.chmod(0o644)
    agent = write(
        tmp_path / "multi.hcl",
        'plugin "nomad-device-example" {\n  config {\n    dir = "/srv"\n  }\n}\n'
        'plugin "license_seats" {\n  config {\n    devices = 4\n  }\n}\n',
    )
    result = run_cli("config", "--json", "--config", "multi.hcl", "license_seats.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["Config"]["devices"] == 4
    assert agent.is_file()


def test_plugin_refuses_its_config() -> None:
    result = run_cli("fingerprint", "--config-json", '{"devices": -1}', SDK)
    assert result.returncode == 1
    assert "the plugin refused its config (SetConfig: INVALID_ARGUMENT)" in result.stderr
    assert "devices: must not be negative" in result.stderr


# ------------------------------------------------------------ config errors


def test_config_errors_name_file_line_and_key(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    agent = write(
        tmp_path / "agent.hcl",
        'plugin "misbehaving.py" {\n  config {\n    devics = 3\n    flaky = "maybe"\n  }\n}\n',
    )
    result = run_cli(
        "fingerprint",
        "--config",
        str(agent),
        str(MISBEHAVING),
        env=cli_env(LAUNCHER_TEST_PID_FILE=str(pid_file)),
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-3:] == [
        "error: failed to parse config:",
        f'{agent}:3: Invalid label: No argument or block type is named "devics". Did you mean '
        '"devices"?',
        f'{agent}:4: Incorrect attribute value type: Inappropriate value for attribute "flaky": '
        "a bool is required.",
    ]
    assert wait_gone(read_pid(pid_file))


def test_missing_required_in_json_config() -> None:
    result = run_cli("fingerprint", "--config-json", '{"devices": "many"}', SDK)
    assert result.returncode == 1
    assert (
        "--config-json: devices: Incorrect attribute value type: Inappropriate value for "
        'attribute "devices": a number is required.'
    ) in result.stderr


def test_hcl_syntax_error_fails_before_launching(tmp_path: Path) -> None:
    agent = write(tmp_path / "agent.hcl", "config {\n  devices = = 1\n}\n")
    result = run_cli("fingerprint", "--config", str(agent), "/nonexistent/plugin")
    assert result.returncode == 1
    assert f"{agent}:2: invalid HCL" in result.stderr


def test_agent_files_are_read_without_python_hcl2(tmp_path: Path) -> None:
    # The SDK reads agent files with its own HCL 1 reader, as the agent does.
    fake = tmp_path / "hidden" / "hcl2"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'hcl2'\")\n")
    agent = write(tmp_path / "agent.hcl", "config {\n}\n")
    env = cli_env(PYTHONPATH=str(fake.parent))
    result = run_cli("fingerprint", "--config", str(agent), SDK, env=env)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------- usage


def test_usage_errors() -> None:
    assert run_cli().returncode == 2
    result = run_cli("fingerprint")
    assert result.returncode == 2
    assert "no plugin given" in result.stderr
    result = run_cli("reserve", "--", SDK)
    assert result.returncode == 2
    assert "at least one device ID" in result.stderr
    result = run_cli("stats", "--interval", "soon", SDK)
    assert result.returncode == 2


def test_plugin_not_found() -> None:
    result = run_cli("info", "/nonexistent/plugin")
    assert result.returncode == 1
    assert "cannot start plugin '/nonexistent/plugin'" in result.stderr


# --------------------------------------------------------- failing plugins


def test_plugin_that_never_handshakes(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    env = cli_env(LAUNCHER_TEST_MODE="hang", LAUNCHER_TEST_PID_FILE=str(pid_file))
    # The plugin never handshakes: a launcher that did not give up would meet run_cli's timeout.
    result = run_cli("info", "--start-timeout", "1", str(MISBEHAVING), env=env)
    assert result.returncode == 1
    assert "timeout while waiting for plugin to start (1s)" in result.stderr
    assert wait_gone(read_pid(pid_file))


def test_plugin_that_exits_before_the_handshake(tmp_path: Path) -> None:
    env = cli_env(LAUNCHER_TEST_MODE="exit")
    result = run_cli("fingerprint", str(MISBEHAVING), env=env)
    assert result.returncode == 1
    assert "plugin exited before we could connect (exit status 3)" in result.stderr
    assert "giving up before the handshake" in result.stderr


def test_plugin_crashing_mid_session(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    env = cli_env(LAUNCHER_TEST_MODE="crash", LAUNCHER_TEST_PID_FILE=str(pid_file))
    result = run_cli("reserve", str(MISBEHAVING), "dev0", env=env)
    assert result.returncode == 1
    assert "error: Reserve: the plugin exited unexpectedly (exit status 7)" in result.stderr
    assert wait_gone(read_pid(pid_file))


# -------------------------------------------------------------- interrupts


class Running:
    """The launcher in its own process group, its stdout read line by line."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [*launcher_command(), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def next_line(self, timeout: float = 20) -> str:
        return self.lines.get(timeout=timeout)

    def signal_group(self, sig: int) -> None:
        """As a terminal does for Ctrl-C: the whole foreground group gets it."""
        os.killpg(self.proc.pid, sig)

    def finish(self, timeout: float = 20) -> tuple[int, str]:
        code = self.proc.wait(timeout)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def running() -> Iterator[type[Running]]:
    started: list[Running] = []

    class Tracked(Running):
        def __init__(self, *args: str, env: dict[str, str]) -> None:
            super().__init__(*args, env=env)
            started.append(self)

    yield Tracked
    for run in started:
        run.kill()


def test_ctrl_c_during_watch_stops_the_plugin(tmp_path: Path, running: type[Running]) -> None:
    pid_file = tmp_path / "pid"
    env = cli_env(LAUNCHER_TEST_PID_FILE=str(pid_file))
    run = running("fingerprint", "--watch", "--json", str(MISBEHAVING), env=env)
    first = json.loads(run.next_line())
    assert first[0]["Vendor"] == "sdk"
    pid = read_pid(pid_file)
    run.signal_group(signal.SIGINT)  # the plugin ignores SIGINT, as Go plugins do
    code, stderr = run.finish()
    assert code == 130
    assert "interrupted (SIGINT); the plugin was stopped" in stderr
    assert wait_gone(pid)


def test_second_ctrl_c_still_cleans_up(tmp_path: Path, running: type[Running]) -> None:
    pid_file = tmp_path / "pid"
    env = cli_env(LAUNCHER_TEST_PID_FILE=str(pid_file))
    run = running("fingerprint", "--watch", "--json", str(MISBEHAVING), env=env)
    run.next_line()
    pid = read_pid(pid_file)
    run.signal_group(signal.SIGINT)
    run.signal_group(signal.SIGINT)
    code, _ = run.finish()
    assert code == 130
    assert wait_gone(pid)


def test_ctrl_c_during_start_up(tmp_path: Path, running: type[Running]) -> None:
    pid_file = tmp_path / "pid"
    env = cli_env(LAUNCHER_TEST_MODE="hang", LAUNCHER_TEST_PID_FILE=str(pid_file))
    run = running("info", "--start-timeout", "60", str(MISBEHAVING), env=env)
    pid = read_pid(pid_file)
    time.sleep(0.3)
    run.signal_group(signal.SIGINT)
    code, stderr = run.finish()
    assert code == 130
    assert "interrupted" in stderr
    assert wait_gone(pid)


def test_sigterm_stops_the_plugin(tmp_path: Path, running: type[Running]) -> None:
    pid_file = tmp_path / "pid"
    env = cli_env(LAUNCHER_TEST_PID_FILE=str(pid_file))
    run = running("stats", "--count", "0", "--interval", "200ms", str(MISBEHAVING), env=env)
    run.next_line()
    pid = read_pid(pid_file)
    run.proc.send_signal(signal.SIGTERM)
    code, _ = run.finish()
    assert code == 128 + signal.SIGTERM
    assert wait_gone(pid)


# ------------------------------------------------------------ example plugin


def test_example_watch_sees_a_new_device(tmp_path: Path, running: type[Running]) -> None:
    need_example()
    from nomad_device.plugins.example.demo import prepare_demo_dir

    directory = prepare_demo_dir(tmp_path / "devices")
    agent = write(
        tmp_path / "agent.hcl",
        f'plugin "nomad-device-example" {{\n  config {{\n    dir = "{directory}"\n'
        '    list_period = "200ms"\n  }\n}\n',
    )
    run = running(
        "fingerprint", "--watch", "--json", "--config", str(agent), "nomad-device-example",
        env=cli_env(),
    )  # fmt: skip
    (group,) = json.loads(run.next_line())
    assert group["Vendor"] == "nomad" and group["Type"] == "file" and group["Name"] == "mock"
    health = {d["ID"]: (d["Healthy"], d["HealthDescription"]) for d in group["Instances"]}
    assert health == {
        "device01": (False, 'Device has bad permissions "-rwxrwxrwx"'),
        "device02": (True, ""),
        "device03": (True, ""),
    }
    (directory / "device04").write_text("new")
    (group,) = json.loads(run.next_line())
    assert [d["ID"] for d in group["Instances"]][-1] == "device04"
    run.signal_group(signal.SIGINT)
    code, _ = run.finish()
    assert code == 130


def test_demo() -> None:
    need_example()
    result = run_cli("demo")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for heading in ("PluginInfo", "ConfigSchema", "SetConfig", "Fingerprint", "Stats"):
        assert f"== {heading}" in out
    assert "device01  unhealthy" in out
    assert "== Reserve(device02)" in out
    demo_dir = out.split("the example plugin on ", 1)[1].split()[0]
    assert not Path(demo_dir).exists()


def test_example_schema_and_defaults() -> None:
    need_example()
    schema = run_cli("schema", "nomad-device-example")
    assert schema.returncode == 0, schema.stderr
    assert [line.split("#")[0].strip() for line in schema.stdout.splitlines()] == [
        "config {",
        "dir = string",
        "list_period = string",
        "unhealthy_perm = string",
        "}",
    ]
    config = run_cli("config", "--json", "nomad-device-example")
    assert config.returncode == 0, config.stderr
    report = json.loads(config.stdout)
    assert report["Config"] == {"dir": ".", "list_period": "5s", "unhealthy_perm": "-rwxrwxrwx"}
    assert bytes.fromhex(report["Msgpack"]) == bytes.fromhex(
        "83"
        " a3 646972 a1 2e"  # dir = "."
        " ab 6c6973745f706572696f64 a2 3573"  # list_period = "5s"
        " ae 756e6865616c7468795f7065726d aa 2d 727778 727778 727778"  # "-rwxrwxrwx"
    )


def test_example_rejects_unknown_keys_like_nomad(tmp_path: Path) -> None:
    need_example()
    agent = write(
        tmp_path / "client.hcl",
        'client {\n  enabled = true\n}\n\nplugin "nomad-device-example" {\n  config {\n'
        '    dir = "/tmp"\n    list_perod = "1s"\n  }\n}\n',
    )
    result = run_cli("fingerprint", "--config", str(agent), "nomad-device-example")
    assert result.returncode == 1
    assert (
        f'{agent}:8: Invalid label: No argument or block type is named "list_perod". Did you '
        'mean "list_period"?'
    ) in result.stderr
