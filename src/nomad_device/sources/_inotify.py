"""Files and directories changing, from the kernel's inotify.

Three libc calls through ``ctypes`` (``inotify_init1``, ``inotify_add_watch``,
``inotify_rm_watch``) and ``os.read`` of a packed struct. A binding would save
only those few lines (the small, well-kept one wraps exactly that and no
more); the rest of this module is what a binding leaves to its users anyway,
and the bigger libraries bring a thread and a framework of their own.

What the kernel leaves to its users is handled here:

- **Bursts.** Events are gathered until the descriptor has been quiet for
  ``settle`` seconds (2 ms), so a lone change is reported at once; while
  changes keep coming, batches are at least ``max_delay`` (250 ms) apart and
  no event waits longer than that. 10,000 changes arrive as a handful of
  :class:`FileEvents` batches: at most one per 250 ms of the burst.
- **Queue overflow** (``IN_Q_OVERFLOW``, more than
  ``fs.inotify.max_queued_events`` waiting): a batch with ``overflow=True``,
  meaning "rescan everything"; the watches are checked again as well, since
  the lost events may have been removals.
- **A watched path removed or renamed away**: the loss is reported, and the
  nearest existing ancestor is watched until the path exists again; then the
  path is watched again and a batch reports it as created.
- **No inotify** (no libc symbol, ``ENOSYS``, ``EMFILE``, disabled through
  ``NOMAD_DEVICE_SOURCES_DISABLE=inotify``) or **the watch limit**
  (``ENOSPC``): one warning, then the source waits without yielding until it
  is closed, so the caller's poll period is the only mechanism left.
- **Trees someone else can grow.** A recursive watch costs one kernel watch
  per directory, charged to the user running it (``max_user_watches``), and
  whoever can make directories under it decides how many. ``max_watches``
  caps one source (a warning when reached, an ``overflow`` batch, and the
  directories beyond it left to the caller's poll period); ``one_filesystem``
  keeps it off other mounts (``/dev/shm``, ``/dev/pts`` under ``/dev``); and
  ``descend`` lets the caller skip directories it has no interest in.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from nomad_device.sources._base import DISABLE_ENV, EventSource, disabled

__all__ = [
    "CHANGES",
    "FLAGS",
    "LISTING",
    "MAX_DELAY",
    "MAX_EVENTS",
    "SETTLE",
    "SYSCALLS",
    "FileEvent",
    "FileEvents",
    "Inotify",
    "Syscalls",
    "flag_names",
    "inotify",
    "parse",
]

log = logging.getLogger("nomad_device.sources.inotify")

# <sys/inotify.h>
IN_ACCESS: Final = 0x00000001
IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_CLOSE_WRITE: Final = 0x00000008
IN_CLOSE_NOWRITE: Final = 0x00000010
IN_OPEN: Final = 0x00000020
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_UNMOUNT: Final = 0x00002000
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ONLYDIR: Final = 0x01000000
IN_DONT_FOLLOW: Final = 0x02000000
IN_EXCL_UNLINK: Final = 0x04000000
IN_MASK_CREATE: Final = 0x10000000
IN_MASK_ADD: Final = 0x20000000
IN_ISDIR: Final = 0x40000000
IN_ONESHOT: Final = 0x80000000
IN_ALL_EVENTS: Final = 0x00000FFF

#: Readable names of the bits an event's mask may carry.
FLAGS: Final = {
    value: name
    for name, value in globals().items()
    if name.startswith("IN_") and name != "IN_ALL_EVENTS" and isinstance(value, int)
}

#: The default: anything that changes a file's existence, name, metadata or
#: finished content (a writer closing it), but not every single ``write``.
CHANGES: Final = (
    IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_CREATE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
#: What a directory listing can observe (names, types, modes), not contents.
LISTING: Final = CHANGES & ~IN_CLOSE_WRITE

#: Seconds of quiet that end a batch (one operation's events come closer than
#: that), and, while changes keep coming, the least time between batches and the
#: longest an event is held (see the module doc).
SETTLE: Final = 0.002
MAX_DELAY: Final = 0.25
#: Events kept in one batch; beyond it the batch says ``overflow`` instead.
MAX_EVENTS: Final = 4096

# Watches on a missing path's ancestor: only what can bring the path back.
_GUARD: Final = IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
# What a recursive watch needs to follow its tree.
_TREE: Final = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM
_SELF: Final = IN_DELETE_SELF | IN_MOVE_SELF
_HEADER: Final = struct.Struct("iIII")  # wd, mask, cookie, len


def flag_names(mask: int) -> tuple[str, ...]:
    """``0x40000100`` -> ``("IN_CREATE", "IN_ISDIR")``."""
    return tuple(name for value, name in sorted(FLAGS.items()) if mask & value)


def parse(buffer: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    """``(wd, mask, cookie, name)`` for each ``struct inotify_event`` in what ``read`` returned."""
    offset, end = 0, len(buffer)
    while offset + _HEADER.size <= end:
        wd, mask, cookie, length = _HEADER.unpack_from(buffer, offset)
        offset += _HEADER.size
        name = buffer[offset : offset + length].split(b"\0", 1)[0]
        offset += length
        yield wd, mask, cookie, name


@dataclass(frozen=True)
class FileEvent:
    """One change: ``path`` is absolute; ``root`` is the watched path it was seen under."""

    path: str
    mask: int
    root: str
    cookie: int = 0  # pairs an IN_MOVED_FROM with its IN_MOVED_TO

    @property
    def flags(self) -> tuple[str, ...]:
        return flag_names(self.mask)

    @property
    def is_dir(self) -> bool:
        return bool(self.mask & IN_ISDIR)


@dataclass(frozen=True)
class FileEvents:
    """A batch: the events of one burst, in order.

    ``overflow`` means some events were lost (the kernel's queue overflowed,
    the batch outgrew ``max_events``, or the watch limit was hit): rescan
    everything rather than trust ``events``.
    """

    events: tuple[FileEvent, ...] = ()
    overflow: bool = False

    @property
    def paths(self) -> frozenset[str]:
        return frozenset(event.path for event in self.events)


_Call = Any  # a ctypes foreign function (its type is private to ctypes)


class Syscalls:
    """inotify through libc; :data:`SYSCALLS` is the instance used (tests replace it)."""

    def __init__(self) -> None:
        self._calls: tuple[_Call, _Call, _Call] | None = None

    def _libc(self) -> tuple[_Call, _Call, _Call]:
        if self._calls is None:
            import ctypes  # here, not at import: a plugin that never watches never loads it

            try:
                libc = ctypes.CDLL(None, use_errno=True)
                init1, add, rm = libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch
            except (OSError, AttributeError) as exc:
                raise OSError(errno.ENOSYS, f"libc has no inotify ({exc})") from None
            init1.argtypes, init1.restype = [ctypes.c_int], ctypes.c_int
            add.argtypes, add.restype = (
                [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32],
                ctypes.c_int,
            )
            rm.argtypes, rm.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            self._calls = (init1, add, rm)
        return self._calls

    def init(self) -> int:
        fd = int(self._libc()[0](os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            _raise_errno()
        return fd

    def add_watch(self, fd: int, path: str, mask: int) -> int:
        wd = int(self._libc()[1](fd, os.fsencode(path), mask))
        if wd < 0:
            _raise_errno(path)
        return wd

    def rm_watch(self, fd: int, wd: int) -> None:
        if self._libc()[2](fd, wd) < 0:
            _raise_errno()


def _raise_errno(path: str | None = None) -> None:
    import ctypes

    code = ctypes.get_errno()
    raise OSError(code, os.strerror(code), path)


SYSCALLS = Syscalls()


class _Limit(Exception):
    """inotify_add_watch said ENOSPC: the user's watch limit is reached."""


class _Root:
    """One path the caller asked for, and how it is watched right now.

    A plain class, not a dataclass: one costs about 0.5 ms to define, paid by
    every program that imports this module at start-up.
    """

    __slots__ = (
        "awaited", "dev", "guard", "index", "path", "recursive", "refused", "subs", "wd",
    )  # fmt: skip

    def __init__(self, index: int, path: str, recursive: bool) -> None:
        self.index = index
        self.path = path
        self.recursive = recursive
        self.dev = -1  # recursive: the filesystem the path is on, when armed
        self.wd: int | None = None  # armed: the watch on the path itself
        self.subs: dict[int, str] = {}  # recursive: wd -> subdirectory
        self.guard: int | None = None  # missing: the watch on the nearest existing ancestor
        self.awaited = ""  # the entry in the guard's directory that leads to path
        self.refused = ""  # why it could not be watched at all (logged once)


# A watch descriptor's roles: (kind, root index) -> the path it stands for.
_Roles = dict[tuple[str, int], str]


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _sysctl(name: str) -> str:
    try:
        with open(f"/proc/sys/fs/inotify/{name}") as f:
            return f"fs.inotify.{name} = {f.read().strip()}"
    except OSError:
        return f"fs.inotify.{name}"


class Inotify(EventSource[FileEvents]):
    """See :func:`inotify`."""

    def __init__(
        self,
        paths: tuple[str | os.PathLike[str], ...],
        *,
        recursive: bool = False,
        mask: int = CHANGES,
        settle: float = SETTLE,
        max_delay: float = MAX_DELAY,
        max_events: int = MAX_EVENTS,
        max_watches: int | None = None,
        one_filesystem: bool = False,
        descend: Callable[[str], bool] | None = None,
    ) -> None:
        super().__init__(log, settle, max_delay)
        if not paths:
            raise ValueError("inotify() needs at least one path")
        if max_watches is not None and max_watches < 1:
            raise ValueError("max_watches must be at least 1")
        unique = dict.fromkeys(os.path.abspath(os.fspath(p)) for p in paths)
        if any("\0" in path for path in unique):
            raise ValueError("a path to watch must not contain a NUL character")
        self._roots = [_Root(i, path, recursive) for i, path in enumerate(unique)]
        self._mask = (mask & IN_ALL_EVENTS) | _SELF
        self._max_events = max(1, max_events)
        self._max_watches = max_watches
        self._one_filesystem = one_filesystem
        self._descend = descend
        self._capped = False  # the max_watches warning was given
        self._watches: dict[int, _Roles] = {}
        self._events: list[FileEvent] = []
        self._overflow = False
        self._overflows = 0
        self._overflow_logged = -1e9
        self._inotify_fd = -1
        where = ", ".join(root.path for root in self._roots)
        self._fallback = f"change detection under {where} falls back to the poll period"

    def _open(self) -> tuple[int | None, str]:
        if disabled("inotify"):
            return None, f"inotify disabled by {DISABLE_ENV}; {self._fallback}"
        try:
            fd = SYSCALLS.init()
        except OSError as exc:
            limit = f", {_sysctl('max_user_instances')}" if exc.errno == errno.EMFILE else ""
            return None, f"inotify unavailable ({_reason(exc)}{limit}); {self._fallback}"
        self._inotify_fd = fd
        try:
            for root in self._roots:
                self._arm(root, report=False)
        except _Limit:
            os.close(fd)
            return None, self._limit_message()
        except BaseException:
            os.close(fd)  # the constructor fails: nobody else would ever close it
            raise
        return fd, ""

    def _limit_message(self) -> str:
        return (
            f"inotify watch limit reached ({_sysctl('max_user_watches')}); {self._fallback}"
            " (raise the limit with sysctl to get events again)"
        )

    # -- the batch being built ------------------------------------------------------

    def _has_item(self) -> bool:
        return bool(self._events) or self._overflow

    def _take(self) -> FileEvents | None:
        if not self._has_item():
            return None
        batch = FileEvents(tuple(self._events), self._overflow)
        self._events, self._overflow = [], False
        return batch

    def _report(self, path: str, mask: int, root: _Root, cookie: int = 0) -> None:
        if len(self._events) >= self._max_events:
            self._overflow = True
        else:
            self._events.append(FileEvent(path, mask, root.path, cookie))

    # -- reading ----------------------------------------------------------------------

    def _drain(self, fd: int) -> bool:
        reported = False
        try:
            for _ in range(16):  # then let the caller breathe; the rest is still queued
                try:
                    data = os.read(fd, 65536)
                except (BlockingIOError, InterruptedError):
                    break
                if not data:
                    break
                for wd, mask, cookie, name in parse(data):
                    reported |= self._handle(wd, mask, cookie, name)
        except _Limit:
            self._overflow = True
            self._give_up(self._limit_message())
            return True
        except OSError as exc:
            self._overflow = True
            self._give_up(f"reading inotify failed ({_reason(exc)}); {self._fallback}")
            return True
        return reported

    def _handle(self, wd: int, mask: int, cookie: int, raw_name: bytes) -> bool:
        """Apply one event; whether the batch grew."""
        before = (len(self._events), self._overflow)
        if mask & IN_Q_OVERFLOW:
            self._overflowed()
            return True
        roles = self._watches.get(wd)
        if roles is None:
            return False  # a watch already removed; its last events are stale
        name = os.fsdecode(raw_name)
        for (kind, index), path in list(roles.items()):
            root = self._roots[index]
            if kind == "guard":
                self._guard_event(root, mask, name)
            else:
                self._content_event(root, wd, path, mask, cookie, name)
        if mask & IN_IGNORED and wd in self._watches:
            # The kernel dropped the watch (unmounted, or gone without a *_SELF first).
            for kind, index in list(self._watches.pop(wd)):
                root = self._roots[index]
                root.subs.pop(wd, None)
                if (kind == "root" and root.wd == wd) or (kind == "guard" and root.guard == wd):
                    self._lose(root)
                    self._arm(root, report=True)
        return (len(self._events), self._overflow) != before

    def _content_event(
        self, root: _Root, wd: int, path: str, mask: int, cookie: int, name: str
    ) -> None:
        full = os.path.join(path, name) if name else path
        if mask & _SELF and not name:
            if wd == root.wd:
                self._report(full, mask, root)
                self._lose(root)
                self._arm(root, report=True)
            else:
                # A subdirectory: its parent's IN_DELETE / IN_MOVED_FROM reports it.
                self._drop_tree(root, path)
            return
        if root.recursive and mask & IN_ISDIR and name:
            if mask & (IN_CREATE | IN_MOVED_TO):
                self._report_if_wanted(full, mask, root, cookie)
                self._add_tree(root, full, report=True)
                return
            if mask & IN_MOVED_FROM:
                self._drop_tree(root, full)
        self._report_if_wanted(full, mask, root, cookie)

    def _report_if_wanted(self, path: str, mask: int, root: _Root, cookie: int) -> None:
        if mask & self._mask & IN_ALL_EVENTS:
            self._report(path, mask, root, cookie)

    def _guard_event(self, root: _Root, mask: int, name: str) -> None:
        if (mask & _SELF and not name) or (name and name == root.awaited):
            self._lose(root)
            self._arm(root, report=True)

    def _overflowed(self) -> None:
        self._overflow = True
        self._overflows += 1
        now = time.monotonic()
        if now - self._overflow_logged >= 60:
            log.warning(
                "inotify queue overflowed (%s): some changes were lost; reporting a full rescan%s",
                _sysctl("max_queued_events"),
                f" ({self._overflows} overflows since the last report)"
                if self._overflows > 1
                else "",
            )
            self._overflow_logged, self._overflows = now, 0
        self._resync()

    def _resync(self) -> None:
        """After lost events: check that every watch still covers what it should.

        Asking for the watch again answers exactly: the kernel returns the
        existing descriptor for the same inode, a new one for a new inode
        (descriptors are not reused), and an error if the path is gone.
        """
        for root in self._roots:
            if root.wd is None:
                self._arm(root, report=True)
                continue
            try:
                wd = self._add(root.path, "root", root, self._content_mask(root))
            except OSError:
                wd = None
            if wd != root.wd:
                self._lose(root)  # the stale watch and its subtree
                self._arm(root, report=True)
            elif root.recursive:
                for sub_wd, sub in list(root.subs.items()):
                    if not os.path.isdir(sub):
                        self._remove_role(sub_wd, ("sub", root.index))
                        del root.subs[sub_wd]
                self._add_tree(root, root.path, report=False)

    # -- watches ------------------------------------------------------------------------

    def _add(self, path: str, kind: str, root: _Root, mask: int) -> int:
        """Watch ``path`` for one more role (masks add up); ENOSPC raises _Limit."""
        try:
            wd = SYSCALLS.add_watch(self._inotify_fd, path, mask | IN_MASK_ADD | IN_EXCL_UNLINK)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _Limit from None
            raise
        self._watches.setdefault(wd, {})[(kind, root.index)] = path
        return wd

    def _remove_role(self, wd: int, key: tuple[str, int]) -> None:
        roles = self._watches.get(wd)
        if roles is None:
            return
        roles.pop(key, None)
        if not roles:
            del self._watches[wd]
            # Already gone with its inode: the kernel sent IN_IGNORED itself.
            with contextlib.suppress(OSError):
                SYSCALLS.rm_watch(self._inotify_fd, wd)

    def _content_mask(self, root: _Root) -> int:
        return self._mask | (_TREE if root.recursive else 0)

    def _lose(self, root: _Root) -> None:
        """Forget every watch serving ``root``."""
        for wd in list(root.subs):
            self._remove_role(wd, ("sub", root.index))
        root.subs.clear()
        if root.wd is not None:
            self._remove_role(root.wd, ("root", root.index))
        if root.guard is not None:
            self._remove_role(root.guard, ("guard", root.index))
        root.wd = root.guard = None
        root.awaited = ""

    def _arm(self, root: _Root, report: bool) -> bool:
        """Watch ``root.path``, or its nearest existing ancestor until it appears.

        Returns whether the path itself is watched now. With ``report``, its
        (re)appearance is added to the batch as an ``IN_CREATE``.
        """
        for _ in range(32):  # a path that flaps faster than this is caught at the next event
            try:
                info = os.stat(root.path)
            except OSError:
                info = None
            if info is not None:
                try:
                    root.wd = self._add(root.path, "root", root, self._content_mask(root))
                except (FileNotFoundError, NotADirectoryError):
                    continue  # gone again meanwhile: look again
                except OSError as exc:
                    self._refuse(root, exc)
                    return False
                is_dir = stat.S_ISDIR(info.st_mode)
                if root.recursive and is_dir:
                    root.dev = info.st_dev
                    self._add_tree(root, root.path, report=report)
                if report:
                    self._report(root.path, IN_CREATE | (IN_ISDIR if is_dir else 0), root)
                return True
            ancestor = os.path.dirname(root.path)
            while ancestor != "/" and not os.path.isdir(ancestor):
                ancestor = os.path.dirname(ancestor)
            try:
                root.guard = self._add(ancestor, "guard", root, _GUARD)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                self._refuse(root, exc)
                return False
            rest = os.path.relpath(root.path, ancestor)
            root.awaited = rest.split(os.sep, 1)[0]
            step = os.path.join(ancestor, root.awaited)
            # It may have appeared between the look and the watch.
            if not (os.path.exists(root.path) or os.path.isdir(step)):
                return False
            self._lose(root)
        return False

    def _refuse(self, root: _Root, exc: OSError) -> None:
        why = _reason(exc)
        if why != root.refused:
            log.warning(
                "cannot watch %s (%s); changes there are seen at the poll period only",
                root.path,
                why,
            )
            root.refused = why

    def _add_tree(self, root: _Root, top: str, report: bool) -> None:
        """Watch every directory under ``top`` (not following links); ``report`` what is found.

        Directories on another filesystem (``one_filesystem``), refused by
        ``descend``, or beyond ``max_watches`` are neither watched nor read.
        """
        pending = [top]
        while pending:
            directory = pending.pop()
            if directory != root.path:  # the root's own watch is root.wd
                if not self._wanted(root, directory):
                    continue
                if self._max_watches is not None and len(self._watches) >= self._max_watches:
                    self._cap_reached(root, directory)
                    continue
                try:
                    wd = self._add(directory, "sub", root, self._content_mask(root))
                except (FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as exc:
                    log.warning("cannot watch %s (%s)", directory, _reason(exc))
                    continue
                root.subs[wd] = directory
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        try:
                            is_dir = entry.is_dir(follow_symlinks=False)
                        except OSError:
                            is_dir = False
                        if is_dir:
                            pending.append(entry.path)
                        if report:
                            self._report(entry.path, IN_CREATE | (IN_ISDIR if is_dir else 0), root)
            except OSError:
                continue  # vanished or unreadable; its parent's events say so

    def _wanted(self, root: _Root, directory: str) -> bool:
        """Whether a subdirectory of a recursive root is to be watched at all."""
        if self._one_filesystem:
            try:
                if os.lstat(directory).st_dev != root.dev:
                    return False  # a mount point: another filesystem's tree
            except OSError:
                return False
        return self._descend is None or bool(self._descend(directory))

    def _cap_reached(self, root: _Root, directory: str) -> None:
        """One warning per source, and a batch that says: rescan, some changes go unseen."""
        self._overflow = True
        if not self._capped:
            self._capped = True
            log.warning(
                "inotify watch cap reached (max_watches = %d) under %s: %s and any other"
                " directory beyond the cap is not watched; changes there are seen at the"
                " poll period only",
                self._max_watches,
                root.path,
                directory,
            )

    def _drop_tree(self, root: _Root, top: str) -> None:
        prefix = top.rstrip("/") + "/"
        for wd, directory in list(root.subs.items()):
            if directory == top or directory.startswith(prefix):
                self._remove_role(wd, ("sub", root.index))
                del root.subs[wd]


def inotify(
    *paths: str | os.PathLike[str],
    recursive: bool = False,
    mask: int = CHANGES,
    settle: float = SETTLE,
    max_delay: float = MAX_DELAY,
    max_events: int = MAX_EVENTS,
    max_watches: int | None = None,
    one_filesystem: bool = False,
    descend: Callable[[str], bool] | None = None,
) -> Inotify:
    """Watch ``paths`` (files or directories); iterate to get :class:`FileEvents` batches.

    ``async for batch in inotify(p)`` in async code, ``for batch in inotify(p)``
    in a thread; ``with`` (or :meth:`Inotify.close`, from any thread) releases
    the descriptor and ends the loop. A directory's own entries are watched;
    ``recursive`` adds every subdirectory, including new ones. ``mask``
    chooses the ``IN_*`` events (default :data:`CHANGES`). A path that does
    not exist yet, or disappears, is watched for from its nearest existing
    ancestor and reported as created when it appears. A batch ends after
    ``settle`` seconds of quiet (default 2 ms); while changes keep coming,
    batches are at least ``max_delay`` apart and no event is held longer
    (default 250 ms). ``max_events`` caps a batch; beyond it the batch says
    ``overflow`` (rescan everything) instead of listing them.

    Making the source touches no file: the watches are placed when it is
    entered or first read (off the event loop for ``async with``/``async
    for``). Enter it before a first full look, so nothing changed goes unseen.

    For recursive watches over trees that others can grow: ``max_watches``
    caps the watches this source holds (its paths' own watches are always
    kept; subdirectories beyond the cap are left out, with one warning and an
    ``overflow`` batch); ``one_filesystem`` does not descend into other
    mounts; ``descend(path)`` returning false skips a subdirectory and all
    below it.
    """
    return Inotify(
        paths,
        recursive=recursive,
        mask=mask,
        settle=settle,
        max_delay=max_delay,
        max_events=max_events,
        max_watches=max_watches,
        one_filesystem=one_filesystem,
        descend=descend,
    )
