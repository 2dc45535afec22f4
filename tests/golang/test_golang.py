"""Tests for nomad_device.golang: Go standard-library renderings reproduced in Python."""

from __future__ import annotations

import os
import pickle
import random
import stat
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from nomad_device.golang import (
    GoDurationError,
    file_mode_string,
    filepath_abs,
    filepath_clean,
    filepath_join,
    format_duration,
    go_file_mode,
    parse_duration,
    parse_duration_timedelta,
    perm_string,
    quote,
    time_string,
)
from nomad_device.golang.proxy import ProxyError, proxy_for

NS = 1
US = 1_000
MS = 1_000_000
SEC = 1_000_000_000
MIN = 60 * SEC
HOUR = 60 * MIN
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)

HAVE_ZONEINFO = os.path.isdir("/usr/share/zoneinfo")
needs_zoneinfo = pytest.mark.skipif(not HAVE_ZONEINFO, reason="no /usr/share/zoneinfo")


# ----------------------------------------------------------------------------- durations

DURATION_OK: list[tuple[str, int]] = [
    ("0", 0),
    ("+0", 0),
    ("-0", 0),
    ("5s", 5 * SEC),
    ("30s", 30 * SEC),
    ("1478s", 1478 * SEC),
    ("-5s", -5 * SEC),
    ("+5s", 5 * SEC),
    ("-0s", 0),
    ("+0s", 0),
    ("0s", 0),
    ("00s", 0),
    ("5.0s", 5 * SEC),
    ("5.6s", 5 * SEC + 600 * MS),
    ("5.s", 5 * SEC),
    (".5s", 500 * MS),
    ("1.0s", SEC),
    ("1.00s", SEC),
    ("1.004s", SEC + 4 * MS),
    ("1.0040s", SEC + 4 * MS),
    ("100.00100s", 100 * SEC + 1 * MS),
    ("10ns", 10 * NS),
    ("11us", 11 * US),
    ("12\u00b5s", 12 * US),  # MICRO SIGN
    ("12\u03bcs", 12 * US),  # GREEK SMALL LETTER MU
    ("1\u00b5s", US),
    ("1\u03bcs", US),
    ("13ms", 13 * MS),
    ("14s", 14 * SEC),
    ("15m", 15 * MIN),
    ("16h", 16 * HOUR),
    ("3h30m", 3 * HOUR + 30 * MIN),
    ("1h2m", HOUR + 2 * MIN),
    ("1h2m3.5s", HOUR + 2 * MIN + 3 * SEC + 500 * MS),
    ("10.5s4m", 4 * MIN + 10 * SEC + 500 * MS),
    ("-2m3.4s", -(2 * MIN + 3 * SEC + 400 * MS)),
    ("1h2m3s4ms5us6ns", HOUR + 2 * MIN + 3 * SEC + 4 * MS + 5 * US + 6 * NS),
    ("39h9m14.425s", 39 * HOUR + 9 * MIN + 14 * SEC + 425 * MS),
    ("1s1s", 2 * SEC),
    ("1.5h", 90 * MIN),
    ("-1.5h", -90 * MIN),
    ("300ms", 300 * MS),
    ("2h45m", 2 * HOUR + 45 * MIN),
    ("52763797000ns", 52763797000 * NS),
    ("0.3333333333333333333h", 20 * MIN),
    ("0.100000000000000000000h", 6 * MIN),
    ("0.830103483285477580700h", 49 * MIN + 48 * SEC + 372539827 * NS),
    ("1.0000000000000000000001s", SEC),
    ("1.00000000000000000000001s", SEC),
    ("9007199254740993ns", (1 << 53) + 1),
    ("9223372036854775807ns", INT64_MAX),
    ("9223372036854775.807us", INT64_MAX),
    ("9223372036s854ms775us807ns", INT64_MAX),
    ("-9223372036854775808ns", INT64_MIN),
    ("-9223372036854775.808us", INT64_MIN),
    ("-9223372036s854ms775us808ns", INT64_MIN),
    ("-2562047h47m16.854775808s", INT64_MIN),
    ("2562047h47m16.854775807s", INT64_MAX),
    ("2562047h", 2562047 * HOUR),
    # Go sums in a uint64: two terms of exactly 2**63 wrap around to zero.
    ("9223372036854775808ns9223372036854775808ns", 0),
    ("-9223372036854775808ns9223372036854775808ns", 0),
]

DURATION_ERR: list[tuple[str, str]] = [
    ("", 'time: invalid duration ""'),
    ("3", 'time: missing unit in duration "3"'),
    ("1", 'time: missing unit in duration "1"'),
    ("-", 'time: invalid duration "-"'),
    ("+", 'time: invalid duration "+"'),
    ("s", 'time: invalid duration "s"'),
    (".", 'time: invalid duration "."'),
    ("-.", 'time: invalid duration "-."'),
    (".s", 'time: invalid duration ".s"'),
    ("+.s", 'time: invalid duration "+.s"'),
    ("1d", 'time: unknown unit "d" in duration "1d"'),
    ("1x", 'time: unknown unit "x" in duration "1x"'),
    ("1.1.1s", 'time: missing unit in duration "1.1.1s"'),
    ("1S", 'time: unknown unit "S" in duration "1S"'),
    ("1 s", 'time: unknown unit " s" in duration "1 s"'),
    (" 1s", 'time: invalid duration " 1s"'),
    ("1s ", 'time: unknown unit "s " in duration "1s "'),
    ("1hour", 'time: unknown unit "hour" in duration "1hour"'),
    ("--1s", 'time: invalid duration "--1s"'),
    ("-+1s", 'time: invalid duration "-+1s"'),
    ("1s-1s", 'time: unknown unit "s-" in duration "1s-1s"'),
    ("1e3s", 'time: unknown unit "e" in duration "1e3s"'),
    ("0x10s", 'time: unknown unit "x" in duration "0x10s"'),
    ("\u00b5s", 'time: invalid duration "\\xc2\\xb5s"'),
    ("1\u00b5", 'time: unknown unit "\\xc2\\xb5" in duration "1\\xc2\\xb5"'),
    ("1\u00e9", 'time: unknown unit "\\xc3\\xa9" in duration "1\\xc3\\xa9"'),
    ("1\u00ff", 'time: unknown unit "\\xc3\\xbf" in duration "1\\xc3\\xbf"'),
    ("1\u2028s", 'time: unknown unit "\\xe2\\x80\\xa8s" in duration "1\\xe2\\x80\\xa8s"'),
    ("1\ufffds", 'time: unknown unit "\\xef\\xbf\\xbds" in duration "1\\xef\\xbf\\xbds"'),
    (
        "1\U0001f600",
        'time: unknown unit "\\xf0\\x9f\\x98\\x80" in duration "1\\xf0\\x9f\\x98\\x80"',
    ),
    # Control bytes become \xNN, DEL stays raw, quote and backslash get a backslash.
    ("1\x00", 'time: unknown unit "\\x00" in duration "1\\x00"'),
    ("1\t\n", 'time: unknown unit "\\x09\\x0a" in duration "1\\x09\\x0a"'),
    ("1\x1b[0m", 'time: unknown unit "\\x1b[" in duration "1\\x1b[0m"'),
    ("1\x7f", 'time: unknown unit "\x7f" in duration "1\x7f"'),
    ('1"s', 'time: unknown unit "\\"s" in duration "1\\"s"'),
    ("1\\s", 'time: unknown unit "\\\\s" in duration "1\\\\s"'),
    ("\t1s", 'time: invalid duration "\\x091s"'),
    # surrogateescape'd raw bytes are reported as the raw bytes Go would have seen.
    ("1\udcff", 'time: unknown unit "\\xff" in duration "1\\xff"'),
    ("\udcc3\udca9", 'time: invalid duration "\\xc3\\xa9"'),
    ("1\ud800s", 'time: unknown unit "\\xed\\xa0\\x80s" in duration "1\\xed\\xa0\\x80s"'),
    # Overflow.
    ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
    ("9223372036854775809ns", 'time: invalid duration "9223372036854775809ns"'),
    ("-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'),
    ("9223372036854775807ns1ns", 'time: invalid duration "9223372036854775807ns1ns"'),
    ("9223372036854775808ns1ns", 'time: invalid duration "9223372036854775808ns1ns"'),
    ("-9223372036854775808ns1ns", 'time: invalid duration "-9223372036854775808ns1ns"'),
    ("9223372036854775.808us", 'time: invalid duration "9223372036854775.808us"'),
    ("9223372036854775810ns", 'time: invalid duration "9223372036854775810ns"'),
    ("99999999999999999999ns", 'time: invalid duration "99999999999999999999ns"'),
    ("2562048h", 'time: invalid duration "2562048h"'),
    ("3000000h", 'time: invalid duration "3000000h"'),
    ("2562047h48m", 'time: invalid duration "2562047h48m"'),
    ("2562047.9h", 'time: invalid duration "2562047.9h"'),
    ("9223372037s", 'time: invalid duration "9223372037s"'),
    # An unknown unit is reported even when the number would overflow.
    ("99999999999999999999x", 'time: invalid duration "99999999999999999999x"'),
    ("9223372036854775808x", 'time: unknown unit "x" in duration "9223372036854775808x"'),
]


@pytest.mark.parametrize(("text", "want"), DURATION_OK)
def test_parse_duration_ok(text: str, want: int) -> None:
    assert parse_duration(text) == want


@pytest.mark.parametrize(("text", "want"), DURATION_ERR)
def test_parse_duration_error(text: str, want: str) -> None:
    with pytest.raises(GoDurationError) as info:
        parse_duration(text)
    assert str(info.value) == want
    assert isinstance(info.value, ValueError)
    assert info.value.value == text


def test_duration_error_pickles() -> None:
    with pytest.raises(GoDurationError) as info:
        parse_duration("1x")
    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == str(info.value)
    assert again.message == 'unknown unit "x" in duration'


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1h2m3.5s", timedelta(hours=1, minutes=2, seconds=3.5)),
        ("1500ns", timedelta(microseconds=1)),
        ("999ns", timedelta(0)),
        ("-1500ns", timedelta(microseconds=-1)),
        ("-999ns", timedelta(0)),
        ("1.5us", timedelta(microseconds=1)),
        ("-2562047h47m16.854775808s", timedelta(microseconds=-(2**63 // 1000))),
        ("2562047h47m16.854775807s", timedelta(microseconds=INT64_MAX // 1000)),
    ],
)
def test_parse_duration_timedelta(text: str, want: timedelta) -> None:
    assert parse_duration_timedelta(text) == want


def test_parse_duration_timedelta_error() -> None:
    with pytest.raises(GoDurationError, match=r'^time: unknown unit "d" in duration "7d"$'):
        parse_duration_timedelta("7d")


DURATION_FORMAT: list[tuple[int, str]] = [
    (0, "0s"),
    (1, "1ns"),
    (999, "999ns"),
    (1100, "1.1\u00b5s"),
    (US, "1\u00b5s"),
    (1500, "1.5\u00b5s"),
    (999_999, "999.999\u00b5s"),
    (MS, "1ms"),
    (2200 * US, "2.2ms"),
    (999_999_999, "999.999999ms"),
    (SEC, "1s"),
    (3300 * MS, "3.3s"),
    (SEC + 1, "1.000000001s"),
    (59 * SEC, "59s"),
    (MIN, "1m0s"),
    (4 * MIN + 5 * SEC, "4m5s"),
    (4 * MIN + 5001 * MS, "4m5.001s"),
    (HOUR, "1h0m0s"),
    (5 * HOUR + 6 * MIN + 7001 * MS, "5h6m7.001s"),
    (8 * MIN + 1, "8m0.000000001s"),
    (HOUR + 2 * MIN + 3 * SEC + 500 * MS, "1h2m3.5s"),
    (100 * HOUR, "100h0m0s"),
    (INT64_MAX, "2562047h47m16.854775807s"),
    (INT64_MIN, "-2562047h47m16.854775808s"),
    (-1, "-1ns"),
    (-1500, "-1.5\u00b5s"),
    (-SEC, "-1s"),
    (-(HOUR + 1), "-1h0m0.000000001s"),
]


@pytest.mark.parametrize(("ns", "want"), DURATION_FORMAT)
def test_format_duration(ns: int, want: str) -> None:
    assert format_duration(ns) == want


@pytest.mark.parametrize("ns", [INT64_MAX + 1, INT64_MIN - 1, 10**30])
def test_format_duration_out_of_range(ns: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        format_duration(ns)


def test_format_parse_round_trip() -> None:
    rng = random.Random(1234)
    samples = [ns for ns, _ in DURATION_FORMAT]
    for _ in range(2000):
        magnitude = rng.randrange(64)
        samples.append(rng.randrange(-(1 << magnitude), 1 << magnitude))
    for ns in samples:
        assert parse_duration(format_duration(ns)) == ns


# ----------------------------------------------------------------------------- quoting

QUOTE: list[tuple[str, str]] = [
    ("", '""'),
    ("abc", '"abc"'),
    ("hello, world", '"hello, world"'),
    ('"', '"\\""'),
    ("\\", '"\\\\"'),
    ("'", '"\'"'),
    ("`", '"`"'),
    ("\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
    ("\x00", '"\\x00"'),
    ("\x01\x1b\x1f", '"\\x01\\x1b\\x1f"'),
    ("\x7f", '"\\x7f"'),
    ("\x80\x9f", '"\\u0080\\u009f"'),
    ("\u00a0", '"\\u00a0"'),  # NO-BREAK SPACE is not "printable" for Go
    ("\u00a1\u00ff", '"\u00a1\u00ff"'),
    ("\u00ad", '"\\u00ad"'),  # SOFT HYPHEN (format character)
    ("caf\u00e9", '"caf\u00e9"'),
    ("e\u0301", '"e\u0301"'),  # combining mark is printable
    ("\u0378", '"\\u0378"'),  # unassigned
    ("\u2000\u3000", '"\\u2000\\u3000"'),  # spaces other than U+0020
    ("\u200b\u200d\u200e", '"\\u200b\\u200d\\u200e"'),  # format characters
    ("\u2028\u2029", '"\\u2028\\u2029"'),
    ("\u65e5\u672c\u8a9e", '"\u65e5\u672c\u8a9e"'),
    ("\uac00", '"\uac00"'),
    ("\ue000", '"\\ue000"'),  # private use
    ("\ufeff", '"\\ufeff"'),
    ("\ufffd", '"\ufffd"'),
    ("\ufffe\uffff", '"\\ufffe\\uffff"'),
    ("\U0001f600", '"\U0001f600"'),
    ("\U0001d11e", '"\U0001d11e"'),
    ("\U000e0001", '"\\U000e0001"'),  # LANGUAGE TAG (format)
    ("\U000f0000", '"\\U000f0000"'),  # supplementary private use
    ("\U0010ffff", '"\\U0010ffff"'),
    ("\U0001fae8", '"\U0001fae8"'),  # assigned in Unicode 15.0: printable for Go
    ("\U00031350", '"\U00031350"'),  # CJK Extension H (Unicode 15.0)
    ("\U0001fae9", '"\\U0001fae9"'),  # still unassigned in Unicode 15.0
    ("\u0cf3", '"\u0cf3"'),
    # Lone surrogates: surrogateescape bytes and WTF-8 bytes, each invalid for Go.
    ("\udcff", '"\\xff"'),
    ("a\udc80b", '"a\\x80b"'),
    ("\udcc3\udca9", '"\u00e9"'),  # the escaped bytes form valid UTF-8 again
    ("\ud800", '"\\xed\\xa0\\x80"'),
    ("\udfff", '"\\xed\\xbf\\xbf"'),
    ("\udcf0\udc9f\udc98", '"\\xf0\\x9f\\x98"'),  # truncated 4-byte sequence
    ("\udce0\udc80\udc80", '"\\xe0\\x80\\x80"'),  # overlong
    ("\udcf4\udc90\udc80\udc80", '"\\xf4\\x90\\x80\\x80"'),  # above U+10FFFF
    ("\udcc0\udcaf", '"\\xc0\\xaf"'),
]


@pytest.mark.parametrize(("text", "want"), QUOTE)
def test_quote(text: str, want: str) -> None:
    assert quote(text) == want


def test_quote_is_a_go_literal_for_plain_text() -> None:
    # For strings without escapes Go's %q is just a double-quoted copy.
    for text in ["nomad", "gpu-0", "0000:3b:00.0", "/dev/nvidia0"]:
        assert quote(text) == f'"{text}"'


# ----------------------------------------------------------------------------- file modes

MODES: list[tuple[int, str, str]] = [
    (stat.S_IFREG | 0o644, "-rw-r--r--", "-rw-r--r--"),
    (stat.S_IFREG | 0o777, "-rwxrwxrwx", "-rwxrwxrwx"),
    (stat.S_IFREG | 0o000, "----------", "----------"),
    (stat.S_IFREG | 0o421, "-r---w---x", "-r---w---x"),
    (stat.S_IFDIR | 0o755, "drwxr-xr-x", "-rwxr-xr-x"),
    (stat.S_IFLNK | 0o777, "Lrwxrwxrwx", "-rwxrwxrwx"),
    (stat.S_IFIFO | 0o644, "prw-r--r--", "-rw-r--r--"),
    (stat.S_IFSOCK | 0o755, "Srwxr-xr-x", "-rwxr-xr-x"),
    (stat.S_IFCHR | 0o666, "Dcrw-rw-rw-", "-rw-rw-rw-"),
    (stat.S_IFBLK | 0o660, "Drw-rw----", "-rw-rw----"),
    (stat.S_IFREG | stat.S_ISUID | 0o755, "urwxr-xr-x", "-rwxr-xr-x"),
    (stat.S_IFREG | stat.S_ISGID | 0o755, "grwxr-xr-x", "-rwxr-xr-x"),
    (stat.S_IFREG | stat.S_ISVTX | 0o644, "trw-r--r--", "-rw-r--r--"),
    (stat.S_IFREG | 0o7777, "ugtrwxrwxrwx", "-rwxrwxrwx"),
    (stat.S_IFDIR | stat.S_ISVTX | 0o777, "dtrwxrwxrwx", "-rwxrwxrwx"),
    (stat.S_IFDIR | stat.S_ISGID | 0o775, "dgrwxrwxr-x", "-rwxrwxr-x"),
    (stat.S_IFCHR | stat.S_ISUID | stat.S_ISVTX | 0o600, "Ductrw-------", "-rw-------"),
    (0o070000 | 0o644, "-rw-r--r--", "-rw-r--r--"),  # unknown type: no letter on Linux
    (0o644, "-rw-r--r--", "-rw-r--r--"),
]


@pytest.mark.parametrize(("st_mode", "want", "want_perm"), MODES)
def test_file_mode_string(st_mode: int, want: str, want_perm: str) -> None:
    assert file_mode_string(st_mode) == want
    assert perm_string(st_mode) == want_perm


@pytest.mark.parametrize(
    ("st_mode", "want"),
    [
        (stat.S_IFREG | 0o644, 0o644),
        (stat.S_IFDIR | 0o755, (1 << 31) | 0o755),
        (stat.S_IFLNK | 0o777, (1 << 27) | 0o777),
        (stat.S_IFBLK | 0o600, (1 << 26) | 0o600),
        (stat.S_IFCHR | 0o600, (1 << 26) | (1 << 21) | 0o600),
        (stat.S_IFIFO | 0o600, (1 << 25) | 0o600),
        (stat.S_IFSOCK | 0o600, (1 << 24) | 0o600),
        (stat.S_IFREG | 0o7000, (1 << 23) | (1 << 22) | (1 << 20)),
    ],
)
def test_go_file_mode_bits(st_mode: int, want: int) -> None:
    assert go_file_mode(st_mode) == want


def test_go_file_mode_rejects_negative() -> None:
    with pytest.raises(ValueError):
        go_file_mode(-1)


# ----------------------------------------------------------------------------- times


class Nameless(tzinfo):
    """A fixed zone with no abbreviation, like Go's time.FixedZone("", offset)."""

    def __init__(self, seconds: int) -> None:
        self._offset = timedelta(seconds=seconds)

    def utcoffset(self, dt: datetime | None) -> timedelta:
        return self._offset

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str | None:
        return None


IST = timezone(timedelta(hours=5, minutes=30), "IST")
PLUS0530 = timezone(timedelta(hours=5, minutes=30))
MINUS0330 = timezone(-timedelta(hours=3, minutes=30))
T0 = 1_700_000_000 * SEC  # 2023-11-14 22:13:20 UTC

TIMES: list[tuple[int, tzinfo, str]] = [
    (0, UTC, "1970-01-01 00:00:00 +0000 UTC"),
    (T0, UTC, "2023-11-14 22:13:20 +0000 UTC"),
    (T0 + 123456789, UTC, "2023-11-14 22:13:20.123456789 +0000 UTC"),
    (T0 + 100000000, UTC, "2023-11-14 22:13:20.1 +0000 UTC"),
    (T0 + 1, UTC, "2023-11-14 22:13:20.000000001 +0000 UTC"),
    (T0 + 120000, UTC, "2023-11-14 22:13:20.00012 +0000 UTC"),
    (-1, UTC, "1969-12-31 23:59:59.999999999 +0000 UTC"),
    (-SEC, UTC, "1969-12-31 23:59:59 +0000 UTC"),
    (951_782_400 * SEC, UTC, "2000-02-29 00:00:00 +0000 UTC"),
    (INT64_MAX, UTC, "2262-04-11 23:47:16.854775807 +0000 UTC"),
    (INT64_MIN, UTC, "1677-09-21 00:12:43.145224192 +0000 UTC"),
    (253402300800 * SEC, UTC, "10000-01-01 00:00:00 +0000 UTC"),
    (-62135596800 * SEC, UTC, "0001-01-01 00:00:00 +0000 UTC"),
    (-62135596801 * SEC, UTC, "0000-12-31 23:59:59 +0000 UTC"),
    (-62198755200 * SEC, UTC, "-0001-01-01 00:00:00 +0000 UTC"),
    # Fixed offsets without an abbreviation print the number twice.
    (T0, PLUS0530, "2023-11-15 03:43:20 +0530 +0530"),
    (T0, MINUS0330, "2023-11-14 18:43:20 -0330 -0330"),
    (T0, Nameless(0), "2023-11-14 22:13:20 +0000 +0000"),
    (T0, Nameless(-30), "2023-11-14 22:12:50 +0000 +0000"),
    (T0, Nameless(-90), "2023-11-14 22:11:50 -0001 -0001"),
    (T0, Nameless(19815), "2023-11-15 03:43:35 +0530 +0530"),
    (T0, Nameless(-50400), "2023-11-14 08:13:20 -1400 -1400"),
    (T0, IST, "2023-11-15 03:43:20 +0530 IST"),
    (T0, timezone(timedelta(0), "Z"), "2023-11-14 22:13:20 +0000 Z"),
]


@pytest.mark.parametrize(("ns", "tz", "want"), TIMES)
def test_time_string(ns: int, tz: tzinfo, want: str) -> None:
    assert time_string(ns, tz) == want


NAMED_TIMES: list[tuple[int, str, str]] = [
    (T0, "Asia/Kolkata", "2023-11-15 03:43:20 +0530 IST"),
    (0, "Asia/Kolkata", "1970-01-01 05:30:00 +0530 IST"),
    (-5_000_000_000 * SEC, "Asia/Kolkata", "1811-07-23 21:00:08 +0553 LMT"),
    (-2_500_000_000 * SEC, "Asia/Kolkata", "1890-10-12 00:54:30 +0521 MMT"),
    (T0, "America/New_York", "2023-11-14 17:13:20 -0500 EST"),
    (1_690_000_000 * SEC + 5, "America/New_York", "2023-07-22 00:26:40.000000005 -0400 EDT"),
    (-2_500_000_000 * SEC, "America/New_York", "1890-10-11 14:33:20 -0500 EST"),
    (9_223_372_036 * SEC, "America/New_York", "2262-04-11 19:47:16 -0400 EDT"),
    (T0, "UTC", "2023-11-14 22:13:20 +0000 UTC"),
]


@needs_zoneinfo
@pytest.mark.parametrize(("ns", "zone", "want"), NAMED_TIMES)
def test_time_string_named_zone(ns: int, zone: str, want: str) -> None:
    assert time_string(ns, ZoneInfo(zone)) == want


LOCAL_ZONES: list[tuple[str, str]] = [
    ("", "2023-11-14 22:13:20 +0000 UTC"),
    ("UTC", "2023-11-14 22:13:20 +0000 UTC"),
    (":UTC", "2023-11-14 22:13:20 +0000 UTC"),
    (":", "2023-11-14 22:13:20 +0000 UTC"),
    # Go reads TZif files only: POSIX rule strings and unknown names fall back to UTC.
    ("UTC0", "2023-11-14 22:13:20 +0000 UTC"),
    ("IST-5:30", "2023-11-14 22:13:20 +0000 UTC"),
    ("No/Such_Zone", "2023-11-14 22:13:20 +0000 UTC"),
    ("/nonexistent/zone", "2023-11-14 22:13:20 +0000 UTC"),
]

NAMED_LOCAL_ZONES: list[tuple[str, str]] = [
    ("Asia/Kolkata", "2023-11-15 03:43:20 +0530 IST"),
    (":Asia/Kolkata", "2023-11-15 03:43:20 +0530 IST"),
    ("/usr/share/zoneinfo/Asia/Kolkata", "2023-11-15 03:43:20 +0530 IST"),
    ("America/New_York", "2023-11-14 17:13:20 -0500 EST"),
    ("Etc/GMT-14", "2023-11-15 12:13:20 +1400 +14"),
]


@pytest.mark.parametrize(("tz_env", "want"), LOCAL_ZONES)
def test_time_string_local_zone(monkeypatch: pytest.MonkeyPatch, tz_env: str, want: str) -> None:
    monkeypatch.setenv("TZ", tz_env)
    assert time_string(T0) == want


@needs_zoneinfo
@pytest.mark.parametrize(("tz_env", "want"), NAMED_LOCAL_ZONES)
def test_time_string_local_named_zone(
    monkeypatch: pytest.MonkeyPatch, tz_env: str, want: str
) -> None:
    monkeypatch.setenv("TZ", tz_env)
    assert time_string(T0) == want


def test_time_string_rejects_float() -> None:
    with pytest.raises(TypeError):
        time_string(1.5, UTC)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        time_string(True, UTC)


def test_time_string_of_real_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    target = tmp_path / "f"
    target.write_text("x")
    os.utime(target, ns=(T0 + 5, T0 + 5))
    assert time_string(os.stat(target).st_mtime_ns) == "2023-11-14 22:13:20.000000005 +0000 UTC"


# ----------------------------------------------------------------------------- paths

CLEAN: list[tuple[str, str]] = [
    ("", "."),
    (".", "."),
    ("..", ".."),
    ("/", "/"),
    ("//", "/"),
    ("///", "/"),
    ("//x", "/x"),
    ("//x//y//", "/x/y"),
    ("abc", "abc"),
    ("abc/", "abc"),
    ("abc/def", "abc/def"),
    ("a/b/c", "a/b/c"),
    ("./", "."),
    ("./abc", "abc"),
    ("abc/.", "abc"),
    ("abc/./def", "abc/def"),
    ("/./abc/def/.", "/abc/def"),
    ("abc/..", "."),
    ("abc/../..", ".."),
    ("abc/../../..", "../.."),
    ("a/../b", "b"),
    ("a/../../b", "../b"),
    ("/..", "/"),
    ("/../abc", "/abc"),
    ("/../../abc", "/abc"),
    ("../abc", "../abc"),
    ("../../abc/../def", "../../def"),
    ("abc/def/ghi/../jkl", "abc/def/jkl"),
    ("abc/def/../ghi/../jkl", "abc/jkl"),
    ("abc/./../def", "def"),
    ("abc//./../def", "def"),
    ("abc/../../././../def", "../../def"),
    ("...", "..."),
    ("a/.../b", "a/.../b"),
    (".a/..b/", ".a/..b"),
]


@pytest.mark.parametrize(("path", "want"), CLEAN)
def test_filepath_clean(path: str, want: str) -> None:
    assert filepath_clean(path) == want


JOIN: list[tuple[tuple[str, ...], str]] = [
    ((), ""),
    (("",), ""),
    (("", ""), ""),
    (("a",), "a"),
    (("a", "b"), "a/b"),
    (("a", ""), "a"),
    (("", "b"), "b"),
    (("/", "a"), "/a"),
    (("/", "a/b"), "/a/b"),
    (("/", ""), "/"),
    (("//", "a"), "/a"),
    (("/a", "b"), "/a/b"),
    (("a/", "b"), "a/b"),
    (("a/", ""), "a"),
    (("", "", "a"), "a"),
    (("a", "", "b"), "a/b"),
    (("a", "..", "..", "b"), "../b"),
    (("/a", "/b/"), "/a/b"),
    (("", "/a"), "/a"),
    (("a", "/../b"), "b"),
    (("/var", "run", "./nomad.sock"), "/var/run/nomad.sock"),
]


@pytest.mark.parametrize(("parts", "want"), JOIN)
def test_filepath_join(parts: tuple[str, ...], want: str) -> None:
    assert filepath_join(*parts) == want


@pytest.mark.parametrize(
    ("path", "want"),
    [("/a/../b", "/b"), ("//x/", "/x"), ("/", "/"), ("/a/./b/", "/a/b")],
)
def test_filepath_abs_absolute(path: str, want: str) -> None:
    assert filepath_abs(path) == want


@pytest.fixture
def linked_dir(tmp_path: Path) -> tuple[Path, Path]:
    """A real directory and a symlink to it."""
    real = tmp_path / "real" / "sub"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    return real, link / "sub"


def test_filepath_abs_relative_uses_pwd(
    monkeypatch: pytest.MonkeyPatch, linked_dir: tuple[Path, Path]
) -> None:
    real, via_link = linked_dir
    monkeypatch.chdir(real)
    monkeypatch.setenv("PWD", str(via_link) + "/")
    # $PWD names "." so Go keeps the symlinked spelling (and Join cleans it).
    assert filepath_abs("x/../y") == f"{via_link}/y"
    assert filepath_abs("") == str(via_link)
    assert filepath_abs(".") == str(via_link)
    assert filepath_abs("..") == str(via_link.parent)


@pytest.mark.parametrize("pwd", [None, "relative/dir", "/nonexistent-dir-for-test", "/"])
def test_filepath_abs_ignores_unusable_pwd(
    monkeypatch: pytest.MonkeyPatch, linked_dir: tuple[Path, Path], pwd: str | None
) -> None:
    real, _ = linked_dir
    monkeypatch.chdir(real)
    if pwd is None:
        monkeypatch.delenv("PWD", raising=False)
    else:
        monkeypatch.setenv("PWD", pwd)
    assert filepath_abs("a") == f"{os.getcwd()}/a"


# --------------------------------------------------------------------- proxies

# golang.org/x/net/http/httpproxy: useProxy and the NO_PROXY matchers (cases written
# from its rules, not taken from its tests).
P = "http://p:1"


def _no(value: str) -> dict[str, str]:
    return {"HTTP_PROXY": P, "NO_PROXY": value}


def _no_lower(value: str) -> dict[str, str]:
    return {"HTTP_PROXY": P, "no_proxy": value}


PROXY_CASES = [
    ("http://nomad.example:4646", {"HTTP_PROXY": "proxy:3128"}, "http://proxy:3128"),
    ("http://nomad.example:4646", {"http_proxy": "http://p:1"}, "http://p:1"),
    (
        "http://nomad.example:4646",
        {"HTTP_PROXY": "http://a:1", "http_proxy": "http://b:1"},
        "http://a:1",
    ),
    ("https://nomad.example", {"HTTP_PROXY": "http://p:1"}, None),  # https uses HTTPS_PROXY
    ("https://nomad.example", {"HTTPS_PROXY": "http://p:1"}, "http://p:1"),
    ("http://nomad.example", {"ALL_PROXY": "http://p:1"}, None),  # Go never reads ALL_PROXY
    ("http://127.0.0.1:4646", {"HTTP_PROXY": "http://p:1"}, None),
    ("http://127.9.9.9:4646", {"HTTP_PROXY": "http://p:1"}, None),
    ("http://localhost:4646", {"HTTP_PROXY": "http://p:1"}, None),
    ("http://[::1]:4646", {"HTTP_PROXY": "http://p:1"}, None),
    ("http://[::2]:4646", {"HTTP_PROXY": "http://p:1"}, "http://p:1"),
    ("http://nomad.example", _no("*"), None),
    ("http://nomad.example", _no("example"), None),
    ("http://nomad.example", _no("xample"), "http://p:1"),
    ("http://nomad.example", _no("nomad.example"), None),
    ("http://a.nomad.example", _no_lower("nomad.example"), None),
    (
        "http://nomad.example",
        _no(".nomad.example"),
        "http://p:1",
    ),
    ("http://a.nomad.example", _no("*.nomad.example"), None),
    (
        "http://anomad.example",
        _no("nomad.example"),
        "http://p:1",
    ),
    (
        "http://nomad.example:4646",
        _no("nomad.example:80"),
        "http://p:1",
    ),
    (
        "http://nomad.example:4646",
        _no("nomad.example:4646"),
        None,
    ),
    ("http://10.1.2.3:4646", _no("10.0.0.0/8"), None),
    ("http://10.1.2.3:4646", _no("10.1.2.3"), None),
    ("http://10.1.2.4:4646", _no("10.1.2.3"), "http://p:1"),
    ("http://NOMAD.Example", _no(" Nomad.example "), None),
    ("unix:///run/nomad.sock", {"HTTP_PROXY": "http://p:1"}, None),
]


@pytest.mark.parametrize(("url", "env", "want"), PROXY_CASES)
def test_proxy_rules_are_go_s(url: str, env: dict[str, str], want: str | None) -> None:
    assert proxy_for(url, env) == want


def test_no_proxy_in_cgi() -> None:
    with pytest.raises(ProxyError, match="CGI"):
        proxy_for("http://nomad.example", {"HTTP_PROXY": "http://p:1", "REQUEST_METHOD": "GET"})
