"""The Stats checks: interval 0 means about one message a second, and the stream stays open.

Nomad passes its telemetry interval (zero meaning one second) and stops
collecting for good when the stream ends (protocol notes, section 5).
"""

from __future__ import annotations

import itertools
import statistics
import time

import grpc

from nomad_device.testing.conformance.checks import Status
from nomad_device.testing.conformance.streams import StreamWatch
from nomad_device.testing.conformance.suite import Suite, seconds, waited_for_cpu

__all__ = ["stats_checks"]


def stats_checks(suite: Suite, stats: StreamWatch, fingerprint: StreamWatch) -> None:
    messages = stats.snapshot()
    latest = fingerprint.snapshot()[-1][1]
    has_devices = any(g.devices for g in latest.device_group)
    window = (stats.ended_at if stats.ended else time.monotonic() - stats.started) or 0.0
    times = [t for t, _ in messages]
    evidence = [f"{len(messages)} message(s) in {seconds(window)}"]
    if times:
        evidence.append("at " + ", ".join(f"{t:.2f}" for t in times[:10]) + " s")
    # "Too slow" is judged in the plugin's own time (a busy host delays a good plugin's
    # messages), "too fast" on the wall clock (no host makes a plugin faster).
    own = stats.own_snapshot()[: len(messages)]
    own_window = stats.own_elapsed()
    if own and window - own_window >= 0.05:
        evidence.append(
            "in the plugin's own time at " + ", ".join(f"{t:.2f}" for t in own[:10]) + " s"
        )
        evidence.append(waited_for_cpu(window - own_window))
    # -- the interval -------------------------------------------------------
    gaps = [b - a for a, b in itertools.pairwise(times)]
    own_gaps = [b - a for a, b in itertools.pairwise(own)]
    if stats.ended and not messages:
        suite.put(
            "stats-interval",
            Status.FAIL,
            f"Stats with interval 0 got no message: {stats.describe_end()}",
            evidence,
        )
    elif gaps and statistics.median(gaps) < 0.5:
        suite.put(
            "stats-interval",
            Status.FAIL,
            f"messages every {statistics.median(gaps):.3f} s: interval 0 must mean 1 s",
            evidence,
        )
    elif not messages:
        note = "no devices" if not has_devices else "the plugin reports no statistics"
        suite.put(
            "stats-interval",
            Status.PASS,
            f"interval 0 accepted; no messages ({note})",
            evidence,
        )
    elif own_gaps and statistics.median(own_gaps) > 2.0:
        suite.put(
            "stats-interval",
            Status.WARN,
            f"messages every {statistics.median(own_gaps):.2f} s; expected about 1 s for "
            "interval 0",
            evidence,
        )
    elif own[0] > 1.5:
        suite.put(
            "stats-interval",
            Status.WARN,
            f"the first message came after {seconds(own[0])}; send it at once",
            evidence,
        )
    elif not gaps and own_window >= 2.5:
        suite.put(
            "stats-interval",
            Status.WARN,
            f"only one message in {seconds(own_window)}; expected one about every second",
            evidence,
        )
    else:
        cadence = f", every {statistics.median(gaps):.2f} s" if gaps else ""
        suite.put("stats-interval", Status.PASS, f"interval 0 accepted{cadence}", evidence)
    # -- staying open ---------------------------------------------------------
    if not stats.ended:
        suite.put("stats-stream-open", Status.PASS, f"open for {seconds(window)}", evidence)
    elif not messages:
        suite.put(
            "stats-stream-open",
            Status.SKIP,
            "skipped: Stats never sent a message (see stats-interval)",
        )
    elif stats.end_code == grpc.StatusCode.OK:
        suite.put(
            "stats-stream-open",
            Status.FAIL,
            f"{stats.describe_end()}; Nomad stops collecting stats for good",
            evidence,
        )
    else:
        suite.put(
            "stats-stream-open",
            Status.WARN,
            f"{stats.describe_end()}; Nomad retries only after 5 s or more",
            evidence,
        )
