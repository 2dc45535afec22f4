"""A FUSE filesystem that can hang: every request waits while it is held.

Spoken over ``/dev/fuse`` directly (FUSE's kernel protocol, 7.31), so the
tests need no library: a tree of directories and empty files, served by one
thread. :meth:`HangFS.hold` makes each request from then on wait, as a dead
NFS server or a stuck FUSE daemon would, until :meth:`HangFS.release`;
``stat``, ``inotify_add_watch`` and directory listings under the mount then
block in the kernel for real. Needs root and ``/dev/fuse``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

_IN = struct.Struct("<IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, extlen, pad
_OUT = struct.Struct("<IiQ")  # len, error, unique
_ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # ino size blocks a/m/ctime, nsecs, mode ... flags
_LOOKUP, _FORGET, _GETATTR, _INIT, _OPENDIR, _READDIR, _RELEASEDIR = 1, 2, 3, 26, 27, 28, 29
_INTERRUPT, _DESTROY, _BATCH_FORGET = 36, 38, 42
_NO_REPLY = {_FORGET, _INTERRUPT, _BATCH_FORGET}
_MNT_DETACH = 2


def usable() -> bool:
    """Whether this process can mount a FUSE filesystem (root, with /dev/fuse)."""
    return os.geteuid() == 0 and os.path.exists("/dev/fuse")


class HangFS:
    """Serve ``tree`` (names of directories ending in ``/``, and of files) at ``mountpoint``."""

    def __init__(self, mountpoint: Path, tree: list[str]) -> None:
        self.mountpoint = mountpoint
        self._nodes: dict[int, tuple[str, bool]] = {1: ("", True)}  # nodeid -> (path, is_dir)
        for name in tree:
            self._nodes[len(self._nodes) + 1] = (name.rstrip("/"), name.endswith("/"))
        self._open = threading.Event()
        self._open.set()
        #: Set once a request has come in while held (something is stuck now).
        self.stuck = threading.Event()
        self._fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        options = f"fd={self._fd},rootmode=40000,user_id=0,group_id=0".encode()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mount(b"hangfs", str(mountpoint).encode(), b"fuse.hangfs", 0, options) != 0:
            code = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(code, f"mount: {os.strerror(code)}")
        self._libc = libc
        self._thread = threading.Thread(target=self._serve, name="hangfs", daemon=True)
        self._thread.start()

    def hold(self) -> None:
        """From now on, every request waits (in the kernel, for its caller) until release()."""
        self.stuck.clear()
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def close(self) -> None:
        self.release()
        self._libc.umount2(str(self.mountpoint).encode(), _MNT_DETACH)
        self._thread.join(10)
        with contextlib.suppress(OSError):
            os.close(self._fd)

    # -- the protocol ---------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            try:
                request = os.read(self._fd, 1 << 18)  # at least max_write and a header
            except OSError as exc:
                if exc.errno in (errno.EINTR, errno.ENOENT):
                    continue  # ENOENT: a request interrupted before it was read
                return  # ENODEV: unmounted
            _, opcode, unique, node, *_ = _IN.unpack_from(request)
            if opcode == _DESTROY:
                return
            if opcode in _NO_REPLY:
                continue
            if not self._open.is_set():
                self.stuck.set()
                self._open.wait()
            error, body = self._answer(opcode, node, request[_IN.size :])
            with contextlib.suppress(OSError):  # the caller may have gone (interrupted)
                os.write(self._fd, _OUT.pack(_OUT.size + len(body), -error, unique) + body)

    def _answer(self, opcode: int, node: int, body: bytes) -> tuple[int, bytes]:
        if opcode == _INIT:
            # major, minor, max_readahead, flags, max_background, congestion, max_write, ...
            return 0, struct.pack("<IIIIHHIIHHII", 7, 31, 0, 0, 16, 12, 1 << 16, 1, 0, 0, 0, 0) + (
                b"\0" * 24
            )
        if node not in self._nodes:
            return errno.ENOENT, b""
        if opcode == _LOOKUP:
            name = body.split(b"\0", 1)[0].decode()
            parent = self._nodes[node][0]
            wanted = f"{parent}/{name}" if parent else name
            for child, (path, _) in self._nodes.items():
                if path == wanted:
                    # nodeid, generation, entry_valid, attr_valid, their nsecs: nothing cached.
                    return 0, struct.pack("<QQQQII", child, 0, 0, 0, 0, 0) + self._attr(child)
            return errno.ENOENT, b""
        if opcode == _GETATTR:
            return 0, struct.pack("<QII", 0, 0, 0) + self._attr(node)
        if opcode == _OPENDIR:
            return 0, struct.pack("<QIi", 0, 0, 0)
        if opcode == _RELEASEDIR:
            return 0, b""
        if opcode == _READDIR:
            offset = struct.unpack_from("<QQI", body)[1]
            return 0, self._listing(node, offset)
        return errno.ENOSYS, b""

    def _attr(self, node: int) -> bytes:
        is_dir = self._nodes[node][1]
        mode = (stat.S_IFDIR | 0o755) if is_dir else (stat.S_IFREG | 0o644)
        return _ATTR.pack(node, 0, 0, 0, 0, 0, 0, 0, 0, mode, 2 if is_dir else 1, 0, 0, 0, 4096, 0)

    def _children(self, node: int) -> Iterator[tuple[int, str, bool]]:
        parent = self._nodes[node][0]
        for child, (path, is_dir) in self._nodes.items():
            head, _, name = path.rpartition("/")
            if child != 1 and head == parent:
                yield child, name, is_dir

    def _listing(self, node: int, offset: int) -> bytes:
        out = b""
        for index, (child, name, is_dir) in enumerate(self._children(node), start=1):
            if index <= offset:
                continue
            raw = name.encode()
            entry = struct.pack("<QQII", child, index, len(raw), 4 if is_dir else 8) + raw
            out += entry + b"\0" * (-len(entry) % 8)
        return out


@contextlib.contextmanager
def hangfs(mountpoint: Path, tree: list[str]) -> Iterator[HangFS]:
    mountpoint.mkdir(exist_ok=True)
    fs = HangFS(mountpoint, tree)
    try:
        yield fs
    finally:
        fs.close()
