"""Benchmark nomad-device-generic: scan cost at scale, and uevent-to-host latency.

Two measurements, each over the real wire with the plugin launched as Nomad
launches it, on a fake /dev and /sys made under a temp dir (real device nodes
made with mknod, so this needs root):

1. **Fingerprint at scale**: ``--nodes`` (default 1,000) character devices
   matched by one glob, each with its sysfs entry. Reported: launch + SetConfig,
   the first Fingerprint message (the first scan, cold caches), the cost of one
   rescan when nothing changed (in-process ``detect()``, warm caches, median of
   20), and the plugin process's resident memory after the first fingerprint.
2. **uevent to host**: a USB device is added to
   (or removed from) the fake sysfs, where neither inotify nor polling can see
   it (``fingerprint_period`` is one hour), then a real kernel uevent is
   synthesised by writing ``change`` to a real device's ``uevent`` file in
   /sys. The figure is the time from that write to the host receiving the
   Fingerprint message with the new state: kernel, netlink, the plugin's
   rescan, the SDK's diff and the gRPC stream. ``--events`` rounds (default
   100), p50/p99/max.

Run as root (about half a minute):

    .venv/bin/python scripts/bench_generic.py [--nodes 1000] [--events 100]

Figures vary a lot on a shared machine; compare runs on the same host only.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import stat
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from nomad_device.config import encode_config
from nomad_device.host import DevicePluginClient
from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig, UsbBlock
from nomad_device.plugins.generic.plugin import GenericDevicePlugin
from nomad_device.plugins.generic.roots import ENV_DEV_ROOT, ENV_SYS_ROOT, Roots

COMMAND = [sys.executable, "-m", "nomad_device.plugins.generic"]
BENCH_MAJOR = 250


def memory_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} for pid {pid}")


def relink(link: Path, target: Path) -> None:
    if link.is_symlink():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def make_tree(base: Path, nodes: int) -> tuple[Path, Path]:
    dev, sysfs = base / "dev", base / "sys"
    (dev / "bench").mkdir(parents=True)
    for sub in ("dev/char", "dev/block", "bus/usb/devices", "class/bench", "class/usb"):
        (sysfs / sub).mkdir(parents=True)
    for i in range(nodes):
        directory = sysfs / "devices" / "virtual" / "bench" / f"n{i}"
        directory.mkdir(parents=True)
        (directory / "dev").write_text(f"{BENCH_MAJOR}:{i}\n")
        (directory / "uevent").write_text(f"MAJOR={BENCH_MAJOR}\nMINOR={i}\nDEVNAME=bench/n{i}\n")
        relink(directory / "subsystem", sysfs / "class" / "bench")
        relink(sysfs / "dev" / "char" / f"{BENCH_MAJOR}:{i}", directory)
        os.mknod(dev / "bench" / f"n{i}", stat.S_IFCHR | 0o600, os.makedev(BENCH_MAJOR, i))
    return dev, sysfs


def env_for(dev: Path, sysfs: Path) -> dict[str, str]:
    return {**os.environ, ENV_DEV_ROOT: str(dev), ENV_SYS_ROOT: str(sysfs)}


def bench_scale(base: Path, nodes: int) -> None:
    started = time.perf_counter()
    dev, sysfs = make_tree(base / "scale", nodes)
    built = time.perf_counter() - started
    config = GenericConfig(
        device={"bench": DeviceBlock(paths=["/dev/bench/*"])},
        fingerprint_period=timedelta(hours=1),
    )
    t0 = time.perf_counter()
    client = DevicePluginClient.launch(COMMAND, env=env_for(dev, sysfs), start_timeout=60)
    try:
        client.set_config(encode_config(config))
        t1 = time.perf_counter()
        with client.fingerprint() as stream:
            t2 = time.perf_counter()
            (group,) = stream.next(120)
            t3 = time.perf_counter()
            assert len(group.devices) == nodes, len(group.devices)
            assert all(d.healthy for d in group.devices)
            pid = client.process.pid
            rss, hwm = memory_mib(pid, "VmRSS"), memory_mib(pid, "VmHWM")
    finally:
        client.kill()

    plugin = GenericDevicePlugin(Roots(str(dev), str(sysfs)))
    plugin.configure(config)
    cold_start = time.perf_counter()
    plugin.detect()
    cold = time.perf_counter() - cold_start
    warm = []
    for _ in range(20):
        start = time.perf_counter()
        plugin.detect()
        warm.append(time.perf_counter() - start)

    print(f"fingerprint with {nodes} matched nodes (tree built in {built:.1f} s):")
    print(f"  launch + SetConfig            {1000 * (t1 - t0):8.1f} ms")
    print(f"  first Fingerprint message     {1000 * (t3 - t2):8.1f} ms")
    print(f"  in-process scan, cold         {1000 * cold:8.1f} ms")
    print(
        f"  in-process rescan, unchanged  {1000 * statistics.median(warm):8.1f} ms (median of 20)"
    )
    print(f"  plugin RSS after fingerprint  {rss:8.1f} MiB (peak {hwm:.1f} MiB)")


def real_uevent_file() -> str:
    """A real device whose uevent file can be written to make the kernel announce it."""
    for pattern in ("/sys/devices/virtual/mem/null/uevent", "/sys/devices/virtual/misc/*/uevent"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise SystemExit("no /sys/devices/virtual/misc/*/uevent to write to")


def add_usb(sysfs: Path, port: str) -> Path:
    syspath = sysfs / "devices" / "pci0000:00" / "0000:00:14.0" / "usb1" / port
    syspath.mkdir(parents=True)
    for name, value in (("idVendor", "1a86"), ("idProduct", "7523"), ("busnum", "1"),
                        ("devnum", "2"), ("speed", "12")):  # fmt: skip
        (syspath / name).write_text(value + "\n")
    relink(sysfs / "bus" / "usb" / "devices" / port, syspath)
    return syspath


def remove_usb(sysfs: Path, port: str, syspath: Path) -> None:
    (sysfs / "bus" / "usb" / "devices" / port).unlink()
    shutil.rmtree(syspath)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def bench_uevents(base: Path, rounds: int) -> None:
    dev, sysfs = make_tree(base / "events", 0)
    trigger = real_uevent_file()
    config = GenericConfig(
        device={"ch340": DeviceBlock(usb=[UsbBlock(vendor_id="1a86")])},
        fingerprint_period=timedelta(hours=1),
    )
    client = DevicePluginClient.launch(COMMAND, env=env_for(dev, sysfs), start_timeout=60)
    latencies: list[float] = []
    try:
        client.set_config(encode_config(config))
        with client.fingerprint() as stream:
            assert stream.next(30) == []
            time.sleep(1)  # let the watchers start
            syspath: Path | None = None
            for i in range(2 * rounds):
                if syspath is None:
                    syspath = add_usb(sysfs, "1-1")
                    wanted = 1
                else:
                    remove_usb(sysfs, "1-1", syspath)
                    syspath, wanted = None, 0
                start = time.perf_counter()
                with open(trigger, "w") as f:
                    f.write("change")
                while True:
                    groups = stream.next(10)
                    count = sum(len(g.devices) for g in groups)
                    if count == wanted:
                        break
                latencies.append(time.perf_counter() - start)
                time.sleep(0.02 if i % 2 else 0.05)
    finally:
        client.kill()
    ms = [1000 * v for v in latencies]
    print(f"uevent to host ({len(ms)} changes, trigger {trigger}):")
    print(
        f"  p50 {statistics.median(ms):.1f} ms   p99 {percentile(ms, 0.99):.1f} ms"
        f"   max {max(ms):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--events", type=int, default=100)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the fake /dev is made of real device nodes (mknod)")
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.platform()}")
    base = Path(tempfile.mkdtemp(prefix="bench-generic-"))
    try:
        bench_scale(base, args.nodes)
        bench_uevents(base, args.events)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
