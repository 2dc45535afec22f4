"""Private socket directories, and the ones SIGKILLed plugins leave behind.

A plugin removes its socket directory when it stops, but one the host
SIGKILLs (it waits 2 s after Shutdown) or the OOM killer takes removes
nothing: each such death used to leave a directory and a dead socket in the
temp dir for good. A live plugin therefore holds an ``flock`` on its
directory for its whole life, and each plugin that starts removes the
directories nobody holds. Telling live from dead by the lock, not by
connecting, means no plugin ever touches another's socket.

Only what this module made is touched: a directory named as it names them,
owned by this user, mode 0700 (or 0710, for a socket group), older than a
minute (a plugin that has just made one may not hold its lock yet), unlocked,
and holding nothing but sockets.

The temp dir is everybody's: any local user can fill it with names (1.2
million empty ``plugin<12 hex>`` files stalled a sweep on the event loop for
16-35 s, past the agent's deadlines). So the sweep never delays serving: it
runs in a thread of its own after the handshake, reads at most
:data:`MAX_ENTRIES` entries for at most :data:`MAX_SECONDS` per start, looks
closer only at directories of this user (the directory entry's type, then
one ``lstat``), and the next start continues where the last one stopped. That
place is kept in a state file of this user's in the temp dir (see
:class:`_State`), whose ``flock`` also makes plugins starting together sweep
one after the other, each continuing the last one's walk.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import stat
import threading
import time
from typing import Final

from nomad_device.frozen import frozen

__all__ = [
    "MAX_ENTRIES",
    "MAX_SECONDS",
    "MIN_AGE_SECONDS",
    "Pass",
    "hold",
    "private_dir",
    "state_name",
    "sweep",
    "sweep_in_background",
    "temp_base",
]

#: A leftover must be at least this old: a starting plugin makes its
#: directory, then opens and locks it.
MIN_AGE_SECONDS: Final = 60.0

#: The most temp-dir entries one start's sweep reads (any name, any owner).
#: About 20 ms of one core where they are other users' files; a bigger temp
#: dir is walked over several starts.
MAX_ENTRIES: Final = 20_000

#: The longest one start's sweep runs (from when it may start: see _State).
MAX_SECONDS: Final = 0.5

# What private_dir() names: the prefix, then 12 hex digits.
_NAME: Final = re.compile(r"plugin(?:-tls)?[0-9a-f]{12}\Z")

log = logging.getLogger("goplugin.socketdirs")


def temp_base() -> str:
    """The temp dir, chosen as ``tempfile`` does from the environment."""
    return next((d for d in (os.environ.get(v) for v in ("TMPDIR", "TEMP", "TMP")) if d), "/tmp")


def private_dir(prefix: str) -> str:
    """A fresh 0700 directory in the temp dir, as ``tempfile.mkdtemp`` makes.

    Not tempfile itself: it imports shutil, random, bz2 and lzma, which cost
    every launch about 1 MiB and a few ms before the handshake.
    """
    base = temp_base()
    for _ in range(100):
        path = os.path.join(base, prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return os.path.abspath(path)
    raise FileExistsError(f"no unused name for a socket directory in {base}")


def hold(dir_fd: int) -> None:
    """Mark the directory open at ``dir_fd`` as in use until that descriptor closes."""
    fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def state_name() -> str:
    """The name, in the temp dir, of this user's sweep state (where the walk goes on)."""
    return f"plugin-sweep-{os.geteuid()}"


@frozen
class Pass:
    """One start's sweep: what it removed, how many entries it read, where it began
    and stopped (``(offset, skip)``: see :func:`sweep`; ``stop`` None: the end)."""

    removed: tuple[str, ...]
    examined: int
    start: tuple[int, int]
    stop: tuple[int, int] | None


def sweep_in_background() -> threading.Thread:
    """Start :func:`sweep` in a daemon thread: serving never waits for it."""
    thread = threading.Thread(target=_sweep_quietly, name="socketdirs-sweep", daemon=True)
    thread.start()
    return thread


def _sweep_quietly() -> None:
    try:
        sweep()
    except Exception as exc:  # a sweep that fails must not be noticed by anything else
        log.debug("sweeping socket directories failed: %s", exc)


def sweep(
    base: str | None = None,
    min_age: float = MIN_AGE_SECONDS,
    max_entries: int = MAX_ENTRIES,
    max_seconds: float = MAX_SECONDS,
) -> Pass:
    """Remove the socket directories of plugins that died without cleaning up.

    Reads at most ``max_entries`` entries of the temp dir, for at most
    ``max_seconds`` (at least one entry), continuing where the last sweep
    stopped. Never raises: a directory it cannot judge or remove is left as
    it is.

    Where a sweep stops is a directory offset (what ``telldir`` gives, which
    Linux file systems keep valid across opens: a hash on ext4, an index on
    tmpfs, btrfs and XFS) where the last read began, and how many entries of
    that read were already seen. It is only a hint: every candidate is judged
    afresh, an offset that no longer fits starts again at the top, and
    entries added or removed between starts are at worst seen twice or at the
    next round.
    """
    base = base or temp_base()
    try:
        dir_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        log.debug("cannot sweep %s: %s", base, exc)
        return Pass((), 0, (0, 0), None)
    try:
        with _State(dir_fd, base) as state:
            start = state.position()
            done = _walk(dir_fd, base, start, min_age, max_entries, max_seconds)
            state.save(done.stop)
    except OSError as exc:  # the temp dir itself failed under the walk (EMFILE, EIO)
        log.debug("cannot sweep %s: %s", base, exc)
        return Pass((), 0, (0, 0), None)
    finally:
        os.close(dir_fd)
    log.debug(
        "swept socket directories of dead plugins",
        extra={
            "examined": done.examined,
            "removed": list(done.removed),
            "resumed": done.start != (0, 0),
            "complete": done.stop is None,
        },
    )
    return done


def _walk(
    dir_fd: int,
    base: str,
    start: tuple[int, int],
    min_age: float,
    max_entries: int,
    max_seconds: float,
) -> Pass:
    """Read entries from ``start`` until the end or a bound; remove the leftovers among them.

    Python's ``scandir`` reads the directory in batches through a duplicate of
    ``dir_fd``, which shares its offset: when the offset moves, the entry in
    hand is the first of a read that began where the offset was before. A
    stop is that offset and how many entries after it were seen, less those
    removed (a read from that offset will not return them again).
    """
    offset, skip = start
    try:
        os.lseek(dir_fd, offset, os.SEEK_SET)
    except OSError:
        offset, skip = 0, 0
        os.lseek(dir_fd, 0, os.SEEK_SET)
    made_before = time.time() - min_age
    deadline = time.monotonic() + max_seconds
    uid = os.geteuid()
    removed: list[str] = []
    examined = 0
    batch, seen, read_to = offset, 0, offset
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            now_at = os.lseek(dir_fd, 0, os.SEEK_CUR)
            if now_at != read_to:
                batch, seen, read_to = read_to, 0, now_at
            seen += 1
            if skip:
                skip -= 1
                continue
            if examined and (examined >= max_entries or time.monotonic() >= deadline):
                return Pass(tuple(removed), examined, start, (batch, seen - 1))
            examined += 1
            name = entry.name
            if not _NAME.match(name):
                continue
            try:
                # The entry's type first (no system call on most file systems):
                # other users' files cost nothing more, their directories one lstat.
                if not entry.is_dir(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
                if st.st_uid != uid or st.st_mtime > made_before:
                    continue
                if _remove_if_left(dir_fd, name, made_before):
                    removed.append(os.path.join(base, name))
                    seen -= 1  # read again from ``batch``, this read has one entry less
            except OSError as exc:
                log.debug("left %s: %s", name, exc)
    return Pass(tuple(removed), examined, start, None)


def _remove_if_left(dir_fd: int, name: str, made_before: float) -> bool:
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if (
            st.st_uid != os.geteuid()
            or stat.S_IMODE(st.st_mode) not in (0o700, 0o710)
            or st.st_mtime > made_before
        ):
            return False
        try:
            hold(fd)
        except BlockingIOError:
            return False  # a live plugin holds it
        entries = os.listdir(fd)
        for entry in entries:
            if not stat.S_ISSOCK(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                return False
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    # The temp dir is sticky and the directory ours: nobody can have swapped it.
    os.rmdir(name, dir_fd=dir_fd)
    return True


class _State:
    """Where the last sweep stopped, in a file of this user's in the temp dir, locked.

    The file holds ``<dev> <inode> <offset> <skip>`` of the temp dir; it is
    removed when a sweep reaches the end (a temp dir read in one go keeps no
    file). Its ``flock`` is held for the whole sweep, so that plugins starting
    together sweep in turn, each going on from the last. It is opened without
    following links and without blocking, and used only if it is a plain file
    of this user's with one link and no access for others: another user can
    take the name (then every sweep starts at the top, said at warning), but
    never make a sweep write to a file of theirs, or wait on a lock of theirs.
    """

    def __init__(self, dir_fd: int, base: str) -> None:
        self._dir_fd = dir_fd
        self._base = base
        self._name = state_name()
        self._fd: int | None = None
        st = os.fstat(dir_fd)
        self._where = (st.st_dev, st.st_ino)

    def __enter__(self) -> _State:
        self._fd = self._open()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int | None:
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        for _ in range(3):
            try:
                fd = os.open(self._name, flags, dir_fd=self._dir_fd)
            except FileNotFoundError:
                try:
                    fd = os.open(
                        self._name, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=self._dir_fd
                    )
                except FileExistsError:
                    continue
            except OSError as exc:
                self._refuse(str(exc))
                return None
            st = os.fstat(fd)
            if (
                not stat.S_ISREG(st.st_mode)
                or st.st_uid != os.geteuid()
                or st.st_nlink != 1
                or st.st_mode & 0o077
            ):
                os.close(fd)
                self._refuse(f"not a private file of uid {os.geteuid()} (owner uid {st.st_uid})")
                return None
            fcntl.flock(fd, fcntl.LOCK_EX)  # another plugin is sweeping: go on after it
            if os.fstat(fd).st_nlink:
                return fd
            os.close(fd)  # that sweep reached the end and removed the file: start afresh
        return None

    def _refuse(self, why: str) -> None:
        log.warning(
            f"sweep state {os.path.join(self._base, self._name)} cannot be used: {why};"
            " every sweep starts at the top of the temp dir"
        )

    def position(self) -> tuple[int, int]:
        if self._fd is None:
            return (0, 0)
        try:
            fields = [int(f) for f in os.pread(self._fd, 128, 0).split()]
        except ValueError:
            return (0, 0)
        if len(fields) != 4 or tuple(fields[:2]) != self._where or min(fields[2:]) < 0:
            return (0, 0)
        return (fields[2], fields[3])

    def save(self, stop: tuple[int, int] | None) -> None:
        fd = self._fd
        if fd is None:
            return
        with contextlib.suppress(OSError):
            if stop is None:
                # Under our lock nobody else removes or replaces it; checked all the same.
                named = os.stat(self._name, dir_fd=self._dir_fd, follow_symlinks=False)
                if (named.st_dev, named.st_ino) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
                    os.unlink(self._name, dir_fd=self._dir_fd)
                return
            data = f"{self._where[0]} {self._where[1]} {stop[0]} {stop[1]}\n".encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
