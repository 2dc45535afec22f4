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

Run (about a minute; the files are empty, created in a temp dir and removed):

    .venv/bin/python scripts/bench_example.py [--sizes 1000 10000 100000]
        [--period 1s] [--periods 10]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import duration_pb2

from nomad_device.config import encode_config
from nomad_device.golang import parse_duration
from nomad_device.host import DevicePluginClient
from nomad_device.plugins.example.plugin import ExampleConfig
from nomad_device.proto import device_pb2, device_pb2_grpc

COMMAND = [sys.executable, "-m", "nomad_device.plugins.example"]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (all threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


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


def measure(count: int, period: str, periods: int) -> Result:
    root = Path(tempfile.mkdtemp(prefix="bench-example-"))
    try:
        populate(root, count)
        started = time.perf_counter()
        client = DevicePluginClient.launch(COMMAND, start_timeout=60)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 1000, 10000, 100000])
    parser.add_argument("--period", default="1s", help="list_period (Go duration)")
    parser.add_argument("--periods", type=int, default=10, help="idle periods to average")
    args = parser.parse_args()

    print(
        f"nomad-device-example, Python {platform.python_version()}, {os.cpu_count()} CPUs,"
        f" list_period {args.period}, CPU averaged over {args.periods} idle periods"
    )
    header = (
        f"{'files':>8} {'launch+cfg':>10} {'1st fp':>8} {'CPU/rescan':>10}"
        f" {'change':>8} {'RSS':>9} {'peak RSS':>9} {'1st stats':>9}"
    )
    print(header)
    for count in args.sizes:
        r = measure(count, args.period, args.periods)
        print(
            f"{r.files:>8,} {ms(r.launch, 10)} {ms(r.first, 8)} {ms(r.rescan_cpu, 10, 1)}"
            f" {ms(r.change, 8)} {r.rss:>6.1f}MiB {r.peak:>6.1f}MiB {ms(r.stats_first, 9)}",
            flush=True,
        )


def ms(seconds: float, width: int, digits: int = 0) -> str:
    text = "-" if math.isnan(seconds) else f"{seconds * 1000:.{digits}f}ms"
    return f"{text:>{width}}"


if __name__ == "__main__":
    main()
