"""go-cty's msgpack encoder, for :func:`nomad_device.wire.cty.marshal`.

Hosts and tests encode (playing Nomad's part); a plugin only decodes. So the
encoder and the 512-bit number arithmetic it needs live here, imported by
``cty.marshal`` and ``cty.concrete_type`` on first use rather than by every
plugin launch. Call those two; nothing here is public.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Final, TypeAlias, cast

from nomad_device.golang import quote as go_quote
from nomad_device.wire.cty import (
    _MAX_DECIMAL_DIGITS,
    BOOL,
    DYNAMIC,
    NUMBER,
    STRING,
    CtyEncodeError,
    CtyType,
    List,
    Map,
    Object,
    Path,
    Set,
    Tuple,
    _Collection,
    _expected,
    _infer,
    _py_kind,
    type_to_json,
)

if TYPE_CHECKING:
    from fractions import Fraction  # imported where used, as in cty

# ------------------------------------------------------------------ numbers
#
# go-cty keeps numbers as math/big floats: int64s exactly, everything parsed from text
# rounded to a 512-bit mantissa. The helpers below reproduce that arithmetic (including
# how big.ParseFloat scales by powers of five) and big.Float's decimal formatting, so
# that encoded numbers are byte-identical.

_PREC: Final = 512
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_MAX_DECIMAL_EXPONENT: Final = 20_000


class _Num:
    """A finite cty number: ``(-1)**neg * mant * 2**exp`` with ``mant >= 0``."""

    __slots__ = ("exp", "mant", "neg")

    def __init__(self, neg: bool, mant: int, exp: int) -> None:
        self.neg = neg
        self.mant = mant
        self.exp = exp

    def fraction(self) -> Fraction:
        from fractions import Fraction

        value = (
            Fraction(self.mant << self.exp)
            if self.exp >= 0
            else Fraction(self.mant, 1 << -self.exp)
        )
        return -value if self.neg else value


_Number: TypeAlias = _Num | float  # float only for +/-inf


def _round_quotient(num: int, den: int, exp2: int, bits: int) -> tuple[int, int]:
    """Round ``num / den * 2**exp2`` (positive) to ``bits`` bits, ties to even."""
    e = num.bit_length() - den.bit_length()
    if (num >= den << e) if e >= 0 else (num << -e >= den):
        e += 1
    shift = bits - e
    if shift >= 0:
        n2, d2 = num << shift, den
    else:
        n2, d2 = num, den << -shift
    m, r = divmod(n2, d2)
    if 2 * r > d2 or (2 * r == d2 and m & 1):
        m += 1
    return m, exp2 - shift


def _pow5(k: int) -> tuple[int, int]:
    """5**k as big.ParseFloat computes it: exact up to 5**27, then by rounded squaring."""
    if k <= 27:
        return 5**k, 0
    z, ze = 5**27, 0
    f, fe = 5, 0
    n = k - 27
    while n > 0:
        if n & 1:
            z, ze = _round_quotient(z * f, 1, ze + fe, _PREC + 64)
        f, fe = _round_quotient(f * f, 1, fe + fe, _PREC + 128)
        n >>= 1
    return z, ze


def _num_from_decimal(neg: bool, digits: int, exp10: int) -> _Num:
    """The value ``big.ParseFloat(text, 10, 512, ToNearestEven)`` yields for digits*10**exp10."""
    if digits == 0:
        return _Num(neg, 0, 0)
    if exp10 == 0:
        m, e = _round_quotient(digits, 1, 0, _PREC)
    elif exp10 < 0:
        pm, pe = _pow5(-exp10)
        m, e = _round_quotient(digits, pm, exp10 - pe, _PREC)
    else:
        pm, pe = _pow5(exp10)
        m, e = _round_quotient(digits * pm, 1, exp10 + pe, _PREC)
    return _Num(neg, m, e)


def _to_number(value: object, path: Path) -> _Number:
    """Map a Python number to the value go-cty would hold for it."""
    from decimal import Decimal
    from fractions import Fraction

    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | Fraction):
        raise CtyEncodeError(path, f"expected number, got {_py_kind(value)}")
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return _Num(value < 0, abs(value), 0)
        m, e = _round_quotient(abs(value), 1, 0, _PREC)
        return _Num(value < 0, m, e)
    if isinstance(value, Fraction):
        if value == 0:
            return _Num(False, 0, 0)
        m, e = _round_quotient(abs(value.numerator), value.denominator, 0, _PREC)
        return _Num(value < 0, m, e)
    if isinstance(value, float):
        if math.isnan(value):
            raise CtyEncodeError(path, "NaN is not a number cty can hold")
        if math.isinf(value):
            return value
        value = Decimal(repr(value))
    if value.is_nan():
        raise CtyEncodeError(path, "NaN is not a number cty can hold")
    if value.is_infinite():
        return float(value)
    sign, digit_tuple, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    if len(digit_tuple) > _MAX_DECIMAL_DIGITS or abs(value.adjusted()) > _MAX_DECIMAL_EXPONENT:
        raise CtyEncodeError(path, f"number {value} is too long or too large to encode")
    digits = int("".join(map(str, digit_tuple)) or "0")
    return _num_from_decimal(bool(sign), digits, exponent)


def _num_is_int(n: _Num) -> bool:
    return n.exp >= 0 or n.mant & ((1 << -n.exp) - 1) == 0


def _num_int64(n: _Num) -> int | None:
    if n.mant == 0:
        return 0
    if not _num_is_int(n) or n.mant.bit_length() + n.exp > 64:
        return None
    v = n.mant << n.exp if n.exp >= 0 else n.mant >> -n.exp
    v = -v if n.neg else v
    return v if _INT64_MIN <= v <= _INT64_MAX else None


def _num_exact_float(n: _Num) -> float | None:
    top = n.mant.bit_length() + n.exp
    if top > 1024 or top < -1080:
        return None
    from fractions import Fraction

    q = n.fraction()
    f = float(q)
    return f if Fraction(f) == q else None


def _int_to_str(n: int) -> str:
    """``str(n)`` without CPython's digit limit for huge ints."""
    if n.bit_length() < 10_000:
        return str(n)
    half = int(n.bit_length() * 0.30103) // 2
    hi, lo = divmod(n, 10**half)
    return _int_to_str(hi) + _int_to_str(lo).zfill(half)


# A decimal is (digits without trailing zeros, exp): value = 0.digits * 10**exp, as in
# math/big's decimal type. The operations mirror its rounding rules exactly.
_Dec: TypeAlias = tuple[str, int]


def _dec_of(mant: int, exp2: int) -> _Dec:
    if mant == 0:
        return "", 0
    if exp2 >= 0:
        s = _int_to_str(mant << exp2)
        dexp = len(s)
    else:
        s = _int_to_str(mant * 5**-exp2)
        dexp = len(s) + exp2
    s = s.rstrip("0")
    return s, dexp


def _dec_at(d: _Dec, i: int) -> str:
    return d[0][i] if 0 <= i < len(d[0]) else "0"


def _dec_round_down(d: _Dec, n: int) -> _Dec:
    if n < 0 or n >= len(d[0]):
        return d
    mant = d[0][:n].rstrip("0")
    return mant, d[1] if mant else 0


def _dec_round_up(d: _Dec, n: int) -> _Dec:
    mant, exp = d
    if n < 0 or n >= len(mant):
        return d
    while n > 0 and mant[n - 1] >= "9":
        n -= 1
    if n == 0:
        return "1", exp + 1
    return mant[: n - 1] + chr(ord(mant[n - 1]) + 1), exp


def _dec_round(d: _Dec, n: int) -> _Dec:
    mant = d[0]
    if n < 0 or n >= len(mant):
        return d
    if mant[n] == "5" and n + 1 == len(mant):
        up = n > 0 and (ord(mant[n - 1]) - ord("0")) & 1 != 0
    else:
        up = mant[n] >= "5"
    return _dec_round_up(d, n) if up else _dec_round_down(d, n)


def _dec_shortest(d: _Dec, n: _Num) -> _Dec:
    """Fewest digits that still read back as ``n`` at 512-bit precision."""
    if not d[0]:
        return d
    shift = n.mant.bit_length() - (_PREC + 1)
    mant = n.mant >> shift if shift > 0 else n.mant << -shift
    exp2 = n.exp + shift
    lower = _dec_of(mant - 1, exp2)
    upper = _dec_of(mant + 1, exp2)
    inclusive = mant & 2 == 0
    for i, m in enumerate(d[0]):
        lo, up = _dec_at(lower, i), _dec_at(upper, i)
        okdown = lo != m or (inclusive and i + 1 == len(lower[0]))
        okup = m != up and (inclusive or chr(ord(m) + 1) < up or i + 1 < len(upper[0]))
        if okdown and okup:
            return _dec_round(d, i + 1)
        if okdown:
            return _dec_round_down(d, i + 1)
        if okup:
            return _dec_round_up(d, i + 1)
    return d


def _fmt_f(d: _Dec, prec: int) -> str:
    mant, exp = d
    head = mant[:exp] + "0" * (exp - min(len(mant), exp)) if exp > 0 else "0"
    if prec > 0:
        return head + "." + "".join(_dec_at(d, exp + i) for i in range(prec))
    return head


def _fmt_e(d: _Dec, prec: int) -> str:
    mant, exp = d
    out = mant[0] if mant else "0"
    if prec > 0:
        frac = mant[1 : prec + 1]
        out += "." + frac + "0" * (prec - len(frac))
    e10 = exp - 1 if mant else 0
    return f"{out}e{'-' if e10 < 0 else '+'}{abs(e10):02d}"


def _text_shortest(n: _Num) -> str:
    """``big.Float.Text('f', -1)`` for a 512-bit value."""
    d = _dec_shortest(_dec_of(n.mant, n.exp), n)
    return ("-" if n.neg else "") + _fmt_f(d, max(len(d[0]) - d[1], 0))


def _text_g10(n: _Number) -> str:
    """``big.Float.String()`` (``%.10g``), which cty hashes numbers in sets with."""
    if isinstance(n, float):
        return "+Inf" if n > 0 else "-Inf"
    d = _dec_round(_dec_of(n.mant, n.exp), 10)
    sign = "-" if n.neg else ""
    eprec = 10
    if eprec > len(d[0]) and len(d[0]) >= d[1]:
        eprec = len(d[0])
    if d[1] - 1 < -4 or d[1] - 1 >= eprec:
        return sign + _fmt_e(d, min(10, len(d[0])) - 1)
    prec = len(d[0]) if d[1] < 10 else 10
    return sign + _fmt_f(d, max(prec - d[1], 0))


def _wire_number(n: _Number) -> int | float | str:
    """What go-cty writes for a number: compact int, float64, or decimal text."""
    if isinstance(n, float):
        return n
    as_int = _num_int64(n)
    if as_int is not None:
        return as_int
    if not _num_is_int(n):
        as_float = _num_exact_float(n)
        if as_float is not None:
            return as_float
    return _text_shortest(n)


def _number_sort_key(n: _Number) -> Fraction | float:
    return n if isinstance(n, float) else n.fraction()


def concrete_type(value: object, ty: CtyType) -> CtyType:
    """What :func:`nomad_device.wire.cty.concrete_type` returns."""
    return _concrete(value, ty, ())


def _concrete(value: object, ty: CtyType, path: Path) -> CtyType:
    if value is None:
        return ty
    if ty is DYNAMIC:
        return _infer(value, path)
    if isinstance(ty, _Collection):
        items: list[tuple[str | int, object]]
        if isinstance(ty, Map) and isinstance(value, Mapping):
            items = [(str(k), v) for k, v in value.items()]
        elif not isinstance(ty, Map) and isinstance(value, list | tuple | set | frozenset):
            items = list(enumerate(value))
        else:
            return ty
        etys = {_concrete(v, ty.elem, (*path, k)) for k, v in items if v is not None}
        if len(etys) > 1:
            raise CtyEncodeError(path, f"elements of this {ty._kind} have different types")
        return type(ty)(etys.pop()) if etys else ty
    if isinstance(ty, Object) and isinstance(value, Mapping):
        return Object({k: _concrete(value.get(k), a, (*path, k)) for k, a in ty.attrs.items()})
    if isinstance(ty, Tuple) and isinstance(value, list | tuple) and len(value) == len(ty.elems):
        return Tuple(
            [
                _concrete(v, e, (*path, i))
                for i, (v, e) in enumerate(zip(value, ty.elems, strict=True))
            ]
        )
    return ty


# ------------------------------------------------------------------ marshal


def marshal(value: object, ty: CtyType) -> bytes:
    """What :func:`nomad_device.wire.cty.marshal` returns."""
    tree = _encode(value, ty, ())
    return _pack(tree)


def _pack(tree: object) -> bytes:
    # Imported here: a plugin only decodes (with _Reader below), so the msgpack
    # extension stays out of every launch; hosts and tests encode.
    import msgpack

    return cast(bytes, msgpack.packb(tree, use_bin_type=True))


def _nfc(value: str, path: Path) -> str:
    text = unicodedata.normalize("NFC", value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CtyEncodeError(path, "string is not valid Unicode (lone surrogate)") from None
    return text


def _sequence(value: object, ty: CtyType, path: Path, *, allow_set: bool) -> list[object]:
    kinds: tuple[type, ...] = (list, tuple, set, frozenset) if allow_set else (list, tuple)
    if not isinstance(value, kinds):
        raise CtyEncodeError(path, f"expected {_expected(ty)}, got {_py_kind(value)}")
    return list(cast(Sequence[object], value))


def _mapping(value: object, ty: CtyType, path: Path) -> Mapping[object, object]:
    if not isinstance(value, Mapping):
        raise CtyEncodeError(path, f"expected {_expected(ty)}, got {_py_kind(value)}")
    return cast(Mapping[object, object], value)


def _encode(value: object, ty: CtyType, path: Path) -> object:
    if ty is DYNAMIC:
        if value is None:
            return None
        actual = _infer(value, path)
        return [type_to_json(actual).encode(), _encode(value, actual, path)]
    if value is None:
        return None
    if ty is STRING:
        if not isinstance(value, str):
            raise CtyEncodeError(path, f"expected string, got {_py_kind(value)}")
        return _nfc(value, path)
    if ty is NUMBER:
        return _wire_number(_to_number(value, path))
    if ty is BOOL:
        if not isinstance(value, bool):
            raise CtyEncodeError(path, f"expected bool, got {_py_kind(value)}")
        return value
    if isinstance(ty, List):
        items = _sequence(value, ty, path, allow_set=False)
        return [_encode(v, ty.elem, (*path, i)) for i, v in enumerate(items)]
    if isinstance(ty, Set):
        return [tree for tree, _ in _ordered_set(value, ty, path)]
    if isinstance(ty, Map):
        out: dict[str, object] = {}
        for key, item in _map_items(value, ty, path):
            out[key] = _encode(item, ty.elem, (*path, key))
        return out
    if isinstance(ty, Object):
        return {
            _nfc(name, path): _encode(v, aty, (*path, name))
            for name, aty, v in _object_items(value, ty, path)
        }
    if isinstance(ty, Tuple):
        items = _sequence(value, ty, path, allow_set=False)
        if len(items) != len(ty.elems):
            raise CtyEncodeError(
                path, f"expected a tuple of {len(ty.elems)} elements, got {len(items)}"
            )
        return [
            _encode(v, e, (*path, i)) for i, (v, e) in enumerate(zip(items, ty.elems, strict=True))
        ]
    raise TypeError(f"not a cty type: {ty!r}")


def _map_items(value: object, ty: Map, path: Path) -> list[tuple[str, object]]:
    """Map entries with NFC keys in the sorted order cty iterates maps in."""
    entries: dict[str, object] = {}
    for key, item in _mapping(value, ty, path).items():
        if not isinstance(key, str):
            raise CtyEncodeError(path, f"map keys must be strings, got {_py_kind(key)}")
        entries[_nfc(key, (*path, key))] = item
    return sorted(entries.items())


def _object_items(value: object, ty: Object, path: Path) -> Iterator[tuple[str, CtyType, object]]:
    """Attributes in sorted order; a missing attribute is null, an unknown one an error."""
    given = _mapping(value, ty, path)
    for key in given:
        if key not in ty.attrs:
            raise CtyEncodeError((*path, str(key)), "unexpected attribute for this object type")
    for name, aty in ty.attrs.items():
        yield name, aty, given.get(name)


def _ordered_set(value: object, ty: Set, path: Path) -> list[tuple[object, object]]:
    """Encoded set elements, duplicates dropped, in cty's set iteration order."""
    seen: set[bytes] = set()
    unique: list[tuple[object, object]] = []
    for i, item in enumerate(_sequence(value, ty, path, allow_set=True)):
        tree = _encode(item, ty.elem, (*path, i))
        key = _pack(tree)
        if key not in seen:
            seen.add(key)
            unique.append((tree, item))
    ety = ty.elem
    if ety is STRING:
        unique.sort(key=lambda tv: (1, "") if tv[1] is None else (0, cast(str, tv[0])))
    elif ety is NUMBER:
        from fractions import Fraction

        unique.sort(
            key=lambda tv: (
                (1, Fraction(0))
                if tv[1] is None
                else (0, _number_sort_key(_to_number(tv[1], path)))
            )
        )
    elif ety is BOOL:
        unique.sort(key=lambda tv: (1, False) if tv[1] is None else (0, bool(tv[1])))
    else:
        # No natural order: cty sorts by the bytes it hashes values with (stable sort,
        # so values hashing alike keep their given order, as they share a bucket).
        unique.sort(key=lambda tv: _hash_text(tv[1], ety, path).encode())
    return unique


def _hash_text(value: object, ty: CtyType, path: Path) -> str:
    """The text cty hashes a set element with (``makeSetHashBytes``)."""
    if value is None:
        return "~"
    if ty is DYNAMIC:
        ty = _infer(value, path)
    if ty is NUMBER:
        return _text_g10(_to_number(value, path))
    if ty is BOOL:
        return "T" if value else "F"
    if ty is STRING:
        return go_quote(_nfc(cast(str, value), path))
    if isinstance(ty, Map):
        inner = "".join(
            f"{go_quote(k)}:{_hash_text(v, ty.elem, path)};" for k, v in _map_items(value, ty, path)
        )
        return "{" + inner + "}"
    if isinstance(ty, List):
        items = _sequence(value, ty, path, allow_set=False)
        return "[" + "".join(_hash_text(v, ty.elem, path) + ";" for v in items) + "]"
    if isinstance(ty, Set):
        ordered = _ordered_set(value, ty, path)
        return "[" + "".join(_hash_text(v, ty.elem, path) + ";" for _, v in ordered) + "]"
    if isinstance(ty, Object):
        items3 = _object_items(value, ty, path)
        return "<" + "".join(_hash_text(v, a, path) + ";" for _, a, v in items3) + ">"
    if isinstance(ty, Tuple):
        items = _sequence(value, ty, path, allow_set=False)
        return (
            "<"
            + "".join(_hash_text(v, e, path) + ";" for v, e in zip(items, ty.elems, strict=True))
            + ">"
        )
    raise TypeError(f"not a cty type: {ty!r}")
