"""Kernel device events from a ``NETLINK_KOBJECT_UEVENT`` socket.

Two streams share the protocol:

- **group 1, the kernel's**: every ``add``, ``remove``, ``change``, ``bind``
  ... as the kernel emits it, device node or not. It needs nothing in
  userspace, so it works on a node without ``udevd``. Only messages sent by
  the kernel itself (netlink port 0) are accepted.
- **group 2, udev's** (``udev=True``): the same events re-sent by ``udevd``
  once its rules ran, so device nodes, symlinks and permissions exist, with
  udev's properties added. Messages start with the 40-byte libudev header,
  parsed here (no libudev, no pyudev); only those sent by root are accepted.
  Without ``udevd`` this stream is silent: :func:`udev_running` tells.

Filtering by subsystem and action happens here, in userspace: the kernel
cannot filter group 1, and a BPF filter would save little at uevent rates.
The socket gets a large receive buffer; when the kernel still drops events
(``ENOBUFS``) the next item is a :class:`UEvent` with ``overflow=True``,
meaning "rescan everything". A socket that cannot be opened (``EPERM``,
``EPROTONOSUPPORT`` in some containers, or
``NOMAD_DEVICE_SOURCES_DISABLE=uevent``) logs one warning and yields nothing
until closed.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal

from nomad_device.sources._base import DISABLE_ENV, EventSource, disabled

__all__ = [
    "BUFFER_SIZE",
    "LIBUDEV_MAGIC",
    "UEvent",
    "UEvents",
    "parse",
    "udev_running",
    "uevents",
]

log = logging.getLogger("nomad_device.sources.uevent")

NETLINK_KOBJECT_UEVENT: Final = 15
GROUP_KERNEL: Final = 1
GROUP_UDEV: Final = 2
#: Receive buffer asked for (the kernel doubles it); a coldplug of a big node fits.
BUFFER_SIZE: Final = 8 * 1024 * 1024
#: The libudev header's magic, stored big-endian.
LIBUDEV_MAGIC: Final = 0xFEEDCAFE
# prefix "libudev\0", magic (big-endian), then header_size, properties_off,
# properties_len, and four filter fields (subsystem and devtype hashes, tag
# bloom) in host order.
_LIBUDEV: Final = struct.Struct(">8sI")
_LIBUDEV_REST: Final = struct.Struct("=IIIIIII")
_LIBUDEV_SIZE: Final = _LIBUDEV.size + _LIBUDEV_REST.size
_UCRED: Final = struct.Struct("iII")  # pid, uid, gid
_SO_RCVBUFFORCE: Final = getattr(socket, "SO_RCVBUFFORCE", 33)
_SO_PASSCRED: Final = getattr(socket, "SO_PASSCRED", 16)
_SCM_CREDENTIALS: Final = getattr(socket, "SCM_CREDENTIALS", 2)
_UDEV_CONTROL: Final = "/run/udev/control"


def udev_running(control: str = _UDEV_CONTROL) -> bool:
    """Whether ``udevd`` seems to run (its control socket exists): cheap, no I/O beyond a stat."""
    return os.path.exists(control)


@dataclass(frozen=True)
class UEvent:
    """One device event.

    ``devname`` is as sent: relative to ``/dev`` from the kernel (``bus/usb/001/002``),
    absolute from udev; :attr:`devnode` is always absolute. ``properties`` holds
    every ``KEY=value`` of the message, ``ACTION`` and ``DEVPATH`` included.
    ``overflow`` marks the stand-in for events the kernel dropped: rescan everything.
    """

    action: str
    devpath: str
    subsystem: str = ""
    devname: str = ""
    devtype: str = ""
    seqnum: int = 0
    properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    source: Literal["kernel", "udev"] = "kernel"
    overflow: bool = False

    @property
    def devnode(self) -> str:
        if not self.devname:
            return ""
        return self.devname if self.devname.startswith("/") else "/dev/" + self.devname

    @property
    def sysfs_path(self) -> str:
        return "/sys" + self.devpath if self.devpath else ""


def parse(data: bytes) -> UEvent | None:
    """A kernel (``action@devpath\\0KEY=value\\0...``) or libudev message; None if neither."""
    if data.startswith(b"libudev\0"):
        return _parse_udev(data)
    header, _, rest = data.partition(b"\0")
    action, at, devpath = header.partition(b"@")
    if not at or not action:
        return None
    properties = _properties(rest)
    properties.setdefault("ACTION", action.decode("utf-8", "replace"))
    properties.setdefault("DEVPATH", devpath.decode("utf-8", "replace"))
    return _event(properties, "kernel")


def _parse_udev(data: bytes) -> UEvent | None:
    if len(data) < _LIBUDEV_SIZE:
        return None
    _, magic = _LIBUDEV.unpack_from(data)
    header_size, offset, length = _LIBUDEV_REST.unpack_from(data, _LIBUDEV.size)[:3]
    if magic != LIBUDEV_MAGIC or header_size < _LIBUDEV_SIZE or offset + length > len(data):
        return None
    properties = _properties(data[offset : offset + length])
    if "ACTION" not in properties or "DEVPATH" not in properties:
        return None
    return _event(properties, "udev")


def _properties(blob: bytes) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in blob.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq and key:
            found[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return found


def _event(properties: dict[str, str], source: Literal["kernel", "udev"]) -> UEvent:
    try:
        seqnum = int(properties.get("SEQNUM", "0"))
    except ValueError:
        seqnum = 0
    return UEvent(
        action=properties["ACTION"],
        devpath=properties["DEVPATH"],
        subsystem=properties.get("SUBSYSTEM", ""),
        devname=properties.get("DEVNAME", ""),
        devtype=properties.get("DEVTYPE", ""),
        seqnum=seqnum,
        properties=MappingProxyType(properties),
        source=source,
    )


class UEvents(EventSource[UEvent]):
    """See :func:`uevents`."""

    def __init__(
        self,
        subsystems: Iterable[str] | None = None,
        actions: Iterable[str] | None = None,
        *,
        udev: bool = False,
        buffer_size: int = BUFFER_SIZE,
    ) -> None:
        super().__init__(log)
        self._subsystems = _names(subsystems)
        self._actions = _names(actions)
        self._udev = udev
        self._queue: deque[UEvent] = deque()
        self._dropped = 0
        self._dropped_logged = -1e9
        self._socket: socket.socket | None = None
        self._buffer_size = buffer_size
        what = "udev" if udev else "kernel"
        self._fallback = f"{what} device events unavailable"

    def _open(self) -> tuple[int | None, str]:
        suffix = "device changes are seen at the poll period only"
        if disabled("uevent"):
            return None, f"{self._fallback} (disabled by {DISABLE_ENV}); {suffix}"
        try:
            sock = socket.socket(
                socket.AF_NETLINK,
                socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                NETLINK_KOBJECT_UEVENT,
            )
        except OSError as exc:
            return None, f"{self._fallback} (netlink: {_reason(exc)}); {suffix}"
        try:
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, self._buffer_size)
            except OSError:  # not root: as much as net.core.rmem_max allows
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._buffer_size)
            sock.setsockopt(socket.SOL_SOCKET, _SO_PASSCRED, 1)
            sock.bind((0, GROUP_UDEV if self._udev else GROUP_KERNEL))
        except OSError as exc:
            sock.close()
            return None, f"{self._fallback} (netlink: {_reason(exc)}); {suffix}"
        self._socket = sock
        if self._udev and not udev_running():
            log.warning(
                "udevd does not seem to run (no %s): the udev event stream stays silent"
                " until it does; the kernel's stream (udev=False) works without it",
                _UDEV_CONTROL,
            )
        return sock.fileno(), ""

    def _has_item(self) -> bool:
        return bool(self._queue)

    def _take(self) -> UEvent | None:
        return self._queue.popleft() if self._queue else None

    def _drain(self, fd: int) -> bool:
        sock = self._socket
        assert sock is not None and sock.fileno() == fd
        for _ in range(256):  # then yield; the rest waits in the socket
            try:
                data, ancillary, flags, address = sock.recvmsg(
                    65536, socket.CMSG_SPACE(_UCRED.size)
                )
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self._lost()
                    continue
                self._give_up(f"{self._fallback} (netlink: {_reason(exc)}); polling only")
                break
            if not self._trusted(address, ancillary) or flags & socket.MSG_TRUNC:
                continue
            event = parse(data)
            if event is not None and self._wanted(event):
                self._queue.append(event)
        return bool(self._queue)

    def _trusted(self, address: object, ancillary: list[tuple[int, int, bytes]]) -> bool:
        """Kernel messages come from port 0; udev's from a root process (libudev's rules)."""
        port = address[0] if isinstance(address, tuple) and address else None
        if not self._udev:
            return port == 0
        for level, kind, payload in ancillary:
            if (
                level == socket.SOL_SOCKET
                and kind == _SCM_CREDENTIALS
                and len(payload) >= _UCRED.size
            ):
                _, uid, _ = _UCRED.unpack_from(payload)
                return uid == 0 and port != 0
        return False

    def _wanted(self, event: UEvent) -> bool:
        if self._subsystems is not None and event.subsystem not in self._subsystems:
            return False
        return self._actions is None or event.action in self._actions

    def _lost(self) -> None:
        self._dropped += 1
        if not (self._queue and self._queue[-1].overflow):
            self._queue.append(
                UEvent("overflow", "", source="udev" if self._udev else "kernel", overflow=True)
            )
        now = time.monotonic()
        if now - self._dropped_logged >= 60:
            log.warning(
                "the kernel dropped device events (receive buffer full); reporting a full rescan%s",
                f" ({self._dropped} times since the last report)" if self._dropped > 1 else "",
            )
            self._dropped_logged, self._dropped = now, 0

    def _close_fd(self, fd: int) -> None:
        sock, self._socket = self._socket, None
        if sock is not None:
            sock.close()  # the object owns the descriptor: never close it twice
        else:
            os.close(fd)


def _names(names: Iterable[str] | None) -> frozenset[str] | None:
    """A filter; a lone string is one name (``"usb"``), not the letters u, s, b."""
    if names is None:
        return None
    return frozenset([names] if isinstance(names, str) else names)


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def uevents(
    subsystems: Iterable[str] | None = None,
    actions: Iterable[str] | None = None,
    *,
    udev: bool = False,
    buffer_size: int = BUFFER_SIZE,
) -> UEvents:
    """Device events as :class:`UEvent`, one at a time, from the kernel (or ``udev=True``).

    ``subsystems`` and ``actions`` keep only matching events (``None``: all).
    Iterate with ``async for`` or, in a thread, ``for``; ``with`` or
    :meth:`UEvents.close` (from any thread) ends it.
    """
    return UEvents(subsystems, actions, udev=udev, buffer_size=buffer_size)
