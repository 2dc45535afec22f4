"""Exponential back-off, for the engine and for plugins that retry something.

A plugin that retries (re-subscribing to hardware events, reconnecting to a
daemon) wants the same schedule the engine uses for ``detect()``: 1 s, 2 s,
4 s ... up to a cap. What is easy to get wrong by hand is the reset: a
watcher that ran fine for an hour and then failed should start again at the
first step, not at the cap it reached a week ago. :meth:`Backoff.failed`
takes how long the run lasted for that.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = ["BACKOFF_MAX", "BACKOFF_START", "Backoff", "backoff_delay"]

BACKOFF_START: Final = 1.0
BACKOFF_MAX: Final = 60.0


def backoff_delay(failures: int, start: float = BACKOFF_START, cap: float = BACKOFF_MAX) -> float:
    """The delay after ``failures`` consecutive failures: ``start``, doubling, up to ``cap``."""
    if failures > 64:  # 2**64 seconds is past any cap; avoid float overflow
        return float(cap)
    return float(min(cap, start * 2 ** max(0, failures - 1)))


class Backoff:
    """Exponential back-off: ``start``, twice that, four times ... up to ``cap`` seconds.

    ``failed()`` records a failure and says how long to wait; ``succeeded()``
    starts again from ``start``. A run that lasted at least ``reset_after``
    seconds (default: ``cap``) before failing counts as a first failure again,
    so one old streak never makes a healthy retry wait the maximum.
    """

    __slots__ = ("cap", "failures", "reset_after", "start")

    def __init__(
        self,
        start: float = BACKOFF_START,
        cap: float = BACKOFF_MAX,
        *,
        reset_after: float | None = None,
    ) -> None:
        for name, value in (("start", start), ("cap", cap)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"Backoff {name} must be a positive number of seconds: {value!r}")
        if cap < start:
            raise ValueError(f"Backoff cap ({cap:g}s) is less than its start ({start:g}s)")
        self.start = float(start)
        self.cap = float(cap)
        self.reset_after = float(cap if reset_after is None else reset_after)
        #: Consecutive failures so far.
        self.failures = 0

    def failed(self, ran_for: float = 0.0) -> float:
        """Record a failure after a run of ``ran_for`` seconds; the delay before the next try."""
        if ran_for >= self.reset_after:
            self.failures = 0
        self.failures += 1
        return backoff_delay(self.failures, self.start, self.cap)

    def succeeded(self) -> None:
        """Back to the start: the next failure waits ``start`` seconds."""
        self.failures = 0

    def __repr__(self) -> str:
        return (
            f"Backoff(start={self.start:g}, cap={self.cap:g}, reset_after={self.reset_after:g}, "
            f"failures={self.failures})"
        )
