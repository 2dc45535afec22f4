"""Run the conformance checks against a plugin executable.

The runner plays a Nomad client, but watches more closely than one: it starts
the executable itself (so it sees every byte on stdout and every stderr line),
connects over the real wire with the SDK's host client, and walks the plugin
through the life Nomad gives it:

1. a launch without the magic cookie (in parallel with the rest);
2. the main launch: handshake, health, PluginInfo, ConfigSchema, SetConfig
   twice with the config Nomad would send, Fingerprint, then Stats after the
   first message, both watched for an observation window; then Reserve with an
   unknown ID and with none, a SIGINT, and Shutdown;
3. a second launch to compare device IDs across the restart.

A plugin that misbehaves early still gets every later check that can run; the
rest are reported as skipped with the reason. This module holds only that
order; the checks themselves live with their family (:mod:`.transport`,
:mod:`.baseplugin`, :mod:`.fingerprint`, :mod:`.stats`, :mod:`.reserve`,
:mod:`.lifecycle`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from google.protobuf import duration_pb2

from nomad_device.proto import device_pb2, device_pb2_grpc
from nomad_device.testing.conformance import (
    baseplugin,
    fingerprint,
    lifecycle,
    reserve,
    stats,
    transport,
)
from nomad_device.testing.conformance.baseplugin import (
    _STRICT_SEMVER_RE as _STRICT_SEMVER_RE,
)
from nomad_device.testing.conformance.baseplugin import (
    _VERSION_RE as _VERSION_RE,
)
from nomad_device.testing.conformance.baseplugin import (
    _literal_problems as _literal_problems,
)
from nomad_device.testing.conformance.checks import CHECKS
from nomad_device.testing.conformance.fingerprint import (
    _group_problems as _group_problems,
)
from nomad_device.testing.conformance.launch import Launch
from nomad_device.testing.conformance.report import ConformanceReport
from nomad_device.testing.conformance.streams import StreamWatch
from nomad_device.testing.conformance.suite import Suite, SuiteOptions

if TYPE_CHECKING:
    from nomad_device.agentconfig.agentfile import PluginBlock

__all__ = ["SuiteOptions", "run_conformance"]

#: The checks that need a configured plugin.
_NEED_CONFIG = (
    "first-fingerprint",
    "device-groups-valid",
    "fingerprint-stream-open",
    "stats-interval",
    "stats-stream-open",
    "reserve-unknown-id",
    "reserve-empty",
    "stable-ids",
)


def run_conformance(
    command: Sequence[str], options: SuiteOptions | None = None
) -> ConformanceReport:
    """Run every check against the plugin started by ``command``."""
    if not command:
        raise ValueError("no plugin command given")
    options = options or SuiteOptions()
    argv, block = _agent_config(list(command), options)
    suite = Suite(argv, options, block)
    began = time.monotonic()
    with ThreadPoolExecutor(1, thread_name_prefix="conformance-cookie") as pool:
        cookie = pool.submit(transport.cookie_refusal, suite)
        try:
            _main_launch(suite)
        finally:
            cookie.result()
    transport.hclog_stderr(suite)
    suite.skip([c.id for c in CHECKS], "not reached")
    return ConformanceReport(
        command=tuple(suite.command),
        results=tuple(suite.results[c.id] for c in CHECKS),
        seconds=time.monotonic() - began,
        plugin_name=suite.plugin_name,
        plugin_version=suite.plugin_version,
    )


def _agent_config(
    command: list[str], options: SuiteOptions
) -> tuple[list[str], PluginBlock | None]:
    """Read ``config_file`` before anything starts: the plugin's block, and the command
    with the block's ``args`` when the command gives none (as the launcher does).

    Raises :class:`~nomad_device.agentconfig.agentfile.ConfigFileError` (a ValueError) for a
    file that cannot be read or has no block for the plugin.
    """
    if options.config_file is None or options.config is not None:
        return command, None
    if options.config_json is not None:  # the more specific option wins, as for config
        return command, None
    from nomad_device.agentconfig import agentfile

    agent = agentfile.parse_agent_paths(options.config_file)
    block = agent.select(command, options.plugin_name)
    if block.args and os.path.basename(command[-1]) == agentfile.plugin_file(command):
        command = [*command, *block.args]
    return command, block


def _main_launch(suite: Suite) -> None:
    launch = Launch(suite.command, suite.options)
    suite.launches.append(launch)
    try:
        started = launch.start()
        transport.handshake(suite, launch, started)
        if not started:
            suite.skip(
                [c.id for c in CHECKS if c.id not in ("cookie-refusal", "hclog-stderr")],
                "the plugin did not start (see handshake)",
            )
            return
        _session(suite, launch)
    finally:
        launch.close()
        transport.stdout_quiet(suite)


def _session(suite: Suite, launch: Launch) -> None:
    """The main launch's calls, in the order a Nomad client makes them."""
    client = launch.client
    assert client is not None
    timeout = suite.options.timeout
    transport.health(suite, client, timeout)
    baseplugin.plugin_info(suite, client, timeout)
    spec = baseplugin.config_schema(suite, client, timeout)
    config = baseplugin.set_config(suite, client, spec, timeout)
    if config is None:
        suite.skip(_NEED_CONFIG, "skipped: the plugin was not configured (see set-config)")
        lifecycle.sigint_ignored(suite, launch, [])
        lifecycle.shutdown(suite, launch, [])
        return
    stub = device_pb2_grpc.DevicePluginStub(client.process.channel)
    fingerprints = StreamWatch(
        stub.Fingerprint(device_pb2.FingerprintRequest()), "fingerprint", launch.clock
    )
    watches = [fingerprints]
    try:
        got_first = fingerprints.wait(lambda: bool(fingerprints.messages), timeout)
        fingerprint.first_fingerprint(suite, fingerprints, got_first, launch)
        stats_watch: StreamWatch | None = None
        if got_first:
            # Nomad starts collecting stats only once the first fingerprint arrived.
            request = device_pb2.StatsRequest(collection_interval=duration_pb2.Duration())
            stats_watch = StreamWatch(stub.Stats(request), "stats", launch.clock)
            watches.append(stats_watch)
            first_at = fingerprints.started + fingerprints.messages[0][0]
            _observe(launch, first_at + suite.options.open_window)
        fingerprint.fingerprint_open(suite, fingerprints, launch)
        fingerprint.groups_valid(suite, fingerprints)
        if stats_watch is None:
            suite.skip(
                ["stats-interval", "stats-stream-open"],
                "skipped: Nomad asks for stats only after the first fingerprint",
            )
        else:
            stats.stats_checks(suite, stats_watch, fingerprints)
        known = fingerprint.id_set(
            m for _, msg in fingerprints.snapshot() for m in msg.device_group
        )
        reserve.reserve_unknown(suite, launch, known)
        reserve.reserve_empty(suite, launch)
        lifecycle.sigint_ignored(suite, launch, watches)
    finally:
        for watch in watches:
            watch.cancel()
    latest = fingerprints.snapshot()
    lifecycle.shutdown(suite, launch, watches)
    if not latest:
        suite.skip(["stable-ids"], "skipped: no fingerprint to compare")
    else:
        lifecycle.stable_ids(suite, config, latest[-1][1])


def _observe(launch: Launch, deadline: float) -> None:
    """Let the streams run until ``deadline`` (sooner if the process dies)."""
    while time.monotonic() < deadline and launch.alive():
        launch.wait_exit(min(0.1, max(0.0, deadline - time.monotonic())))
