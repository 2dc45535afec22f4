"""Launching a plugin safely: signals, interruptible start-up, streams, log lines.

The launcher must never leave a plugin process behind. Device plugins ignore
SIGINT (Ctrl-C reaches the whole process group, and a Nomad agent decides when
its plugins stop), so on Ctrl-C, SIGTERM or SIGHUP the launcher kills the
plugin itself, the way Nomad does: Shutdown RPC, a grace period, then SIGKILL.
A second signal during that clean-up cuts the grace period short (SIGKILL at
once) instead of abandoning the process.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as _dt
import json
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Sequence
from typing import Final, Generic, TypeVar

from nomad_device.cli.console import Console
from nomad_device.cli.process import Interrupted, SignalGuard, resolve_command
from nomad_device.cli.render import Style
from nomad_device.constants import DROPPED_FIELD
from nomad_device.display import printable
from nomad_device.goplugin.client import KillResult, PluginError
from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.host import CallError, DevicePluginClient, Stream

__all__ = [
    "Interrupted",
    "PluginDied",
    "PluginError",
    "PluginSession",
    "SignalGuard",
    "StreamEnded",
    "StreamPump",
    "display_name",
    "format_log",
    "resolve_command",
]

T = TypeVar("T")

_LEVEL_ORDER: Final = {"trace": 0, "debug": 1, "info": 2, "warn": 3, "error": 4}


class PluginDied(Exception):
    """The plugin process ended while the launcher still needed it."""


def display_name(command: Sequence[str]) -> str:
    """The plugin as the user named it: the script for ``python script.py``."""
    if not command:
        return "plugin"
    if len(command) > 1 and os.path.basename(command[0]).startswith("python"):
        return command[1]
    return command[0]


def _child_pids() -> set[int]:
    """PIDs of this process's children (Linux /proc; empty where unavailable)."""
    me = os.getpid()
    found: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and fields[1].isdigit() and int(fields[1]) == me:
            found.add(int(name))
    return found


def format_log(entry: HclogEntry, name: str, style: Style) -> str:
    """A plugin's hclog entry as one terminal line, like a Nomad agent's log."""
    when = entry.timestamp or _dt.datetime.now().astimezone()
    stamp = when.astimezone().isoformat(timespec="milliseconds")
    level = entry.level.upper() if entry.level in _LEVEL_ORDER else "DEBUG"
    tag = style.level(entry.level, f"[{level}]")
    pad = " " * (7 - len(level) - 2)
    module = entry.module or name
    # What the plugin wrote is shown, never obeyed: escaped before the level's colour.
    text = f"{stamp} {tag}{pad} {printable(module)}: {printable(entry.message)}"
    for key, value in entry.fields.items():
        if isinstance(value, str) and value and not any(c.isspace() for c in value):
            shown = value
        else:
            shown = json.dumps(value, ensure_ascii=False, default=str)
        text += f" {printable(key)}={printable(shown)}"
    return text


class StreamEnded(Exception):
    """The plugin ended a stream (Nomad treats that as fatal for the plugin)."""


class StreamPump(Generic[T]):
    """Reads a :class:`Stream` on a daemon thread so the main thread can wait with
    timeouts and still be interrupted by Ctrl-C at any moment."""

    def __init__(self, stream: Stream[T], name: str) -> None:
        self.stream = stream
        self.name = name
        self._queue: queue.Queue[tuple[str, object]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"pump-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for message in self.stream:
                self._queue.put(("message", message))
            self._queue.put(("end", None))
        except CallError as exc:
            self._queue.put(("error", exc))
        except Exception as exc:
            self._queue.put(("error", exc))

    def get(self, timeout: float | None = None) -> T:
        """The next message; raises TimeoutError, :class:`StreamEnded` or CallError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError(f"{self.name}: no message within {timeout:g}s")
            try:
                kind, value = self._queue.get(timeout=wait)
            except queue.Empty:
                continue
            if kind == "message":
                return value  # type: ignore[return-value]
            if kind == "end":
                raise StreamEnded(f"the plugin ended the {self.name} stream")
            assert isinstance(value, Exception)
            raise value

    def cancel(self) -> None:
        with contextlib.suppress(Exception):
            self.stream.cancel()


class PluginSession:
    """One plugin process launched for the launcher, with its log lines shown."""

    def __init__(
        self,
        command: Sequence[str],
        console: Console,
        guard: SignalGuard,
        *,
        start_timeout: float,
        log_level: str = "info",
    ) -> None:
        self.command = list(command)
        self.console = console
        self.guard = guard
        self.start_timeout = start_timeout
        self.log_threshold = _LEVEL_ORDER.get(log_level, 2)
        self.name = os.path.basename(display_name(self.command))
        self.recent: collections.deque[HclogEntry] = collections.deque(maxlen=12)
        #: What the plugin said it left out of its messages (``dropped=<kind>``), by kind.
        self.dropped: collections.Counter[str] = collections.Counter()
        self.client: DevicePluginClient | None = None
        self._closed = False
        self._quiet_logger = logging.getLogger("nomad_device.cli.plugin-relay")
        self._quiet_logger.propagate = False
        if not self._quiet_logger.handlers:
            self._quiet_logger.addHandler(logging.NullHandler())

    def on_log(self, entry: HclogEntry) -> None:
        self.recent.append(entry)
        kind = entry.fields.get(DROPPED_FIELD)
        if isinstance(kind, str):
            self.dropped[kind] += 1
        level = entry.level if entry.level in _LEVEL_ORDER else "debug"
        if _LEVEL_ORDER[level] >= self.log_threshold:
            self.console.log(format_log(entry, self.name, self.console.err_style))

    # -- start --------------------------------------------------------------------

    def start(self) -> DevicePluginClient:
        """Launch like a Nomad client; Ctrl-C during start-up leaves no process behind."""
        before = _child_pids()
        box: queue.Queue[tuple[str, object]] = queue.Queue()

        def run() -> None:
            try:
                client = DevicePluginClient.launch(
                    self.command,
                    logger=self._quiet_logger,
                    on_log=self.on_log,
                    start_timeout=self.start_timeout,
                )
                box.put(("ok", client))
            except BaseException as exc:
                box.put(("error", exc))

        thread = threading.Thread(target=run, name="plugin-launch", daemon=True)
        thread.start()
        try:
            while True:
                try:
                    kind, value = box.get(timeout=0.2)
                    break
                except queue.Empty:
                    continue
        except BaseException:
            with self.guard.cleanup():
                self._abort_start(before, thread, box)
            raise
        if kind == "error":
            assert isinstance(value, BaseException)
            raise value
        assert isinstance(value, DevicePluginClient)
        self.client = value
        self.guard.watch(value.process.pid)
        return value

    def _abort_start(
        self, before: set[int], thread: threading.Thread, box: queue.Queue[tuple[str, object]]
    ) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for pid in _child_pids() - before:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            thread.join(0.1)
            if not thread.is_alive():
                break
        with contextlib.suppress(queue.Empty):
            kind, value = box.get_nowait()
            if kind == "ok" and isinstance(value, DevicePluginClient):
                value.process.kill(grace=0.5)

    # -- state --------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.client.process.pid if self.client is not None else None

    def exit_status(self) -> int | None:
        """The plugin's exit status if it has ended, else None."""
        if self.client is None or self.client.process.process is None:
            return None
        return self.client.process.process.poll()

    def describe_exit(self, status: int) -> str:
        if status < 0:
            try:
                how = f"killed by {signal.Signals(-status).name}"
            except ValueError:
                how = f"killed by signal {-status}"
        else:
            how = f"exit status {status}"
        text = f"the plugin exited unexpectedly ({how})"
        tail = [e.message for e in self.recent if e.raw or _LEVEL_ORDER.get(e.level, 1) >= 2]
        if tail:
            text += "; its last output:\n" + "\n".join("  " + line for line in tail[-6:])
        return text

    def crashed(self, exc: BaseException) -> int | None:
        """The plugin's exit status if ``exc`` came from its death, else None.

        A lost connection usually means the process is going away, so the exit is
        given a moment to be observed (and its last log lines to arrive).
        """
        lost = not isinstance(exc, CallError) or exc.code.name in ("UNAVAILABLE", "CANCELLED")
        deadline = time.monotonic() + (2.0 if lost else 0.1)
        status = self.exit_status()
        while status is None and time.monotonic() < deadline:
            time.sleep(0.02)
            status = self.exit_status()
        if status is not None:
            time.sleep(0.05)
        return status

    def explain(self, exc: BaseException) -> str:
        """An operator-level sentence for a failure, naming a crashed plugin as such."""
        status = self.crashed(exc)
        if status is not None:
            return self.describe_exit(status)
        if isinstance(exc, CallError):
            return f"{exc.method} failed: {exc.code.name}: {exc.details}"
        return str(exc)

    # -- stop -----------------------------------------------------------------------

    def close(self) -> KillResult | None:
        """Kill the plugin as Nomad does; safe to call twice; not interruptible."""
        if self._closed or self.client is None:
            return None
        self._closed = True
        with self.guard.cleanup():
            result = self.client.kill()
        self.guard.forget(self.client.process.pid)
        return result
