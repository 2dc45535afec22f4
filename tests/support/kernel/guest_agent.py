"""Inside the test VM: load drivers as udev would, and run the plugin for the host's tests.

The guest's init (``kernel_vm.INIT``) mounts the host's root read-only over
9p, chroots into it and starts this file with the checkout's own
interpreter, so the guest runs the very code under test. There is no udevd
in the guest, so this agent does the one job of udev's the tests need: for
every ``add`` uevent with a ``MODALIAS`` it runs ``modprobe -b`` (udev's
kmod builtin), and at start it loads the drivers of every device already
there (udev's coldplug). Nodes come from devtmpfs.

The tests on the host talk to it over a virtio-serial port: length-prefixed
pickles, one request and one answer at a time. Besides plain commands
(``sh``, ``read``) it hosts device plugins: each is launched with the SDK's
own host (:class:`DevicePluginClient`: go-plugin's handshake, its unix
socket, hclog on stderr, gRPC), so the wire between that host and the plugin
is the real one, and every Fingerprint message and uevent is kept with the
guest's monotonic time so that the host can wait on them and measure.
"""

from __future__ import annotations

import glob
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

PORT_NAME = "nomad.ctl"
_HEADER = struct.Struct(">I")


class Journal:
    """Items with the guest's monotonic time, which a reader can wait on."""

    def __init__(self) -> None:
        self.items: list[tuple[float, Any]] = []
        self.changed = threading.Condition()

    def add(self, item: Any) -> None:
        with self.changed:
            self.items.append((time.monotonic(), item))
            self.changed.notify_all()

    def since(self, index: int, timeout: float) -> list[tuple[float, Any]]:
        """Items from ``index`` on; waits up to ``timeout`` for one when there are none."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.items) > index, timeout)
            return self.items[index:]


# ------------------------------------------------------------------ udev's part


class Udev:
    """Kernel uevents, kept; drivers loaded from each ``add``'s ``MODALIAS``."""

    def __init__(self, module_root: str) -> None:
        self.module_root = module_root
        self.events = Journal()
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)  # KOBJECT_UEVENT
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((0, 1))
        self.pending: list[str] = []
        self.wake = threading.Condition()
        threading.Thread(target=self._listen, name="uevents", daemon=True).start()
        threading.Thread(target=self._load, name="modprobe", daemon=True).start()

    def modprobe(self, aliases: Sequence[str]) -> None:
        if aliases:
            command = ["modprobe", "-a", "-b", "-q", "-d", self.module_root, *aliases]
            subprocess.run(command, check=False, stdin=subprocess.DEVNULL)

    def coldplug(self) -> None:
        """Load the drivers of the devices present, until loading one adds no others
        (a PCI driver brings virtio or USB devices that want drivers of their own)."""
        seen: set[str] = set()
        while True:
            aliases = set()
            for path in glob.glob("/sys/bus/*/devices/*/modalias"):
                try:
                    with open(path) as f:
                        aliases.add(f.read().strip())
                except OSError:
                    continue
            new = sorted(aliases - seen)
            if not new:
                return
            seen |= aliases
            self.modprobe(new)

    def _listen(self) -> None:
        while True:
            data = self.sock.recv(1 << 16)
            fields = data.split(b"\0")
            event: dict[str, str] = {}
            for field in fields[1:]:
                key, sep, value = field.decode("utf-8", "replace").partition("=")
                if sep:
                    event[key] = value
            if "ACTION" not in event:
                continue
            self.events.add(event)
            if event["ACTION"] == "add" and event.get("MODALIAS"):
                with self.wake:
                    self.pending.append(event["MODALIAS"])
                    self.wake.notify()

    def _load(self) -> None:
        while True:
            with self.wake:
                self.wake.wait_for(lambda: bool(self.pending))
                aliases, self.pending[:] = list(self.pending), []
            self.modprobe(aliases)


# --------------------------------------------------------------- plugins hosted


class Hosted:
    """One plugin launched by the SDK's host, its Fingerprint stream read all along."""

    def __init__(self, command: list[str], config: bytes, env: dict[str, str]) -> None:
        from nomad_device.host import DevicePluginClient

        self.logs: list[Any] = []
        self.messages = Journal()
        self.client = DevicePluginClient.launch(
            command, env={**os.environ, **env}, on_log=self.logs.append, start_timeout=120
        )
        self.client.set_config(config, timeout=120)
        self.stream = self.client.fingerprint()
        threading.Thread(target=self._read, name="fingerprint", daemon=True).start()

    def _read(self) -> None:
        from nomad_device.proto import device_pb2
        from nomad_device.wire.convert import group_to_proto

        try:
            for groups in self.stream:
                message = device_pb2.FingerprintResponse()
                for group in groups:
                    group_to_proto(group, message.device_group.add())
                self.messages.add(message.SerializeToString())
        except Exception as exc:
            self.messages.add(_error(exc))


def _error(exc: BaseException) -> tuple[str, str, str, str]:
    """An exception as plain data (CallError's gRPC code by name)."""
    code = getattr(exc, "code", None)
    return ("error", type(exc).__name__, getattr(code, "name", ""), str(exc))


def loop() -> float:
    """A fixed piece of Python work: its CPU seconds."""
    started = time.process_time()
    sum(i * i for i in range(200_000))
    return time.process_time() - started


class Agent:
    def __init__(self, module_root: str) -> None:
        self.udev = Udev(module_root)
        self.plugins: dict[int, Hosted] = {}

    # Each public method is one request the host may send.

    def ping(self) -> dict[str, Any]:
        return {"release": os.uname().release, "now": time.monotonic()}

    def bench(self) -> float:
        """CPU seconds of :func:`loop`, which the host times too."""
        return loop()

    def sh(self, script: str, timeout: float = 120) -> tuple[int, str, str]:
        done = subprocess.run(
            ["/bin/sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return done.returncode, done.stdout, done.stderr

    def read(self, path: str) -> str:
        with open(path) as f:
            return f.read()

    def uevents(self, since: int, timeout: float) -> list[tuple[float, Any]]:
        return self.udev.events.since(since, timeout)

    def launch(self, command: list[str], config: bytes, env: dict[str, str]) -> int:
        hosted = Hosted(command, config, env)
        key = len(self.plugins) + 1
        self.plugins[key] = hosted
        return key

    def messages(self, key: int, since: int, timeout: float) -> list[tuple[float, Any]]:
        return self.plugins[key].messages.since(since, timeout)

    def reserve(self, key: int, ids: list[str]) -> bytes:
        """A ContainerReservation, serialised (the SDK's model types hold mapping
        proxies, which do not pickle)."""
        from nomad_device.wire.convert import reservation_to_proto

        reservation = self.plugins[key].client.reserve(ids, timeout=120)
        return reservation_to_proto(reservation).SerializeToString()

    def stats(self, key: int, timeout: float) -> bytes:
        """The first Stats message, as a StatsResponse."""
        from nomad_device.proto import device_pb2
        from nomad_device.wire.convert import group_stats_to_proto

        with self.plugins[key].client.stats(1.0) as stream:
            groups = stream.next(timeout)
        message = device_pb2.StatsResponse()
        for group in groups:
            group_stats_to_proto(group, message.groups.add())
        return message.SerializeToString()

    def logs(self, key: int, since: int) -> list[tuple[str, str, dict[str, str]]]:
        """hclog lines the plugin wrote: level, message and fields as text."""
        entries = self.plugins[key].logs[since:]
        return [(e.level, e.message, {k: str(v) for k, v in e.fields.items()}) for e in entries]

    def kill(self, key: int) -> str:
        hosted = self.plugins.pop(key)
        return hosted.client.kill().outcome


def _find_port() -> str:
    """The virtio-serial port the host named ``nomad.ctl`` (udev would link it)."""
    for name_file in glob.glob("/sys/class/virtio-ports/*/name"):
        with open(name_file) as f:
            named = f.read().strip() == PORT_NAME
        node = "/dev/" + os.path.basename(os.path.dirname(name_file))
        if named and os.path.exists(node):  # devtmpfs makes it just after the uevent
            return node
    raise LookupError(PORT_NAME)


def _wait(what: Callable[[], str], udev: Udev, timeout: float) -> str:
    """``what()`` once it stops raising LookupError; woken by each uevent."""
    deadline = time.monotonic() + timeout
    index = 0
    while True:
        try:
            return what()
        except LookupError:
            if time.monotonic() > deadline:
                raise
        index += len(udev.events.since(index, max(0.0, deadline - time.monotonic())))


def _read_exact(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            raise EOFError("the host closed the control port")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _send(fd: int, value: Any) -> None:
    data = pickle.dumps(value)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def serve(module_root: str) -> None:
    started = time.monotonic()
    agent = Agent(module_root)
    agent.udev.coldplug()
    port = _wait(_find_port, agent.udev, 120)
    fd = os.open(port, os.O_RDWR)
    _send(fd, ("ready", {"release": os.uname().release, "seconds": time.monotonic() - started}))
    while True:
        (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
        method, kwargs = pickle.loads(_read_exact(fd, size))
        try:
            answer: Any = ("ok", getattr(agent, method)(**kwargs))
        except Exception as exc:
            answer = (*_error(exc), traceback.format_exc())
        _send(fd, answer)


if __name__ == "__main__":
    serve(sys.argv[1])
