"""Byte-exact Python ports of the Go behaviours Nomad's operators and files meet.

Nomad's own device plugins are written in Go, so operators see durations, quoted
strings, file modes, timestamps and paths rendered by Go's standard library. A Python
plugin that wants its fingerprints, stats and error messages to look identical has to
reproduce those renderings exactly, including Go's odd corners; these functions do.

The SDK's other ports of Go live beside them, imported on use:
:mod:`~nomad_device.golang.strconv` (``ParseInt``, ``ParseFloat``, ``ParseBool`` and
their errors), :mod:`~nomad_device.golang.version` (hashicorp/go-version) and
:mod:`~nomad_device.golang.proxy` (``net/http``'s ``ProxyFromEnvironment``). One
cross-check holds them all to Go (``interop/cmd/gostd``,
``tests/golang/test_go_crosscheck.py``).

Go strings are byte strings while Python's are code points. Everywhere below a Python
``str`` is turned into the bytes Go would see as follows: ordinary code points become
UTF-8; lone surrogates U+DC80..U+DCFF (what ``os.fsdecode``/``surrogateescape`` use to
smuggle undecodable bytes) become the original byte again; any other lone surrogate
becomes its 3-byte "WTF-8" form, which Go treats as three invalid bytes.
"""

from __future__ import annotations

import functools
import os
import unicodedata
from datetime import UTC, datetime, timedelta, timezone, tzinfo

__all__ = [
    "GoDurationError",
    "file_mode_string",
    "filepath_abs",
    "filepath_clean",
    "filepath_join",
    "format_duration",
    "getwd",
    "go_file_mode",
    "json_string",
    "parse_duration",
    "parse_duration_timedelta",
    "perm_string",
    "quote",
    "time_string",
    "valid_utf8",
]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MASK = (1 << 64) - 1
_TWO63 = 1 << 63


def _go_bytes(s: str) -> bytes:
    """Return the byte string Go would hold for ``s`` (see module docstring)."""
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        pass
    out = bytearray()
    for ch in s:
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:
            out.append(cp - 0xDC00)
        else:
            out += ch.encode("utf-8", "surrogatepass")
    return bytes(out)


# --------------------------------------------------------------------------- durations

_NS_PER_US = 1_000
_NS_PER_MS = 1_000_000
_NS_PER_S = 1_000_000_000

_UNITS: dict[bytes, int] = {
    b"ns": 1,
    b"us": _NS_PER_US,
    "\u00b5s".encode(): _NS_PER_US,  # MICRO SIGN
    "\u03bcs".encode(): _NS_PER_US,  # GREEK SMALL LETTER MU
    b"ms": _NS_PER_MS,
    b"s": _NS_PER_S,
    b"m": 60 * _NS_PER_S,
    b"h": 3600 * _NS_PER_S,
}


class GoDurationError(ValueError):
    """A duration Go's ``time.ParseDuration`` rejects; ``str()`` is Go's ``err.Error()``."""

    def __init__(self, message: str, value: str) -> None:
        self.message = message
        self.value = value
        super().__init__(f"time: {message} {_time_quote(_go_bytes(value))}")

    def __reduce__(self) -> tuple[type[GoDurationError], tuple[str, str]]:
        return (type(self), (self.message, self.value))


def _time_quote(raw: bytes) -> str:
    """Quote like the ``time`` package's private helper (not ``strconv.Quote``).

    Every byte of a non-ASCII rune, every invalid byte and every byte below
    0x20 becomes ``\\xNN``; only ``"`` and ``\\`` get a backslash; DEL stays literal.
    Because all non-ASCII bytes are escaped, a per-byte rule is equivalent to Go's
    per-rune loop.
    """
    parts = ['"']
    for b in raw:
        if b >= 0x80 or b < 0x20:
            parts.append(f"\\x{b:02x}")
        elif b in (0x22, 0x5C):
            parts.append("\\" + chr(b))
        else:
            parts.append(chr(b))
    parts.append('"')
    return "".join(parts)


def _is_digit(b: int) -> bool:
    return 0x30 <= b <= 0x39


def parse_duration(s: str) -> int:
    """Parse ``s`` to integer nanoseconds exactly like Go's ``time.ParseDuration``.

    Grammar ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` with units ns, us, µs, μs, ms, s, m, h.
    Go accumulates in a uint64; that arithmetic (including its overflow checks, the
    float64 used for fractions, and one wrap-around corner) is mirrored so accepted
    values and error texts match. Raises :class:`GoDurationError`.
    """
    raw = _go_bytes(s)
    rest = raw
    neg = False
    if rest[:1] in (b"-", b"+"):
        neg = rest[:1] == b"-"
        rest = rest[1:]
    if rest == b"0":
        return 0
    if not rest:
        raise GoDurationError("invalid duration", s)

    total = 0
    pos = 0
    end = len(rest)
    while pos < end:
        if not (rest[pos] == 0x2E or _is_digit(rest[pos])):
            raise GoDurationError("invalid duration", s)

        # Integer part: Go refuses anything above 2**63 here.
        start = pos
        whole = 0
        while pos < end and _is_digit(rest[pos]):
            if whole > _TWO63 // 10:
                raise GoDurationError("invalid duration", s)
            whole = whole * 10 + rest[pos] - 0x30
            if whole > _TWO63:
                raise GoDurationError("invalid duration", s)
            pos += 1
        have_int = pos != start

        # Fraction: digits past uint64 precision are consumed but ignored.
        frac = 0
        scale = 1.0
        have_frac = False
        if pos < end and rest[pos] == 0x2E:
            pos += 1
            start = pos
            saturated = False
            while pos < end and _is_digit(rest[pos]):
                if not saturated:
                    if frac > _INT64_MAX // 10:
                        saturated = True
                    else:
                        nxt = frac * 10 + rest[pos] - 0x30
                        if nxt > _TWO63:
                            saturated = True
                        else:
                            frac = nxt
                            scale *= 10
                pos += 1
            have_frac = pos != start
        if not have_int and not have_frac:
            raise GoDurationError("invalid duration", s)

        # Unit: everything up to the next '.' or digit.
        start = pos
        while pos < end and not (rest[pos] == 0x2E or _is_digit(rest[pos])):
            pos += 1
        if pos == start:
            raise GoDurationError("missing unit in duration", s)
        unit_text = rest[start:pos]
        unit = _UNITS.get(unit_text)
        if unit is None:
            raise GoDurationError(f"unknown unit {_time_quote(unit_text)} in duration", s)

        if whole > _TWO63 // unit:
            raise GoDurationError("invalid duration", s)
        value = whole * unit
        if frac > 0:
            # Go computes this term in float64; Python floats are the same IEEE type.
            value += int(float(frac) * (float(unit) / scale))
            if value > _TWO63:
                raise GoDurationError("invalid duration", s)
        # Two terms of exactly 2**63 wrap Go's uint64 sum to 0; keep that quirk.
        total = (total + value) & _UINT64_MASK
        if total > _TWO63:
            raise GoDurationError("invalid duration", s)

    if neg:
        return -total
    if total > _INT64_MAX:
        raise GoDurationError("invalid duration", s)
    return total


def parse_duration_timedelta(s: str) -> timedelta:
    """Parse like :func:`parse_duration` and return a ``timedelta``.

    ``timedelta`` only has microsecond resolution, so sub-microsecond nanoseconds are
    truncated toward zero (as Go's ``d.Truncate(time.Microsecond)`` does): "1500ns" is
    1 µs and "-1500ns" is -1 µs.
    """
    ns = parse_duration(s)
    micros = abs(ns) // _NS_PER_US
    return timedelta(microseconds=-micros if ns < 0 else micros)


def _split_frac(value: int, digits: int) -> tuple[str, int]:
    """Return (".ddd" with trailing zeros trimmed, or "", value // 10**digits)."""
    base = 10**digits
    text = f"{value % base:0{digits}d}".rstrip("0")
    return ("." + text if text else ""), value // base


def format_duration(ns: int) -> str:
    """Render int64 nanoseconds exactly like Go's ``time.Duration.String()``."""
    if not _INT64_MIN <= ns <= _INT64_MAX:
        raise ValueError(f"duration {ns} ns does not fit in Go's int64 Duration")
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < _NS_PER_S:
        # Sub-second values switch to the smallest readable unit.
        if u == 0:
            return "0s"
        if u < _NS_PER_US:
            return f"{sign}{u}ns"
        if u < _NS_PER_MS:
            frac, whole = _split_frac(u, 3)
            return f"{sign}{whole}{frac}\u00b5s"
        frac, whole = _split_frac(u, 6)
        return f"{sign}{whole}{frac}ms"
    frac, secs = _split_frac(u, 9)
    out = f"{secs % 60}{frac}s"
    mins = secs // 60
    if mins:
        out = f"{mins % 60}m{out}"
        hours = mins // 60
        if hours:
            out = f"{hours}h{out}"
    return sign + out


# --------------------------------------------------------------------------- quoting

# Printable code points assigned in Unicode 15.0.0 (the version Go 1.21+ uses).
# Python 3.11's unicodedata is Unicode 14.0.0 and reports these as unassigned.
# Derived by comparing Go's strconv.IsPrint with the category rule below.
_UNICODE_15_PRINTABLE: tuple[tuple[int, int], ...] = (
    (0x0CF3, 0x0CF3),
    (0x0ECE, 0x0ECE),
    (0x10EFD, 0x10EFF),
    (0x1123F, 0x11241),
    (0x11B00, 0x11B09),
    (0x11F00, 0x11F10),
    (0x11F12, 0x11F3A),
    (0x11F3E, 0x11F59),
    (0x1342F, 0x1342F),
    (0x13440, 0x13455),
    (0x1B132, 0x1B132),
    (0x1B155, 0x1B155),
    (0x1D2C0, 0x1D2D3),
    (0x1DF25, 0x1DF2A),
    (0x1E030, 0x1E06D),
    (0x1E08F, 0x1E08F),
    (0x1E4D0, 0x1E4F9),
    (0x1F6DC, 0x1F6DC),
    (0x1F774, 0x1F776),
    (0x1F77B, 0x1F77F),
    (0x1F7D9, 0x1F7D9),
    (0x1FA75, 0x1FA77),
    (0x1FA87, 0x1FA88),
    (0x1FAAD, 0x1FAAF),
    (0x1FABB, 0x1FABD),
    (0x1FABF, 0x1FABF),
    (0x1FACE, 0x1FACF),
    (0x1FADA, 0x1FADB),
    (0x1FAE8, 0x1FAE8),
    (0x1FAF7, 0x1FAF8),
    (0x2B739, 0x2B739),
    (0x31350, 0x323AF),
)

_ESCAPES = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
}


@functools.lru_cache(maxsize=4096)
def _is_print(cp: int) -> bool:
    """Approximate Go's ``unicode.IsPrint``: L, M, N, P, S categories plus ASCII space.

    Exact for Go's Unicode 15.0.0 tables when Python's unicodedata is 14.0 or 15.0.
    A Python built on a newer Unicode would call later additions printable where
    Go 1.26 escapes them.
    """
    if cp <= 0xFF:
        return 0x20 <= cp <= 0x7E or (0xA1 <= cp <= 0xFF and cp != 0xAD)
    if 0xD800 <= cp <= 0xDFFF:
        return False
    if unicodedata.category(chr(cp))[0] in "LMNPS":
        return True
    return any(lo <= cp <= hi for lo, hi in _UNICODE_15_PRINTABLE)


def _decode_runes(raw: bytes) -> list[tuple[int, int]]:
    """Split ``raw`` into (code point, byte) pairs the way Go's UTF-8 decoder does.

    A valid rune yields (cp, -1); each byte of an ill-formed sequence yields (-1, byte),
    since Go consumes exactly one byte per decoding error.
    """
    try:
        return [(ord(ch), -1) for ch in raw.decode("utf-8")]
    except UnicodeDecodeError:
        pass
    out: list[tuple[int, int]] = []
    i, n = 0, len(raw)
    while i < n:
        b0 = raw[i]
        if b0 < 0x80:
            out.append((b0, -1))
            i += 1
            continue
        # (sequence length, allowed range of the second byte) per RFC 3629.
        if 0xC2 <= b0 <= 0xDF:
            size, lo, hi = 2, 0x80, 0xBF
        elif b0 == 0xE0:
            size, lo, hi = 3, 0xA0, 0xBF
        elif b0 == 0xED:
            size, lo, hi = 3, 0x80, 0x9F
        elif 0xE1 <= b0 <= 0xEF:
            size, lo, hi = 3, 0x80, 0xBF
        elif b0 == 0xF0:
            size, lo, hi = 4, 0x90, 0xBF
        elif b0 == 0xF4:
            size, lo, hi = 4, 0x80, 0x8F
        elif 0xF1 <= b0 <= 0xF3:
            size, lo, hi = 4, 0x80, 0xBF
        else:
            size, lo, hi = 0, 0, 0
        ok = size > 0 and i + size <= n and lo <= raw[i + 1] <= hi
        ok = ok and all(0x80 <= raw[j] <= 0xBF for j in range(i + 2, i + size))
        if ok:
            out.append((ord(raw[i : i + size].decode("utf-8")), -1))
            i += size
        else:
            out.append((-1, b0))
            i += 1
    return out


def valid_utf8(s: str) -> str:
    """``s`` with every byte that is not valid UTF-8 replaced by U+FFFD, one per byte.

    That is what Go's JSON encoders (encoding/json, and the msgpack library's JSON
    handle Nomad uses) write for such bytes.
    """
    if s.isascii():
        return s
    return "".join("\ufffd" if cp < 0 else chr(cp) for cp, _ in _decode_runes(_go_bytes(s)))


def quote(s: str) -> str:
    """Quote ``s`` exactly like Go's ``strconv.Quote`` (and ``fmt``'s ``%q`` on strings).

    Printable runes stay literal, ``\\a\\b\\f\\n\\r\\t\\v`` use their short escapes,
    other C0 controls and DEL become ``\\xNN``, remaining non-printables ``\\uNNNN`` or
    ``\\UNNNNNNNN``, and bytes that are not valid UTF-8 (surrogates, see module
    docstring) become ``\\xNN`` each.
    """
    parts = ['"']
    for cp, bad in _decode_runes(_go_bytes(s)):
        if cp < 0:
            parts.append(f"\\x{bad:02x}")
        elif cp in (0x22, 0x5C):
            parts.append("\\" + chr(cp))
        elif _is_print(cp):
            parts.append(chr(cp))
        elif cp in _ESCAPES:
            parts.append(_ESCAPES[cp])
        elif cp < 0x20 or cp == 0x7F:
            parts.append(f"\\x{cp:02x}")
        elif cp < 0x10000:
            parts.append(f"\\u{cp:04x}")
        else:
            parts.append(f"\\U{cp:08x}")
    parts.append('"')
    return "".join(parts)


_JSON_SHORT = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def json_string(s: str) -> str:
    """Quote ``s`` as Go's ``encoding/json`` does.

    HTML-safe (``<``, ``>``, ``&``, U+2028 and U+2029 as ``\\u`` escapes), short
    escapes for ``\\b\\f\\n\\r\\t``, each byte that is not UTF-8 as ``\\ufffd``.
    """
    out = ['"']
    runes = ((ord(c), 0) for c in s) if s.isascii() else _decode_runes(_go_bytes(s))
    for code, _ in runes:
        ch = chr(code) if code >= 0 else ""
        if code < 0:
            out.append("\\ufffd")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20:
            out.append(_JSON_SHORT.get(ch, f"\\u{code:04x}"))
        elif ch in "<>&" or code in (0x2028, 0x2029):
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


# --------------------------------------------------------------------------- file modes

# Go's io/fs.FileMode type bits, most significant first, with their String() letters.
_MODE_LETTERS = "dalTLDpSugct?"
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_DEVICE = 1 << 26
_MODE_NAMED_PIPE = 1 << 25
_MODE_SOCKET = 1 << 24
_MODE_SETUID = 1 << 23
_MODE_SETGID = 1 << 22
_MODE_CHAR_DEVICE = 1 << 21
_MODE_STICKY = 1 << 20

# Linux st_mode values; spelled out so results do not depend on the host platform.
_S_IFMT = 0o170000
_S_IFTYPE_TO_GO = {
    0o060000: _MODE_DEVICE,  # block device
    0o020000: _MODE_DEVICE | _MODE_CHAR_DEVICE,
    0o040000: _MODE_DIR,
    0o010000: _MODE_NAMED_PIPE,
    0o120000: _MODE_SYMLINK,
    0o100000: 0,  # regular file
    0o140000: _MODE_SOCKET,
}
_S_ISUID = 0o4000
_S_ISGID = 0o2000
_S_ISVTX = 0o1000


def go_file_mode(st_mode: int) -> int:
    """Convert a Linux ``st_mode`` to the ``os.FileMode`` bits Go's ``os.Stat`` reports.

    Unknown file types get no type bit (Go does not set ModeIrregular on Linux).
    """
    if st_mode < 0:
        raise ValueError(f"st_mode must be non-negative, got {st_mode}")
    mode = st_mode & 0o777
    mode |= _S_IFTYPE_TO_GO.get(st_mode & _S_IFMT, 0)
    if st_mode & _S_ISGID:
        mode |= _MODE_SETGID
    if st_mode & _S_ISUID:
        mode |= _MODE_SETUID
    if st_mode & _S_ISVTX:
        mode |= _MODE_STICKY
    return mode


def _render_file_mode(mode: int) -> str:
    letters = "".join(c for i, c in enumerate(_MODE_LETTERS) if mode & (1 << (31 - i)))
    perms = "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))
    return (letters or "-") + perms


def file_mode_string(st_mode: int) -> str:
    """Return Go's ``FileInfo.Mode().String()`` for a Linux ``st_mode``.

    E.g. ``"-rw-r--r--"``, ``"drwxr-xr-x"``, ``"Lrwxrwxrwx"``, ``"Dcrw-rw-rw-"``,
    ``"urwxr-xr-x"`` (setuid), ``"dtrwxrwxrwx"`` (sticky directory).
    """
    return _render_file_mode(go_file_mode(st_mode))


def perm_string(st_mode: int) -> str:
    """Return Go's ``FileInfo.Mode().Perm().String()``: ``-`` plus nine rwx flags."""
    return _render_file_mode(st_mode & 0o777)


# --------------------------------------------------------------------------- times

# Where Go looks up $TZ names on Unix, in order (time/zoneinfo_unix.go).
_GO_ZONE_DIRS = ("/usr/share/zoneinfo/", "/usr/share/lib/zoneinfo/", "/usr/lib/locale/TZ/")
_GO_ZONE_DIRS_NO_SLASH = ("/etc/zoneinfo",)


def _zone_from_file(path: str) -> tzinfo | None:
    # zoneinfo (with sysconfig) is imported only when a Go time string is wanted,
    # not by every plugin launch.
    from zoneinfo import ZoneInfo

    try:
        with open(path, "rb") as fh:
            return ZoneInfo.from_file(fh, key=path)
    except (OSError, ValueError):
        return None


@functools.lru_cache(maxsize=16)
def _go_local_zone(tz_env: str | None) -> tzinfo | None:
    """Pick the zone Go's ``time.Local`` would use for a given ``$TZ``; None means UTC.

    Go does not understand POSIX rule strings such as ``TZ=IST-5:30`` (libc does):
    anything that is not a readable TZif file falls back to UTC. Results are cached
    per ``$TZ`` value, much as Go reads the zone once per process; the real GOROOT
    ``zoneinfo.zip`` fallback of a Go toolchain is deliberately not consulted.
    """
    if tz_env is None:
        return _zone_from_file("/etc/localtime")
    name = tz_env[1:] if tz_env.startswith(":") else tz_env
    if name.startswith("/"):
        return _zone_from_file(name)
    if name in ("", "UTC"):
        return None
    for directory in _GO_ZONE_DIRS:
        zone = _zone_from_file(directory + name)
        if zone is not None:
            return zone
    for directory in _GO_ZONE_DIRS_NO_SLASH:
        zone = _zone_from_file(directory + "/" + name)
        if zone is not None:
            return zone
    return None


# Earliest/latest instants whose zone Python's datetime can evaluate.
_LOOKUP_MIN = -62135596800 + 2 * 86400  # 0001-01-03T00:00:00Z
_LOOKUP_MAX = 253402300799 - 2 * 86400  # 9999-12-29T23:59:59Z
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _zone_at(sec: int, tz: tzinfo | None) -> tuple[str, int]:
    """Return (abbreviation or "", offset seconds east of UTC) at Unix second ``sec``."""
    if tz is None:
        return "UTC", 0
    clamped = min(max(sec, _LOOKUP_MIN), _LOOKUP_MAX)
    local = (_EPOCH + timedelta(seconds=clamped)).astimezone(tz)
    off = local.utcoffset()
    if off is None:
        raise ValueError(f"tzinfo {tz!r} returned no UTC offset")
    offset = off.days * 86400 + off.seconds
    name = local.tzname() or ""
    # datetime.timezone(offset) without a name invents "UTC+05:30"; Go's equivalent,
    # FixedZone("", offset), has no name, so treat it as nameless.
    if isinstance(tz, timezone) and offset != 0 and name == timezone(off).tzname(None):
        name = ""
    return name, offset


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """Proleptic Gregorian (year, month, day) for a day count from 1970-01-01."""
    days += 719468  # shift the epoch to 0000-03-01
    era, doe = divmod(days, 146097)
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


def _numeric_zone(offset: int) -> str:
    """Go's "-0700": minutes truncated toward zero, seconds dropped."""
    minutes = abs(offset) // 60
    sign = "-" if offset < 0 and minutes else "+"
    return f"{sign}{minutes // 60:02d}{minutes % 60:02d}"


def time_string(ns: int, tz: tzinfo | None = None) -> str:
    """Render a file time exactly like Go's ``time.Time.String()`` after ``os.Stat``.

    ``ns`` is integer nanoseconds since the Unix epoch (``os.stat_result.st_mtime_ns``)
    so nothing is lost to float rounding. Layout is
    ``2006-01-02 15:04:05.999999999 -0700 MST`` (stat times carry no monotonic
    reading). With ``tz=None`` the zone is the one Go's ``time.Local`` picks from
    ``$TZ`` / ``/etc/localtime``; pass any ``tzinfo`` to override. A zone without an
    abbreviation (``tzname()`` None/empty, or an unnamed ``datetime.timezone``) prints
    its numeric offset in the abbreviation slot, as Go does.
    """
    if isinstance(ns, bool) or not isinstance(ns, int):
        raise TypeError(f"ns must be int nanoseconds, got {type(ns).__name__}")
    zone = _go_local_zone(os.environ.get("TZ")) if tz is None else tz
    sec, nsec = divmod(ns, _NS_PER_S)
    name, offset = _zone_at(sec, zone)
    days, clock = divmod(sec + offset, 86400)
    year, month, day = _civil_from_days(days)
    hour, rem = divmod(clock, 3600)
    minute, second = divmod(rem, 60)
    year_text = f"-{-year:04d}" if year < 0 else f"{year:04d}"
    frac = f".{nsec:09d}".rstrip("0") if nsec else ""
    numeric = _numeric_zone(offset)
    return (
        f"{year_text}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}{frac}"
        f" {numeric} {name or numeric}"
    )


# --------------------------------------------------------------------------- paths


def filepath_clean(path: str) -> str:
    """Lexically tidy ``path`` like Go's ``filepath.Clean`` on Unix.

    Unlike ``posixpath.normpath``, a leading ``//`` collapses to ``/``.
    """
    if path == "":
        return "."
    rooted = path.startswith("/")
    kept: list[str] = []
    for elem in path.split("/"):
        if elem in ("", "."):
            continue
        if elem == "..":
            if kept and kept[-1] != "..":
                kept.pop()
            elif not rooted:
                kept.append("..")
            # "/.." is "/": nothing above the root.
            continue
        kept.append(elem)
    body = "/".join(kept)
    if rooted:
        return "/" + body
    return body or "."


def filepath_join(*parts: str) -> str:
    """Join like Go's ``filepath.Join``: skip leading empties, then Clean; all empty -> ""."""
    for i, part in enumerate(parts):
        if part != "":
            return filepath_clean("/".join(parts[i:]))
    return ""


def getwd() -> str:
    """Working directory as Go's ``os.Getwd`` reports it: trusts ``$PWD`` if it is "."."""
    pwd = os.environ.get("PWD", "")
    if pwd.startswith("/"):
        dot = os.stat(".")
        try:
            candidate = os.stat(pwd)
        except (OSError, ValueError):
            pass
        else:
            if os.path.samestat(dot, candidate):
                return pwd
    return os.getcwd()


def filepath_abs(path: str, cwd: str | None = None) -> str:
    """Absolute form of ``path`` like Go's ``filepath.Abs`` (purely lexical, no symlinks).

    Relative paths are joined to ``cwd``, by default the working directory as
    Go's ``os.Getwd`` sees it, which is ``$PWD`` when that names the current
    directory (so it may contain symlinks, unlike ``os.getcwd()``). Raises
    ``OSError`` if the directory is gone.
    """
    if path.startswith("/"):
        return filepath_clean(path)
    return filepath_join(getwd() if cwd is None else cwd, path)
