"""Versions and version constraints as Nomad's ``version`` and ``semver`` operators use them.

The version on the left is always read by hashicorp/go-version's ``NewVersion``
(the loose form: ``v1.2``, ``1.2.3.4``, ``1.0beta``). The constraint on the
right is read by go-version's ``NewConstraint`` for ``version`` (operators
``= != > < >= <= ~>``; a constraint without a pre-release never matches a
pre-release version) or by Nomad's ``helper/constraints/semver`` for ``semver``
(no ``~>``, strict versions, no pre-release rule). Both compare with
go-version's ``Compare``. Written from those sources' behaviour, not copied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from nomad_device.golang.strconv import parse_int

__all__ = ["Version", "VersionConstraint", "parse_constraint", "parse_version"]

_SEG: Final = r"v?([0-9]+(\.[0-9]+)*?)"
_META: Final = r"(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?"
_NUM_PRE: Final = r"-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)"
_WORD_PRE: Final = r"([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)"
#: go-version's VersionRegexpRaw (the separator before a word pre-release is optional).
_LOOSE_RAW: Final = _SEG + "(" + _NUM_PRE + "|(-?" + _WORD_PRE + "))?" + _META + "?"
#: go-version's SemverRegexpRaw (the separator is required).
_STRICT_RAW: Final = _SEG + "(" + _NUM_PRE + "|(-" + _WORD_PRE + "))?" + _META + "?"
_LOOSE: Final = re.compile("^" + _LOOSE_RAW + r"\Z", re.ASCII)
_STRICT: Final = re.compile("^" + _STRICT_RAW + r"\Z", re.ASCII)
#: Go's ``\\s`` (RE2: no vertical tab).
_WS: Final = r"[\t\n\f\r ]*"
_GO_CONSTRAINT: Final = re.compile(
    "^" + _WS + "(<=|>=|!=|~>|<|>|=|)" + _WS + "(" + _LOOSE_RAW + ")" + _WS + r"\Z", re.ASCII
)
_SEMVER_CONSTRAINT: Final = re.compile(
    "^" + _WS + "(<=|>=|!=|<|>|=|)" + _WS + "(" + _STRICT_RAW + ")" + _WS + r"\Z", re.ASCII
)


@dataclass(frozen=True)
class Version:
    segments: tuple[int, ...]
    pre: str
    metadata: str
    #: How many segments the text gave (before padding to three).
    given: int

    def __str__(self) -> str:
        text = ".".join(str(s) for s in self.segments)
        if self.pre:
            text += "-" + self.pre
        if self.metadata:
            text += "+" + self.metadata
        return text

    def compare(self, other: Version) -> int:
        if str(self) == str(other):
            return 0
        if self.segments == other.segments:
            if not self.pre and not other.pre:
                return 0
            if not self.pre:
                return 1
            if not other.pre:
                return -1
            return _compare_prereleases(self.pre, other.pre)
        mine, theirs = self.segments, other.segments
        for i in range(max(len(mine), len(theirs))):
            if i > len(mine) - 1:
                return -1 if any(theirs[i:]) else 0
            if i > len(theirs) - 1:
                return 1 if any(mine[i:]) else 0
            if mine[i] != theirs[i]:
                return -1 if mine[i] < theirs[i] else 1
        return 0


def _compare_part(a: str, b: str) -> int:
    if a == b:
        return 0
    a_int, b_int = parse_int(a), parse_int(b)
    if a == "":
        return -1 if b_int is not None else 1
    if b == "":
        return 1 if a_int is not None else -1
    if a_int is not None and b_int is None:
        return -1
    if a_int is None and b_int is not None:
        return 1
    if a_int is None and b_int is None and a.encode() > b.encode():
        return 1
    if a_int is not None and b_int is not None and a_int > b_int:
        return 1
    return -1


def _compare_prereleases(a: str, b: str) -> int:
    if a == b:
        return 0
    mine, theirs = a.split("."), b.split(".")
    for i in range(max(len(mine), len(theirs))):
        result = _compare_part(
            mine[i] if i < len(mine) else "", theirs[i] if i < len(theirs) else ""
        )
        if result:
            return result
    return 0


def _build(match: re.Match[str], offset: int) -> Version | None:
    groups = match.groups()
    texts = groups[offset].split(".")
    segments = []
    for text in texts:
        value = parse_int(text)
        if value is None:
            return None  # "error parsing version": a segment overflows int64
        segments.append(value)
    while len(segments) < 3:
        segments.append(0)
    pre = groups[offset + 6] or groups[offset + 3] or ""
    return Version(tuple(segments), pre, groups[offset + 9] or "", len(texts))


def parse_version(text: str, *, strict: bool = False) -> Version | None:
    """go-version's ``NewVersion`` (``strict``: ``NewSemver``); None when malformed."""
    match = (_STRICT if strict else _LOOSE).match(text)
    return _build(match, 0) if match else None


@dataclass(frozen=True)
class _Single:
    op: str
    check: Version
    semver: bool

    def ok(self, v: Version) -> bool:
        c = self.check
        if self.op in ("", "="):
            return v.compare(c) == 0
        if self.op == "!=":
            return v.compare(c) != 0
        if not self.semver and not _prerelease_ok(v, c):
            return False
        cmp = v.compare(c)
        if self.op == ">":
            return cmp == 1
        if self.op == "<":
            return cmp == -1
        if self.op == ">=":
            return cmp >= 0
        if self.op == "<=":
            return cmp <= 0
        return _pessimistic(v, c)


def _prerelease_ok(v: Version, c: Version) -> bool:
    if c.pre and v.pre:
        return v.segments == c.segments
    return not (not c.pre and v.pre)


def _pessimistic(v: Version, c: Version) -> bool:
    if c.pre and not v.pre:
        return False
    if v.compare(c) < 0:
        return False
    cs = len(c.segments)
    if cs > len(v.segments):
        return False
    for i in range(c.given - 1):
        if v.segments[i] != c.segments[i]:
            return False
    return c.segments[cs - 1] <= v.segments[cs - 1]


@dataclass(frozen=True)
class VersionConstraint:
    text: str
    parts: tuple[_Single, ...]

    def check(self, v: Version) -> bool:
        return all(p.ok(v) for p in self.parts)


def parse_constraint(text: str, *, semver: bool) -> VersionConstraint | None:
    """go-version's ``NewConstraint`` or Nomad's semver ``NewConstraint``; None when
    malformed (Nomad's job validation rejects those)."""
    pattern = _SEMVER_CONSTRAINT if semver else _GO_CONSTRAINT
    parts = []
    for single in text.split(","):
        match = pattern.match(single)
        if match is None:
            return None
        version = parse_version(match.group(2), strict=semver)
        if version is None:
            return None
        parts.append(_Single(match.group(1), version, semver))
    return VersionConstraint(text, tuple(parts))
