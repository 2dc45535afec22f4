"""Nomad's device attributes: parsing a constraint value, units, comparison.

Mirrors ``plugins/shared/structs/attribute.go`` and ``units.go`` in Nomad:

- ``parse_attribute`` (``ParseAttribute``): a known unit is split off the end
  (longest unit name first) only when the last byte is a letter; then int64,
  float64, bool (Go's ``ParseBool``, so ``t`` and ``1``-like words count), else
  a string;
- ``Attribute.compare`` (``Compare``): values compare only when both have a
  known unit of the same base, or neither has one; two ints compare exactly in
  the base unit (int64 arithmetic, wrapping as Go does, and integer division for
  ``mW``), anything else through 256-bit ``big.Float`` arithmetic, reproduced
  here with exact fractions and the same rounding.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from nomad_device.golang.strconv import parse_bool, parse_float, parse_int

__all__ = ["UNITS", "Attribute", "Unit", "parse_attribute"]

BYTE, BYTE_RATE, HERTZ, WATT = "byte", "byte rate", "hertz", "watt"


@dataclass(frozen=True)
class Unit:
    name: str
    base: str
    multiplier: int
    inverse: bool = False


def _units() -> dict[str, Unit]:
    out: dict[str, Unit] = {}
    for i, prefix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), start=1):
        out[prefix + "B"] = Unit(prefix + "B", BYTE, 1 << (10 * i))
        out[prefix + "B/s"] = Unit(prefix + "B/s", BYTE_RATE, 1 << (10 * i))
    for i, prefix in enumerate(("k", "M", "G", "T", "P", "E"), start=1):
        out[prefix + "B"] = Unit(prefix + "B", BYTE, 1000**i)
        out[prefix + "B/s"] = Unit(prefix + "B/s", BYTE_RATE, 1000**i)
    out["KB"] = Unit("KB", BYTE, 1000)
    out["KB/s"] = Unit("KB/s", BYTE_RATE, 1000)
    out["MHz"] = Unit("MHz", HERTZ, 1000**2)
    out["GHz"] = Unit("GHz", HERTZ, 1000**3)
    out["mW"] = Unit("mW", WATT, 1000, inverse=True)
    out["W"] = Unit("W", WATT, 1)
    out["kW"] = Unit("kW", WATT, 1000)
    out["MW"] = Unit("MW", WATT, 1000**2)
    out["GW"] = Unit("GW", WATT, 1000**3)
    return out


#: Nomad's ``UnitIndex``.
UNITS: Final = _units()
#: Nomad's ``lengthSortedUnits`` (two names of one length never both end a string).
_BY_LENGTH: Final = sorted(UNITS, key=len, reverse=True)
_PREC: Final = 256
#: Go's ``unicode.IsSpace`` (what ``strings.TrimSpace`` cuts).
_GO_SPACE: Final = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_INT64: Final = 1 << 64


def _wrap64(value: int) -> int:
    value %= _INT64
    return value - _INT64 if value >= 1 << 63 else value


def _round(value: Fraction, prec: int = _PREC) -> Fraction:
    """``value`` rounded to ``prec`` significant bits, ties to even (big.Float's default)."""
    if value == 0:
        return value
    sign = -1 if value < 0 else 1
    mag = abs(value)
    exp = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** exp > mag:
        exp -= 1
    # mag in [2**exp, 2**(exp+1)): keep prec bits.
    scale = Fraction(2) ** (prec - 1 - exp)
    scaled = mag * scale
    whole = scaled.numerator // scaled.denominator
    rest = scaled - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2 == 1):
        whole += 1
    return sign * whole / scale


def _last_byte_is_letter(text: str) -> bool:
    """Go's ``unicode.IsLetter(rune(input[len-1]))``: the last *byte*, read as a rune."""
    last = text.encode("utf-8")[-1]
    return unicodedata.category(chr(last)).startswith("L")


class NaNComparison(ValueError):
    """Nomad's scheduler would panic here: ``big.Float.SetFloat64`` refuses NaN."""


@dataclass(frozen=True)
class Attribute:
    """``psstructs.Attribute``: at most one value field is normally set, plus a unit."""

    float_value: float | None = None
    int_value: int | None = None
    string_value: str | None = None
    bool_value: bool | None = None
    unit: str = ""

    @staticmethod
    def of(value: object, unit: str = "") -> Attribute:
        if isinstance(value, bool):
            return Attribute(bool_value=value, unit=unit)
        if isinstance(value, int):
            return Attribute(int_value=value, unit=unit)
        if isinstance(value, float):
            return Attribute(float_value=value, unit=unit)
        return Attribute(string_value=str(value), unit=unit)

    # -- Nomad's accessors --------------------------------------------------------

    def typed_unit(self) -> Unit | None:
        return UNITS.get(self.unit)

    def comparable(self, other: Attribute) -> bool:
        mine, theirs = self.typed_unit(), other.typed_unit()
        if mine is not None and theirs is not None:
            return mine.base == theirs.base
        if (mine is None) != (theirs is None):
            return False
        if self.string_value is not None:
            return other.string_value is not None
        if self.bool_value is not None:
            return other.bool_value is not None
        return True

    def compare(self, other: Attribute) -> int | None:
        """-1/0/1, or None when Nomad says the two do not compare. Two bools give 0
        when equal and 1 otherwise (so ``true > false`` and ``false > true``)."""
        if not self.comparable(other):
            return None
        if self.bool_value is not None:
            if other.bool_value is None:
                return None
            return 0 if self.bool_value == other.bool_value else 1
        if self.string_value is not None:
            if other.string_value is None:
                return None  # Go would dereference nil here; nothing sensible to say
            a, b = self.string_value.encode(), other.string_value.encode()
            return (a > b) - (a < b)
        if self.int_value is not None or self.float_value is not None:
            return self._number_compare(other)
        return None

    def _number_compare(self, other: Attribute) -> int | None:
        if self.int_value is not None and other.int_value is not None:
            a, b = self._base_int(), other._base_int()
            return (a > b) - (a < b)
        a_f, b_f = self._base_float(), other._base_float()
        if a_f is None or b_f is None:
            return None
        return (a_f > b_f) - (a_f < b_f)

    def _base_int(self) -> int:
        assert self.int_value is not None
        value = self.int_value
        unit = self.typed_unit()
        if unit is None:
            return value
        if unit.inverse:
            quotient = abs(value) // unit.multiplier
            return quotient if value >= 0 else -quotient
        return _wrap64(value * unit.multiplier)

    def _base_float(self) -> Fraction | float | None:
        """The value in the base unit as big.Float would hold it (a float only for ±Inf)."""
        if self.int_value is not None:
            value: Fraction | float = Fraction(self.int_value)
        elif self.float_value is not None:
            if math.isnan(self.float_value):
                raise NaNComparison("NaN")
            value = self.float_value if math.isinf(self.float_value) else Fraction(self.float_value)
        else:
            return None
        unit = self.typed_unit()
        if unit is None:
            return value
        multiplier = Fraction(unit.multiplier)
        if unit.inverse:
            multiplier = _round(1 / multiplier)
        if isinstance(value, float):
            return value  # ±Inf times a positive multiplier
        return _round(value * multiplier)

    # -- display --------------------------------------------------------------------

    def kind(self) -> str:
        if self.bool_value is not None:
            return "bool"
        if self.string_value is not None:
            return "string"
        if self.int_value is not None:
            return "int"
        if self.float_value is not None:
            return "float"
        return "empty"

    def text(self) -> str:
        """The value as an operator reads it: ``2 GiB``, ``1.5``, ``"T4"``, ``true``."""
        from nomad_device.golang import quote

        if self.bool_value is not None:
            return "true" if self.bool_value else "false"
        if self.string_value is not None:
            return quote(self.string_value)
        if self.int_value is not None:
            number = str(self.int_value)
        elif self.float_value is not None:
            number = _go_float(self.float_value)
        else:
            return "(no value)"
        return f"{number} {self.unit}" if self.unit else number


def _go_float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def parse_attribute(text: str) -> Attribute:
    """``ParseAttribute``: how Nomad reads a constraint's literal value."""
    if not text:
        return Attribute(string_value=text)
    unit = ""
    numeric = text
    if _last_byte_is_letter(text):
        for name in _BY_LENGTH:
            if text.endswith(name):
                unit = name
                break
        if unit:
            numeric = text[: -len(unit)].strip(_GO_SPACE)
    as_int = parse_int(numeric)
    if as_int is not None:
        return Attribute(int_value=as_int, unit=unit)
    as_float = parse_float(numeric)
    if as_float is not None:
        return Attribute(float_value=as_float, unit=unit)
    as_bool = parse_bool(text)
    if as_bool is not None:
        return Attribute(bool_value=as_bool)
    return Attribute(string_value=text)
