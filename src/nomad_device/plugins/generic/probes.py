"""Probe commands: the operator's own health check for a device, run so that it cannot hurt.

A probe (``probe { command = [...] }``) runs per device every ``interval``;
exit status 0 is healthy, anything else unhealthy, with the first line of
its output as the reason. The plugin runs as root and lives as long as the
Nomad agent, so a probe is held to what it was asked to do:

- **Output** is read as it comes; the first 64 KiB are kept, the rest is
  read and dropped (a probe printing gigabytes costs time, not memory, and is
  never blocked on a full pipe). The reason is its first non-empty line,
  without control characters or terminal escapes, at most 200 characters.
- **The whole process tree** ends with the probe: on exit (whatever it left
  running), on timeout, and when the plugin stops. Each probe runs under a
  small reaper of its own (:data:`REAPER`, ``python -I -S -c``): the
  reaper is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``), so everything
  the probe starts, ``setsid`` and double-forked daemons included, stays
  its descendant; when the command exits, or the plugin sends it SIGTERM, it
  SIGKILLs every descendant it finds in ``/proc`` and reaps them until it
  has no child left. ``PR_SET_PDEATHSIG`` sends it that SIGTERM even when
  the plugin dies without a word (Nomad's SIGKILL).

  Why not make the plugin itself the subreaper: orphans would then be the
  plugin's own children, and reaping them needs ``waitpid(-1)``, which
  steals the exit status that :mod:`subprocess` waits for on its own
  children (a failed probe would read as exit 0); and telling one probe's
  orphans from another's is guesswork. A reaper per probe has no such
  neighbour. Why not a cgroup: it needs a writable, delegated cgroup v2
  subtree, which Nomad does not give its plugins (and cgroup v1 hosts have
  no ``cgroup.kill``).
- **Environment**: ``PATH`` (the plugin's, absolute entries only), ``LANG``,
  the ``GENERIC_DEVICE_*`` variables and the probe's ``env`` block; nothing
  else of the agent's (``NOMAD_TOKEN``, the plugin cookie, ``PLUGIN_*``).
  The working directory is ``/``.
- **Failure to run** (no such program, a bad argument) is a verdict,
  ``probe <program> could not start: <reason>``, never an exception: one
  broken probe cannot stop the others, nor the plugin's event sources.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import signal
import subprocess
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from nomad_device.interpreter import python_command
from nomad_device.plugin import DevicePlugin, Scheduled
from nomad_device.plugins.generic.config import ProbeSpec
from nomad_device.plugins.generic.discovery import Found

Key = tuple[str, str]

__all__ = [
    "MAX_OUTPUT",
    "MAX_REASON",
    "REAPER",
    "ProbeProcesses",
    "ProbeResult",
    "ProbeTarget",
    "Prober",
    "clean_reason",
    "probe_env",
    "run_probe",
]

#: Longer reasons are cut: they end up in ``nomad node status`` tables.
MAX_REASON: Final = 200
#: Output kept per run; the rest is read and dropped.
MAX_OUTPUT: Final = 64 * 1024
#: Probes running at once; more wait their turn.
MAX_CONCURRENT_PROBES: Final = 8
#: How long a reaper may take to kill and reap its tree once asked.
STOP_GRACE: Final = 2.0
#: PATH when the plugin has none of its own.
DEFAULT_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The reaper: its own argv is [parent pid, status fd, command...]. Standard
# library only, and nothing of this package: it runs under ``python -I -S``.
# It reports on the status fd, once: "exit N" (N from waitstatus_to_exitcode,
# negative for a signal), "stopped" (SIGTERM came first) or "nostart ERRNO".
REAPER: Final = r"""
import ctypes, os, signal, sys
parent, status_fd, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
os.set_inheritable(status_fd, False)  # the probe must neither hold nor forge it
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
stops = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, stops | {signal.SIGCHLD})
me = os.getpid()

def report(text):
    os.write(status_fd, text.encode() + b"\n")

def descendants():
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/" + name + "/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(name))
    found, todo = [], [me]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found

def end_tree():
    while True:
        for pid in descendants():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return

outcome = "stopped"
if os.getppid() == parent:
    try:
        child = os.posix_spawnp(
            argv[0], argv, os.environ,
            setsigmask=(),
            setsigdef=tuple(stops | {signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ}),
        )
    except OSError as exc:
        outcome = "nostart %d" % (exc.errno or 0)
        child = None
    while child is not None:
        if signal.sigwaitinfo(stops | {signal.SIGCHLD}).si_signo != signal.SIGCHLD:
            break
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            if pid == child:
                outcome = "exit %d" % os.waitstatus_to_exitcode(status)
                child = None
end_tree()
report(outcome)
"""

_ANSI: Final = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)")


def clean_reason(output: bytes) -> str:
    """The first line with something readable in it, fit for ``nomad node status``.

    Terminal escapes (colours, titles) go whole; other control and format
    characters (bidi overrides, zero-width ones) are dropped; tabs become spaces.
    """
    text = output.decode("utf-8", "replace")
    for line in text.splitlines():
        line = _ANSI.sub("", line.replace("\t", " "))
        line = "".join(c for c in line if unicodedata.category(c) not in ("Cc", "Cf"))
        line = line.strip()
        if line:
            return line if len(line) <= MAX_REASON else line[: MAX_REASON - 1] + "…"
    return ""


@dataclass(frozen=True)
class ProbeTarget:
    spec: ProbeSpec
    env: Mapping[str, str]  # the GENERIC_DEVICE_* variables


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str  # "" when ok
    duration: float  # seconds
    finished: float  # time.monotonic()
    spec: ProbeSpec


def probe_env(found: Found) -> dict[str, str]:
    """What a probe is told about its device (documented in docs/plugins/generic.md)."""
    nodes = [n.resolved for n in found.all_nodes]
    env = {
        "GENERIC_DEVICE_ID": found.id,
        "GENERIC_DEVICE_KIND": found.label,
        "GENERIC_DEVICE_PATH": nodes[0] if nodes else "",
        "GENERIC_DEVICE_PATHS": ",".join(nodes),
    }
    if found.pci_bus_id is not None:
        env["GENERIC_DEVICE_PCI_ADDRESS"] = found.pci_bus_id
    return env


def environment(target: ProbeTarget, inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """``PATH``, ``LANG``, the device's variables and the operator's: nothing else."""
    inherited = os.environ if inherited is None else inherited
    path = ":".join(p for p in inherited.get("PATH", "").split(":") if p.startswith("/"))
    env = {"PATH": path or DEFAULT_PATH}
    if "LANG" in inherited:
        env["LANG"] = inherited["LANG"]
    return {**env, **target.env, **target.spec.env}


class ProbeProcesses:
    """The reapers running now, so that the plugin's close() can end them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    def add(self, process: subprocess.Popen[bytes]) -> bool:
        """Track ``process``; False (and it is stopped) once close() has begun."""
        with self._lock:
            if not self._closed:
                self._running.add(process)
                return True
        _stop(process)
        return False

    def discard(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.discard(process)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, grace: float = 0.5) -> None:
        """Ask every reaper to end its tree, wait up to ``grace`` seconds in all, then
        SIGKILL what is left (the probe's process group with it). Safe from any thread."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for process in running:
            with contextlib.suppress(OSError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
            if process.poll() is None:
                _stop(process, grace=0.0)


def _stop(process: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> None:
    """SIGTERM the reaper (it kills its tree), then SIGKILL its group if it lingers."""
    with contextlib.suppress(OSError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(1.0)


def _read_output(process: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bool]:
    """Read the probe's output until EOF or ``deadline``: (first MAX_OUTPUT bytes, ended)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    kept = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(kept), False
        if not poller.poll(max(1, int(left * 1000))):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return bytes(kept), True
        if len(kept) < MAX_OUTPUT:
            kept += chunk[: MAX_OUTPUT - len(kept)]


def _status(fd: int) -> str:
    """The reaper's one line; "" if it died before writing it."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 256).decode("ascii", "replace").strip()
    except OSError:
        return ""


def run_probe(target: ProbeTarget, processes: ProbeProcesses, what: str = "probe") -> ProbeResult:
    """Run one probe to its end or timeout (blocking: call it on a worker thread).

    Never raises for anything the probe does: every outcome is a result.
    ``what`` names the command in the reasons (``release command`` for one
    that cleans a device after a release: the same rules, another purpose).
    """
    spec = target.spec
    start = time.monotonic()

    def result(ok: bool, reason: str) -> ProbeResult:
        end = time.monotonic()
        return ProbeResult(ok, reason, end - start, end, spec)

    program = spec.command[0] if spec.command else "(none)"
    if processes.closed:
        return result(False, "the plugin is stopping")
    try:
        python = python_command()
    except FileNotFoundError as exc:
        return result(False, f"{what} {program} could not start: {exc}")
    read_status, write_status = os.pipe()
    reaper = [*python, "-c", REAPER, str(os.getpid()), str(write_status)]
    try:
        process = subprocess.Popen(
            [*reaper, *spec.command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=environment(target),
            cwd="/",
            start_new_session=True,
            pass_fds=(write_status,),
        )
    except (OSError, ValueError) as exc:
        os.close(read_status)
        return result(False, f"{what} {program} could not start: {_why(exc)}")
    finally:
        os.close(write_status)
    try:
        if not processes.add(process):
            return result(False, "the plugin is stopping")
        deadline = start + spec.timeout
        try:
            output, ended = _read_output(process, deadline)
            if ended:  # the output is closed; the probe itself may still run
                try:
                    process.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    ended = False
            if not ended:
                _stop(process)
                return result(False, f"{what} timed out after {spec.timeout:g}s")
        finally:
            processes.discard(process)
            if process.stdout is not None:
                process.stdout.close()
        return _verdict(_status(read_status), output, what, program, result)
    finally:
        os.close(read_status)


def _verdict(
    status: str,
    output: bytes,
    what: str,
    program: str,
    result: Callable[[bool, str], ProbeResult],
) -> ProbeResult:
    word, _, number = status.partition(" ")
    command = f"{what} {program}"
    if not word:  # the reaper itself failed (its traceback is in the output)
        line = clean_reason(output.splitlines()[-1] if output.strip() else b"")
        return result(False, f"{command} could not be run: {line or 'no status'}")
    if word == "nostart":
        code = int(number) if number.isdigit() else 0
        return result(False, f"{command} could not start: {os.strerror(code).lower()}")
    if word != "exit" or not number.lstrip("-").isdigit():
        return result(False, "the plugin is stopping")
    code = int(number)
    if code == 0:
        return result(True, "")
    line = clean_reason(output)
    if line:
        return result(False, line)
    if code < 0:
        return result(False, f"{what} killed by signal {-code}")
    return result(False, f"{what} exited with status {code}")


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return (exc.strerror or str(exc)).lower()
    return str(exc)


class Prober:
    """The probes of the devices the last scan found, each on its own interval.

    They belong to the plugin, not to a stream: :meth:`track` (from
    ``detect``, any thread) says which devices to probe, and each probe is a
    timer of the plugin's (``call_later``) whose run takes a thread of the
    plugin's ``probes`` pool (:data:`MAX_CONCURRENT_PROBES` at once; more
    wait their turn). ``on_change`` is called whenever a verdict changes, so
    a rescan publishes it. :meth:`close` ends every process tree.
    """

    #: The plugin's worker pool for probe runs.
    POOL: Final = "probes"

    def __init__(
        self, plugin: DevicePlugin[Any], on_change: Callable[[], None], log: logging.Logger
    ) -> None:
        self._plugin = plugin
        self._on_change = on_change
        self._log = log
        self.processes = ProbeProcesses()
        self._lock = threading.Lock()
        self._targets: dict[Key, ProbeTarget] = {}
        self._results: dict[Key, ProbeResult] = {}
        self._timers: dict[Key, Scheduled] = {}
        self._running: set[Key] = set()

    def track(self, targets: Mapping[Key, ProbeTarget]) -> None:
        now = time.monotonic()
        with self._lock:
            before, self._targets = self._targets, dict(targets)
            for key in [k for k in self._results if k not in targets]:
                del self._results[key]
            for key in [k for k in self._timers if targets.get(k) != before.get(k)]:
                self._timers.pop(key).cancel()
            for key, target in targets.items():
                if key in self._timers or key in self._running:
                    continue
                last = self._results.get(key)
                if last is None or last.spec != target.spec:
                    self._schedule(key, 0.0)
                else:
                    self._schedule(key, max(0.0, last.finished + target.spec.interval - now))

    def result(self, key: Key) -> ProbeResult | None:
        with self._lock:
            result = self._results.get(key)
            target = self._targets.get(key)
        if result is None or target is None or result.spec != target.spec:
            return None
        return result

    def _schedule(self, key: Key, delay: float) -> None:
        """With the lock held: run ``key``'s probe in ``delay`` seconds."""
        if self.processes.closed:
            return

        async def due() -> None:
            await self._due(key)

        self._timers[key] = self._plugin.call_later(delay, due)

    async def _due(self, key: Key) -> None:
        with self._lock:
            self._timers.pop(key, None)
            target = self._targets.get(key)
            if target is None or key in self._running:
                return
            self._running.add(key)
        try:
            result = await self._plugin.run_blocking(self._run, target, pool=self.POOL)
        except RuntimeError:  # the plugin closed
            return
        finally:
            with self._lock:
                self._running.discard(key)
        changed = False
        with self._lock:
            current = self._targets.get(key)
            if current is None:
                return
            if current.spec == result.spec:
                before = self._results.get(key)
                self._results[key] = result
                changed = before is None or (before.ok, before.reason) != (result.ok, result.reason)
                self._schedule(key, result.spec.interval)
            else:
                self._schedule(key, 0.0)  # the block changed while it ran
        if changed:
            self._on_change()

    def _run(self, target: ProbeTarget) -> ProbeResult:
        """One run; a bug here is a verdict and a log line, never the end of probing."""
        start = time.monotonic()
        try:
            return run_probe(target, self.processes)
        except Exception as exc:
            self._log.exception(
                "probe failed to run", extra={"command": " ".join(target.spec.command)}
            )
            reason = clean_reason(f"probe failed to run: {type(exc).__name__}: {exc}".encode())
            end = time.monotonic()
            return ProbeResult(False, reason, end - start, end, target.spec)

    def close(self) -> None:
        """End every probe's process tree; no probe starts after this."""
        with self._lock:
            timers, self._timers = list(self._timers.values()), {}
        self.processes.close()
        for timer in timers:
            timer.cancel()
