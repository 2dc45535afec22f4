"""Go's ``strconv.ParseInt(s, 10, 64)``, ``ParseFloat(s, 64)`` and ``ParseBool``.

Nomad parses every constraint value with these (``psstructs.ParseAttribute``),
and Python's ``int()``/``float()`` accept more than Go does (spaces, Unicode
digits, ``+nan``, ``1_0`` in ``int``) and less (hex floats, ``1_000.5`` is fine in
both but ``0x1p-2`` only in Go). A value Go refuses stays a string in Nomad, so
the difference decides placements.
"""

from __future__ import annotations

import math
import re
from typing import Final

from nomad_device.golang import parse_bool

__all__ = ["parse_bool", "parse_float", "parse_int"]

INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1

_INT_RE: Final = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)
_DEC_RE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<mant>[0-9_]*(?:\.[0-9_]*)?)(?:[eE](?P<exp>[+-]?[0-9][0-9_]*))?\Z",
    re.ASCII,
)
_HEX_RE: Final = re.compile(
    r"(?P<sign>[+-]?)0[xX](?P<mant>[0-9A-Fa-f_]*(?:\.[0-9A-Fa-f_]*)?)"
    r"[pP](?P<exp>[+-]?[0-9][0-9_]*)\Z",
    re.ASCII,
)


def parse_int(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``; None where Go returns an error."""
    if not _INT_RE.match(text):
        return None
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else None


def _underscore_ok(s: str) -> bool:
    """Go's rule: an underscore only between digits (a base prefix counts as one)."""
    if s[:1] in ("+", "-"):
        s = s[1:]
    saw = "^"
    i = 0
    hexa = False
    if len(s) >= 2 and s[0] == "0" and s[1].lower() in "box":
        i = 2
        saw = "0"
        hexa = s[1].lower() == "x"
    while i < len(s):
        c = s[i]
        if "0" <= c <= "9" or (hexa and "a" <= c.lower() <= "f"):
            saw = "0"
        elif c == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
        i += 1
    return saw != "_"


def _special(text: str) -> float | None:
    sign = 1.0
    body = text
    if body[:1] in ("+", "-"):
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
        if body.lower() in ("inf", "infinity"):
            return math.copysign(math.inf, sign)
        return None
    if body.lower() in ("inf", "infinity"):
        return math.inf
    if body.lower() == "nan":
        return math.nan
    return None


def parse_float(text: str) -> float | None:
    """``strconv.ParseFloat(text, 64)``; None where Go returns an error (also on
    overflow, where Go returns ±Inf *and* an error)."""
    if not text:
        return None
    special = _special(text)
    if special is not None:
        return special
    hexa = _HEX_RE.match(text) if len(text) > 2 else None
    if hexa is not None and len(text) - len(hexa.group("sign")) > 2:
        mant = hexa.group("mant")
        if not any(c not in "._" for c in mant):
            return None
        if not _underscore_ok(text):
            return None
        digits = mant.replace("_", "")
        exp = hexa.group("exp").replace("_", "")
        try:
            value = float.fromhex(f"{hexa.group('sign')}0x{digits or '0'}p{exp}")
        except OverflowError:
            return None
        return value
    dec = _DEC_RE.match(text)
    if dec is None:
        return None
    mant = dec.group("mant")
    if not any("0" <= c <= "9" for c in mant):
        return None
    if ("_" in text) and not _underscore_ok(text):
        return None
    cleaned = dec.group("sign") + mant.replace("_", "")
    if dec.group("exp") is not None:
        exp = int(dec.group("exp").replace("_", ""))
        # Go caps the exponent it reads at 10000; beyond that the value is 0 or Inf anyway.
        exp = max(-20000, min(20000, exp))
        cleaned += f"e{exp}"
    value = float(cleaned)
    if math.isinf(value):
        return None  # ErrRange
    return value
