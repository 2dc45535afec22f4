"""The SDK's ports of Go's functions say what Go says: one cross-check for all of them.

``interop/bin/gostd`` (``interop/cmd/gostd``) answers, one request a line, with
what Go's own functions give: durations, ``strconv`` (Quote, ParseInt in base 10
and 0, ParseFloat, ParseBool, with their error texts), ``encoding/json``'s
strings, file modes and times from ``os.Lstat``/``os.Stat``, ``time.Time.String``
in every kind of zone, ``filepath.Join``/``Abs``, hashicorp/go-version (the
version Nomad pins), ``net/http``'s proxy rules, ``regexp`` and ``math/big`` at
256 bits (as Nomad's ``Attribute`` compares). The Python side must give the same
bytes for a corpus of fixed and generated inputs. Nomad itself is never built.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from nomad_device.golang import (
    GoDurationError,
    file_mode_string,
    filepath_abs,
    filepath_join,
    format_duration,
    json_string,
    parse_duration,
    perm_string,
    quote,
    time_string,
)
from nomad_device.golang.proxy import ProxyError, proxy_for
from nomad_device.golang.strconv import (
    float_error,
    int_error,
    parse_bool,
    parse_float,
    parse_int,
)
from nomad_device.golang.version import parse_constraint, parse_version
from nomad_device.placement.attribute import Attribute
from nomad_device.placement.operators import compile_regexp

from .test_golang import (
    DURATION_ERR,
    DURATION_FORMAT,
    DURATION_OK,
    HAVE_ZONEINFO,
    INT64_MAX,
    INT64_MIN,
    JOIN,
    PROXY_CASES,
    QUOTE,
    SEC,
    T0,
    Nameless,
)

pytestmark = [pytest.mark.interop, pytest.mark.slow]

Request = dict[str, Any]
Ask = Callable[..., list[str]]


def _wire_bytes(text: str) -> bytes:
    """Bytes Go should receive for ``text`` (surrogateescape bytes, else WTF-8)."""
    out = bytearray()
    for ch in text:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            out.append(ord(ch) - 0xDC00)
        else:
            out += ch.encode("utf-8", "surrogatepass")
    return bytes(out)


def _b64(text: str) -> str:
    return base64.b64encode(_wire_bytes(text)).decode("ascii")


@pytest.fixture(scope="module")
def go(interop_bin: Path) -> Ask:
    """Ask gostd: the answers (as text) to ``requests``, run with ``env``/``cwd``."""

    def ask(
        requests: Sequence[Request], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> list[str]:
        done = subprocess.run(
            [str(interop_bin / "gostd")],
            input="".join(json.dumps(r) + "\n" for r in requests),
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=110,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == len(requests)
        return [base64.b64decode(line).decode("utf-8", "surrogateescape") for line in lines]

    return ask


def _compare(go: Ask, cases: Sequence[tuple[Request, str]], **how: Any) -> None:
    answers = go([request for request, _ in cases], **how)
    wrong = [
        (request, go_says, mine)
        for (request, mine), go_says in zip(cases, answers, strict=True)
        if go_says != mine
    ]
    assert not wrong, wrong[:10]


# -------------------------------------------------------------- durations, quoting, JSON


def _duration(text: str) -> str:
    try:
        return "V" + str(parse_duration(text))
    except GoDurationError as err:
        return "E" + str(err)


def _duration_inputs() -> list[str]:
    inputs = [text for text, _ in DURATION_OK] + [text for text, _ in DURATION_ERR]
    inputs += [format_duration(ns) for ns, _ in DURATION_FORMAT]
    rng = random.Random(20240601)
    alphabet = ["0", "1", "5", "9", ".", "-", "+", "n", "s", "u", "m", "h", "\u00b5", "x", " "]
    for _ in range(600):
        inputs.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 9))))
    for _ in range(300):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 25)))
        frac = "".join(rng.choice("0123456789") for _ in range(rng.randrange(0, 25)))
        unit = rng.choice(["ns", "us", "\u03bcs", "ms", "s", "m", "h"])
        sign = rng.choice(["", "-", "+"])
        inputs.append(f"{sign}{digits}.{frac}{unit}" if frac else f"{sign}{digits}{unit}")
    return inputs


def _format_inputs() -> list[int]:
    rng = random.Random(77)
    values = [ns for ns, _ in DURATION_FORMAT]
    for _ in range(500):
        magnitude = rng.randrange(1, 64)
        values.append(rng.randrange(-(1 << magnitude), 1 << magnitude))
    return values


def _text_inputs() -> list[str]:
    inputs = [text for text, _ in QUOTE]
    inputs.append("".join(chr(c) for c in range(128)))
    # Every code point once, in chunks, so the whole IsPrint table is compared.
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    inputs += ["".join(map(chr, points[i : i + 8192])) for i in range(0, len(points), 8192)]
    return inputs


def test_durations_quoting_and_json_strings(go: Ask) -> None:
    texts = _text_inputs()
    cases: list[tuple[Request, str]] = []
    cases += [({"op": "duration", "b": _b64(s)}, _duration(s)) for s in _duration_inputs()]
    cases += [({"op": "format", "n": n}, format_duration(n)) for n in _format_inputs()]
    cases += [({"op": "quote", "b": _b64(s)}, quote(s)) for s in texts]
    cases += [({"op": "json", "b": _b64(s)}, json_string(s)) for s in texts]
    cases += [({"op": "join", "parts": list(parts)}, filepath_join(*parts)) for parts, _ in JOIN]
    _compare(go, cases)


# ------------------------------------------------------------------------ times and files

ZONE_NAMES = [
    "UTC",
    "Asia/Kolkata",
    "America/New_York",
    "Europe/Dublin",
    "Australia/Lord_Howe",
    "Asia/Dubai",
    "Pacific/Apia",
    "America/St_Johns",
]
FIXED_OFFSETS = [0, 19800, -12600, -30, -90, 19815, 50400, -50400]
INSTANTS = [
    0,
    -1,
    T0,
    T0 + 123456789,
    T0 + 100000000,
    1_690_000_000 * SEC + 5,
    -2_500_000_000 * SEC,
    -5_000_000_000 * SEC,
    4_102_444_800 * SEC + 1,
    INT64_MAX,
    INT64_MIN,
]
EXTREME_INSTANTS = [
    253402300800 * SEC,
    -62135596801 * SEC,
    -62198755200 * SEC + 7,
    10**12 * SEC,
]


def _time(ns: int, zone: str, fixed: int = 0) -> Request:
    return {"op": "time", "sec": ns // SEC, "nsec": ns % SEC, "zone": zone, "fixed": fixed}


def test_time_strings_in_named_and_fixed_zones(go: Ask) -> None:
    cases: list[tuple[Request, str]] = []
    for ns in INSTANTS + EXTREME_INSTANTS:
        offsets = FIXED_OFFSETS
        cases += [(_time(ns, "", off), time_string(ns, Nameless(off))) for off in offsets]
        zones = (ZONE_NAMES if ns in INSTANTS else ["UTC"]) if HAVE_ZONEINFO else []
        cases += [(_time(ns, zone), time_string(ns, ZoneInfo(zone))) for zone in zones]
    _compare(go, cases)


def _make_files(root: Path) -> Iterator[Path]:
    """Create one file of every kind Go distinguishes and give each a distinct mtime."""
    mtimes = iter(
        [
            T0 + 123456789,
            T0,
            T0 + 100000000,
            -1,
            1_690_000_000 * SEC + 5,
            -2_500_000_000 * SEC,
            4_102_444_800 * SEC + 1,
            0,
            T0 + 7,
            T0 + 8,
            T0 + 9,
            T0 + 10,
        ]
    )

    def touch(path: Path) -> Path:
        stamp = next(mtimes, T0)
        os.utime(path, ns=(stamp, stamp), follow_symlinks=False)
        return path

    for name, mode in [
        ("reg644", 0o644),
        ("reg777", 0o777),
        ("setuid", 0o4755),
        ("setgid", 0o2755),
        ("allbits", 0o7777),
    ]:
        path = root / name
        path.write_text(name)
        path.chmod(mode)
        yield touch(path)
    for name, mode in [("dir", 0o755), ("sticky", 0o1777), ("setgiddir", 0o2775)]:
        path = root / name
        path.mkdir()
        path.chmod(mode)
        yield touch(path)
    fifo = root / "fifo"
    os.mkfifo(fifo, 0o640)
    yield touch(fifo)
    link = root / "link"
    link.symlink_to(root / "reg644")
    yield touch(link)


def _special_files(short_dir: Path) -> list[Path]:
    """Sockets and devices (skipped individually where the host does not allow them)."""
    found: list[Path] = []
    sock_path = short_dir / "sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(sock_path))
        found.append(sock_path)
    except OSError:
        pass
    finally:
        server.close()
    for dev in ["/dev/null", "/dev/loop0", "/dev/sda", "/dev/vda", "/dev/nvme0n1"]:
        if os.path.exists(dev):
            found.append(Path(dev))
    return found


def _describe(st: os.stat_result, *, times: bool) -> str:
    mtime = time_string(st.st_mtime_ns) if times else "?"
    return f"{file_mode_string(st.st_mode)}\t{perm_string(st.st_mode)}\t{mtime}"


TZ_VARIANTS: list[str | None] = ["", "UTC", "UTC0", "IST-5:30", "No/Such_Zone", None]
if HAVE_ZONEINFO:
    TZ_VARIANTS += [
        "Asia/Kolkata",
        ":Asia/Kolkata",
        "/usr/share/zoneinfo/Asia/Kolkata",
        "America/New_York",
    ]


def test_file_modes_and_local_times_under_every_tz(
    go: Ask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = list(_make_files(tmp_path))
    short_dir = Path(tempfile.mkdtemp(prefix="gx", dir="/tmp"))  # a socket path is short
    try:
        paths = [*files, *_special_files(short_dir)]
        local = [*INSTANTS, *EXTREME_INSTANTS[:2]]
        for tz in TZ_VARIANTS:
            env = {k: v for k, v in os.environ.items() if k != "TZ"}
            if tz is None:
                monkeypatch.delenv("TZ", raising=False)
            else:
                env["TZ"] = tz
                monkeypatch.setenv("TZ", tz)
            cases = [(_time(ns, "Local"), time_string(ns), True) for ns in local]
            for path in paths:
                times = not str(path).startswith("/dev/")  # a device's are the node's
                mine = "\n".join(
                    _describe(st, times=times) for st in (os.lstat(path), os.stat(path))
                )
                cases.append(({"op": "stat", "s": str(path)}, mine, times))
            answers = go([request for request, _, _ in cases], env=env)
            for (request, mine, times), go_says in zip(cases, answers, strict=True):
                if not times:
                    go_says = "\n".join(
                        "\t".join([*line.split("\t")[:2], "?"]) for line in go_says.split("\n")
                    )
                assert go_says == mine, (tz, request)
    finally:
        shutil.rmtree(short_dir, ignore_errors=True)


def test_filepath_abs_from_a_directory_reached_through_a_link(
    go: Ask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real" / "sub"
    real.mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(tmp_path / "real")
    inputs = ["", ".", "..", "a", "a/../b", "./x/", "../../q", "/abs//p/..", "//x"]
    for pwd in [f"{tmp_path}/lnk/sub", f"{tmp_path}/lnk/sub/", "/", "not/absolute"]:
        monkeypatch.chdir(real)
        monkeypatch.setenv("PWD", pwd)
        cases = [({"op": "abs", "s": p}, filepath_abs(p)) for p in inputs]
        _compare(go, cases, env={**os.environ, "PWD": pwd}, cwd=real)


# ---------------------------------------------------------------------------- strconv


def _float_answer(text: str) -> str:
    value = parse_float(text)
    if value is None:
        return float_error(text)
    if value != value:
        return "NaN"
    return struct.pack(">d", value).hex()


def _words() -> list[str]:
    rng = random.Random(20261201)
    alphabet = "0123456789+-._eExXpPaAfFnNiItTyYbBoO "
    fixed = ["1_000", "0x1p-2", "1e400", "-1e-400", "+Inf", "nan", "+nan", "Infinity"]
    fixed += ["infinity", "0x1.8p1", "1__0", "_1", "1_", "0x_1p0", "0b101", "0o17", "1e1_0"]
    fixed += ["9223372036854775807", "9223372036854775808", "-9223372036854775808"]
    fixed += ["-9223372036854775809", "18446744073709551616x", "0x8000000000000000"]
    fixed += ["00012", "1.", ".5", ".", "e5", "1e", "0x", "0xp1", "", "0", "-0", "0_7", "08"]
    fixed += ["0x_1f", "0b", "0o", "0B11", "0O7_7", "+0x1F", "-0b1", "1" * 5000, "1e" + "9" * 5000]
    fixed += ["0x1p" + "9" * 5000, "true", "T", "FALSE", "tRuE", "1", "f", "yes"]
    return fixed + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(1500)
    ]


def test_strconv_values_and_errors(go: Ask) -> None:
    cases: list[tuple[Request, str]] = []
    for w in _words():
        for base in (10, 0):
            value = parse_int(w, base)
            mine = int_error(w, base) if value is None else str(value)
            cases.append(({"op": "int", "s": w, "base": base}, mine))
        cases.append(({"op": "float", "s": w}, _float_answer(w)))
        b = parse_bool(w)
        mine = f"strconv.ParseBool: parsing {quote(w)}: invalid syntax" if b is None else ""
        cases.append(({"op": "bool", "s": w}, mine or str(b).lower()))
    _compare(go, cases)


# ------------------------------------------------------------------ go-version, proxies


def _versions() -> list[Request]:
    rng = random.Random(20261202)
    segs = ["0", "1", "2", "10", "01"]
    pres = ["", "-alpha", "-alpha.1", "-1", "beta", "-rc.10", "-x-y", "+meta", "-a+b", "~x"]
    versions = ["v1.2", "1.2.3.4", "1", "1.x", "1..2", " 1.2", "1.2 ", "1." + "9" * 5000]
    for _ in range(250):
        versions.append(
            ".".join(rng.choice(segs) for _ in range(rng.randint(1, 4))) + rng.choice(pres)
        )
    ops = ["", "=", "!=", ">", "<", ">=", "<=", "~>", "=>"]
    out: list[Request] = []
    for v in versions:
        out.append({"op": "semverparse", "s": v})
        out.append({"op": "vcmp", "s": v, "t": rng.choice(versions)})
        pad = [" ", ""]
        cons = ",".join(
            f"{rng.choice(pad)}{rng.choice(ops)}{rng.choice(pad)}{rng.choice(versions).strip()}"
            for _ in range(rng.randint(1, 2))
        )
        out.append({"op": "version", "s": v, "t": cons})
    return out


def _version_answer(r: Request) -> str:
    if r["op"] == "semverparse":
        return "ok" if parse_version(r["s"], strict=True) is not None else "ERR"
    a = parse_version(r["s"])
    if r["op"] == "vcmp":
        b = parse_version(r["t"])
        return "ERRV" if a is None or b is None else str(a.compare(b))
    if a is None:
        return "ERRV"
    c = parse_constraint(r["t"], semver=False)
    return "ERRC" if c is None else str(c.check(a)).lower()


def _proxy_answer(url: str, env: dict[str, str]) -> str:
    try:
        return proxy_for(url, env) or ""
    except ProxyError:
        return "ERR"


def test_go_version_and_proxy_rules(go: Ask) -> None:
    cases = [(r, _version_answer(r)) for r in _versions()]
    proxies = [(url, env) for url, env, _ in PROXY_CASES if not url.startswith("unix:")]
    proxies.append(("http://nomad.example", {"HTTP_PROXY": "http://p:1", "REQUEST_METHOD": "GET"}))
    cases += [
        ({"op": "proxy", "s": url, "env": env}, _proxy_answer(url, env)) for url, env in proxies
    ]
    _compare(go, cases)


# ------------------------------------------------------------- Nomad's values, in Go


_UNITS = {(1000, True): "mW", (1, False): "W", (1000, False): "kW", (1 << 20, False): "MiB"}


def _big_cmp(a: dict[str, Any], b: dict[str, Any]) -> str:
    def attr(side: dict[str, Any]) -> Attribute:
        unit = _UNITS[(int(side["m"]), bool(side["inv"]))]
        if side.get("i") is not None:
            # force the big.Float path: an int against a float never takes intComparator
            return Attribute(int_value=int(side["i"]), unit=unit)
        return Attribute(float_value=float(side["f"]), unit=unit)

    fa, fb = attr(a)._base_float(), attr(b)._base_float()
    assert fa is not None and fb is not None
    left, right = Fraction(fa), Fraction(fb)
    return str((left > right) - (left < right))


def _regexp(pattern: str, text: str) -> str:
    try:
        compiled = compile_regexp(pattern)
    except ValueError:
        return "ERR"
    return str(compiled.search(text) is not None).lower()  # type: ignore[attr-defined]


def test_attribute_comparisons_and_regexps(go: Ask) -> None:
    rng = random.Random(20261203)
    cases: list[tuple[Request, str]] = []
    for _ in range(300):

        def side() -> dict[str, Any]:
            m, inv = rng.choice(list(_UNITS))
            if rng.random() < 0.5:
                return {"i": rng.randint(-(10**6), 10**6), "m": m, "inv": inv}
            base = rng.choice([1.5, 0.003, 2.0, 1e-3, 123.456, -0.5, 1 / 3])
            return {"f": base * rng.randint(1, 2000), "m": m, "inv": inv}

        a = side()
        b = side() if rng.random() < 0.7 else dict(a)
        if "f" in a and "f" in b:
            b = {"i": rng.randint(1, 5000), "m": b["m"], "inv": b["inv"]}
        cases.append(({"op": "big", "a": a, "c": b}, _big_cmp(a, b)))
    patterns = ["^T4$", r"T\d", "(?i)tesla", "a|b", "[[:alpha:]]+", r"\pL", "(?=x)", r"(a)\1"]
    patterns += ["x{1001}", "(?P<n>a)", "(?<n>a)", r"\z", r"\Z", r"\C", "[a-", "a**", r"\Qa.b\E"]
    patterns.append("(?U)a+")
    for p in patterns:
        for text in ("T4", "tesla-V100", "a.b", "", "xyz", "ab"):
            cases.append(({"op": "regexp", "s": p, "t": text}, _regexp(p, text)))
    _compare(go, cases)
