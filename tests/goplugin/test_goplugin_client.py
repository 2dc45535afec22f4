"""The host side of go-plugin (goplugin/client.py): the stderr relay and kill."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest
from support import PLUGINS, SDK_PLUGIN

from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.host import DevicePluginClient

FLOOD = [sys.executable, str(PLUGINS / "floods_stderr.py")]


def _wait_for(predicate: Callable[[], bool], timeout: float = 30) -> bool:
    """Whether ``predicate`` came true within ``timeout`` (stderr lags the wire)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_raising_on_log_callback_is_logged_and_the_relay_keeps_draining(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[HclogEntry] = []

    def on_log(entry: HclogEntry) -> None:
        calls.append(entry)
        raise RuntimeError("the author's callback is broken")

    logger = logging.getLogger("test.relay")
    caplog.set_level(logging.DEBUG, logger="test.relay")
    client = DevicePluginClient.launch(FLOOD, logger=logger, on_log=on_log, start_timeout=30)
    try:
        # ~1 MiB of stderr from the plugin's event loop: it only returns if we keep reading.
        client.reserve(["x"], timeout=30)
        assert client.health(timeout=10) == "SERVING"
        assert _wait_for(
            lambda: any(r.getMessage().startswith("line 5000 ") for r in list(caplog.records))
        )
    finally:
        client.kill()
    failures = [r for r in caplog.records if "on_log callback raised" in r.getMessage()]
    assert len(failures) == 1  # once per distinct error, not once per line
    assert "RuntimeError: the author's callback is broken" in failures[0].getMessage()
    assert failures[0].exc_info is not None
    # The callback saw every line, and the relay logged each one.
    assert sum(1 for e in calls if e.message.startswith("line ")) == 5000


def test_distinct_callback_errors_are_logged_up_to_a_cap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def on_log(entry: HclogEntry) -> None:
        raise ValueError(entry.message[:12])  # a different error for each line

    logger = logging.getLogger("test.relay.cap")
    caplog.set_level(logging.DEBUG, logger="test.relay.cap")
    client = DevicePluginClient.launch(FLOOD, logger=logger, on_log=on_log, start_timeout=30)
    try:
        client.reserve(["x"], timeout=30)
        assert _wait_for(
            lambda: any("keeps failing" in r.getMessage() for r in list(caplog.records))
        )
    finally:
        client.kill()
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert sum("on_log callback raised" in m for m in messages) == 10
    assert sum("keeps failing" in m for m in messages) == 1


def test_kill_after_close_still_shuts_the_plugin_down() -> None:
    """close() drops the channel; kill() must then reach the plugin over a new one.

    Run in a child process: calling through a closed gRPC channel crashed the
    host with a segmentation fault.
    """
    script = textwrap.dedent(
        f"""
        import sys
        from nomad_device.host import DevicePluginClient

        client = DevicePluginClient.launch([sys.executable, {str(SDK_PLUGIN)!r}])
        client.process.close()
        result = client.kill()
        print(result.outcome, result.returncode)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["graceful", "0"]
