"""What release tracking remembers across restarts: which releases were handled.

``<state_dir>/released.json`` holds one record per device (its last holder,
that holder's ``CreateIndex``, whether its release was handled). It is
written whole, 0600, and renamed into place, by a thread of its own so that
neither the plugin's loop nor the follower waits on the disk. The directory
is used only if no one but root (or the plugin's user) can write it: whoever
can edit the file can stop a device being cleaned.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Mapping
from typing import Final

from nomad_device.plugin.ledger import DeviceKey, Record

__all__ = ["STATE_FILE", "Saver", "StateFile"]

log = logging.getLogger("nomad_device.release")

STATE_FILE: Final = "released.json"


class StateFile:
    """``<state_dir>/released.json``: the records, written whole and renamed into place.

    The directory is made (0700) if missing and used only if it is a real
    directory owned by root or the plugin's user that others may not write to:
    whoever can write the file can stop a device being cleaned.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, STATE_FILE)
        self.problem = ""

    def prepare(self) -> bool:
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            info = os.lstat(self.directory)
        except OSError as exc:
            self.problem = f"cannot use {self.directory}: {(exc.strerror or str(exc)).lower()}"
            return False
        if not stat.S_ISDIR(info.st_mode):
            self.problem = f"{self.directory} is not a directory"
        elif info.st_uid not in (0, os.geteuid()):
            self.problem = f"{self.directory} is owned by uid {info.st_uid}"
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            self.problem = f"{self.directory} is writable by group or others"
        else:
            return True
        return False

    def load(self) -> dict[DeviceKey, Record]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read(64 * 1024 * 1024))
        out: dict[DeviceKey, Record] = {}
        for item in data.get("devices", []) if isinstance(data, dict) else []:
            parts = [item.get(k) for k in ("vendor", "type", "name", "id", "alloc")]
            vendor, type_, name, device_id, alloc = parts
            created = item.get("created", 0)
            if (
                isinstance(vendor, str)
                and isinstance(type_, str)
                and isinstance(name, str)
                and isinstance(device_id, str)
                and isinstance(alloc, str)
                and isinstance(item.get("done"), bool)
                and isinstance(created, int)
            ):
                out[(vendor, type_, name, device_id)] = Record(alloc, item["done"], created)
        return out

    def save(self, records: Mapping[DeviceKey, Record]) -> None:
        devices = [
            {"vendor": k[0], "type": k[1], "name": k[2], "id": k[3], "alloc": r.alloc,
             "created": r.created, "done": r.done}
            for k, r in sorted(records.items())
        ]  # fmt: skip
        data = json.dumps({"version": 1, "devices": devices}, indent=1).encode()
        temp = f"{self.path}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, self.path)
        dirfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)


class Saver:
    """Writes the latest records in a thread of its own; a burst of changes is one write."""

    def __init__(self, file: StateFile | None) -> None:
        self._file = file
        self._cond = threading.Condition()
        self._pending: dict[DeviceKey, Record] | None = None
        self._writing = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._failed = ""

    def request(self, records: dict[DeviceKey, Record]) -> None:
        if self._file is None:
            return
        with self._cond:
            self._pending = records
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="nomad-release-state", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        assert self._file is not None
        while True:
            with self._cond:
                while self._pending is None and not self._stopped:
                    self._cond.wait()
                if self._pending is None:
                    return
                records, self._pending = self._pending, None
                self._writing = True
            try:
                self._file.save(records)
                self._failed = ""
            except (OSError, ValueError) as exc:
                why = f"cannot write {self._file.path}: {exc}"
                if why != self._failed:
                    log.warning("%s; what is handled now may be handled again after a restart", why)
                self._failed = why
            finally:
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()

    def stop(self, timeout: float) -> None:
        """Write what is pending (within ``timeout``), then end the thread."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            while (self._pending is not None or self._writing) and self._thread is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)
