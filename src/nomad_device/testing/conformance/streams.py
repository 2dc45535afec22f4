"""Watch a server stream the way Nomad holds one: read it in the background, note every
message's arrival time (on the wall clock and in the plugin's own time), and tell an end
the plugin chose from a cancel we issued."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from nomad_device.testing.conformance.clock import PluginClock
from nomad_device.testing.conformance.suite import seconds

__all__ = ["StreamWatch"]


class StreamWatch:
    """Consumes a server stream in a thread, keeping every message with its time."""

    def __init__(self, call: Any, name: str, clock: PluginClock | None = None) -> None:
        self._call = call
        self.clock = clock or PluginClock(None)
        self._mark = self.clock.mark()
        self.started = self._mark.wall
        self.messages: list[tuple[float, Any]] = []
        #: Each message's arrival in the plugin's own time since the start (:mod:`.clock`).
        self.own_times: list[float] = []
        self.ended_at: float | None = None
        self._own_ended_at: float | None = None
        self.end_code: grpc.StatusCode | None = None
        self.end_details = ""
        self._cancelled = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        code, details = grpc.StatusCode.OK, ""
        try:
            for message in self._call:
                at, own = time.monotonic() - self.started, self.clock.since(self._mark)
                with self._cond:
                    self.messages.append((at, message))
                    self.own_times.append(own)
                    self._cond.notify_all()
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = (exc.details() if isinstance(exc, grpc.Call) else str(exc)) or ""
        with self._cond:
            if not (self._cancelled and code == grpc.StatusCode.CANCELLED):
                self.ended_at = time.monotonic() - self.started
                self._own_ended_at = self.clock.since(self._mark)
                self.end_code, self.end_details = code, details
            self._cond.notify_all()

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate`` holds or the stream ends, ``timeout`` seconds at most of
        the plugin's own time; the predicate's value."""

        def step(left: float) -> bool:
            with self._cond:
                return self._cond.wait_for(lambda: predicate() or self.ended, left)

        self.clock.wait(step, timeout)
        with self._cond:
            return predicate()

    def own_elapsed(self) -> float:
        """The plugin's own time the stream has been open (until its end, if it ended)."""
        if self._own_ended_at is not None:
            return self._own_ended_at
        return self.clock.since(self._mark)

    def snapshot(self) -> list[tuple[float, Any]]:
        with self._cond:
            return list(self.messages)

    def own_snapshot(self) -> list[float]:
        with self._cond:
            return list(self.own_times)

    def describe_end(self) -> str:
        assert self.ended_at is not None and self.end_code is not None
        when = f"after {seconds(self.ended_at)}"
        if self.end_code == grpc.StatusCode.OK:
            return f"the stream ended {when} (the handler returned)"
        return f"the stream failed {when}: {self.end_code.name}: {self.end_details}"

    def cancel(self) -> None:
        with self._cond:
            self._cancelled = True
        self._call.cancel()
        self._thread.join(2.0)
