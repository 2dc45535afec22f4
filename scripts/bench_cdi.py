"""Benchmark nomad-device-generic's CDI devices: reading a spec, rescans, a spec change to the host.

A fake host (under a temp dir, real device nodes made with mknod, so this
needs root) with ``--gpus`` GPUs shaped as ``nvidia-ctk cdi generate``
describes them: per GPU a device by index and one by UUID (its ``/dev/nvidiaN``
and DRM nodes below a PCI function), two MIG devices on each, ``all``; the
spec's own control nodes, ``NVIDIA_VISIBLE_DEVICES=void``, four
``nvidia-cdi-hook`` hooks and ``--mounts`` read-only library mounts. Measured:

1. **Spec read**: decoding and validating that spec (YAML as nvidia-ctk
   writes it, and JSON), median of 20, with its size.
2. **Rescan**: one in-process ``detect()`` with the spec unchanged (its parse
   kept by the file's identity) and after it was rewritten (parsed again),
   median of 20 each.
3. **Spec change to host**: the plugin launched as Nomad launches it, with
   ``fingerprint_period = "1h"``; the spec is regenerated the way nvidia-ctk
   writes it (a new file renamed over the old), alternately with and without
   one more device. The figure is the time from the rename to the host
   holding the Fingerprint message with the new state: inotify, the rescan,
   the SDK's diff and the gRPC stream. ``--events`` rounds of two changes,
   0.3 s apart: a change that follows another within 250 ms waits for the
   inotify source's rate limit for bursts (``sources/_inotify.py``).

Run as root (well under a minute):

    .venv/bin/python scripts/bench_cdi.py [--gpus 8] [--mounts 40] [--events 100]

Compare with ``scripts/bench_generic.py --only usb`` in the same session:
figures move with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from nomad_device.config import encode_config
from nomad_device.host import DevicePluginClient
from nomad_device.plugins.generic import cdi
from nomad_device.plugins.generic.config import CdiBlock, DeviceBlock, GenericConfig
from nomad_device.plugins.generic.plugin import GenericDevicePlugin
from nomad_device.plugins.generic.roots import ENV_DEV_ROOT, ENV_SYS_ROOT, Roots

COMMAND = [sys.executable, "-m", "nomad_device.plugins.generic"]
#: Major 1 ("mem") is in every kernel's /proc/devices and has no minors this high in
#: sysfs: a node the kernel knows only by its major, as NVIDIA's /dev/nvidia*.
MAJOR = 1
DRM_MAJOR = 226
HOOK = "/usr/bin/nvidia-cdi-hook"


def mkdirs(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
    path.chmod(0o755)
    return path


def node(dev: Path, name: str, major: int, minor: int) -> None:
    path = dev / name
    mkdirs(path.parent)
    os.mknod(path, 0o20660, os.makedev(major, minor))


def make_host(base: Path, gpus: int, mounts: int) -> tuple[Path, Path, Path, dict[str, Any]]:
    """The fake /dev and /sys, the spec directory, and the spec (a mapping)."""
    dev, sysfs = mkdirs(base / "dev"), mkdirs(base / "sys")
    for sub in ("dev/char", "dev/block", "bus/pci/devices"):
        mkdirs(sysfs / sub)
    specs, lib = mkdirs(dev / "cdi"), mkdirs(dev / "lib")
    minor = 1000
    devices: list[dict[str, Any]] = []
    every: list[dict[str, Any]] = []
    for index in range(gpus):
        address = f"0000:{0x10 + index:02x}:00.0"
        function = mkdirs(sysfs / "devices" / "pci0000:00" / address)
        for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200"),
                            ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x16c1"),
                            ("numa_node", str(index % 2)), ("enable", "1")):  # fmt: skip
            (function / name).write_text(value + "\n")
        (sysfs / "bus" / "pci" / "devices" / address).symlink_to(
            os.path.relpath(function, sysfs / "bus" / "pci" / "devices")
        )
        drm = mkdirs(function / "drm" / f"card{index + 1}")
        (drm / "dev").write_text(f"{DRM_MAJOR}:{index + 1}\n")
        (drm / "uevent").write_text(
            f"MAJOR={DRM_MAJOR}\nMINOR={index + 1}\nDEVNAME=dri/card{index + 1}\n"
        )
        (sysfs / "dev" / "char" / f"{DRM_MAJOR}:{index + 1}").symlink_to(
            os.path.relpath(drm, sysfs / "dev" / "char")
        )
        node(dev, f"dri/card{index + 1}", DRM_MAJOR, index + 1)
        node(dev, f"nvidia{index}", MAJOR, minor + index)
        own = [{"path": f"/dev/nvidia{index}"}, {"path": f"/dev/dri/card{index + 1}"}]
        every.extend(own)
        edits = {"deviceNodes": own, "hooks": [_hook("create-symlinks", "--link", f"x{index}::y")]}
        devices.append({"containerEdits": edits, "name": str(index)})
        devices.append(
            {"containerEdits": edits, "name": f"GPU-{index:08x}-0000-0000-0000-000000000000"}
        )
        for gi in range(2):
            cap = 100 + 2 * index + gi
            node(dev, f"nvidia-caps/nvidia-cap{cap}", MAJOR, minor + 500 + cap)
            mig = [{"path": f"/dev/nvidia{index}"}, {"path": f"/dev/nvidia-caps/nvidia-cap{cap}"}]
            devices.append({"containerEdits": {"deviceNodes": mig}, "name": f"{index}:{gi}"})
    devices.append({"containerEdits": {"deviceNodes": every}, "name": "all"})
    common = []
    for offset, name in enumerate(
        ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
    ):
        node(dev, name, MAJOR, minor + 900 + offset)
        common.append({"path": f"/dev/{name}"})
    libs = []
    for index in range(mounts):
        path = lib / f"libnvidia-{index}.so.550.54.15"
        path.write_text("ELF")
        path.chmod(0o644)
        libs.append(
            {
                "containerPath": f"/usr/lib/x86_64-linux-gnu/{path.name}",
                "hostPath": str(path),
                "options": ["ro", "nosuid", "nodev", "bind"],
            }
        )
    spec = {
        "cdiVersion": "0.5.0",
        "containerEdits": {
            "deviceNodes": common,
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "hooks": [
                _hook("update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"),
                _hook("enable-cuda-compat", "--host-driver-version=550.54.15"),
                _hook("disable-device-node-modification"),
                _hook("create-symlinks"),
            ],
            "mounts": libs,
        },
        "devices": devices,
        "kind": "nvidia.com/gpu",
    }
    return dev, sysfs, specs, spec


def _hook(*args: str) -> dict[str, Any]:
    return {"args": ["nvidia-cdi-hook", *args], "hookName": "createContainer", "path": HOOK}


def yaml_text(value: Any, indent: int = 0) -> str:
    """The spec as sigs.k8s.io/yaml writes it (what nvidia-ctk uses): keys sorted,
    sequences at their key's indentation, strings quoted where YAML would read them
    otherwise."""
    pad = " " * indent
    out = []
    if isinstance(value, dict):
        for key in sorted(value):
            item = value[key]
            if isinstance(item, (dict, list)) and item:
                out.append(f"{pad}{key}:")
                out.append(yaml_text(item, indent + (2 if isinstance(item, dict) else 0)))
            else:
                out.append(f"{pad}{key}: {_scalar(item)}")
    else:
        for item in value:
            if isinstance(item, dict):
                inner = yaml_text(item, indent + 2)
                out.append(f"{pad}- " + inner[indent + 2 :])
            else:
                out.append(f"{pad}- {_scalar(item)}")
    return "\n".join(out)


def _scalar(item: Any) -> str:
    if isinstance(item, (dict, list)):
        return "{}" if isinstance(item, dict) else "[]"
    text = str(item)
    plain = text and not text[0].isdigit() and ": " not in text and text[0] not in "-&*!|>'\"%@`{[#"
    return text if plain else json.dumps(text)


def write(specs: Path, spec: dict[str, Any]) -> float:
    """Regenerate the spec as nvidia-ctk does (a new file renamed over the old); when."""
    staged = specs / ".nvidia.yaml.tmp"
    staged.write_text("---\n" + yaml_text(spec) + "\n")
    staged.chmod(0o644)
    when = time.perf_counter()
    staged.rename(specs / "nvidia.yaml")
    return when


def median_ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def bench_read(spec: dict[str, Any]) -> None:
    texts = {"YAML": ("---\n" + yaml_text(spec) + "\n").encode(), "JSON": json.dumps(spec).encode()}
    devices = len(spec["devices"])
    for name, data in texts.items():
        times = []
        for _ in range(20):
            start = time.perf_counter()
            read = cdi.read_spec(data, "/etc/cdi/nvidia.yaml", 0)
            times.append(time.perf_counter() - start)
        assert len(read.devices) == devices
        print(f"  read the {name} spec ({len(data) / 1024:.0f} KiB, {devices} devices)"
              f"   {median_ms(times):7.1f} ms (median of 20)")  # fmt: skip


def config(specs: Path) -> GenericConfig:
    block = DeviceBlock(cdi=CdiBlock(kind="nvidia.com/gpu", spec_dirs=[str(specs)], hooks="skip",
                                     devices=["[0-9]*", "all"]))  # fmt: skip
    return GenericConfig(device={"gpu": block}, fingerprint_period=timedelta(hours=1))


def bench_rescan(dev: Path, sysfs: Path, specs: Path, spec: dict[str, Any]) -> None:
    logging.disable(logging.WARNING)  # the in-process plugin's notes
    plugin = GenericDevicePlugin(Roots(str(dev), str(sysfs)))
    plugin.configure(config(specs))
    (group,) = plugin.detect()
    unchanged, changed = [], []
    for _ in range(20):
        start = time.perf_counter()
        plugin.detect()
        unchanged.append(time.perf_counter() - start)
    for _ in range(20):
        write(specs, spec)
        start = time.perf_counter()
        plugin.detect()
        changed.append(time.perf_counter() - start)
    print(f"  in-process rescan, spec unchanged {median_ms(unchanged):7.1f} ms (median of 20;"
          f" {len(group.devices)} devices)")  # fmt: skip
    print(f"  in-process rescan, spec rewritten {median_ms(changed):7.1f} ms (median of 20)")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def bench_changes(dev: Path, sysfs: Path, specs: Path, spec: dict[str, Any], rounds: int) -> None:
    env = {**os.environ, ENV_DEV_ROOT: str(dev), ENV_SYS_ROOT: str(sysfs)}
    extra = {"containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}, "name": "9:9"}
    plain = len([d for d in spec["devices"] if d["name"][0].isdigit() or d["name"] == "all"])
    client = DevicePluginClient.launch(COMMAND, env=env, start_timeout=60)
    latencies: list[float] = []
    try:
        client.set_config(encode_config(config(specs)))
        with client.fingerprint() as stream:
            (group,) = stream.next(30)
            assert len(group.devices) == plain, len(group.devices)
            time.sleep(1)  # let the watchers start
            for i in range(2 * rounds):
                more = i % 2 == 0
                wanted = plain + 1 if more else plain
                start = write(
                    specs, {**spec, "devices": [*spec["devices"], extra]} if more else spec
                )
                while True:
                    groups = stream.next(10)
                    if sum(len(g.devices) for g in groups) == wanted:
                        break
                latencies.append(time.perf_counter() - start)
                # Beyond the inotify source's 250 ms between batches of a burst: each
                # change alone, as a regenerated spec is.
                time.sleep(0.3)
    finally:
        client.kill()
    ms = [1000 * v for v in latencies]
    print(f"spec change to host ({len(ms)} changes, the spec renamed into place):")
    print(f"  p50 {statistics.median(ms):.1f} ms   p99 {percentile(ms, 0.99):.1f} ms"
          f"   max {max(ms):.1f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--mounts", type=int, default=40)
    parser.add_argument("--events", type=int, default=100)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the fake /dev is made of real device nodes (mknod)")
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.platform()}")
    base = Path(tempfile.mkdtemp(prefix="bench-cdi-"))
    try:
        dev, sysfs, specs, spec = make_host(base, args.gpus, args.mounts)
        write(specs, spec)
        print(f"an nvidia-ctk-shaped spec: {args.gpus} GPUs, {args.mounts} mounts:")
        bench_read(spec)
        bench_rescan(dev, sysfs, specs, spec)
        bench_changes(dev, sysfs, specs, spec, args.events)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
