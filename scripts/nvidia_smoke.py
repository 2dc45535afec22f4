"""Smoke-test nomad-device-nvidia on a node with NVIDIA GPUs, against nvidia-smi.

Runs the plugin the way a Nomad client does, through this project's own
tools, and compares what it reports with what ``nvidia-smi`` says about the
same GPUs:

1. ``nvidia-smi -q -x`` and ``nvidia-smi -L``: the GPUs, their MIG devices and
   their readings, as NVIDIA's own tool sees them;
2. ``nomad-device-launcher fingerprint --json``: device IDs, groups, health
   (a healthy GPU reported unhealthy fails the run), attributes, and each
   device's PCI bus ID, which must name a device in ``/sys/bus/pci/devices``
   (what Nomad's NUMA placement compares it with);
3. ``nomad-device-launcher stats --json``: every statistic within a tolerance
   of nvidia-smi's reading, and present exactly where nvidia-smi has a value;
4. ``nomad-device-launcher reserve --json`` of every device: the environment
   and device nodes a task would get, each node present (and, for real nodes,
   the right character device);
5. ``nomad-device-conformance --json``: the conformance suite.

It changes nothing on the GPUs: every NVML call the plugin and nvidia-smi
make is a query. (A reservation of a MIG device may create its missing
``/dev/nvidia-caps`` node, as ``nvidia-modprobe`` does on the first CUDA use.)
The whole run stays under four minutes (``--budget``). Run it on the GPU node,
as the user the Nomad agent runs as (root), from the SDK's virtual
environment:

    /opt/nomad-device-sdk/bin/python scripts/nvidia_smoke.py            # text report
    /opt/nomad-device-sdk/bin/python scripts/nvidia_smoke.py --json     # for the record

Exit status: 0 when nothing failed (warnings are differences within reason,
listed for a person to judge), 1 when a check failed, 2 when it could not run.
Results go into docs/plugins/nvidia.md ("Proof on real hardware").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

PASS, WARN, FAIL = "pass", "warn", "fail"

#: nvidia-smi's bus IDs are NVML's (upper case, 8-digit domain); sysfs's are not.
_BUS_ID = re.compile(r"^\s*([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s*$")
_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:[A-Za-z/%]+)?\s*$")
_LISTED_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s+(MIG-[^)\s]+)\)")
_LISTED_GPU = re.compile(r"^GPU\s+\d+:.*\(UUID:\s+(GPU-[^)\s]+)\)")


# ----------------------------------------------------------------------- report


@dataclass
class Check:
    name: str
    status: str
    detail: str = ""


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def add(self, name: str, status: str, detail: str = "") -> None:
        self.checks.append(Check(name, status, detail))

    def expect(self, name: str, ok: bool, detail: str, otherwise: str = FAIL) -> None:
        self.add(name, PASS if ok else otherwise, detail)

    @property
    def failed(self) -> bool:
        return any(c.status == FAIL for c in self.checks)

    def text(self) -> str:
        width = max((len(c.name) for c in self.checks), default=10)
        lines = [f"{c.status.upper():4}  {c.name:<{width}}  {c.detail}" for c in self.checks]
        counts = {s: sum(c.status == s for c in self.checks) for s in (PASS, WARN, FAIL)}
        lines.append(
            f"\n{counts[PASS]} passed, {counts[WARN]} warnings, {counts[FAIL]} failed"
            f" in {time.monotonic() - self.started:.1f}s"
        )
        return "\n".join(lines)

    def json(self) -> str:
        return json.dumps(
            {
                "ok": not self.failed,
                "seconds": round(time.monotonic() - self.started, 1),
                "checks": [asdict(c) for c in self.checks],
            },
            indent=2,
        )


# ----------------------------------------------------------------- nvidia-smi


def number(text: str | None) -> float | None:
    """``"40960 MiB"`` -> 40960.0; ``N/A``, ``[Not Supported]``, deprecations -> None."""
    if text is None:
        return None
    found = _NUMBER.match(text)
    return float(found.group(1)) if found else None


def sysfs_bus_id(bus_id: str) -> str:
    """``00000000:9A:00.0`` as sysfs names it: ``0000:9a:00.0``."""
    found = _BUS_ID.match(bus_id)
    if not found:
        return bus_id.strip().lower()
    domain, bus, device, function = found.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function}"


@dataclass
class SmiMig:
    index: int
    uuid: str = ""
    profile: str = ""
    memory_total: float | None = None
    memory_used: float | None = None


@dataclass
class SmiGpu:
    """One GPU as ``nvidia-smi -q -x`` shows it; None where it says N/A."""

    uuid: str
    name: str
    minor: int | None = None
    bus_id: str = ""
    memory_total: float | None = None
    memory_used: float | None = None
    bar1_total: float | None = None
    power_limit: float | None = None
    power_draw: float | None = None
    max_graphics_clock: float | None = None
    max_memory_clock: float | None = None
    link_gen: float | None = None
    link_width: float | None = None
    display: str | None = None
    persistence: str | None = None
    mig: bool = False
    migs: list[SmiMig] = field(default_factory=list)
    temperature: float | None = None
    utilization: dict[str, float | None] = field(default_factory=dict)
    dram_correctable: float | None = None
    retirement_pending: bool = False
    remap_pending: bool = False
    remap_failure: bool = False
    sm_clock: float | None = None
    memory_clock: float | None = None


def _text(node: ET.Element | None, path: str) -> str | None:
    found = None if node is None else node.find(path)
    return None if found is None or found.text is None else found.text.strip()


def _enabled(text: str | None) -> str | None:
    """The Go plugin's ``%v`` of an enable state: ``"1"``/``"0"``; None when not a state."""
    return {"Enabled": "1", "Disabled": "0"}.get(text or "")


def _yes(text: str | None) -> bool:
    return (text or "").strip().lower() == "yes"


def parse_query(document: str) -> tuple[str, list[SmiGpu]]:
    """The driver version and the GPUs of an ``nvidia-smi -q -x`` document.

    Element names vary by release (``power_readings`` with ``power_limit``
    before 535, ``gpu_power_readings`` with ``current_power_limit`` since,
    ``average_power_draw`` from 595): each is looked up where it may be.
    """
    root = ET.fromstring(document)
    gpus: list[SmiGpu] = []
    for node in root.findall("gpu"):
        power = node.find("gpu_power_readings")
        if power is None:
            power = node.find("power_readings")
        draw = next(
            (
                v
                for tag in ("power_draw", "average_power_draw", "instant_power_draw")
                if (v := number(_text(power, tag))) is not None
            ),
            None,
        )
        limit = number(_text(power, "current_power_limit"))
        if limit is None:
            limit = number(_text(power, "power_limit"))
        gpu = SmiGpu(
            uuid=_text(node, "uuid") or "",
            name=_text(node, "product_name") or "",
            bus_id=_text(node, "pci/pci_bus_id") or node.get("id", ""),
            memory_total=number(_text(node, "fb_memory_usage/total")),
            memory_used=number(_text(node, "fb_memory_usage/used")),
            bar1_total=number(_text(node, "bar1_memory_usage/total")),
            power_limit=limit,
            power_draw=draw,
            max_graphics_clock=number(_text(node, "max_clocks/graphics_clock")),
            max_memory_clock=number(_text(node, "max_clocks/mem_clock")),
            link_gen=number(_text(node, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
            link_width=number(_text(node, "pci/pci_gpu_link_info/link_widths/max_link_width")),
            display=_enabled(_text(node, "display_mode")),
            persistence=_enabled(_text(node, "persistence_mode")),
            mig=_text(node, "mig_mode/current_mig") == "Enabled",
            temperature=number(_text(node, "temperature/gpu_temp")),
            utilization={
                name: number(_text(node, f"utilization/{tag}"))
                for name, tag in (
                    ("GPU utilization", "gpu_util"),
                    ("Memory utilization", "memory_util"),
                    ("Encoder utilization", "encoder_util"),
                    ("Decoder utilization", "decoder_util"),
                )
            },
            dram_correctable=number(_text(node, "ecc_errors/volatile/dram_correctable")),
            retirement_pending=_yes(_text(node, "retired_pages/pending_retirement")),
            remap_pending=_yes(_text(node, "remapped_rows/remapped_row_pending")),
            remap_failure=_yes(_text(node, "remapped_rows/remapped_row_failure")),
            sm_clock=number(_text(node, "clocks/sm_clock")),
            memory_clock=number(_text(node, "clocks/mem_clock")),
        )
        minor = number(_text(node, "minor_number"))
        gpu.minor = None if minor is None else int(minor)
        for index, mig in enumerate(node.findall("mig_devices/mig_device")):
            gpu.migs.append(
                SmiMig(
                    index=int(number(_text(mig, "index")) or index),
                    memory_total=number(_text(mig, "fb_memory_usage/total")),
                    memory_used=number(_text(mig, "fb_memory_usage/used")),
                )
            )
        gpus.append(gpu)
    return _text(root, "driver_version") or "", gpus


def add_listing(gpus: Sequence[SmiGpu], listing: str) -> None:
    """MIG UUIDs and profiles from ``nvidia-smi -L`` (``-q -x`` has no MIG UUIDs)."""
    by_uuid = {gpu.uuid: gpu for gpu in gpus}
    current: SmiGpu | None = None
    for line in listing.splitlines():
        if found := _LISTED_GPU.match(line):
            current = by_uuid.get(found.group(1))
        elif (found := _LISTED_MIG.match(line)) and current is not None:
            profile, index, uuid = found.group(1), int(found.group(2)), found.group(3)
            mig = next((m for m in current.migs if m.index == index), None)
            if mig is None:
                mig = SmiMig(index)
                current.migs.append(mig)
            mig.uuid, mig.profile = uuid, profile


# --------------------------------------------------------------- the plugin


@dataclass(frozen=True)
class Tools:
    launcher: list[str]
    conformance: list[str]
    plugin: list[str]
    config: list[str]
    deadline: float

    def left(self, cap: float) -> float:
        left = self.deadline - time.monotonic()
        if left <= 1:
            raise TimeoutError("the time budget ran out")
        return min(cap, left)


def run(command: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command), capture_output=True, text=True, timeout=timeout, check=False
    )


def launcher_json(tools: Tools, args: Sequence[str], cap: float = 60) -> Any:
    result = run([*tools.launcher, *args[:1], "--json", *tools.config, *args[1:]], tools.left(cap))
    if result.returncode != 0:
        raise RuntimeError(
            f"nomad-device-launcher {args[0]} exited {result.returncode}: "
            + (result.stderr.strip().splitlines() or ["no output"])[-1]
        )
    return json.loads(result.stdout)


def _value(attribute: Mapping[str, Any]) -> Any:
    for key in ("Int", "Float", "String", "Bool"):
        if attribute.get(key) is not None:
            return attribute[key]
    return None


def _within(a: float | None, b: float | None, tolerance: float) -> bool:
    return a is not None and b is not None and abs(a - b) <= tolerance


def pci_bandwidth(gen: float | None, width: float | None) -> int:
    """The Go plugin's figure: MB/s per lane by PCIe generation (0 below gen 3)."""
    per_lane = {3: 1 << 10, 4: 2 << 10, 5: 3 << 10, 6: 4 << 10}.get(int(gen or 0), 0)
    return int(width or 0) * per_lane


# ----------------------------------------------------------------- comparing


def expected_devices(gpus: Iterable[SmiGpu]) -> dict[str, tuple[SmiGpu, SmiMig | None, str]]:
    """Device ID -> (GPU, MIG device, group name), as the plugin should report them."""
    found: dict[str, tuple[SmiGpu, SmiMig | None, str]] = {}
    for gpu in gpus:
        if not gpu.mig:
            found[gpu.uuid] = (gpu, None, gpu.name)
            continue
        for mig in gpu.migs:
            if mig.uuid:
                found[mig.uuid] = (gpu, mig, f"{gpu.name} MIG {mig.profile}")
    return found


def compare_fingerprint(
    report: Report,
    driver: str,
    gpus: Sequence[SmiGpu],
    groups: Sequence[Mapping[str, Any]],
    sysfs: str,
) -> None:
    expected = expected_devices(gpus)
    reported = {
        instance["ID"]: (group, instance) for group in groups for instance in group["Instances"]
    }
    missing, extra = sorted(set(expected) - set(reported)), sorted(set(reported) - set(expected))
    report.expect(
        "fingerprint: devices",
        not missing and not extra,
        f"{len(reported)} device(s), as nvidia-smi lists"
        if not missing and not extra
        else f"missing {missing}, unexpected {extra}",
    )
    for device_id, (gpu, _, group_name) in sorted(expected.items()):
        if device_id not in reported:
            continue
        group, instance = reported[device_id]
        report.expect(
            f"fingerprint: {device_id} group",
            group["Name"] == group_name,
            f"{group['Name']!r}" + ("" if group["Name"] == group_name else f", not {group_name!r}"),
        )
        faults = [
            why
            for why, shown in (
                ("retirement pending", gpu.retirement_pending),
                ("row remapping pending", gpu.remap_pending),
                ("row remapping failed", gpu.remap_failure),
            )
            if shown
        ]
        healthy, why = instance["Healthy"], instance.get("HealthDescription", "")
        if faults:
            report.expect(
                f"health: {device_id}",
                not healthy,
                f"unhealthy ({why}); nvidia-smi: {', '.join(faults)}"
                if not healthy
                else f"healthy, but nvidia-smi shows {', '.join(faults)}",
            )
        else:
            report.expect(
                f"health: {device_id}",
                healthy,
                "healthy"
                if healthy
                else f"reported unhealthy on a GPU nvidia-smi finds fine: {why}",
            )
        bus = (instance.get("Locality") or {}).get("PciBusID")
        want = sysfs_bus_id(gpu.bus_id)
        in_sysfs = os.path.isdir(os.path.join(sysfs, "bus", "pci", "devices", bus or "-"))
        node = _read(os.path.join(sysfs, "bus", "pci", "devices", bus or "-", "numa_node"))
        report.expect(
            f"numa: {device_id}",
            bus == want and in_sysfs,
            f"{bus} in {sysfs}/bus/pci/devices (numa_node {node or '?'})"
            if bus == want and in_sysfs
            else f"locality {bus!r}: nvidia-smi says {gpu.bus_id}, sysfs names it {want}"
            + ("" if in_sysfs else ", not found in sysfs"),
        )
    first_of: dict[str, tuple[SmiGpu, SmiMig | None]] = {}
    for device_id in sorted(expected):
        gpu, mig, name = expected[device_id]
        first_of.setdefault(name, (gpu, mig))
    for group in groups:
        if group["Name"] in first_of:
            gpu, mig = first_of[group["Name"]]
            compare_attributes(report, group, driver, gpu, mig)


def compare_attributes(
    report: Report, group: Mapping[str, Any], driver: str, gpu: SmiGpu, mig: SmiMig | None
) -> None:
    attrs = {name: _value(a) for name, a in group["Attributes"].items()}
    memory = gpu.memory_total if mig is None else mig.memory_total
    expectations: list[tuple[str, Any, float]] = [
        ("driver_version", driver, 0),
        ("memory", memory, 1),
        ("bar1", gpu.bar1_total, 1),
        ("power", int(gpu.power_limit) if gpu.power_limit is not None else 0, 1),
        ("cores_clock", gpu.max_graphics_clock, 0),
        ("memory_clock", gpu.max_memory_clock, 0),
        ("pci_bandwidth", pci_bandwidth(gpu.link_gen, gpu.link_width), 0),
        ("display_state", gpu.display, 0),
        ("persistence_mode", gpu.persistence, 0),
    ]
    for name, want, tolerance in expectations:
        got = attrs.get(name)
        label = f"attribute: {group['Name']} {name}"
        if want is None:
            if name == "memory" and got is not None:
                report.add(
                    label, WARN, f"{got} (nvidia-smi: N/A; an integrated GPU's system memory?)"
                )
            else:
                report.expect(
                    label,
                    got is None,
                    "left out, as nvidia-smi has no value"
                    if got is None
                    else f"{got!r}, but nvidia-smi has no value",
                )
        elif isinstance(want, str):
            report.expect(
                label, got == want, f"{got!r}" + ("" if got == want else f", not {want!r}")
            )
        else:
            ok = got is not None and abs(float(got) - float(want)) <= tolerance
            report.expect(label, ok, f"{got}" + ("" if ok else f", nvidia-smi {want:g}"))


def compare_stats(
    report: Report, gpus: Sequence[SmiGpu], samples: Sequence[Mapping[str, Any]]
) -> None:
    expected = expected_devices(gpus)
    seen: set[str] = set()
    for group in samples:
        for device_id, values in group["InstanceStats"].items():
            if device_id not in expected or device_id in seen:
                continue
            seen.add(device_id)
            gpu, mig, _ = expected[device_id]
            stats = ((values.get("Stats") or {}).get("Attributes")) or {}
            compare_device_stats(report, device_id, stats, gpu, mig)
    report.expect(
        "stats: devices",
        seen == set(expected),
        f"{len(seen)} of {len(expected)} device(s) have statistics",
        otherwise=WARN,
    )


def _stat(stats: Mapping[str, Any], name: str) -> tuple[float | None, float | None]:
    value = stats.get(name)
    if value is None:
        return None, None
    numerator = value.get("IntNumeratorVal", value.get("FloatNumeratorVal"))
    denominator = value.get("IntDenominatorVal", value.get("FloatDenominatorVal"))
    return numerator, denominator


def compare_device_stats(
    report: Report,
    device_id: str,
    stats: Mapping[str, Any],
    gpu: SmiGpu,
    mig: SmiMig | None,
) -> None:
    used, total = _stat(stats, "Memory state")
    want_total = gpu.memory_total if mig is None else mig.memory_total
    want_used = gpu.memory_used if mig is None else mig.memory_used
    if want_total is not None:
        report.expect(
            f"stats: {device_id} memory total",
            _within(total, want_total, 1),
            f"{total} MiB, nvidia-smi {want_total:g} MiB",
        )
        slack = max(512.0, want_total * 0.1)
        report.expect(
            f"stats: {device_id} memory used",
            _within(used, want_used, slack),
            f"{used} MiB, nvidia-smi {want_used} MiB",
            otherwise=WARN,
        )
    if mig is not None:
        others = sorted(set(stats) - {"Memory state", "BAR1 buffer state"})
        report.expect(
            f"stats: {device_id} per-GPU values",
            not others,
            "only the instance's memory, as NVML gives"
            if not others
            else f"unexpected for a MIG device: {others}",
            otherwise=WARN,
        )
        return
    readings: list[tuple[str, float | None, float]] = [
        ("Temperature", gpu.temperature, 10),
        ("SM clock", gpu.sm_clock, max(300.0, (gpu.sm_clock or 0) * 0.5)),
        ("Memory clock", gpu.memory_clock, max(300.0, (gpu.memory_clock or 0) * 0.5)),
        ("ECC memory errors", gpu.dram_correctable, 0),
        *((name, v, 100) for name, v in gpu.utilization.items()),
    ]
    for name, want, tolerance in readings:
        got, _ = _stat(stats, name)
        label = f"stats: {device_id} {name}"
        if want is None:
            report.expect(
                label,
                got is None,
                "left out, as nvidia-smi has no value"
                if got is None
                else f"{got}, but nvidia-smi has none",
                otherwise=WARN,
            )
        else:
            report.expect(
                label, _within(got, want, tolerance), f"{got}, nvidia-smi {want:g}", otherwise=WARN
            )
    draw, limit = _stat(stats, "Power usage")
    if gpu.power_draw is None:
        report.expect(
            f"stats: {device_id} Power usage",
            draw is None,
            "left out, as nvidia-smi has no value",
            otherwise=WARN,
        )
    else:
        ok = draw is not None and (gpu.power_limit is None or _within(limit, gpu.power_limit, 1))
        report.expect(
            f"stats: {device_id} Power usage",
            ok,
            f"{draw} / {limit} W, nvidia-smi {gpu.power_draw:g} / {gpu.power_limit} W",
            otherwise=WARN,
        )


def check_reservation(
    report: Report,
    gpus: Sequence[SmiGpu],
    ids: Sequence[str],
    reservation: Mapping[str, Any],
    dev_root: str,
    proc_root: str,
) -> None:
    envs = reservation.get("Envs") or {}
    want = ",".join(ids)
    got = envs.get("NVIDIA_VISIBLE_DEVICES")
    report.expect(
        "reserve: NVIDIA_VISIBLE_DEVICES",
        got == want,
        f"{len(ids)} device(s)" if got == want else f"{got!r}, not {want!r}",
    )
    specs = {d["TaskPath"]: d["HostPath"] for d in reservation.get("Devices") or []}
    expected = expected_devices(gpus)
    for device_id in ids:
        gpu, _, _ = expected[device_id]
        task = f"/dev/nvidia{gpu.minor}"
        report.expect(
            f"reserve: {device_id} GPU node",
            task in specs,
            f"{task}" if task in specs else f"{task} not in the reservation",
        )
    for task, host in sorted(specs.items()):
        report.add(f"reserve: node {task}", *_node_state(host, task, dev_root, proc_root))


def _node_state(host: str, task: str, dev_root: str, proc_root: str) -> tuple[str, str]:
    try:
        info = os.stat(host)
    except OSError as exc:
        return FAIL, f"{host}: {exc.strerror}"
    if not stat.S_ISCHR(info.st_mode):
        return PASS, f"{host} exists (not a device node: a stand-in tree?)"
    major, minor = os.major(info.st_rdev), os.minor(info.st_rdev)
    gpu = re.fullmatch(r"/dev/nvidia(\d+)", task)
    if gpu and (major, minor) != (195, int(gpu.group(1))):
        return FAIL, f"{host} is {major}:{minor}, not 195:{gpu.group(1)}"
    if "/nvidia-caps/" in task:
        caps = _caps_major(proc_root)
        want = int(task.rsplit("nvidia-cap", 1)[1])
        if (caps, want) != (major, minor):
            return FAIL, f"{host} is {major}:{minor}, not {caps}:{want} (nvidia-caps)"
    return PASS, f"{host} ({major}:{minor})"


def _caps_major(proc_root: str) -> int | None:
    for line in (_read(os.path.join(proc_root, "devices")) or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == "nvidia-caps" and parts[0].isdigit():
            return int(parts[0])
    return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def check_conformance(report: Report, tools: Tools) -> None:
    result = run(
        [*tools.conformance, "--json", *tools.config, "--", *tools.plugin], tools.left(120)
    )
    try:
        verdict = json.loads(result.stdout)
    except json.JSONDecodeError:
        report.add(
            "conformance", FAIL, f"no report (exit {result.returncode}): {result.stderr[-300:]}"
        )
        return
    bad = [r["id"] for r in verdict.get("results", []) if r.get("status") not in ("pass", "skip")]
    report.expect(
        "conformance",
        bool(verdict.get("ok")) and not bad,
        f"{len(verdict.get('results', []))} checks in {verdict.get('seconds', '?')}s"
        + (f"; not passed: {bad}" if bad else ""),
    )


# ----------------------------------------------------------------------- main


def _tool(name: str) -> list[str]:
    beside = os.path.join(os.path.dirname(sys.executable), name)
    found = beside if os.access(beside, os.X_OK) else shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found next to {sys.executable} or on PATH")
    return [found]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="the nvidia-smi to compare with")
    parser.add_argument("--plugin", nargs="+", help="the plugin command (nomad-device-nvidia)")
    parser.add_argument("--config-json", help="the plugin's config body, as JSON")
    parser.add_argument("--sysfs", default="/sys", help="where sysfs is (tests point it elsewhere)")
    parser.add_argument("--budget", type=float, default=230.0, help="seconds for the whole run")
    parser.add_argument("--skip-conformance", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = Report()
    try:
        config = json.loads(args.config_json) if args.config_json else {}
        tools = Tools(
            launcher=_tool("nomad-device-launcher"),
            conformance=_tool("nomad-device-conformance"),
            plugin=list(args.plugin) if args.plugin else _tool("nomad-device-nvidia"),
            config=["--config-json", args.config_json] if args.config_json else [],
            deadline=time.monotonic() + args.budget,
        )
        smi = shutil.which(args.nvidia_smi) or args.nvidia_smi
        query = run([smi, "-q", "-x"], tools.left(60))
        listing = run([smi, "-L"], tools.left(60))
        if query.returncode != 0:
            raise RuntimeError(
                f"nvidia-smi -q -x exited {query.returncode}: {query.stderr.strip()}"
            )
        driver, gpus = parse_query(query.stdout)
        add_listing(gpus, listing.stdout)
        report.add("nvidia-smi", PASS, f"driver {driver}, {len(gpus)} GPU(s)")
        groups = launcher_json(tools, ["fingerprint", "--", *tools.plugin])
        compare_fingerprint(report, driver, gpus, groups, args.sysfs)
        samples = launcher_json(tools, ["stats", "--count", "1", "--", *tools.plugin])
        again = run([smi, "-q", "-x"], tools.left(60))  # readings taken next to the plugin's
        now = parse_query(again.stdout)[1] if again.returncode == 0 else gpus
        add_listing(now, listing.stdout)
        compare_stats(report, now, samples)
        ids = sorted(expected_devices(gpus))
        if ids:
            reservation = launcher_json(tools, ["reserve", *ids, "--", *tools.plugin])
            check_reservation(
                report,
                gpus,
                ids,
                reservation,
                config.get("dev_root", "/dev"),
                config.get("proc_root", "/proc"),
            )
        if not args.skip_conformance:
            check_conformance(report, tools)
    except (OSError, RuntimeError, TimeoutError, subprocess.TimeoutExpired, ET.ParseError) as exc:
        report.add("run", FAIL, f"{type(exc).__name__}: {exc}")
        print(report.json() if args.json else report.text())
        return 2
    print(report.json() if args.json else report.text())
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
