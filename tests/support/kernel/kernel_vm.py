"""A real Debian kernel under QEMU (TCG), with emulated USB and PCI devices: the host side.

:class:`Vm` boots the kernel ``tests/support/kernel/fetch-kernel`` unpacked into the
cache, with a busybox initramfs built here whose ``/init`` loads the virtio
and 9p modules, mounts the host's root read-only over 9p, chroots into it
and starts ``guest_agent.py`` with the checkout's own ``.venv`` Python. The
tests talk to that agent over a virtio-serial port and to QEMU over QMP
(hot-plug, unplug, AER injection), and wait for events -- QMP replies and
events, the agent's answers, the uevents and Fingerprint messages it
recorded -- never for fixed times.

Why TCG: ``/dev/kvm`` on the machines this runs on is a paravirtualised KVM
without ``vmx``, on which a stock kernel does not boot. Everything in the
guest therefore runs 20 to 40 times slower than on the host: the tier boots
one VM for all scenarios and starts as few Python processes in it as it can.
"""

from __future__ import annotations

import compileall
import contextlib
import json
import os
import pickle
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from nomad_device.host import CallError
from nomad_device.model import DeviceGroup, DeviceGroupStats, Reservation

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parents[2]
AGENT = HERE / "guest_agent.py"
#: Where ``fetch-kernel`` unpacks kernels, one directory per package version, and
#: ``current``, a link to the one to boot (beside the bundle tests' chroots).
KERNELS = Path(
    os.environ.get("NOMAD_DEVICE_TEST_KERNELS", "/var/cache/nomad-device-sdk-tests/kernel")
)
#: Another QEMU than the one on PATH (one unpacked beside it, say; it finds its own
#: firmware in ``../share/qemu`` from its binary, the system's otherwise).
QEMU = os.environ.get("NOMAD_DEVICE_TEST_QEMU", "qemu-system-x86_64")
BUSYBOX = "/bin/busybox"
#: Modules the initramfs loads itself, before the host's root (and modprobe) is there.
EARLY = ("virtio_pci", "9pnet_virtio", "9p")
PLUGIN = [sys.executable, "-m", "nomad_device.plugins.generic"]
_HEADER = struct.Struct(">I")
#: Figures the scenarios measured, printed at the end of the run (conftest.py).
FIGURES: dict[str, str] = {}

Groups = list[DeviceGroup]

INIT = r"""#!/bin/busybox sh
/bin/busybox mkdir -p /bin /proc /sys /dev /host
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
. /etc/guest.env
for m in $EARLY; do insmod /lib/early/$m.ko || echo "guest: insmod $m failed"; done
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose hostroot /host \
    || { echo "guest: cannot mount the host's root"; poweroff -f; }
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
# The guest writes only to /run (a checkout under the host's /tmp stays visible).
mount -t tmpfs -o mode=0755 tmpfs /host/run
mkdir -m 1777 /host/run/tmp
echo "guest: starting the agent"
chroot /host /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/run/tmp \
    PYTHONDONTWRITEBYTECODE=1 "$PYTHON" "$AGENT" "$MODULES"
echo "guest: the agent exited with status $?"
poweroff -f
"""


class VmError(RuntimeError):
    """The VM could not be started, or stopped answering."""


class GuestError(AssertionError):
    """A request failed inside the guest."""


# ------------------------------------------------------------------- the kernel


@dataclass(frozen=True)
class Kernel:
    """An unpacked ``linux-image`` package: ``boot/vmlinuz-<release>`` and
    ``lib/modules/<release>`` (with ``depmod``'s indexes) under ``root``."""

    root: Path
    release: str

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.release}"

    @property
    def modules(self) -> Path:
        return self.root / "lib" / "modules" / self.release


def find_kernel() -> Kernel | str:
    """The cached kernel, or why there is none."""
    current = KERNELS / "current"
    found = sorted(current.glob("boot/vmlinuz-*"))
    if not found:
        return f"no kernel unpacked at {current} (run tests/support/kernel/fetch-kernel as root)"
    kernel = Kernel(current.resolve(), found[-1].name.removeprefix("vmlinuz-"))
    if not (kernel.modules / "modules.dep").is_file():
        return f"{kernel.modules} has no modules.dep (run tests/support/kernel/fetch-kernel again)"
    return kernel


def missing() -> list[str]:
    """What this machine lacks to run the tier; empty when it can."""
    out = []
    if shutil.which(QEMU) is None:
        out.append(f"{QEMU} is not installed (Debian: qemu-system-x86)")
    if not os.access(BUSYBOX, os.X_OK):
        out.append(f"no static busybox at {BUSYBOX} (Debian: busybox-static)")
    for tool, package in (("cpio", "cpio"), ("modprobe", "kmod")):
        if shutil.which(tool) is None:
            out.append(f"{tool} is not installed (Debian: {package})")
    if os.geteuid() != 0:
        out.append("not root: QEMU exports the whole root to the guest, which runs as root")
    kernel = find_kernel()
    if isinstance(kernel, str):
        out.append(kernel)
    if not Path(sys.executable).is_relative_to(CHECKOUT):
        out.append(f"{sys.executable} is not the checkout's .venv, which the guest runs")
    return out


def qemu_version() -> tuple[int, int]:
    out = subprocess.run([QEMU, "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = out.split("version ", 1)[1].split(".")[:2]
    return int(major), int(minor)


def early_modules(kernel: Kernel) -> list[Path]:
    """:data:`EARLY` and what they depend on, in an order ``insmod`` accepts."""
    deps: dict[str, list[str]] = {}
    for line in (kernel.modules / "modules.dep").read_text().splitlines():
        name, _, rest = line.partition(":")
        deps[name] = rest.split()
    by_name = {Path(p).name.removesuffix(".ko").replace("-", "_"): p for p in deps}
    order: list[str] = []

    def add(path: str) -> None:
        for dep in reversed(deps[path]):
            add(dep)
        if path not in order:
            order.append(path)

    for name in EARLY:
        add(by_name[name])
    return [kernel.modules / p for p in order]


def build_initramfs(kernel: Kernel, workdir: Path) -> Path:
    """Busybox, ``/init`` and the early modules, as a newc cpio archive."""
    stage = workdir / "initramfs"
    shutil.rmtree(stage, ignore_errors=True)
    for sub in ("bin", "etc", "lib/early"):
        (stage / sub).mkdir(parents=True)
    shutil.copy2(BUSYBOX, stage / "bin" / "busybox")
    names = []
    for module in early_modules(kernel):
        shutil.copy2(module, stage / "lib" / "early" / module.name)
        names.append(module.name.removesuffix(".ko"))
    env = {
        "EARLY": " ".join(names),
        "PYTHON": sys.executable,
        "AGENT": str(AGENT),
        "MODULES": str(kernel.root),
    }
    (stage / "etc" / "guest.env").write_text("".join(f"{k}='{v}'\n" for k, v in env.items()))
    (stage / "init").write_text(INIT)
    (stage / "init").chmod(0o755)
    archive = workdir / "initramfs.cpio"
    files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*"))
    with archive.open("wb") as out:
        subprocess.run(
            ["cpio", "--quiet", "-o", "-H", "newc"],
            input="\n".join(files).encode(),
            stdout=out,
            cwd=stage,
            check=True,
        )
    return archive


def compile_sources() -> None:
    """Byte-compile ``src/`` beside the sources, so that the guest (which cannot write
    there) does not compile every module again in each process: under TCG that is
    most of a plugin's start-up."""
    compileall.compile_dir(CHECKOUT / "src", quiet=1, workers=0)


# ------------------------------------------------------------------------ QMP


class Qmp:
    """QEMU's machine protocol over its unix socket: commands, and events kept for waits."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.events: list[dict[str, Any]] = []
        self._read(60)  # the greeting
        self.command("qmp_capabilities")

    def _read(self, timeout: float) -> dict[str, Any]:
        """One message. (A file made with ``makefile`` cannot be read again after one
        timeout; the raw socket can.)"""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                raise VmError(f"QEMU did not answer over QMP within {timeout:g} s") from None
            except OSError as exc:
                raise VmError(f"QEMU's QMP socket failed ({exc}): did it exit?") from None
            if not chunk:
                raise VmError("QEMU closed its QMP socket (did it exit?)")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def command(self, name: str, timeout: float = 60, **arguments: Any) -> Any:
        request: dict[str, Any] = {"execute": name}
        if arguments:
            request["arguments"] = arguments
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        deadline = time.monotonic() + timeout
        while True:
            message = self._read(deadline - time.monotonic())
            if "event" in message:
                self.events.append(message)
            elif "error" in message:
                raise VmError(f"QMP {name} {arguments}: {message['error'].get('desc')}")
            elif "return" in message:
                return message["return"]

    def hmp(self, line: str) -> str:
        """A human monitor command (``pcie_aer_inject_error`` has no QMP form)."""
        out: str = self.command("human-monitor-command", **{"command-line": line})
        return out

    def wait_event(self, name: str, data: dict[str, Any], timeout: float = 180) -> dict[str, Any]:
        """The first event ``name`` whose data has the items of ``data`` (kept ones first)."""

        def fits(event: dict[str, Any]) -> bool:
            got = event.get("data", {})
            return event["event"] == name and all(got.get(k) == v for k, v in data.items())

        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if fits(event):
                    self.events.remove(event)
                    return event
            left = deadline - time.monotonic()
            if left <= 0:
                raise VmError(f"no QMP event {name} {data} within {timeout:g} s")
            self.events.append(self._read(left))


# ------------------------------------------------------------------------- VM


@dataclass
class Machine:
    """What to boot: QEMU's options beyond the fixed ones, and the kernel's command line."""

    devices: list[str] = field(default_factory=list)  # QEMU arguments, in order
    memory_mib: int = 1024
    cpus: int = 2
    append: str = ""


class Vm:
    """One booted guest: QEMU, its QMP socket and the agent's control port."""

    def __init__(self, kernel: Kernel, workdir: Path, machine: Machine) -> None:
        self.kernel = kernel
        self.workdir = workdir
        self.machine = machine
        self.console = workdir / "console.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._qmp: Qmp | None = None
        self.ctl: socket.socket | None = None
        self.boot_seconds = 0.0
        self.release = ""

    @property
    def qmp(self) -> Qmp:
        assert self._qmp is not None, "the VM is not running"
        return self._qmp

    def command(self, initramfs: Path) -> list[str]:
        m = self.machine
        append = f"console=ttyS0 panic=-1 loglevel=4 {m.append}".strip()
        return [
            QEMU,
            "-machine", "q35,accel=tcg",
            "-smp", str(m.cpus),
            "-m", f"{m.memory_mib}M",
            "-nodefaults", "-display", "none", "-no-reboot",
            "-kernel", str(self.kernel.vmlinuz),
            "-initrd", str(initramfs),
            "-append", append,
            "-serial", f"file:{self.console}",
            "-qmp", f"unix:{self.workdir / 'qmp.sock'},server=on,wait=off",
            "-chardev", f"socket,id=ctl,path={self.workdir / 'ctl.sock'},server=on,wait=off",
            *m.devices,
            "-fsdev", "local,id=hostfs,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device", "virtio-9p-pci,bus=pcie.0,fsdev=hostfs,mount_tag=hostroot",
            "-device", "virtio-serial-pci,bus=pcie.0,id=vser",
            "-device", "virtserialport,chardev=ctl,name=nomad.ctl",
        ]  # fmt: skip

    def start(self, timeout: float = 600) -> None:
        started = time.monotonic()
        compile_sources()
        initramfs = build_initramfs(self.kernel, self.workdir)
        for name in ("qmp.sock", "ctl.sock"):
            (self.workdir / name).unlink(missing_ok=True)
        with (self.workdir / "qemu.log").open("wb") as log:
            self.process = subprocess.Popen(
                self.command(initramfs), stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        try:
            try:
                self._qmp = Qmp(self._connect("qmp.sock"))
            except VmError as exc:
                raise VmError(f"{exc}\n{self.tail()}") from None
            self.ctl = self._connect("ctl.sock")
            kind, info = self._receive(timeout)
            if kind != "ready":
                raise VmError(f"the guest agent said {kind!r} first")
        except BaseException:
            self.close()
            raise
        self.release = info["release"]
        self.boot_seconds = time.monotonic() - started

    def _connect(self, name: str) -> socket.socket:
        """Connect to one of QEMU's sockets, which it makes before it runs the guest."""
        assert self.process is not None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        deadline = time.monotonic() + 60
        while True:
            try:
                sock.connect(str(self.workdir / name))
                return sock
            except (FileNotFoundError, ConnectionRefusedError):
                if self.process.poll() is not None:
                    raise VmError(
                        f"QEMU exited ({self.process.returncode})\n{self.tail()}"
                    ) from None
                if time.monotonic() > deadline:
                    raise VmError(f"QEMU made no {name} within 60 s\n{self.tail()}") from None
                time.sleep(0.05)  # nothing to wait on before the socket exists

    def tail(self, lines: int = 60) -> str:
        """The end of QEMU's own output and of the guest's console, for failures."""
        out = []
        for path in (self.workdir / "qemu.log", self.console):
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)

    def _receive(self, timeout: float) -> Any:
        (size,) = _HEADER.unpack(self._read_exact(_HEADER.size, timeout))
        return pickle.loads(self._read_exact(size, timeout))

    def _read_exact(self, size: int, timeout: float) -> bytes:
        """``size`` bytes from the agent, failing as soon as QEMU exits (a guest panic)."""
        assert self.ctl is not None and self.process is not None
        deadline = time.monotonic() + timeout
        chunks, left = [], size
        while left:
            if self.process.poll() is not None:
                raise VmError(f"QEMU exited ({self.process.returncode})\n{self.tail()}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise VmError(f"the guest did not answer within {timeout:g} s\n{self.tail()}")
            self.ctl.settimeout(min(1.0, remaining))  # to notice QEMU's exit meanwhile
            try:
                chunk = self.ctl.recv(left)
            except TimeoutError:
                continue
            if not chunk:
                raise VmError(f"the guest's control port closed\n{self.tail()}")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def call(self, method: str, *, wait: float = 300, **kwargs: Any) -> Any:
        """One request to the guest agent. A plugin's gRPC error comes back as the
        :class:`CallError` the SDK's host raised in the guest, anything else as
        :class:`GuestError`."""
        assert self.ctl is not None
        data = pickle.dumps((method, kwargs))
        self.ctl.settimeout(wait)
        self.ctl.sendall(_HEADER.pack(len(data)) + data)
        answer = self._receive(wait)
        if answer[0] == "ok":
            return answer[1]
        _, kind, code, text, trace = answer
        if kind == "CallError":
            method_name, _, rest = text.partition(": ")
            raise CallError(method_name, grpc.StatusCode[code], rest.partition(": ")[2])
        raise GuestError(f"{method} in the guest: {kind}: {text}\n{trace}")

    def sh(self, script: str, timeout: float = 300) -> str:
        """Run ``script`` with the guest's ``/bin/sh``: its stdout, or GuestError."""
        code, out, err = self.call("sh", wait=timeout + 30, script=script, timeout=timeout)
        if code != 0:
            raise GuestError(f"guest: {script!r} exited {code}: {err.strip()}")
        return str(out)

    def read(self, path: str) -> str:
        return str(self.call("read", path=path)).strip()

    def now(self) -> float:
        """The guest's monotonic clock, which stamps uevents and Fingerprint messages."""
        return float(self.call("ping")["now"])

    def slowdown(self) -> float:
        """How many times slower the guest runs the same Python than the host: the
        scale for any time measured in it."""
        from support.kernel.guest_agent import loop

        return float(self.call("bench")) / min(loop() for _ in range(3))

    def uevents(self, since: int = 0, timeout: float = 0) -> list[tuple[float, dict[str, str]]]:
        """Kernel uevents the agent received, from the ``since``-th on."""
        out: list[tuple[float, dict[str, str]]] = self.call(
            "uevents", wait=timeout + 60, since=since, timeout=timeout
        )
        return out

    def wait_uevents(
        self, condition: Callable[[list[dict[str, str]]], bool], since: int, timeout: float = 180
    ) -> list[tuple[float, dict[str, str]]]:
        """Uevents from ``since`` on, once ``condition`` holds for them."""
        deadline = time.monotonic() + timeout
        events: list[tuple[float, dict[str, str]]] = []
        while not condition([e for _, e in events]):
            left = deadline - time.monotonic()
            if left <= 0:
                shown = "\n".join(str(e) for _, e in events[-8:])
                raise AssertionError(f"the kernel never sent the uevents awaited; last:\n{shown}")
            events += self.uevents(since + len(events), min(left, 30))
        return events

    def launch(self, config: bytes, command: Sequence[str] = PLUGIN) -> GuestPlugin:
        """Start a plugin in the guest under the SDK's host there, and configure it."""
        key = self.call("launch", wait=600, command=list(command), config=config, env={})
        return GuestPlugin(self, key)

    def close(self) -> None:
        if self._qmp is not None:
            with contextlib.suppress(VmError, OSError):
                self._qmp.command("quit", timeout=10)
        if self.process is not None:
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for sock in (self.ctl, self._qmp.sock if self._qmp else None):
            if sock is not None:
                sock.close()


def pci_addresses(qmp: Qmp) -> dict[str, str]:
    """Each PCI device's qdev ID and the address the guest sees it at (``0000:01:00.0``),
    from ``query-pci``'s bus numbers, which are the ones the guest programmed."""
    out: dict[str, str] = {}

    def walk(devices: Sequence[dict[str, Any]], bus: int) -> None:
        for device in devices:
            if device.get("qdev_id"):
                out[device["qdev_id"]] = f"0000:{bus:02x}:{device['slot']:02x}.{device['function']}"
            bridge = device.get("pci_bridge")
            if bridge is not None:
                walk(bridge.get("devices", []), bridge["bus"]["secondary"])

    for root in qmp.command("query-pci"):
        walk(root["devices"], root["bus"])
    return out


# ---------------------------------------------------------------- a guest plugin


class GuestPlugin:
    """A plugin the agent launched in the guest: its Fingerprint messages as the SDK's
    host there received them (with the guest's time), Reserve and Stats through it."""

    def __init__(self, vm: Vm, key: int) -> None:
        self.vm = vm
        self.key = key
        self.messages: list[tuple[float, Groups]] = []
        self.read = 0  # messages before this one were looked at by a wait
        #: The guest's time at which the SDK's host received the message the last
        #: :meth:`wait_for` returned.
        self.stamp = 0.0

    def pull(self, timeout: float) -> None:
        """Fetch the messages received since the last pull, waiting up to ``timeout``
        for one when there are none."""
        from nomad_device.proto import device_pb2
        from nomad_device.wire.convert import group_from_proto

        got = self.vm.call(
            "messages", wait=timeout + 60, key=self.key, since=len(self.messages), timeout=timeout
        )
        for stamp, data in got:
            if not isinstance(data, bytes):
                raise GuestError(f"the Fingerprint stream ended: {data}")
            message = device_pb2.FingerprintResponse.FromString(data)
            self.messages.append((stamp, [group_from_proto(g) for g in message.device_group]))

    def current(self) -> Groups:
        """The latest state the plugin sent (the first message is waited for)."""
        self.pull(0)
        if not self.messages:
            self.pull(300)
        assert self.messages, "the plugin sent no Fingerprint message"
        self.read = len(self.messages)
        return self.messages[-1][1]

    def wait_for(self, condition: Callable[[Groups], bool], timeout: float = 300) -> Groups:
        """Read messages not yet looked at until one satisfies ``condition``; that one."""
        deadline = time.monotonic() + timeout
        while True:
            while self.read < len(self.messages):
                stamp, groups = self.messages[self.read]
                self.read += 1
                if condition(groups):
                    self.stamp = stamp
                    return groups
            left = deadline - time.monotonic()
            if left <= 0:
                shown = "\n".join(repr(m) for _, m in self.messages[-3:])
                raise AssertionError(f"condition never met; last messages:\n{shown}")
            self.pull(min(left, 30))

    def reserve(self, ids: Sequence[str]) -> Reservation:
        from nomad_device.proto import device_pb2
        from nomad_device.wire.convert import reservation_from_proto

        data = self.vm.call("reserve", key=self.key, ids=list(ids))
        return reservation_from_proto(device_pb2.ContainerReservation.FromString(data))

    def stats(self) -> list[DeviceGroupStats]:
        from nomad_device.proto import device_pb2
        from nomad_device.wire.convert import group_stats_from_proto

        data = self.vm.call("stats", key=self.key, timeout=120)
        return [group_stats_from_proto(g) for g in device_pb2.StatsResponse.FromString(data).groups]

    def logs(self) -> list[tuple[str, str, dict[str, str]]]:
        """The plugin's hclog lines so far: level, message, fields."""
        out: list[tuple[str, str, dict[str, str]]] = self.vm.call("logs", key=self.key, since=0)
        return out

    def kill(self) -> str:
        return str(self.vm.call("kill", key=self.key))


def encode_agent_text(text: str) -> bytes:
    """An agent file's ``nomad-device-generic`` block as the SetConfig bytes a Nomad
    agent sends (decoded against the plugin's schema as the agent decodes it)."""
    from nomad_device.agentconfig.setconfig import config_from_agent_file
    from nomad_device.plugins.generic.plugin import GenericDevicePlugin

    return config_from_agent_file(
        GenericDevicePlugin().config_schema(), text, "nomad-device-generic"
    )
