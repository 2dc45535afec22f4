"""The ``paths`` globs of a block, matched the way :func:`glob.glob` matches them.

Discovery lists matches with :mod:`glob`; two other questions need the same
rules without listing anything:

- does a path lie under a block's own patterns (a device node reached
  through a symlink may, :mod:`.trust`);
- can a directory hold a match at all, or lead to one (inotify need not
  watch anything else, :mod:`.events`).

Each ``/``-separated component is matched on its own (``*`` never crosses a
``/``), with :func:`fnmatch.fnmatchcase`, and a name starting with ``.`` is
matched by a wildcard only when the pattern's component starts with ``.``
too, as ``glob`` does. Paths here are in the form operators write
(``/dev/...``), not under a test's dev root.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from typing import Final

__all__ = ["fixed_dir", "leads_to_match", "matches", "matches_any"]

_MAGIC: Final = re.compile(r"[*?[]")


def fixed_dir(pattern: str) -> str | None:
    """The directory above a glob's first wildcard (``/dev/serial/by-id``); None without any."""
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        if _MAGIC.search(part):
            return "/".join(parts[:i]) or "/"
    return None


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def _component(name: str, part: str) -> bool:
    if not _MAGIC.search(part):
        return name == part
    if name.startswith(".") and not part.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, part)


def matches(pattern: str, path: str) -> bool:
    """Whether ``glob.glob(pattern)`` would list ``path`` (were it there)."""
    wanted, given = _parts(pattern), _parts(path)
    return len(wanted) == len(given) and all(map(_component, given, wanted))


def matches_any(patterns: Iterable[str], path: str) -> bool:
    return any(matches(p, path) for p in patterns)


def leads_to_match(pattern: str, directory: str) -> bool:
    """Whether a match of ``pattern`` could lie somewhere below ``directory``."""
    wanted, given = _parts(pattern), _parts(directory)
    return len(given) < len(wanted) and all(map(_component, given, wanted))
