"""Measure what a Nomad client pays to start a Python plugin.

Prints the handshake time (launch to handshake line on stdout, the moment a
go-plugin host can connect) over N launches, and the plugin's resident memory
after start and after a fingerprint/stats round. Run:

    .venv/bin/python scripts/bench_sdk.py [--launches 20] [PLUGIN_CMD ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.client import PluginProcess, ReattachConfig
from nomad_device.host import DevicePluginClient

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PLUGIN = [sys.executable, str(ROOT / "tests" / "support" / "plugins" / "sdk_plugin.py")]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def one_launch(command: list[str]) -> tuple[float, float, float]:
    env = dict(os.environ)
    env[NOMAD_HANDSHAKE.magic_cookie_key] = NOMAD_HANDSHAKE.magic_cookie_value
    env["PLUGIN_PROTOCOL_VERSIONS"] = "2"
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    handshake = time.perf_counter() - start
    parts = line.strip().split("|")
    rss_start = rss_mib(proc.pid)
    client = DevicePluginClient(
        PluginProcess.reattach(ReattachConfig(parts[2], parts[3], proc.pid, 2))
    )
    with client.fingerprint() as stream:
        stream.next(10)
    with client.stats(0.05) as stats:
        stats.next(10)
    rss_used = rss_mib(proc.pid)
    client.kill()
    proc.wait(5)
    return handshake, rss_start, rss_used


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("command", nargs="*")
    args = parser.parse_args()
    command = args.command or DEFAULT_PLUGIN
    one_launch(command)  # warm the page cache and bytecode caches, as a second agent start would
    results = [one_launch(command) for _ in range(args.launches)]
    handshakes = sorted(r[0] * 1000 for r in results)
    print(f"plugin: {' '.join(command)}")
    print(f"launches: {args.launches}")
    print(
        f"handshake ms: median {statistics.median(handshakes):.0f}, "
        f"min {handshakes[0]:.0f}, max {handshakes[-1]:.0f}"
    )
    print(f"RSS after start MiB: median {statistics.median(r[1] for r in results):.1f}")
    print(f"RSS after fingerprint+stats MiB: median {statistics.median(r[2] for r in results):.1f}")


if __name__ == "__main__":
    main()
