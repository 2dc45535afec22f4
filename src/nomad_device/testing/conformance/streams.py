"""Watch a server stream the way Nomad holds one: read it in the background, note every
message's arrival time, and tell an end the plugin chose from a cancel we issued."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from nomad_device.testing.conformance.suite import seconds

__all__ = ["StreamWatch"]


class StreamWatch:
    """Consumes a server stream in a thread, keeping every message with its time."""

    def __init__(self, call: Any, name: str) -> None:
        self._call = call
        self.started = time.monotonic()
        self.messages: list[tuple[float, Any]] = []
        self.ended_at: float | None = None
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
                with self._cond:
                    self.messages.append((time.monotonic() - self.started, message))
                    self._cond.notify_all()
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = (exc.details() if isinstance(exc, grpc.Call) else str(exc)) or ""
        with self._cond:
            if not (self._cancelled and code == grpc.StatusCode.CANCELLED):
                self.ended_at = time.monotonic() - self.started
                self.end_code, self.end_details = code, details
            self._cond.notify_all()

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate`` holds or the stream ends; the predicate's value."""
        with self._cond:
            self._cond.wait_for(lambda: predicate() or self.ended, max(0.0, timeout))
            return predicate()

    def snapshot(self) -> list[tuple[float, Any]]:
        with self._cond:
            return list(self.messages)

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
