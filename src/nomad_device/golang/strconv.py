"""Go's ``strconv.ParseInt``, ``ParseFloat`` and ``ParseBool``, and their error texts.

Nomad parses every constraint value with these (``psstructs.ParseAttribute``),
and HCL 1 reads an agent file's numbers with them; Python's ``int()`` and
``float()`` accept more than Go does (spaces, Unicode digits, ``+nan``, ``1_0``)
and less (hex floats such as ``0x1p-2``). A value Go refuses stays a string in
Nomad, so the difference decides placements. The parsers return None where Go
returns an error; :func:`int_error` and :func:`float_error` give that error's
text, as an agent prints it.
"""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = ["float_error", "int_error", "parse_bool", "parse_float", "parse_int"]

_U64: Final = 1 << 64
_SYNTAX: Final = "invalid syntax"
_RANGE: Final = "value out of range"

_DEC_RE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<mant>[0-9_]*(?:\.[0-9_]*)?)(?:[eE](?P<exp>[+-]?[0-9][0-9_]*))?\Z",
    re.ASCII,
)
_HEX_RE: Final = re.compile(
    r"(?P<sign>[+-]?)0[xX](?P<mant>[0-9A-Fa-f_]*(?:\.[0-9A-Fa-f_]*)?)"
    r"[pP](?P<exp>[+-]?[0-9][0-9_]*)\Z",
    re.ASCII,
)
_SPECIAL: Final = re.compile(r"(?:([+-]?)(inf|infinity)|(nan))\Z", re.IGNORECASE)
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _underscore_ok(s: str) -> bool:
    """Go's rule: an underscore only between digits (a base prefix counts as one)."""
    s = s[1:] if s[:1] in ("+", "-") else s
    digit = "[0-9a-fA-F]" if s[:2].lower() == "0x" else "[0-9]"
    if s[:2].lower() in ("0b", "0o", "0x"):
        s = "0" + s[2:]
    return re.search(f"(?<!{digit})_|_(?!{digit})", s) is None


def _uint(s: str, base: int) -> int | str:
    """``ParseUint(s, base, 64)``: the value, or Go's reason. Stops at the first digit
    that overflows, as Go does (so a long number is never converted whole)."""
    if not s:
        return _SYNTAX
    base0 = base == 0
    s0 = s
    if base0:
        base = 10
        if s[0] == "0":
            if len(s) >= 3 and s[1].lower() in "box":
                base = {"b": 2, "o": 8, "x": 16}[s[1].lower()]
                s = s[2:]
            else:
                base = 8
                s = s[1:]
    n = 0
    underscores = False
    for c in s:
        if c == "_" and base0:
            underscores = True
            continue
        if "0" <= c <= "9":
            d = ord(c) - 48
        elif c.isascii() and c.isalpha():
            d = ord(c.lower()) - 87
        else:
            return _SYNTAX
        if d >= base:
            return _SYNTAX
        n = n * base + d
        if n >= _U64:
            return _RANGE
    if underscores and not _underscore_ok(s0):
        return _SYNTAX
    return n


def _int(text: str, base: int) -> int | str:
    if not text:
        return _SYNTAX
    negative = text[0] == "-"
    unsigned = _uint(text[1:] if text[0] in "+-" else text, base)
    if unsigned == _SYNTAX:
        return _SYNTAX
    if isinstance(unsigned, str):
        unsigned = _U64 - 1
    if unsigned >= (1 << 63) + negative:
        return _RANGE
    return -unsigned if negative else unsigned


def parse_int(text: str, base: int = 10) -> int | None:
    """``strconv.ParseInt(text, base, 64)`` for base 10 or 0 (prefixes, underscores);
    None where Go returns an error."""
    value = _int(text, base)
    return None if isinstance(value, str) else value


def int_error(text: str, base: int = 10) -> str:
    """Go's error for a ``ParseInt`` that :func:`parse_int` refused."""
    from nomad_device.golang import quote

    reason = _int(text, base)
    return f"strconv.ParseInt: parsing {quote(text)}: {reason}"


def _special(text: str) -> float | None:
    m = _SPECIAL.match(text)
    if m is None:
        return None
    return math.nan if m.group(3) else -math.inf if m.group(1) == "-" else math.inf


def _exponent(text: str) -> int:
    """An exponent's value, capped: Go stops reading it at 10000, where the value is
    0 or Inf anyway (and Python would not convert thousands of digits)."""
    digits = text.lstrip("+-").replace("_", "").lstrip("0")
    value = int(digits) if 0 < len(digits) < 6 else 20000 if digits else 0
    return -value if text.startswith("-") else value


def _float(text: str) -> float | str:
    if not text:
        return _SYNTAX
    special = _special(text)
    if special is not None:
        return special
    hexa = _HEX_RE.match(text) if len(text) > 2 else None
    if hexa is not None and len(text) - len(hexa.group("sign")) > 2:
        mant = hexa.group("mant")
        if not any(c not in "._" for c in mant) or not _underscore_ok(text):
            return _SYNTAX
        digits = mant.replace("_", "")
        exp = _exponent(hexa.group("exp"))
        try:
            return float.fromhex(f"{hexa.group('sign')}0x{digits or '0'}p{exp}")
        except OverflowError:
            return _RANGE
    dec = _DEC_RE.match(text)
    if dec is None:
        return _SYNTAX
    mant = dec.group("mant")
    if not any("0" <= c <= "9" for c in mant):
        return _SYNTAX
    if "_" in text and not _underscore_ok(text):
        return _SYNTAX
    cleaned = dec.group("sign") + mant.replace("_", "")
    if dec.group("exp") is not None:
        cleaned += f"e{_exponent(dec.group('exp'))}"
    value = float(cleaned)
    return _RANGE if math.isinf(value) else value


def parse_float(text: str) -> float | None:
    """``strconv.ParseFloat(text, 64)``; None where Go returns an error (also on
    overflow, where Go returns ±Inf *and* an error)."""
    value = _float(text)
    return None if isinstance(value, str) else value


def float_error(text: str) -> str:
    """Go's error for a ``ParseFloat`` that :func:`parse_float` refused."""
    from nomad_device.golang import quote

    return f"strconv.ParseFloat: parsing {quote(text)}: {_float(text)}"


def parse_bool(text: str) -> bool | None:
    """``strconv.ParseBool``; None where Go returns an error."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None
