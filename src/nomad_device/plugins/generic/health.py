"""Is a device usable? Node checks on every scan, and optional probe commands.

Node checks are cheap and run on every scan. For each node a device brings:

- it exists (a dangling by-id link counts as missing);
- it is the expected kind: for USB nodes the kind and major:minor sysfs gives
  (a node left over from an earlier device is caught), for glob matches the
  kind it had when first seen, and for device nodes that the kernel has a
  device with that number at all;
- the plugin can ``access()`` it with the permissions the block grants. Nodes
  are never opened: opening ``/dev/watchdog`` arms it, opening a serial port
  toggles DTR and resets many boards.

A probe is the operator's own check (``probe { command = [...] }``). It runs
per device, in the background, every ``interval``, and is killed with its
process group after ``timeout``; exit status 0 is healthy, anything else is
unhealthy with the first line of its output (stdout and stderr together) as
the reason. The next successful run makes the device healthy again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from nomad_device.plugins.generic.config import ProbeSpec
from nomad_device.plugins.generic.discovery import Found, Node

__all__ = [
    "MAX_REASON",
    "ProbeResult",
    "ProbeTarget",
    "Prober",
    "describe_kind",
    "node_problem",
    "run_probe",
]

#: Longer reasons are cut: they end up in ``nomad node status`` tables.
MAX_REASON: Final = 200
#: Probes running at once; more wait their turn.
MAX_CONCURRENT_PROBES: Final = 8

_KIND_WORDS: Final = {
    "char": "character device",
    "block": "block device",
    "file": "regular file",
    "directory": "directory",
    "socket": "socket",
    "fifo": "named pipe",
    "other": "special file",
    "missing": "missing file",
}


def describe_kind(kind: str) -> str:
    return _KIND_WORDS.get(kind, kind)


def _access_words(mode: int) -> str:
    wanted = [w for bit, w in ((os.R_OK, "reading"), (os.W_OK, "writing")) if mode & bit]
    return " and ".join(wanted)


def node_problem(
    node: Node, permissions: str, first_kind: str | None, canonical: Callable[[str], str]
) -> str | None:
    """Why this node makes its device unhealthy, or None when it is fine."""
    where = node.task_path
    if node.kind == "missing":
        if node.resolved != node.path:
            return f"{where} points to {canonical(node.resolved)}, which does not exist"
        return f"{where} does not exist"
    if node.expect is not None:
        kind, major, minor = node.expect
        if node.kind != kind:
            return f"{where} is a {describe_kind(node.kind)}, not a {describe_kind(kind)}"
        if (node.major, node.minor) != (major, minor):
            return (
                f"{where} is {node.major}:{node.minor}, but the kernel's device is"
                f" {major}:{minor} (a stale node?)"
            )
    elif first_kind is not None and node.kind != first_kind:
        return f"{where} is now a {describe_kind(node.kind)}, it was a {describe_kind(first_kind)}"
    elif node.is_device and node.known is False:
        return (
            f"{where} is {describe_kind(node.kind)} {node.major}:{node.minor}, which no"
            " device in the kernel has (a stale node?)"
        )
    mode = (os.R_OK if "r" in permissions else 0) | (os.W_OK if "w" in permissions else 0)
    if mode and not _accessible(node.resolved, mode):
        return f"the plugin (uid {os.geteuid()}) may not open {where} for {_access_words(mode)}"
    return None


def _accessible(path: str, mode: int) -> bool:
    if os.access in os.supports_effective_ids:
        return os.access(path, mode, effective_ids=True)
    return os.access(path, mode)


# ------------------------------------------------------------------------- probes


@dataclass(frozen=True)
class ProbeTarget:
    spec: ProbeSpec
    env: Mapping[str, str]


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str  # "" when ok
    duration: float  # seconds
    finished: float  # time.monotonic()
    finished_wall: float  # time.time()
    spec: ProbeSpec


def probe_env(found: Found) -> dict[str, str]:
    """What a probe is told about its device (documented in docs/plugins/generic.md)."""
    nodes = [n.resolved for n in found.nodes]
    return {
        "GENERIC_DEVICE_ID": found.id,
        "GENERIC_DEVICE_KIND": found.label,
        "GENERIC_DEVICE_PATH": nodes[0] if nodes else "",
        "GENERIC_DEVICE_PATHS": ",".join(nodes),
    }


def _first_line(output: bytes) -> str:
    for line in output.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= MAX_REASON else line[: MAX_REASON - 1] + "…"
    return ""


def run_probe(target: ProbeTarget) -> ProbeResult:
    """Run one probe to completion or timeout (blocking; call it in a thread)."""
    spec = target.spec
    env = {**os.environ, **target.env}
    start = time.monotonic()

    def result(ok: bool, reason: str) -> ProbeResult:
        end = time.monotonic()
        return ProbeResult(ok, reason, end - start, end, time.time(), spec)

    try:
        proc = subprocess.Popen(
            list(spec.command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        return result(False, f"probe {spec.command[0]} could not start: {why}")
    try:
        output, _ = proc.communicate(timeout=spec.timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=1)
        return result(False, f"probe timed out after {spec.timeout:g}s")
    if proc.returncode == 0:
        return result(True, "")
    line = _first_line(output)
    if line:
        return result(False, line)
    if proc.returncode < 0:
        return result(False, f"probe killed by signal {-proc.returncode}")
    return result(False, f"probe exited with status {proc.returncode}")


class Prober:
    """Runs the probes of the devices the last scan found, each on its own interval.

    ``track`` (from any thread) says which devices to probe; ``run`` (a
    coroutine, inside the plugin's ``watch``) does the work and calls
    ``on_change`` whenever a device's verdict changes, so a rescan publishes it.
    """

    def __init__(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        self._lock = threading.Lock()
        self._targets: dict[tuple[str, str], ProbeTarget] = {}
        self._results: dict[tuple[str, str], ProbeResult] = {}
        self._wake: Callable[[], None] | None = None

    def track(self, targets: Mapping[tuple[str, str], ProbeTarget]) -> None:
        with self._lock:
            changed = targets != self._targets
            self._targets = dict(targets)
            for key in [k for k in self._results if k not in targets]:
                del self._results[key]
            wake = self._wake
        if changed and wake is not None:
            wake()

    def result(self, key: tuple[str, str]) -> ProbeResult | None:
        with self._lock:
            result = self._results.get(key)
            target = self._targets.get(key)
        if result is None or target is None or result.spec != target.spec:
            return None
        return result

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        limit = asyncio.Semaphore(MAX_CONCURRENT_PROBES)
        running: dict[tuple[str, str], asyncio.Task[ProbeResult]] = {}

        def wake() -> None:
            loop.call_soon_threadsafe(event.set)

        async def one(target: ProbeTarget) -> ProbeResult:
            async with limit:
                return await asyncio.to_thread(run_probe, target)

        with self._lock:
            self._wake = wake
        try:
            while True:
                event.clear()
                now = time.monotonic()
                with self._lock:
                    targets = dict(self._targets)
                    results = dict(self._results)
                next_due = float("inf")
                for key, target in targets.items():
                    if key in running:
                        continue
                    last = results.get(key)
                    if last is None or last.spec != target.spec:
                        due = now
                    else:
                        due = last.finished + target.spec.interval
                    if due <= now:
                        running[key] = asyncio.create_task(one(target))
                    else:
                        next_due = min(next_due, due)
                timeout = None if next_due == float("inf") else max(0.0, next_due - now)
                woken = asyncio.create_task(event.wait())
                try:
                    await asyncio.wait(
                        {woken, *running.values()},
                        timeout=timeout,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    woken.cancel()
                self._collect(running)
        finally:
            with self._lock:
                self._wake = None
            for task in running.values():
                task.cancel()

    def _collect(self, running: dict[tuple[str, str], asyncio.Task[ProbeResult]]) -> None:
        changed = False
        for key, task in list(running.items()):
            if not task.done():
                continue
            del running[key]
            if task.cancelled():
                continue
            error = task.exception()
            if error is not None:
                raise error
            result = task.result()
            with self._lock:
                if key not in self._targets or self._targets[key].spec != result.spec:
                    continue
                before = self._results.get(key)
                self._results[key] = result
            if before is None or (before.ok, before.reason) != (result.ok, result.reason):
                changed = True
        if changed:
            self._on_change()
