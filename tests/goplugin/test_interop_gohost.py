"""The real go-plugin client (interop/cmd/gohost) against the SDK's plugins.

gohost configures go-plugin exactly as a Nomad agent's plugin loader does and
reports every call's result, every log record go-plugin's logger received, and
how ``Kill()`` ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support import SDK_PLUGIN

Report = dict[str, Any]
GoHost = Callable[..., Report]


pytestmark = [pytest.mark.interop, pytest.mark.timeout(900)]

SCHEMA_FIELDS = ["devices", "flaky", "invalid_group", "period_ms", "stats_fail"]
#: go-plugin's own warning before it SIGKILLs a plugin.
FORCED = "plugin failed to exit gracefully"


def sdk_command(mode: str) -> list[str]:
    return [sys.executable, str(SDK_PLUGIN), *([mode] if mode == "async" else [])]


def plugin_logs(report: Report) -> list[dict[str, Any]]:
    """Records go-plugin re-logged from the plugin's stderr (a sub-logger)."""
    return [r for r in report["logs"] if r["module"].startswith("gohost.python")]


def find_log(report: Report, message: str) -> dict[str, Any]:
    for record in plugin_logs(report):
        if record["message"] == message:
            return record
    seen = [(r["level"], r["message"]) for r in plugin_logs(report)]
    raise AssertionError(f"no plugin log {message!r}; got {seen}")


def assert_ok(result: dict[str, Any] | None, what: str) -> Any:
    assert result is not None, f"{what}: not called"
    assert result["ok"], f"{what}: {result.get('error')}"
    assert not result.get("invalid"), f"{what}: Nomad would reject: {result['invalid']}"
    return result.get("value")


def assert_graceful_kill(report: Report) -> None:
    """go-plugin's own kill: Shutdown, then SIGKILL after its 2 s grace. How promptly the SDK
    exits is checked in the plugin's own time (test_transport), which a busy machine does not
    stretch; a bound on this wall-clock figure would be the machine's."""
    kill = report["kill"]
    assert kill["outcome"] == "graceful", kill
    assert kill["process_gone"], kill
    assert not any(r["message"] == FORCED for r in report["logs"])


@pytest.mark.parametrize("auto_mtls", [False, True], ids=["plaintext", "automtls"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_go_host_drives_sdk_plugin(gohost: GoHost, mode: str, auto_mtls: bool) -> None:
    flags = ["-quiet", "-reserve", "dev0", "-reserve", "!print", "-reserve", "!raise"]
    if auto_mtls:
        flags.insert(0, "-auto-mtls")
    report = gohost(*flags, command=sdk_command(mode))

    assert report.get("error") is None, report["_stderr"][-4000:]
    assert report["_returncode"] == 0
    assert report["auto_mtls"] is auto_mtls
    assert report["negotiated_version"] == 2
    assert report["reattach"]["network"] == "unix"

    info = assert_ok(report["plugin_info"], "PluginInfo")
    assert info == {
        "name": "sdk-test" if mode == "sync" else "sdk-test-async",
        "plugin_version": "1.2.3",
        "plugin_api_versions": ["v0.1.0"],
        "type": "DEVICE",
    }

    schema = assert_ok(report["config_schema"], "ConfigSchema")
    assert schema["fields"] == SCHEMA_FIELDS
    assert "object" in schema["spec"]

    assert_ok(report["set_config"], "SetConfig")

    fingerprint = assert_ok(report["fingerprint"], "Fingerprint")
    assert fingerprint["groups"] == [
        {
            "vendor": "sdk",
            "type": "test",
            "name": "widget",
            "devices": [
                {"id": "dev0", "healthy": True, "health_description": ""},
                {"id": "dev1", "healthy": True, "health_description": ""},
            ],
            "attributes": {
                "memory": {"int": 2, "unit": "GiB"},
                "model": {"string": "w1"},
            },
        }
    ]

    dev0, printed, raised = report["reserve"]
    assert dev0["ids"] == ["dev0"]
    assert assert_ok(dev0, "Reserve dev0") == {
        "envs": {"SDK_DEVICES": "dev0"},
        "mounts": [
            {"task_path": "/dev/sdk/dev0", "host_path": "/tmp/sdk/dev0", "read_only": False}
        ],
        "devices": [],
    }
    assert_ok(printed, "Reserve !print")
    assert not raised["ok"]
    assert raised["error"]["code"] == "Internal"
    assert "deliberate failure in reserve" in raised["error"]["message"]

    stats = assert_ok(report["stats"], "Stats")
    (group,) = stats["groups"]
    assert (group["vendor"], group["type"], group["name"]) == ("sdk", "test", "widget")
    assert sorted(group["instance_stats"]) == ["dev0", "dev1"]
    assert group["instance_stats"]["dev1"]["summary"] == {"int_numerator": 1, "unit": "ops"}

    # The plugin's stderr lines reach go-plugin's logger at their own levels.
    author = find_log(report, "author log")
    assert author["level"] == "info"
    assert author["fields"]["@module"] == "author"
    assert author["fields"]["answer"] == 42
    assert find_log(report, "printed to stderr")["level"] == "warn"
    assert find_log(report, "printed to stdout")["level"] == "debug"
    failure = find_log(report, "Reserve failed: deliberate failure in reserve")
    assert failure["level"] == "error"
    assert "Traceback (most recent call last)" in failure["fields"]["traceback"]
    assert "RuntimeError: deliberate failure in reserve" in failure["fields"]["traceback"]
    # Nothing the plugin wrote fell back to go-plugin's "not JSON" debug path.
    assert not [r for r in plugin_logs(report) if r["message"].startswith("{")]

    assert_graceful_kill(report)


def test_go_host_sends_given_config(gohost: GoHost) -> None:
    import msgpack

    config = msgpack.packb(
        {"devices": 3, "flaky": False, "invalid_group": False, "period_ms": 50, "stats_fail": False}
    )
    report = gohost("-quiet", "-config-hex", config.hex(), command=sdk_command("sync"))
    assert_ok(report["set_config"], "SetConfig")
    fingerprint = assert_ok(report["fingerprint"], "Fingerprint")
    assert [d["id"] for d in fingerprint["groups"][0]["devices"]] == ["dev0", "dev1", "dev2"]
    assert_graceful_kill(report)


def test_go_host_reports_set_config_error(gohost: GoHost) -> None:
    import msgpack

    config = msgpack.packb(
        {
            "devices": -1,
            "flaky": False,
            "invalid_group": False,
            "period_ms": 100,
            "stats_fail": False,
        }
    )
    report = gohost("-quiet", "-config-hex", config.hex(), command=sdk_command("sync"))
    result = report["set_config"]
    assert not result["ok"]
    assert result["error"]["code"] == "InvalidArgument"
    assert "devices: must not be negative" in result["error"]["message"]
    assert_graceful_kill(report)


# -- reattach --------------------------------------------------------------------

_PR_SET_CHILD_SUBREAPER = 36


@contextlib.contextmanager
def _adopt_orphans() -> Iterator[bool]:
    """Make this process the reaper of orphaned descendants while inside.

    The plugin outlives its first host; whoever inherits it must reap it
    promptly, or go-plugin (which polls the PID with signal 0 once a second)
    sees the zombie as alive and kills it "forcefully". Some container inits
    reap slowly, so the test adopts the orphan and reaps it itself.
    """
    if not sys.platform.startswith("linux"):
        yield False
        return
    libc = ctypes.CDLL(None, use_errno=True)
    adopted = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield adopted
    finally:
        if adopted:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _reap_when_it_exits(pid: int) -> threading.Thread:
    def wait() -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)

    thread = threading.Thread(target=wait, name=f"reap-{pid}", daemon=True)
    thread.start()
    return thread


def _pid_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_second_go_host_reattaches_after_first_dies(
    gohost: GoHost, gohost_process: Any, mode: str
) -> None:
    first = gohost_process("-quiet", "-print-reattach", command=sdk_command(mode))
    assert first.stdout is not None
    line = first.stdout.readline()
    assert line, "first host printed no reattach config"
    reattach = json.loads(line)
    assert reattach["network"] == "unix"
    pid = reattach["pid"]

    with _adopt_orphans() as adopted:
        first.send_signal(signal.SIGKILL)  # the host dies; the plugin must not
        first.wait(10)
    reaper = _reap_when_it_exits(pid) if adopted else None
    time.sleep(0.2)
    assert _pid_running(pid), "plugin died with its host"

    second = gohost("-reattach", json.dumps(reattach))
    assert second.get("error") is None, second["_stderr"][-4000:]
    assert second["mode"] == "reattach"
    info = assert_ok(second["plugin_info"], "PluginInfo after reattach")
    assert info["name"] == ("sdk-test" if mode == "sync" else "sdk-test-async")
    assert second["kill"]["process_gone"], second["kill"]
    if adopted:
        # The plugin left after Shutdown: go-plugin saw it go before its 2 s.
        assert second["kill"]["outcome"] == "graceful", second["kill"]
        assert reaper is not None
        reaper.join(5)
    assert not _pid_running(pid)
