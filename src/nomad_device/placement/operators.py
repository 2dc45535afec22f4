"""Constraint and affinity operators on devices, as Nomad's scheduler evaluates them.

Mirrors ``resolveDeviceTarget`` and ``checkAttributeConstraint`` in Nomad's
``scheduler/feasible/feasible.go``:

- a target that does not start with ``${`` is a literal, read by
  ``ParseAttribute`` (so ``"4 GiB"`` is a number with a unit and ``"t"`` a bool);
- ``${device.vendor}``, ``${device.type}``, ``${device.model}`` (the group
  name) and ``${device.ids}`` (every instance ID, healthy or not, joined with
  commas) are strings; ``${device.attr.X}`` is the attribute or *missing*; any
  other ``${...}`` is missing;
- missing values: ``!=``/``not`` is true when exactly one side is set and false
  when neither is; ``is_not_set`` is true when the left is missing; every other
  operator is false.

Every check also says *why* it is false, for the explanation.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from nomad_device.golang.version import parse_constraint, parse_version
from nomad_device.placement.attribute import Attribute, NaNComparison, parse_attribute

if TYPE_CHECKING:
    from nomad_device.placement.model import NodeDevices

__all__ = [
    "AFFINITY_OPERATORS",
    "CONSTRAINT_OPERATORS",
    "Target",
    "compile_regexp",
    "evaluate",
    "resolve",
]

CONSTRAINT_OPERATORS: Final = (
    "=",
    "==",
    "is",
    "!=",
    "not",
    "<",
    "<=",
    ">",
    ">=",
    "version",
    "semver",
    "regexp",
    "set_contains",
    "set_contains_all",
    "set_contains_any",
    "is_set",
    "is_not_set",
)
#: ``Affinity.Validate`` knows neither ``is_set`` nor ``is_not_set``.
AFFINITY_OPERATORS: Final = CONSTRAINT_OPERATORS[:-2]
_BYTE_ESCAPE: Final = re.compile(r"(?<!\\)(?:\\\\)*\\C")
_ORDER: Final = frozenset({"<", "<=", ">", ">=", "=", "==", "is"})


@dataclass(frozen=True)
class Target:
    """One side of a constraint, resolved against a device group."""

    text: str
    value: Attribute | None
    found: bool
    #: What the side names on the device (``memory``, ``model``); None for a literal.
    label: str | None = None
    #: For a missing attribute: the group's attributes, to suggest one.
    known: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.label is None:
            return self.value.text() if self.value is not None else self.text
        if not self.found:
            if self.text.startswith("${device.attr."):
                return f"{self.label} is not set{_suggestion(self.label, self.known)}"
            return f"{self.text} is not a device value Nomad knows (it is always missing)"
        assert self.value is not None
        return f"{self.label} = {self.value.text()}"


def resolve(target: str, device: NodeDevices) -> Target:
    """``resolveDeviceTarget``."""
    if not target.startswith("${"):
        return Target(target, parse_attribute(target), True)
    simple = {
        "${device.model}": ("model", device.name),
        "${device.vendor}": ("vendor", device.vendor),
        "${device.type}": ("type", device.type),
    }
    if target == "${device.ids}":
        ids = ",".join(i.id for i in device.instances)
        return Target(target, Attribute(string_value=ids), True, "ids")
    if target in simple:
        label, value = simple[target]
        return Target(target, Attribute(string_value=value), True, label)
    if target.startswith("${device.attr."):
        name = target.removeprefix("${device.attr.").removesuffix("}")
        attr = device.attributes.get(name)
        if attr is None:
            return Target(target, None, False, name, tuple(device.attributes))
        return Target(target, attr, True, name)
    return Target(target, None, False, target)


def _suggestion(name: str, known: tuple[str, ...]) -> str:
    """``; did you mean "subsystem"?``, or the attributes the group has."""
    if not known:
        return " (the group has no attributes)"
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if near:
        return f' (did you mean "{near[0]}"?)'
    names = sorted(known)
    shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
    return f" (the group has {shown})"


def compile_regexp(pattern: str) -> object:
    """Compile with RE2, the syntax and semantics of Go's ``regexp``; raises ValueError."""
    try:
        import re2
    except ImportError:
        from nomad_device.placement.jobspec import CLI_EXTRA_HINT

        raise ValueError(
            f"regexp constraints need google-re2 (Go's regexp syntax): {CLI_EXTRA_HINT}"
        ) from None
    if _BYTE_ESCAPE.search(pattern):
        # RE2 takes \C (any byte); Go's regexp/syntax does not.
        raise ValueError("invalid escape sequence: `\\C`")
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise ValueError(str(detail)) from None


def _unit_word(attr: Attribute) -> str:
    unit = attr.typed_unit()
    return f"{unit.name} ({unit.base})" if unit is not None else "no unit"


def incomparable(a: Attribute, b: Attribute) -> str:
    """Why Nomad's ``Attribute.Compare`` refuses the pair."""
    ua, ub = a.typed_unit(), b.typed_unit()
    if ua is not None and ub is not None:
        return f"{ua.name} is {ua.base} and {ub.name} is {ub.base}"
    if (ua is None) != (ub is None):
        return f"one has a unit and the other none ({_unit_word(a)} vs {_unit_word(b)})"
    return f"a {a.kind()} and a {b.kind()} do not compare"


def _sides(left: Target, right: Target) -> str:
    parts = [s.describe() for s in (left, right) if s.label is not None]
    return "; ".join(parts) if parts else f"{left.describe()} vs {right.describe()}"


def _strings(op: str, left: Target, right: Target) -> tuple[str, str] | str:
    assert left.value is not None and right.value is not None
    for side in (left, right):
        assert side.value is not None
        if side.value.string_value is None:
            name = side.describe()
            return f"{op} compares strings, and {name} is a {side.value.kind()}"
    assert left.value.string_value is not None and right.value.string_value is not None
    return left.value.string_value, right.value.string_value


def _set(text: str) -> set[str]:
    return {part.strip(_GO_SPACE) for part in text.split(",")}


_GO_SPACE: Final = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def evaluate(op: str, left: Target, right: Target) -> tuple[bool, str]:
    """``checkAttributeConstraint``: the verdict and, when false, why."""
    lf, rf = left.found, right.found
    if op in ("distinct_hosts", "distinct_property"):
        return True, ""
    if op in ("!=", "not"):
        if not (lf or rf):
            return False, "neither side is set"
        if lf != rf:
            return True, ""
        return _compared(op, left, right)
    if op in _ORDER:
        if not (lf and rf):
            return False, _missing(left, right)
        return _compared(op, left, right)
    if op == "is_set":
        return (True, "") if lf else (False, left.describe())
    if op == "is_not_set":
        return (True, "") if not lf else (False, left.describe())
    if op not in CONSTRAINT_OPERATORS:
        return False, f"{op!r} is not an operator Nomad knows"
    if not (lf and rf):
        return False, _missing(left, right)
    assert left.value is not None and right.value is not None
    if op in ("version", "semver"):
        return _version(op, left, right)
    pair = _strings(op, left, right)
    if isinstance(pair, str):
        return False, pair
    lhs, rhs = pair
    if op == "regexp":
        try:
            pattern = compile_regexp(rhs)
        except ValueError as exc:
            return False, f"the regexp does not compile: {exc}"
        if pattern.search(lhs) is not None:  # type: ignore[attr-defined]
            return True, ""
        return False, _sides(left, right)
    have = _set(lhs)
    wanted = [part.strip(_GO_SPACE) for part in rhs.split(",")]
    if op in ("set_contains", "set_contains_all"):
        missing = [w for w in wanted if w not in have]
        if not missing:
            return True, ""
        return False, f"{_sides(left, right)}: lacks {', '.join(_q(m) for m in missing)}"
    if any(w in have for w in wanted):
        return True, ""
    return False, f"{_sides(left, right)}: has none of them"


def _q(text: str) -> str:
    from nomad_device.golang import quote

    return quote(text)


def _missing(left: Target, right: Target) -> str:
    return "; ".join(s.describe() for s in (left, right) if not s.found)


def _compared(op: str, left: Target, right: Target) -> tuple[bool, str]:
    assert left.value is not None and right.value is not None
    try:
        result = left.value.compare(right.value)
    except NaNComparison:
        return False, (
            f"{_sides(left, right)}: NaN does not compare (Nomad's scheduler would panic in "
            "math/big here)"
        )
    if result is None:
        return False, (
            f"{_sides(left, right)} does not compare with "
            f"{(right if left.label is not None else left).describe()}: "
            f"{incomparable(left.value, right.value)}"
        )
    ok = {
        "=": result == 0,
        "==": result == 0,
        "is": result == 0,
        "!=": result != 0,
        "not": result != 0,
        "<": result == -1,
        "<=": result != 1,
        ">": result == 1,
        ">=": result != -1,
    }[op]
    return ok, "" if ok else _sides(left, right)


def _version(op: str, left: Target, right: Target) -> tuple[bool, str]:
    assert left.value is not None and right.value is not None
    if left.value.string_value is not None:
        text = left.value.string_value
    elif left.value.int_value is not None:
        text = str(left.value.int_value)
    else:
        return False, f"{op} needs a string or an integer on the left: {left.describe()}"
    version = parse_version(text)
    if version is None:
        return False, f"{left.describe()} is not a version go-version can read"
    if right.value.string_value is None:
        return False, f"{op} needs a string constraint, and {right.describe()} is not one"
    constraint = parse_constraint(right.value.string_value, semver=op == "semver")
    if constraint is None:
        return False, f"{right.describe()} is not a valid {op} constraint"
    if constraint.check(version):
        return True, ""
    return False, _sides(left, right)
