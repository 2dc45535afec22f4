"""A real unprivileged local user for attack tests: created by the test, removed after.

The attacker of docs/security.md is a local user without root: these tests
make one with ``useradd`` (root is needed; CI runs as root) and run its
commands with ``setuid``, so the kernel's own permission checks decide what
it can plant, exactly as on a shared node.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.fake_tree import require_root

#: Unix user names made by this branch's tests start with this (see the brief).
PREFIX = "nd18_"


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int

    def run(self, *command: str | Path) -> None:
        """Run a command as this user, from ``/``; fail the test if it fails.

        Through ``setpriv`` rather than ``subprocess``'s ``user=``: that one makes
        Python fork() instead of vfork(), and grpc's fork handlers then crash the
        child (SIGSEGV before exec) once a test has a channel open.
        """
        become = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]
        result = subprocess.run(
            [*become, "--", *(str(c) for c in command)],
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C"},
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, f"{command} as {self.name}: {result.stderr}"

    def owned_dir(self, path: Path, mode: int = 0o755) -> Path:
        """A directory this user owns (``/run/user/<uid>``'s kind)."""
        path.mkdir()
        os.chown(path, self.uid, self.gid)
        path.chmod(mode)
        return path


@contextmanager
def local_user(tag: str) -> Iterator[LocalUser]:
    """A fresh system user, no home, no login shell; deleted on the way out."""
    require_root("the attack tests create an unprivileged local user")
    name = f"{PREFIX}{tag}{os.getpid()}"[:32]
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        entry = pwd.getpwnam(name)
        yield LocalUser(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
