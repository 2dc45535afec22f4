"""The plugin's own time: the wall clock less what a busy host kept the plugin waiting for a CPU.

Every time bound the suite applies (the handshake, the first fingerprint, the exit
after Shutdown, the stats cadence) is about the plugin. On a loaded machine, a CI
runner beside other jobs, wall time also counts the time the plugin sat runnable
in the kernel's run queue while other processes had the CPUs, and a good plugin
would be failed for the host's business. Linux counts that wait for every thread
(``/proc/PID/task/TID/schedstat``, second field); the plugin's time since a mark
is the wall time less the longest such wait of any one thread of the plugin or
of a process it started (one thread's wait, not the sum: threads wait side by
side). Time the plugin sleeps, blocks on I/O or spends computing still counts,
so a plugin slow by itself is still found on a busy machine; on an idle one the
two clocks agree. Without ``/proc`` (not Linux) the plugin's time is wall time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

__all__ = ["STRETCH", "Mark", "PluginClock"]

#: However busy the host, a bound is never stretched past this many times its
#: wall length, so a starved run still ends.
STRETCH = 20.0


@dataclass(frozen=True)
class Mark:
    """A point in time: the wall clock, and each thread's run-queue wait so far."""

    wall: float
    waits: Mapping[int, int]


class PluginClock:
    """Reads the plugin's own time for the process ``pid`` and those it started."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        # Each thread's wait as last read: a thread that has ended (or a plugin that
        # exited) keeps what it waited.
        self._seen: dict[int, int] = {}
        self._lock = threading.Lock()

    def mark(self) -> Mark:
        return Mark(time.monotonic(), self._waits())

    def since(self, mark: Mark) -> float:
        """Seconds of the plugin's own time since ``mark``."""
        wall = time.monotonic() - mark.wall
        now = self._waits()
        waited = max((ns - mark.waits.get(tid, 0) for tid, ns in now.items()), default=0) / 1e9
        return max(wall - waited, wall / STRETCH, 0.0)

    def wait(self, step: Callable[[float], bool], bound: float, mark: Mark | None = None) -> bool:
        """Call ``step(timeout)`` until it returns True or ``bound`` seconds of the plugin's
        time have passed since ``mark`` (now if None); whether it returned True.

        ``step`` blocks for up to ``timeout`` wall seconds; the plugin's time never runs
        ahead of the wall clock, so no wait overshoots the bound.
        """
        start = mark or self.mark()
        while True:
            left = bound - self.since(start)
            if left <= 0:
                return False
            if step(max(left, 0.01)):
                return True

    def _waits(self) -> dict[int, int]:
        """Run-queue wait so far, in ns, of every thread of the process tree seen yet."""
        read: dict[int, int] = {}
        for pid in _tree(self.pid) if self.pid is not None else ():
            for task in _listdir(f"/proc/{pid}/task"):
                fields = _read(f"/proc/{pid}/task/{task}/schedstat").split()
                if len(fields) >= 2:
                    read[int(task)] = int(fields[1])
        with self._lock:
            for tid, ns in read.items():
                self._seen[tid] = max(ns, self._seen.get(tid, 0))
            return dict(self._seen)


def _tree(pid: int) -> Iterator[int]:
    """``pid`` and its descendants (each thread's ``children`` file names those it forked)."""
    todo = [pid]
    while todo:
        current = todo.pop()
        yield current
        for tid in _listdir(f"/proc/{current}/task"):
            children = _read(f"/proc/{current}/task/{tid}/children")
            todo.extend(int(child) for child in children.split())


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _read(path: str) -> bytes:
    """A /proc file's contents; nothing once its thread or process is gone."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""
