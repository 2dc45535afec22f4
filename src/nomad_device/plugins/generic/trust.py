"""Whether a path may be offered to tasks: the one place the plugin's safety rules live.

The plugin runs as root and hands what it finds to the task driver, which
opens device nodes and bind-mounts everything else by path, as root, later.
So a path is only as trustworthy as everyone who can change what it leads
to. Local users and tasks are not trusted (``docs/security.md``); a path is
offered only if none of them can redirect it:

1. every directory on the way (``/`` down to the match, and on the way
   through every symlink) belongs to root and is writable by nobody else
   (as sshd's ``StrictModes``): a user who can write a directory can swap
   any entry in it, a sticky bit notwithstanding, since new names can
   still be planted. ``/dev/shm``, ``/dev/mqueue``, ``/tmp`` and
   ``/run/user/<uid>`` are out;
2. every symlink followed belongs to root;
3. what becomes a bind mount (a regular file, a directory) belongs to root
   and is writable by nobody else; a device node's or a socket's own mode
   says who may *use* it, not who may redirect it, so it is not judged;
4. a device node reached through a symlink is the kernel's own node for
   its ``major:minor`` (``/dev/<DEVNAME>`` from
   ``/sys/dev/{char,block}/M:m/uevent``), or lies under the block's own
   patterns;
5. a symlink never becomes a directory bind mount: a directory is offered
   only under its own name.

:meth:`PathCheck.check` applies all of them to one path and says why not;
glob matches and USB interface nodes go through it, and so must every other
way of finding nodes (a PCI matcher, for one). Reserve checks again, so that
what changed between the scan and the call is refused rather than granted.

Under a test's dev or sys root (:mod:`.roots`), the root stands for ``/dev``
or ``/sys`` and the directories above it are not judged; the same goes for
the directory of a ``pci.ids`` file named in the plugin's environment.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from nomad_device.plugins.generic.patterns import matches_any
from nomad_device.plugins.generic.roots import Roots
from nomad_device.plugins.generic.sysfs import SysfsCache

__all__ = ["Checked", "PathCheck", "untrusted_dir"]

#: Linux gives up after this many symlinks in one lookup (ELOOP).
_MAX_LINKS: Final = 40


@dataclass(frozen=True)
class Checked:
    """One path judged: what it leads to, and whether it may be offered."""

    path: str  # as given, under the real roots
    resolved: str  # the file behind it; where the walk stopped when refused or missing
    info: os.stat_result | None  # lstat of ``resolved``; None when it does not exist
    via_link: bool  # a symlink was followed on the way
    refusal: str = ""  # why it may not be offered; "" when it may

    @property
    def ok(self) -> bool:
        return not self.refusal


def _mode(info: os.stat_result) -> str:
    return f"mode {stat.S_IMODE(info.st_mode):04o}"


def _who_writes(info: os.stat_result) -> str | None:
    """Who besides root may change this directory or file, in words; None if nobody."""
    if info.st_uid != 0:
        return f"owned by uid {info.st_uid}"
    if info.st_mode & stat.S_IWOTH:
        return f"writable by every user ({_mode(info)})"
    if info.st_mode & stat.S_IWGRP:
        return f"writable by group {info.st_gid} ({_mode(info)})"
    return None


def untrusted_dir(path: str) -> str | None:
    """Why a directory is not root's alone (None when it is): for inotify, which need
    not look inside a directory whose matches would all be refused."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory"
    return _who_writes(info)


class PathCheck:
    """The rules, remembering the directories walked through until :meth:`new_scan`."""

    def __init__(self, roots: Roots, sysfs: SysfsCache) -> None:
        self.roots = roots
        self.sysfs = sysfs
        anchors = [r for r, default in ((roots.dev, "/dev"), (roots.sys, "/sys")) if r != default]
        if roots.pci_ids is not None:  # named by the operator's environment, as the roots are
            anchors.append(os.path.dirname(roots.pci_ids) or "/")
        # Longest first: a path is walked from the deepest root it lies under.
        self._anchors = sorted(anchors, key=len, reverse=True)
        self._dirs: dict[str, os.stat_result | None] = {}

    def new_scan(self) -> None:
        self._dirs.clear()

    def _anchor(self, path: str) -> str:
        for anchor in self._anchors:
            if path == anchor or path.startswith(anchor + "/"):
                return anchor
        return "/"

    def _lstat(self, path: str, remember: bool) -> os.stat_result | None:
        if remember and path in self._dirs:
            return self._dirs[path]
        try:
            info: os.stat_result | None = os.lstat(path)
        except OSError:
            info = None
        if remember:
            self._dirs[path] = info
        return info

    def _show(self, real: str) -> str:
        return self.roots.canonical(real)

    def check(self, real: str, patterns: Sequence[str] = (), *, fresh: bool = False) -> Checked:
        """Judge ``real`` (a path under the real roots) against every rule.

        ``patterns`` are the block's own (``/dev/...`` form, rule 4); ``fresh``
        looks at every directory again instead of what this scan saw.
        """
        remember = not fresh
        path, hops, via_link = real, 0, False
        while True:  # once more after each symlink followed (and each ".." above a root)
            anchor = self._anchor(path)
            try:
                info = os.stat(anchor)
            except OSError:
                return Checked(real, anchor, None, via_link)
            if not stat.S_ISDIR(info.st_mode):
                return Checked(real, anchor, None, via_link)
            why = _who_writes(info)
            if why:
                return Checked(real, anchor, info, via_link, self._swappable(anchor, why))
            current = anchor
            parts = [p for p in path[len(anchor) :].split("/") if p and p != "."]
            restart: str | None = None
            for index, name in enumerate(parts):
                rest = parts[index + 1 :]
                if name == "..":
                    if current == anchor and anchor != "/":
                        restart = "/".join([os.path.dirname(anchor), *rest])
                        break
                    current = os.path.dirname(current) or "/"
                    continue
                step = f"{current.rstrip('/')}/{name}"
                last = not rest
                entry = self._lstat(step, remember and not last)
                if entry is None:
                    return Checked(real, step, None, via_link)
                if stat.S_ISLNK(entry.st_mode):
                    via_link = True
                    if entry.st_uid != 0:
                        return Checked(
                            real, step, entry, via_link,
                            f"{self._show(step)} is a symlink owned by uid {entry.st_uid};"
                            " only root's symlinks are followed",
                        )  # fmt: skip
                    try:
                        target = os.readlink(step)
                    except OSError:
                        return Checked(real, step, None, via_link)
                    base = target if target.startswith("/") else f"{current}/{target}"
                    restart = "/".join([base.rstrip("/"), *rest]) or "/"
                    break
                if last:
                    return self._final(real, step, entry, via_link, patterns)
                if not stat.S_ISDIR(entry.st_mode):
                    return Checked(real, step, None, via_link)  # ENOTDIR: nothing there
                why = _who_writes(entry)
                if why:
                    return Checked(real, step, entry, via_link, self._swappable(step, why))
                current = step
            if restart is None:
                # It ended on a directory reached by ".." (or on the root itself).
                final = self._lstat(current, False)
                if final is None:
                    return Checked(real, current, None, via_link)
                return self._final(real, current, final, via_link, patterns)
            hops += 1
            if hops > _MAX_LINKS:
                return Checked(real, path, None, via_link, "too many levels of symbolic links")
            path = restart if restart.startswith("/") else "/" + restart

    def _swappable(self, directory: str, why: str) -> str:
        return f"{self._show(directory)} is {why}: whoever can write it can swap what is in it"

    def _final(
        self,
        real: str,
        resolved: str,
        info: os.stat_result,
        via_link: bool,
        patterns: Sequence[str],
    ) -> Checked:
        """Rules 3 to 5 for the file a path leads to."""
        shown = self._show(resolved)
        mode = info.st_mode
        if stat.S_ISDIR(mode) and via_link:
            return Checked(
                real, resolved, info, via_link,
                f"it is a symlink to the directory {shown}; a directory is offered (as a bind"
                " mount) only under its own name",
            )  # fmt: skip
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            why = _who_writes(info)
            if why:
                what = "directory" if stat.S_ISDIR(mode) else "file"
                return Checked(
                    real, resolved, info, via_link,
                    f"the {what} {shown} is {why}; it would be bind-mounted into tasks",
                )  # fmt: skip
        if via_link and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
            kind = "char" if stat.S_ISCHR(mode) else "block"
            major, minor = os.major(info.st_rdev), os.minor(info.st_rdev)
            name = self.sysfs.devname(kind, major, minor)
            kernel = self.roots.devname(name) if name else None
            if resolved != kernel and not matches_any(patterns, shown):
                known = f"the kernel's is /dev/{name}" if name else "the kernel names no such node"
                return Checked(
                    real, resolved, info, via_link,
                    f"it leads to {shown}, which is not the kernel's node for {kind}"
                    f" {major}:{minor} ({known}) and matches none of the block's patterns",
                )  # fmt: skip
        return Checked(real, resolved, info, via_link)
