"""Benchmark nomad-device-example on directories of many files.

For each directory size the plugin is launched as Nomad launches it, configured,
and measured over the real wire:

- first fingerprint: from the Fingerprint call to the first message (the figure
  Nomad's 50 s start-up wait depends on), plus launch + SetConfig before it;
- rescan CPU: user+system CPU of the plugin process per ``list_period`` while
  nothing changes and one Fingerprint stream is open (what an idle node pays);
- change latency: from a ``chmod`` to the message reporting the new health
  (up to one ``list_period``, depending on where in the period it lands, plus
  one rescan);
- RSS: resident memory after the first fingerprint and at its peak, which
  includes one Stats collection;
- stats: time from the Stats call to its first message, which Nomad asks for
  every ``collection_interval`` (1 s by default).

Then, on one directory at ``--latency-period`` (Go's default ``5s``):

- change seen: from a ``chmod`` to the host receiving the Fingerprint message
  (raw protobuf, as soon as gRPC hands it over) that reports the new health,
  as p50/p99/max over ``--changes`` changes. Changes are spaced at random:
  with inotify by 1.1 to 1.6 s, so that each is a lone change rather than part
  of a storm (the example rescans at most once a second while changes keep
  coming); polling only, by 0 to one period, so that they land at every phase
  of the period;
- idle CPU per period (from the scheduler's per-thread figures, finer than
  clock ticks) and RSS, with the Fingerprint stream open and nothing changing.

``--poll-only`` runs everything with inotify disabled (the plugin gets
``NOMAD_DEVICE_SOURCES_DISABLE=inotify``), for the figures beside them;
``--command`` measures another build of the example (say, an older checkout's).

Run (about four minutes, ten with ``--poll-only``; the files are empty,
created in a temp dir and removed):

    .venv/bin/python scripts/bench_example.py [--sizes 1000 10000 100000]
        [--period 1s] [--periods 10] [--latency-period 5s] [--changes 100]
        [--latency-files 1000] [--idle-periods 6] [--poll-only] [--command ...]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import duration_pb2

from nomad_device.config import encode_config
from nomad_device.golang import parse_duration
from nomad_device.host import DevicePluginClient
from nomad_device.plugins.example.plugin import ExampleConfig
from nomad_device.proto import device_pb2, device_pb2_grpc
from nomad_device.sources import DISABLE_ENV

COMMAND = [sys.executable, "-m", "nomad_device.plugins.example"]
#: The example rescans at most once a second while changes keep coming.
STORM_DELAY = 1.0
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (all threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def run_seconds(pid: int) -> float:
    """CPU time of the process's live threads, in nanoseconds' precision.

    /proc/PID/stat counts in clock ticks (10 ms), too coarse for an idle plugin;
    each thread's schedstat has the scheduler's own figure. Threads that exit in
    between are missed, which idle plugins do not do.
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def memory_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} for pid {pid}")


def populate(root: Path, count: int) -> None:
    """``count`` empty files, every tenth with mode 0777 (unhealthy)."""
    for i in range(count):
        mode = 0o777 if i % 10 == 0 else 0o644
        fd = os.open(root / f"dev{i:06d}", os.O_CREAT | os.O_WRONLY, mode)
        os.fchmod(fd, mode)
        os.close(fd)


def first_stats(client: DevicePluginClient) -> None:
    """Wait for the first Stats message as raw protobuf (no conversion to model objects).

    The host client's channel has no message-size cap, as go-plugin's has none:
    100,000 devices' stats take about 21 MB.
    """
    request = device_pb2.StatsRequest(collection_interval=duration_pb2.Duration(seconds=3600))
    call: Any = device_pb2_grpc.DevicePluginStub(client.process.channel).Stats(request, timeout=300)
    try:
        next(call)
    finally:
        call.cancel()


@dataclass
class Result:
    files: int
    launch: float
    first: float
    rescan_cpu: float
    change: float
    rss: float
    peak: float
    stats_first: float


def measure(
    count: int, period: str, periods: int, command: list[str], env: Mapping[str, str]
) -> Result:
    root = Path(tempfile.mkdtemp(prefix="bench-example-"))
    try:
        populate(root, count)
        started = time.perf_counter()
        client = DevicePluginClient.launch(command, start_timeout=60, env=env)
        try:
            config = ExampleConfig(dir=str(root), list_period=period)
            client.set_config(encode_config(config))
            launched = time.perf_counter() - started
            pid = client.process.pid

            started = time.perf_counter()
            stream = client.fingerprint()
            message = stream.next(120)
            first = time.perf_counter() - started
            assert sum(len(g.devices) for g in message) == count
            rss = memory_mib(pid, "VmRSS")

            # Idle rescans: one open stream, nothing changing.
            seconds = parse_duration(period) / 1e9
            time.sleep(seconds)  # let any start-up work settle
            cpu_before = cpu_seconds(pid)
            time.sleep(seconds * periods)  # the plugin works meanwhile; we only watch
            rescan_cpu = (cpu_seconds(pid) - cpu_before) / periods

            change = float("nan")
            if count:
                target = root / "dev000001"
                started = time.perf_counter()
                os.chmod(target, 0o777)
                while True:
                    [group] = stream.next(120)
                    if not next(d for d in group.devices if d.id == target.name).healthy:
                        break
                change = time.perf_counter() - started
            stream.cancel()

            stats_first = float("nan")
            if count:
                started = time.perf_counter()
                first_stats(client)
                stats_first = time.perf_counter() - started
            peak = memory_mib(pid, "VmHWM")
        finally:
            client.kill()
        return Result(count, launched, first, rescan_cpu, change, rss, peak, stats_first)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Latency:
    files: int
    changes: list[float]
    idle_cpu: float
    rss: float
    peak: float


def raw_fingerprints(client: DevicePluginClient) -> Iterator[device_pb2.FingerprintResponse]:
    """Fingerprint messages as protobuf, the moment gRPC delivers them."""
    call: Any = device_pb2_grpc.DevicePluginStub(client.process.channel).Fingerprint(
        device_pb2.FingerprintRequest(), timeout=3600
    )
    try:
        yield from call
    finally:
        call.cancel()


def healthy(message: device_pb2.FingerprintResponse, device_id: str) -> bool | None:
    for group in message.device_group:
        for device in group.devices:
            if device_id == device.ID:
                return bool(device.healthy)
    return None


def measure_latency(
    files: int,
    period: str,
    changes: int,
    idle_periods: int,
    poll_only: bool,
    command: list[str],
    env: Mapping[str, str],
) -> Latency:
    root = Path(tempfile.mkdtemp(prefix="bench-example-latency-"))
    seconds = parse_duration(period) / 1e9
    rng = random.Random(12)
    try:
        populate(root, files)
        target = root / "dev000001"  # 0644: healthy
        client = DevicePluginClient.launch(command, start_timeout=60, env=env)
        try:
            client.set_config(encode_config(ExampleConfig(dir=str(root), list_period=period)))
            pid = client.process.pid
            messages = raw_fingerprints(client)
            state = healthy(next(messages), target.name)
            assert state is True, state

            time.sleep(seconds)  # let start-up work settle
            cpu_before = run_seconds(pid)
            time.sleep(seconds * idle_periods)
            idle_cpu = (run_seconds(pid) - cpu_before) / idle_periods
            rss = memory_mib(pid, "VmRSS")

            seen: list[float] = []
            for _ in range(changes):
                want = not state
                started = time.perf_counter()
                os.chmod(target, 0o644 if want else 0o777)
                while healthy(next(messages), target.name) is not want:
                    pass
                seen.append(time.perf_counter() - started)
                state = want
                if poll_only:
                    time.sleep(rng.uniform(0, seconds))
                else:
                    time.sleep(rng.uniform(STORM_DELAY + 0.1, STORM_DELAY + 0.6))
            peak = memory_mib(pid, "VmHWM")
        finally:
            client.kill()
        return Latency(files, seen, idle_cpu, rss, peak)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile: the value below which ``fraction`` of them lie."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[0, 1000, 10000, 100000])
    parser.add_argument("--period", default="1s", help="list_period (Go duration)")
    parser.add_argument("--periods", type=int, default=10, help="idle periods to average")
    parser.add_argument("--latency-period", default="5s", help="list_period for change seen")
    parser.add_argument("--changes", type=int, default=100, help="chmods timed (0: skip)")
    parser.add_argument("--latency-files", type=int, default=1000, help="files in its directory")
    parser.add_argument("--idle-periods", type=int, default=6, help="idle periods to average")
    parser.add_argument("--poll-only", action="store_true", help=f"set {DISABLE_ENV}=inotify")
    parser.add_argument("--command", help="the plugin to launch (default: this checkout's)")
    args = parser.parse_args()
    command = shlex.split(args.command) if args.command else COMMAND
    env = dict(os.environ)
    if args.poll_only:
        env[DISABLE_ENV] = "inotify"
    mode = "poll only (inotify disabled)" if args.poll_only else "inotify + poll"

    if args.sizes:
        print(
            f"nomad-device-example, Python {platform.python_version()}, {os.cpu_count()} CPUs,"
            f" list_period {args.period}, CPU averaged over {args.periods} idle periods, {mode}"
        )
        header = (
            f"{'files':>8} {'launch+cfg':>10} {'1st fp':>8} {'CPU/rescan':>10}"
            f" {'change':>8} {'RSS':>9} {'peak RSS':>9} {'1st stats':>9}"
        )
        print(header)
        for count in args.sizes:
            r = measure(count, args.period, args.periods, command, env)
            print(
                f"{r.files:>8,} {ms(r.launch, 10)} {ms(r.first, 8)} {ms(r.rescan_cpu, 10, 1)}"
                f" {ms(r.change, 8)} {r.rss:>6.1f}MiB {r.peak:>6.1f}MiB {ms(r.stats_first, 9)}",
                flush=True,
            )

    if args.changes:
        lat = measure_latency(
            args.latency_files,
            args.latency_period,
            args.changes,
            args.idle_periods,
            args.poll_only,
            command,
            env,
        )
        print(
            f"\nchange seen, {mode}: list_period {args.latency_period}, {lat.files:,} files,"
            f" {len(lat.changes)} chmods"
        )
        print(
            f"  chmod -> host: p50 {ms(percentile(lat.changes, 0.5), 0, 1)}"
            f"  p99 {ms(percentile(lat.changes, 0.99), 0, 1)}"
            f"  max {ms(max(lat.changes), 0, 1)}"
            f"  (mean {ms(statistics.fmean(lat.changes), 0, 1)})"
        )
        print(
            f"  idle CPU per period {ms(lat.idle_cpu, 0, 2)} (over {args.idle_periods} periods)"
            f"  RSS {lat.rss:.1f}MiB  peak RSS {lat.peak:.1f}MiB",
            flush=True,
        )


def ms(seconds: float, width: int, digits: int = 0) -> str:
    text = "-" if math.isnan(seconds) else f"{seconds * 1000:.{digits}f}ms"
    return f"{text:>{width}}"


if __name__ == "__main__":
    main()
