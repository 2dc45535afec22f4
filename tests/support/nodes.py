"""Nodes unlike the build machine, made from Debian's packages: chroots, emulated CPUs.

- ``debian_root(suite)``: a ``debootstrap --variant=minbase`` tree of an older or
  newer Debian (with its ``python3``), cached under a directory keyed by suite,
  architecture and packages, so a second run costs nothing.
- ``in_root(root, argv)``: a command run in that tree with ``/proc``, ``/dev``
  and a socket directory shared with the host mounted into it, in a mount
  namespace of its own, so that a host process (the Go host, the SDK's
  client) can drive a plugin inside over its unix socket.
- ``binfmt_aarch64()``: qemu-user-static registered with binfmt_misc, so an
  aarch64 ELF file runs as if the CPU were one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from nomad_device.bundle.runtime import apt_mirror
from support.bundle import private_mounts, unavailable

#: Where built trees are kept between runs (root-owned, 0700).
CACHE = Path(os.environ.get("NOMAD_DEVICE_TEST_CHROOTS", "/var/cache/nomad-device-sdk-tests"))

#: Bumped when the way trees are made changes.
RECIPE = 1

_HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


def _need(tool: str, package: str) -> str:
    found = shutil.which(tool)
    if found is None:
        reason = f"{tool} is needed (apt-get install {package})"
        unavailable(reason)
    return found


def _need_root() -> None:
    if os.geteuid() != 0:
        reason = "needs root (chroots, mount namespaces, binfmt_misc)"
        unavailable(reason)


def debian_root(suite: str, arch: str = "amd64", include: tuple[str, ...] = ("python3",)) -> Path:
    """A minimal Debian ``suite`` for ``arch`` with ``include``, built once and cached."""
    _need_root()
    _need("debootstrap", "debootstrap")
    key = hashlib.sha256(repr((RECIPE, suite, arch, include)).encode()).hexdigest()[:12]
    root = CACHE / f"{suite}-{arch}-{key}"
    if (root / ".complete").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time, across test processes
        if (root / ".complete").exists():
            return root
        tmp = Path(tempfile.mkdtemp(prefix=f".{suite}-", dir=CACHE))
        command = ["debootstrap", "--variant=minbase", f"--arch={arch}"]
        if arch != _HOST_ARCH:
            # Unpacked only (no emulated maintainer scripts): enough for a loader,
            # glibc and the C++ runtime, which is all a bundle needs of a node.
            command.append("--foreign")
        if include:
            command.append("--include=" + ",".join(include))
        command += [suite, str(tmp), apt_mirror()]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.fail(f"debootstrap {suite} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        shutil.rmtree(tmp / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        (tmp / ".complete").write_text(" ".join(command) + "\n")
        tmp.rename(root)
    return root


#: Mount what a plugin needs inside the tree, then run the command in it.
_ENTER = """
set -e
root=$1; shift
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mkdir -p "$root/$SHARED"
mount --bind "$SHARED" "$root/$SHARED"
for d in $BINDS; do mkdir -p "$root$d"; mount --bind "$d" "$root$d"; done
exec chroot "$root" "$@"
"""


def in_root(root: Path, argv: list[str], shared: Path, binds: tuple[Path, ...] = ()) -> list[str]:
    """``argv`` run inside ``root``; ``shared`` (and ``binds``) are the same paths inside and out.

    A private mount namespace keeps the mounts from the host and ends them
    with the process.
    """
    script = _ENTER.replace("$SHARED", str(shared)).replace("$BINDS", " ".join(map(str, binds)))
    return private_mounts(script, "enter", str(root), *argv)


def glibc_of(root: Path) -> tuple[int, int]:
    """The glibc version a tree carries, from its loader's file name or ``ldd``."""
    done = subprocess.run(
        ["chroot", str(root), "/usr/bin/ldd", "--version"], capture_output=True, text=True
    )
    first = done.stdout.splitlines()[0]
    major, minor = first.split()[-1].split(".")[:2]
    return int(major), int(minor)


BINFMT = Path("/proc/sys/fs/binfmt_misc")


def binfmt_aarch64() -> Path:
    """The qemu-user interpreter the kernel runs for aarch64 ELF files (registered if need be)."""
    _need_root()
    qemu = _need("qemu-aarch64-static", "qemu-user-static")
    if not (BINFMT / "register").exists():
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], check=False)
    if not (BINFMT / "register").exists():
        pytest.fail("binfmt_misc cannot be mounted here: aarch64 files cannot run transparently")
    entry = BINFMT / "qemu-aarch64"
    if not entry.exists():
        # What qemu-user-static's binfmt-support file registers; F: the kernel opens the
        # interpreter now, so it works inside chroots and namespaces too.
        magic = r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
        mask = r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"
        line = f":qemu-aarch64:M::{magic}:{mask}:{qemu}:F"
        (BINFMT / "register").write_text(line)
    if "enabled" not in entry.read_text():
        pytest.fail(f"{entry} is registered but disabled")
    return Path(qemu)
