"""Helpers for the event-source tests: fake syscalls, waiting, root-only marks."""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

#: Tests that write to /sys or send netlink multicast need root; CI runs as root.
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true",
    reason="needs root (writes a device's uevent file, sends netlink multicast); CI runs it",
)


def next_within(source: Iterator[T], timeout: float = 10.0) -> T:
    """The next item of a blocking source, read in a thread; fails after ``timeout``."""
    found: list[Any] = []

    def read() -> None:
        try:
            found.append(next(source))
        except BaseException as exc:
            found.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        raise AssertionError(f"nothing from the source within {timeout} s")
    if isinstance(found[0], BaseException):
        raise found[0]
    return found[0]  # type: ignore[no-any-return]


def pack(wd: int, mask: int, name: bytes = b"", cookie: int = 0) -> bytes:
    """One ``struct inotify_event`` as the kernel writes it (name NUL-padded to 16)."""
    padded = name + b"\0" * (16 - len(name) % 16) if name else b""
    return struct.pack("iIII", wd, mask, cookie, len(padded)) + padded


class PipeSyscalls:
    """inotify whose descriptor is a pipe: a test writes the kernel's events itself.

    Everything above the syscalls (polling, parsing, batching, re-arming) runs
    for real on those bytes. ``fail_add`` makes ``inotify_add_watch`` fail with
    that errno for paths it matches.
    """

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        os.set_blocking(self.read_end, False)
        self._pipe_inode = os.fstat(self.read_end).st_ino
        self.wds: dict[str, int] = {}
        self.issued = 0
        self.removed: list[int] = []
        self.fail_add: Callable[[str], int | None] = lambda path: None

    def init(self) -> int:
        return self.read_end

    def add_watch(self, fd: int, path: str, mask: int) -> int:
        code = self.fail_add(path)
        if code is not None:
            raise OSError(code, os.strerror(code), path)
        if path not in self.wds:  # like the kernel, never reuse a descriptor
            self.issued += 1
            self.wds[path] = self.issued
        return self.wds[path]

    def rm_watch(self, fd: int, wd: int) -> None:
        self.removed.append(wd)

    def feed(self, *events: bytes) -> None:
        os.write(self.write_end, b"".join(events))

    def close(self) -> None:
        os.close(self.write_end)
        # The source closes the read end itself; close it only if that fd is still our pipe.
        try:
            still_ours = os.fstat(self.read_end).st_ino == self._pipe_inode
        except OSError:
            still_ours = False
        if still_ours:
            os.close(self.read_end)
