"""Launching nomad-device-generic over the real wire, and waiting on what it reports."""

from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from nomad_device import DeviceGroup
from nomad_device.config import encode_config
from nomad_device.host import Stream
from nomad_device.model import Device
from nomad_device.plugins.generic.config import GenericConfig
from support import ROOT
from support.processes import Launched, Launcher

COMMAND = [sys.executable, "-m", "nomad_device.plugins.generic"]

Groups = list[DeviceGroup]


def start(
    launch: Launcher, config: GenericConfig, env: dict[str, str] | None = None, **options: Any
) -> Launched:
    launched = launch(COMMAND, env={**os.environ, **(env or {})}, **options)
    launched.client.set_config(encode_config(config))
    return launched


def first_groups(
    launch: Launcher, config: GenericConfig, env: dict[str, str] | None = None
) -> tuple[Launched, Groups]:
    """Start the plugin, configure it, and read the first Fingerprint message."""
    launched = start(launch, config, env)
    with launched.client.fingerprint() as stream:
        return launched, stream.next(15)


def by_key(groups: Sequence[DeviceGroup]) -> dict[str, DeviceGroup]:
    return {g.key: g for g in groups}


def devices(groups: Sequence[DeviceGroup], key: str) -> dict[str, Device]:
    found = by_key(groups).get(key)
    return {} if found is None else {d.id: d for d in found.devices}


def wait_for(
    stream: Stream[Groups], condition: Callable[[Groups], bool], timeout: float = 15.0
) -> Groups:
    """Read messages until one satisfies ``condition``; fail with what was seen."""
    seen: list[Groups] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            shown = "\n".join(repr(m) for m in seen[-3:])
            raise AssertionError(f"condition never met; last messages:\n{shown}")
        try:
            message = stream.next(left)
        except TimeoutError:
            continue
        seen.append(message)
        if condition(message):
            return message


def wait_until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def logged(launched: Launched, text: str, timeout: float = 10.0, count: int = 1) -> list[str]:
    """Messages containing ``text`` (with their fields), once ``count`` arrived."""

    def render() -> list[str]:
        out = []
        for entry in list(launched.logs):
            line = entry.message + " " + " ".join(f"{k}={v}" for k, v in entry.fields.items())
            if text in line:
                out.append(line)
        return out

    wait_until(lambda: len(render()) >= count, timeout)
    return render()


# ------------------------------------------------------------- the page's presets

DOC = ROOT / "docs" / "plugins" / "generic.md"
AGENT_BLOCKS = [
    b
    for b in re.findall(r"```hcl\n(.*?)```", DOC.read_text(), re.S)
    if b.lstrip().startswith('plugin "nomad-device-generic"')
]


def preset_text(label: str) -> str:
    """The agent config on generic.md that has ``device "<label>"``."""
    (text,) = [b for b in AGENT_BLOCKS if f'device "{label}" {{' in b]
    return text


def preset_config(*labels: str) -> bytes:
    """The config bytes a Nomad agent sends for the page's presets (several: one config
    holding all their device blocks), decoded as an agent decodes its file."""
    return encode_agent_text(agent_file(*labels))


def preset_config_with(label: str, top: str = "", inside: str = "", pci: str = "") -> bytes:
    """A preset with more settings: ``top`` at the config's top level, ``inside`` in its
    device block, ``pci`` replacing the body of its (first) pci block."""
    text = agent_file(label)
    if inside:
        text = text.replace(f'device "{label}" {{', f'device "{label}" {{\n      {inside}', 1)
    if pci:
        start = text.index("pci {")
        end = text.index("}", start)
        text = text[:start] + "pci {\n        " + pci + "\n      " + text[end:]
    if top:
        text = text.replace("  config {", "  config {\n    " + top, 1)
    return encode_agent_text(text)


def encode_agent_text(text: str) -> bytes:
    """An agent file's plugin block as the config bytes the agent sends."""
    from nomad_device.agentconfig import agentfile
    from nomad_device.agentconfig.hcldec import compile_spec, decode, encode
    from nomad_device.plugins.generic.plugin import GenericDevicePlugin

    block = agentfile.parse_agent_text(text, "agent.hcl").select(["nomad-device-generic"], None)
    decoded = decode(compile_spec(GenericDevicePlugin().config_schema()), block.config)
    assert decoded.ok, [d.render("agent.hcl") for d in decoded.diagnostics]
    return encode(decoded)


def agent_file(*labels: str, extra: str = "") -> str:
    """An agent's plugin block with the device blocks of the named presets."""
    bodies = []
    for label in labels:
        lines = preset_text(label).strip().splitlines()
        assert lines[1].strip() == "config {" and lines[-2:] == ["  }", "}"], lines
        bodies.append("\n".join(lines[2:-2]))
    inner = "\n\n".join(bodies) + (f"\n{extra}" if extra else "")
    return f'plugin "nomad-device-generic" {{\n  config {{\n{inner}\n  }}\n}}\n'


# ------------------------------------------------------------------ real uevents


def pci_uevent_file() -> str:
    """A real PCI function whose ``uevent`` file can be written to make the kernel
    announce a ``pci`` change: a host bridge or PCI bridge (class 06), which no driver
    acts on, so that nothing but listeners hears it."""
    for path in sorted(glob.glob("/sys/bus/pci/devices/*")):
        try:
            code = int(Path(path, "class").read_text(), 16)
        except (OSError, ValueError):
            continue
        if code >> 16 == 0x06:
            return os.path.join(os.path.realpath(path), "uevent")
    reason = "no PCI bridge in /sys/bus/pci/devices to synthesise a pci uevent with"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI must synthesise a real kernel uevent")
    pytest.skip(reason)


def announce(uevent_file: str) -> None:
    """``echo change > <uevent_file>``: the kernel sends a real uevent for that device."""
    with open(uevent_file, "w") as f:
        f.write("change")


# ------------------------------------------------- uevents the kernel sends for a test

NETLINK_KOBJECT_UEVENT = 15
_CLONE_NEWNET = 0x40000000
_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port
_NLM_F_REQUEST, _NLM_F_ACK = 0x1, 0x4


class KernelUevents:
    """Uevents of the test's making that the kernel itself sends, from port 0, to the
    listeners of one network namespace: a process with CAP_SYS_ADMIN over a namespace
    may hand the kernel a message on a ``NETLINK_KOBJECT_UEVENT`` socket there, which
    the kernel stamps with a ``SEQNUM`` and broadcasts as its own (``uevent_net_rcv``,
    lib/kobject_uevent.c, Linux 4.18 on). The plugin runs in a namespace of its own
    (:data:`NETNS`, ``unshare --net``), which the real kernel's uevents reach too
    and this host's udevd never hears of. So a plugin sees the ``ERROR_EVENT`` of a
    PCIe recovery as a real kernel sends it, through its real uevent socket."""

    def __init__(self, pid: int) -> None:
        made: list[socket.socket | BaseException] = []

        def enter() -> None:  # setns moves this thread alone, which then ends
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
                try:
                    if libc.setns(fd, _CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns")
                finally:
                    os.close(fd)
                made.append(
                    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_KOBJECT_UEVENT)
                )
            except BaseException as exc:  # re-raised in the test's thread
                made.append(exc)

        thread = threading.Thread(target=enter)
        thread.start()
        thread.join()
        (result,) = made
        if isinstance(result, BaseException):
            raise result
        self.sock = result
        self.sock.settimeout(10)
        self.seq = 0

    def send(self, action: str, devpath: str, **properties: str) -> None:
        """A ``pci`` uevent for ``devpath`` (``/devices/pci0000:00/...``), as the kernel
        words one: ``action@devpath``, then ``ACTION``, ``DEVPATH``, ``SUBSYSTEM``."""
        items = {"ACTION": action, "DEVPATH": devpath, "SUBSYSTEM": "pci", **properties}
        payload = f"{action}@{devpath}\0".encode() + b"".join(
            f"{k}={v}\0".encode() for k, v in items.items()
        )
        self.seq += 1
        header = _NLMSG.pack(_NLMSG.size + len(payload), 0x10, _NLM_F_REQUEST | _NLM_F_ACK,
                             self.seq, 0)  # fmt: skip
        self.sock.sendto(header + payload, (0, 0))
        answer = self.sock.recv(4096)  # NLMSG_ERROR: the header, then the error (0: none)
        (error,) = struct.unpack_from("=i", answer, _NLMSG.size)
        assert error == 0, f"the kernel refused the uevent: {os.strerror(-error)}"

    def close(self) -> None:
        self.sock.close()


#: The plugin's command in a network namespace of its own (see :class:`KernelUevents`).
NETNS = ["unshare", "--net", *COMMAND]


def require_netns() -> None:
    """Skip where no network namespace can be made (outside CI); fail in CI."""
    if shutil.which("unshare") is not None:
        probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True)
        if probe.returncode == 0:
            return
        reason = f"unshare --net fails here: {probe.stderr.strip()}"
    else:
        reason = "unshare (util-linux) is not installed"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI must inject kernel uevents")
    pytest.skip(reason)
