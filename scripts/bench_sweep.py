"""What a temp dir full of other users' names costs a starting plugin.

Plants NAMES empty files named as the SDK names its socket directories
(``plugin<12 hex>``, hard links to a few empty files, as a local user could)
in a fresh directory, then

- times one start's sweep of dead plugins' socket directories
  (``socketdirs.sweep()`` with its default bounds, as each start runs it),
  pass after pass;
- launches a plugin as Nomad does, with ``TMPDIR`` there and with ``TMPDIR``
  empty, interleaved, and times the handshake and the first ``PluginInfo``,
  ``SetConfig`` and Fingerprint message after it.

Run:

    .venv/bin/python scripts/bench_sweep.py [--names 1050000] [--launches 10] [--passes 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nomad_device.config import encode_config
from nomad_device.goplugin import socketdirs
from nomad_device.host import DevicePluginClient
from nomad_device.plugins.example.plugin import ExampleConfig

PLUGIN = [sys.executable, "-m", "nomad_device.plugins.example"]
LINKS_PER_FILE = 50_000  # ext4 allows 65,000 links to one inode


def plant(directory: Path, names: int) -> None:
    for i in range(names):
        seed = directory / f"empty{i // LINKS_PER_FILE}"
        if i % LINKS_PER_FILE == 0:
            seed.touch()
        os.link(seed, directory / f"plugin{i:012x}")


def sweep_passes(directory: Path, passes: int) -> list[tuple[float, int]]:
    os.environ["TMPDIR"] = str(directory)
    try:
        out = []
        for _ in range(passes):
            start = time.perf_counter()
            done = socketdirs.sweep()
            out.append(((time.perf_counter() - start) * 1000, done.examined))
        return out
    finally:
        del os.environ["TMPDIR"]


def one_launch(tmpdir: Path, config: bytes) -> tuple[float, float, float, float]:
    start = time.perf_counter()
    client = DevicePluginClient.launch(PLUGIN, env={**os.environ, "TMPDIR": str(tmpdir)})
    handshake = time.perf_counter()
    client.info()
    info = time.perf_counter()
    client.set_config(config)
    configured = time.perf_counter()
    with client.fingerprint() as stream:
        stream.next(60)
    first = time.perf_counter()
    client.kill()
    return (
        (handshake - start) * 1000,
        (info - handshake) * 1000,
        (configured - info) * 1000,
        (first - configured) * 1000,
    )


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--names", type=int, default=1_050_000)
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--passes", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bsw", dir="/tmp"))
    try:
        flooded, empty, devices = work / "flooded", work / "empty", work / "devices"
        for directory in (flooded, empty, devices):
            directory.mkdir()
        began = time.perf_counter()
        plant(flooded, args.names)
        print(f"planted {args.names:,} names in {time.perf_counter() - began:.0f} s")
        passes = sweep_passes(flooded, args.passes)
        print(
            f"sweep, {args.passes} starts: entries read median {median([p[1] for p in passes])}"
            f" (bound {socketdirs.MAX_ENTRIES:,}), ms median {median([p[0] for p in passes])},"
            f" max {max(p[0] for p in passes):.0f} (bound {socketdirs.MAX_SECONDS * 1000:.0f})"
        )
        config = encode_config(ExampleConfig(dir=str(devices)))
        one_launch(empty, config)  # warm the caches, as a second agent start would
        runs: dict[str, list[tuple[float, float, float, float]]] = {"empty": [], "flooded": []}
        for _ in range(args.launches):
            runs["empty"].append(one_launch(empty, config))
            runs["flooded"].append(one_launch(flooded, config))
        print(f"plugin: {' '.join(PLUGIN)}, {args.launches} launches each, medians in ms")
        print("TMPDIR      handshake  PluginInfo  SetConfig  1st fingerprint")
        for name, rows in runs.items():
            columns = [median([r[i] for r in rows]) for i in range(4)]
            print(f"{name:<10} {columns[0]:>10} {columns[1]:>11} {columns[2]:>10} {columns[3]:>16}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
