"""What the engine's guarantees cost: validation beside conversion, and a rescan storm.

- validation: ``validate()`` of one group of N devices, and of one stats group
  of N instances (with fresh and with reused stat values, as the example plugin
  reuses unchanged ones), beside the protobuf conversion of the same value;
  best of five runs each;
- storm: ``tests/support/plugins/storm_plugin.py`` launched as Nomad launches it; the
  plugin rains 10,000 ``rescan()`` calls on its engine (its sync ``watch()``
  thread, four more threads and the event loop) and the host counts the
  ``detect()`` calls that caused, over the real wire.

Run (about half a minute):

    .venv/bin/python scripts/bench_engine.py [--devices 100000] [--storms 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from nomad_device.host import DevicePluginClient
from nomad_device.model import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DeviceStats,
    StatObject,
    StatValue,
)
from nomad_device.wire import convert

STORM_PLUGIN = (
    Path(__file__).resolve().parent.parent / "tests" / "support" / "plugins" / "storm_plugin.py"
)


def best_ms(fn: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def validation(count: int) -> None:
    devices = tuple(
        Device(f"file{i:06d}", healthy=i % 10 != 0, health_description="" if i % 10 else "0777")
        for i in range(count)
    )
    group = DeviceGroup("example", "file", "mock", devices, {"size": Attribute(1, "MiB")})
    values = {
        d.id: (
            StatValue(int_numerator=1, unit="bytes", desc="size"),
            StatObject({"size": StatValue(int_numerator=1), "mode": StatValue(string_value="-rw")}),
        )
        for d in devices
    }

    def stats(reuse: bool) -> DeviceGroupStats:
        now = dt.datetime.now(dt.UTC)
        if reuse:
            instances = {k: DeviceStats(a, b, now) for k, (a, b) in values.items()}
        else:
            instances = {
                k: DeviceStats(
                    StatValue(int_numerator=1, unit="bytes", desc="size"),
                    StatObject({"size": StatValue(int_numerator=1)}),
                    now,
                )
                for k in values
            }
        return DeviceGroupStats("example", "file", "mock", instances)

    fresh = [stats(reuse=False) for _ in range(5)]
    reused = stats(reuse=True)
    reused.validate()  # a previous period saw these values
    again = [stats(reuse=True) for _ in range(5)]
    rows = [
        ("DeviceGroup.validate", best_ms(group.validate), ""),
        ("group_to_proto", best_ms(lambda: convert.group_to_proto(group)), ""),
        ("DeviceGroupStats.validate", best_ms(lambda: fresh.pop().validate()), "(new values)"),
        ("DeviceGroupStats.validate", best_ms(lambda: again.pop().validate()), "(reused values)"),
        ("group_stats_to_proto", best_ms(lambda: convert.group_stats_to_proto(reused)), ""),
    ]
    print(f"{count:,} devices or stat instances, best of 5:")
    for name, ms, note in rows:
        print(f"  {name:28} {ms:8.1f} ms  {note}".rstrip())


def storm(runs: int) -> None:
    print(f"rescan storm, {runs} runs of 10,000 rescan() calls over the real wire:")
    client = DevicePluginClient.launch([sys.executable, str(STORM_PLUGIN)])
    with client, client.fingerprint() as stream:
        stream.next(30)
        for _ in range(runs):
            report = client.reserve(["!storm"]).envs
            target = f"gen{report['generation']}"
            while True:
                groups = stream.next(30)
                if [d.id for d in groups[0].devices] == [target]:
                    break
            detects = int(groups[0].attributes["detects"].value) - int(report["before"])
            print(
                f"  storm {float(report['seconds']) * 1000:6.0f} ms -> {detects} detect() "
                f"call(s) (settle {float(report['settle']) * 1000:.0f} ms)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--storms", type=int, default=5)
    args = parser.parse_args()
    print(f"Python {platform.python_version()}, {platform.machine()}")
    validation(args.devices)
    storm(args.storms)


if __name__ == "__main__":
    main()
