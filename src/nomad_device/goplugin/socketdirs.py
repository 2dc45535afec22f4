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
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import stat
import time
from typing import Final

__all__ = ["MIN_AGE_SECONDS", "hold", "private_dir", "sweep", "temp_base"]

#: A leftover must be at least this old: a starting plugin makes its
#: directory, then opens and locks it.
MIN_AGE_SECONDS: Final = 60.0

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


def sweep(base: str | None = None, min_age: float = MIN_AGE_SECONDS) -> list[str]:
    """Remove the socket directories of plugins that died without cleaning up.

    Returns the paths removed. Never raises: a directory it cannot judge or
    remove is left as it is.
    """
    base = base or temp_base()
    try:
        names = [n for n in os.listdir(base) if _NAME.match(n)]
    except OSError:
        return []
    removed: list[str] = []
    now = time.time()
    for name in names:
        path = os.path.join(base, name)
        try:
            if _remove_if_left(path, now - min_age):
                removed.append(path)
        except OSError as exc:
            log.debug("left %s: %s", path, exc)
    if removed:
        log.debug("removed socket directories of dead plugins", extra={"paths": removed})
    return removed


def _remove_if_left(path: str, made_before: float) -> bool:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
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
    os.rmdir(path)
    return True
