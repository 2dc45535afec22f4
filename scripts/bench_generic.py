"""Benchmark nomad-device-generic: scan cost at scale, and uevent-to-host latency.

Three measurements, each over the real wire with the plugin launched as Nomad
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
3. **PCI scan**: one in-process ``detect()`` (median of 20, warm) on a host
   with ``--functions`` (default 256) PCI functions, eight of them GPUs a
   ``pci`` block matches (each with a card and a render node), the rest
   functions it does not (bridges): what every PCI uevent costs.
4. **PCI uevent to host**: the same for a PCI function (a Coral TPU,
   ``1ac1:089a`` bound to ``apex``, with its ``apex/apex_0`` node, matched by
   a ``pci`` block) added to and removed from the fake sysfs; the uevent is a
   ``change`` written to a real PCI bridge's ``uevent`` file, so it reaches
   the plugin as a ``pci`` event. Its node exists in the fake /dev from the
   start, so nothing under /dev gives the change away.

Run as root (about a minute):

    .venv/bin/python scripts/bench_generic.py [--nodes 1000] [--events 100] [--functions 256]
        [--only scale,usb,pciscan,pci]

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
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from nomad_device.config import encode_config
from nomad_device.host import DevicePluginClient
from nomad_device.model import DeviceGroup
from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig, PciBlock, UsbBlock
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

    _, cold, warm = scan_in_process(dev, sysfs, config)

    print(f"fingerprint with {nodes} matched nodes (tree built in {built:.1f} s):")
    print(f"  launch + SetConfig            {1000 * (t1 - t0):8.1f} ms")
    print(f"  first Fingerprint message     {1000 * (t3 - t2):8.1f} ms")
    print(f"  in-process scan, cold         {1000 * cold:8.1f} ms")
    print(
        f"  in-process rescan, unchanged  {1000 * statistics.median(warm):8.1f} ms (median of 20)"
    )
    print(f"  plugin RSS after fingerprint  {rss:8.1f} MiB (peak {hwm:.1f} MiB)")


def scan_in_process(
    dev: Path, sysfs: Path, config: GenericConfig
) -> tuple[list[DeviceGroup], float, list[float]]:
    """The first ``detect()`` (its groups and seconds, cold caches), then 20 more."""
    plugin = GenericDevicePlugin(Roots(str(dev), str(sysfs)))
    plugin.configure(config)
    start = time.perf_counter()
    groups = plugin.detect()
    cold = time.perf_counter() - start
    warm = []
    for _ in range(20):
        start = time.perf_counter()
        plugin.detect()
        warm.append(time.perf_counter() - start)
    return groups, cold, warm


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


def measure(
    env: dict[str, str],
    config: GenericConfig,
    trigger: str,
    plug: Callable[[], Callable[[], None]],
    rounds: int,
) -> list[float]:
    """Seconds from each ``change`` write to the host holding the new state: ``plug()``
    adds the device (one device wanted) and returns what removes it (none wanted)."""
    client = DevicePluginClient.launch(COMMAND, env=env, start_timeout=60)
    latencies: list[float] = []
    try:
        client.set_config(encode_config(config))
        with client.fingerprint() as stream:
            assert stream.next(30) == []
            time.sleep(1)  # let the watchers start
            unplug: Callable[[], None] | None = None
            for i in range(2 * rounds):
                if unplug is None:
                    unplug, wanted = plug(), 1
                else:
                    unplug()
                    unplug, wanted = None, 0
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
    return latencies


def report(title: str, trigger: str, latencies: list[float]) -> None:
    ms = [1000 * v for v in latencies]
    print(f"{title} ({len(ms)} changes, trigger {trigger}):")
    print(
        f"  p50 {statistics.median(ms):.1f} ms   p99 {percentile(ms, 0.99):.1f} ms"
        f"   max {max(ms):.1f} ms"
    )


def bench_uevents(base: Path, rounds: int) -> None:
    dev, sysfs = make_tree(base / "events", 0)
    trigger = real_uevent_file()
    config = GenericConfig(
        device={"ch340": DeviceBlock(usb=[UsbBlock(vendor_id="1a86")])},
        fingerprint_period=timedelta(hours=1),
    )

    def plug() -> Callable[[], None]:
        syspath = add_usb(sysfs, "1-1")
        return lambda: remove_usb(sysfs, "1-1", syspath)

    report("uevent to host", trigger, measure(env_for(dev, sysfs), config, trigger, plug, rounds))


def real_pci_uevent_file() -> str:
    """A real PCI bridge (class 06), which no driver acts on: its ``change`` is a ``pci``
    uevent that only listeners hear."""
    for path in sorted(glob.glob("/sys/bus/pci/devices/*")):
        try:
            if int(Path(path, "class").read_text(), 16) >> 16 == 0x06:
                return os.path.join(os.path.realpath(path), "uevent")
        except (OSError, ValueError):
            continue
    raise SystemExit("no PCI bridge in /sys/bus/pci/devices to write a uevent to")


APEX_MAJOR = 120


def add_function(
    sysfs: Path, address: str, ids: tuple[str, str, str], driver: str,
    nodes: tuple[tuple[str, str, int, int], ...] = (),
) -> Path:  # fmt: skip
    """A PCI function as the kernel lays it out: IDs, driver link, nodes below it
    (each ``(sysfs dir, DEVNAME, major, minor)``), its /sys/bus/pci/devices entry."""
    syspath = sysfs / "devices" / "pci0000:00" / address
    syspath.mkdir(parents=True)
    vendor, device, code = ids
    for name, value in (("vendor", vendor), ("device", device), ("class", code),
                        ("enable", "1"), ("numa_node", "-1")):  # fmt: skip
        (syspath / name).write_text(value + "\n")
    (syspath / "uevent").write_text(  # as the kernel's pci_uevent writes it
        f"DRIVER={driver}\nPCI_CLASS={int(code, 16):X}\n"
        f"PCI_ID={int(vendor, 16):04X}:{int(device, 16):04X}\nPCI_SLOT_NAME={address}\n"
    )
    (sysfs / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
    relink(syspath / "driver", sysfs / "bus" / "pci" / "drivers" / driver)
    for where, devname, major, minor in nodes:
        node = syspath / where
        node.mkdir(parents=True)
        (node / "dev").write_text(f"{major}:{minor}\n")
        (node / "uevent").write_text(f"MAJOR={major}\nMINOR={minor}\nDEVNAME={devname}\n")
        (sysfs / "class" / where.split("/")[0]).mkdir(parents=True, exist_ok=True)
        relink(node / "subsystem", sysfs / "class" / where.split("/")[0])
        relink(sysfs / "dev" / "char" / f"{major}:{minor}", node)
    relink(sysfs / "bus" / "pci" / "devices" / address, syspath)
    return syspath


def add_pci(sysfs: Path, address: str) -> Path:
    """A Coral TPU (1ac1:089a on apex) and its ``apex/apex_0`` node."""
    apex = (("apex/apex_0", "apex_0", APEX_MAJOR, 0),)
    return add_function(sysfs, address, ("0x1ac1", "0x089a", "0x088000"), "apex", apex)


def remove_pci(sysfs: Path, address: str, syspath: Path) -> None:
    (sysfs / "bus" / "pci" / "devices" / address).unlink()
    (sysfs / "dev" / "char" / f"{APEX_MAJOR}:0").unlink()
    shutil.rmtree(syspath)


def bench_pci_scan(base: Path, functions: int) -> None:
    dev, sysfs = make_tree(base / "pciscan", 0)
    (dev / "dri").mkdir()
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    gpus = 8
    for i in range(functions):
        address = f"0000:{i // 32:02x}:{i % 32:02x}.0"
        if i < gpus:
            nodes = (
                (f"drm/card{i}", f"dri/card{i}", 226, i),
                (f"drm/renderD{128 + i}", f"dri/renderD{128 + i}", 226, 128 + i),
            )
            add_function(sysfs, address, ("0x1002", "0x740f", "0x038000"), "amdgpu", nodes)
            for _, devname, major, minor in nodes:
                os.mknod(dev / devname, stat.S_IFCHR | 0o660, os.makedev(major, minor))
        else:
            add_function(sysfs, address, ("0x1022", "0x1483", "0x060400"), "pcieport")
    config = GenericConfig(
        device={"gpu": DeviceBlock(pci=[PciBlock(vendor_id="1002", driver="amdgpu")])},
        fingerprint_period=timedelta(hours=1),
    )
    (group,), cold, warm = scan_in_process(dev, sysfs, config)
    assert len(group.devices) == gpus and all(d.healthy for d in group.devices), group
    print(f"PCI scan, {functions} functions of which {gpus} GPUs match:")
    print(f"  in-process scan, cold         {1000 * cold:8.1f} ms")
    print(
        f"  in-process rescan             {1000 * statistics.median(warm):8.1f} ms (median of 20)"
    )


def bench_pci_uevents(base: Path, rounds: int) -> None:
    dev, sysfs = make_tree(base / "pci", 0)
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    os.mknod(dev / "apex_0", stat.S_IFCHR | 0o660, os.makedev(APEX_MAJOR, 0))
    trigger = real_pci_uevent_file()
    config = GenericConfig(
        device={"tpu": DeviceBlock(pci=[PciBlock(vendor_id="1ac1", driver="apex")])},
        fingerprint_period=timedelta(hours=1),
    )

    def plug() -> Callable[[], None]:
        syspath = add_pci(sysfs, "0000:05:00.0")
        return lambda: remove_pci(sysfs, "0000:05:00.0", syspath)

    latencies = measure(env_for(dev, sysfs), config, trigger, plug, rounds)
    report("PCI uevent to host", trigger, latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--functions", type=int, default=256)
    parser.add_argument(
        "--only", default="scale,usb,pciscan,pci", help="which of scale, usb, pciscan, pci"
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    if os.geteuid() != 0:
        raise SystemExit("run as root: the fake /dev is made of real device nodes (mknod)")
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.platform()}")
    base = Path(tempfile.mkdtemp(prefix="bench-generic-"))
    try:
        if "scale" in only:
            bench_scale(base, args.nodes)
        if "usb" in only:
            bench_uevents(base, args.events)
        if "pciscan" in only:
            bench_pci_scan(base, args.functions)
        if "pci" in only:
            bench_pci_uevents(base, args.events)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
