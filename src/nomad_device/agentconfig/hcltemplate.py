"""HCL 2 template expressions, evaluated as a Nomad agent evaluates plugin config.

The agent reads each JSON string of a plugin's config as an HCL 2 template,
with HCL's standard functions (the 15 of Nomad's ``GetStdlibFuncs``) and no
variables. This module evaluates the part of that language whose result it can
give exactly as go-cty would: literals, tuples and objects, those functions,
``!``, unary ``-``, ``+ - * / %``, ``&&``, ``||``, ``==``, ``!=``,
comparisons, ``c ? a : b``, indexing and attributes. Anything else raises
:class:`Unsupported` (the caller refuses the template and says why) rather
than guessing: arithmetic that go-cty would round (it computes in 512-bit
binary: ``0.1 + 0.2``, ``1 / 3``), ``%`` of fractions, splats, ``for``,
template directives, and the few characters whose case mapping or grapheme
clusters need Unicode tables Python does not carry (``ß``, combining marks,
flags).

What the agent itself reports, this reports too (:class:`EvalErrors`, HCL's
summaries): like HCL, evaluation goes on after an error with an unknown value
of the type HCL would give, so every diagnostic the agent shows is found, and
the attribute's own type check still sees that type. Variables never get
here: the decoder refuses them first, in the agent's words.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Final, cast

from nomad_device.agentconfig.ctyconvert import (
    TV,
    UNKNOWN,
    ConversionError,
    friendly,
    go_quote,
    number_text,
    unify,
)
from nomad_device.agentconfig.ctyfuncs import (
    FUNCTIONS,
    MAX_EXPONENT,
    EvalError,
    Unsupported,
    convert,
    number,
)
from nomad_device.hclexpr import Construct, EscapeError, Node, ParseError, parse, unescape, walk
from nomad_device.wire import cty

__all__ = [
    "FUNCTIONS",
    "EvalError",
    "EvalErrors",
    "Unparsable",
    "Unsupported",
    "evaluate",
]


class Unparsable(Unsupported):
    """Text that is no HCL expression: the agent reports a syntax error there."""


def _string_literal(body: str) -> str:
    if "${" in body.replace("$${", "") or "%{" in body.replace("%%{", ""):
        raise Unsupported("a template inside a quoted string")
    try:
        text = unescape(body)
    except EscapeError as exc:
        raise EvalError("Invalid escape sequence", f"{exc}.") from None
    # cty keeps every string in NFC, as the agent's values are.
    return unicodedata.normalize("NFC", text.replace("$${", "${").replace("%%{", "%{"))


_LITERALS: Final = {
    "true": (True, cty.BOOL),
    "false": (False, cty.BOOL),
    "null": (None, cty.DYNAMIC),
}


def _literal(node: Node) -> TV:
    """A literal leaf's value; Unsupported or EvalError where the agent would differ."""
    kind, _, text = node[:3]
    if kind == "number":
        return number(Decimal(str(text))), cty.NUMBER
    if kind in ("string", "key"):
        return (_string_literal(str(text)) if kind == "string" else text), cty.STRING
    if text not in _LITERALS:
        raise Unsupported(f"the name {text!r}")  # the decoder reports variables first
    return _LITERALS[str(text)]


def _expression(text: str) -> Node:
    """One interpolation's tree (:mod:`nomad_device.hclexpr`), its literals checked
    first, as HCL reads them before it evaluates anything."""
    try:
        tree = parse(text, comments=False)
    except Construct as exc:
        raise Unsupported(exc.problem) from None
    except ParseError as exc:
        raise Unparsable(exc.problem) from None
    for node, _ in walk(tree):
        if node[0] in ("number", "string", "name"):
            _literal(node)
    return tree


# --------------------------------------------------------------- evaluation


class EvalErrors(Exception):
    """Every diagnostic the agent reports for one template, in its order, and the
    value HCL makes of it all the same (often unknown, but of a known type, which
    the attribute's own type check still sees)."""

    def __init__(self, errors: Sequence[EvalError], value: TV) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = list(errors)
        self.value = value


def evaluate(parts: Sequence[tuple[str, str]]) -> TV:
    """A template's value: its parts as ``hcldec._template_parts`` splits them.

    A lone interpolation gives its value as it is (HCL unwraps it); text with
    interpolations gives a string. Raises :class:`EvalErrors` with all the
    diagnostics the agent would give, :class:`Unsupported` where it declines.
    """
    if any(kind == "directive" for kind, _ in parts):
        raise Unsupported("a template directive (%{...})")
    trees = [(kind, text if kind == "text" else _expression(text)) for kind, text in parts]
    run = _Evaluation()
    if len(trees) == 1 and trees[0][0] == "interp":
        got = run.eval(trees[0][1])  # type: ignore[arg-type]
    else:
        got = run.template(trees)
    if run.errors:
        raise EvalErrors(run.errors, got)
    return got


class _Evaluation:
    """One template's evaluation: like HCL, it goes on after an error, with an
    unknown value in its place, so that every diagnostic the agent gives is found."""

    def __init__(self) -> None:
        self.errors: list[EvalError] = []

    def fail(self, summary: str, detail: str, ty: cty.CtyType = cty.DYNAMIC) -> TV:
        self.errors.append(EvalError(summary, detail))
        return UNKNOWN, ty

    def template(self, trees: Sequence[tuple[str, object]]) -> TV:
        out: list[str] = []
        known = True
        for kind, tree in trees:
            if kind == "text":
                out.append(str(tree))
                continue
            value, ty = self.eval(tree)  # type: ignore[arg-type]
            if value is None:
                self.fail("Invalid template interpolation value", "The expression result is null.")
                continue
            if value is UNKNOWN:
                known = False
                continue
            try:
                text = convert(value, ty, cty.STRING)[0]
            except ConversionError as exc:
                self.fail(
                    "Invalid template interpolation value",
                    f"Cannot include the given value in a string template: {exc}.",
                )
                continue
            if text is UNKNOWN:
                known = False
                continue
            out.append(str(text))
        return ("".join(out) if known else UNKNOWN), cty.STRING

    def eval(self, node: Node) -> TV:
        """A node's value. Attributes and literal keys fail at the first error of a
        traversal as HCL's do: what follows an error is unknown and of any type."""
        kind, _, *rest = node
        if kind == "lit":  # an argument expanded from a tuple (``f(xs...)``)
            return cast(TV, rest[0])
        if kind in ("number", "string", "name", "key"):
            return _literal(node)
        if kind == "tuple":
            items = [self.eval(e) for e in cast(list[Node], rest[0])]
            return [v for v, _ in items], cty.Tuple([t for _, t in items])
        if kind == "object":
            return self.object_cons(cast(list[tuple[Node, Node]], rest[0]))
        if kind == "cond":
            return self.conditional(*cast(list[Node], rest))
        if kind == "index":
            return self.index(self.eval(cast(Node, rest[0])), self.eval(cast(Node, rest[1])))
        if kind == "attr":
            return self.attribute(self.eval(cast(Node, rest[0])), str(rest[1]))
        if kind == "unary":
            return self.unary(str(rest[0]), self.eval(cast(Node, rest[1])))
        if kind == "binary":
            left, right = self.eval(cast(Node, rest[1])), self.eval(cast(Node, rest[2]))
            return self.binary(str(rest[0]), left, right)
        assert kind == "call"
        return self.call(str(rest[0]), cast(list[Node], rest[1]), bool(rest[2]))

    def object_cons(self, pairs: Sequence[tuple[Node, Node]]) -> TV:
        obj: dict[str, object] = {}
        types: dict[str, cty.CtyType] = {}
        known = True
        for key_expr, value_expr in pairs:
            key, key_ty = self.eval(key_expr)
            value = self.eval(value_expr)
            if key is UNKNOWN:
                known = False
                continue
            if key is None or key_ty not in (cty.STRING, cty.NUMBER, cty.BOOL):
                raise Unsupported("an object key that is not a string")
            name = str(convert(key, key_ty, cty.STRING)[0])
            if name in obj:
                raise Unsupported(f"the object key {name!r} given twice")
            obj[name], types[name] = value
        return (obj, cty.Object(types)) if known else (UNKNOWN, cty.DYNAMIC)

    def conditional(self, condition: Node, yes: Node, no: Node) -> TV:
        """``c ? a : b`` in HCL's order: the results' common type, then the condition;
        only the chosen result's own errors count."""
        before = len(self.errors)
        yes_tv = self.eval(yes)
        yes_errors = self.errors[before:]
        del self.errors[before:]
        no_tv = self.eval(no)
        no_errors = self.errors[before:]
        del self.errors[before:]
        types = [yes_tv[1], no_tv[1]]
        if any(ty not in (cty.STRING, cty.NUMBER, cty.BOOL, cty.DYNAMIC) for ty in types):
            raise Unsupported("a conditional with a collection for a result")
        common: cty.CtyType | None
        if yes_tv == (None, cty.DYNAMIC):  # a bare null takes the other side's type
            common = types[1]
        elif no_tv == (None, cty.DYNAMIC):
            common = types[0]
        elif cty.DYNAMIC in types:  # an unknown side leaves the type open
            common = cty.DYNAMIC
        else:
            common = unify(types)
        if common is None:
            return self.fail(
                "Inconsistent conditional result types",
                "The true and false result expressions must have consistent types. The "
                f"'true' value is {friendly(types[0])}, but the 'false' value is "
                f"{friendly(types[1])}.",
            )
        value, ty = self.eval(condition)
        if value is None:
            return self.fail("Null condition", "The condition value is null.", common)
        if value is UNKNOWN:  # either way null, HCL knows that much
            both_null = yes_tv[0] is None and no_tv[0] is None
            return (None if both_null else UNKNOWN), common
        try:
            chosen = convert(value, ty, cty.BOOL)[0]
        except ConversionError:
            return self.fail(
                "Incorrect condition type", "The condition expression must be of type bool.", common
            )
        self.errors.extend(yes_errors if chosen else no_errors)
        result = yes_tv if chosen else no_tv
        return convert(result[0], result[1], common)

    def index(self, collection: TV, key: TV) -> TV:
        """``c[k]`` as ``hcl.Index`` does it, for the tuples and objects a template makes.

        An unknown collection is still checked by its type, as HCL checks it.
        """
        value, ty = collection
        if value is None:
            detail = "This value is null, so it does not have any indices."
            return self.fail("Attempt to index null value", detail)
        if key[0] is None:
            return self.fail("Invalid index", "Can't use a null value as an indexing key.")
        if cty.DYNAMIC in (ty, key[1]):
            return UNKNOWN, cty.DYNAMIC
        miss = "The given key does not identify an element in this collection value"
        if isinstance(ty, cty.Tuple | cty.Object):
            want = cty.NUMBER if isinstance(ty, cty.Tuple) else cty.STRING
            try:
                at = convert(key[0], key[1], want)[0]
            except ConversionError as exc:
                return self.fail("Invalid index", f"{miss}: {exc}.")
            if at is UNKNOWN:
                return UNKNOWN, cty.DYNAMIC
            if isinstance(ty, cty.Tuple):
                if not isinstance(at, int) or not 0 <= at < len(ty.elems):
                    return self.fail("Invalid index", f"{miss}.")
                elem = ty.elems[at]
            else:
                if str(at) not in ty.attrs:
                    return self.fail("Invalid index", f"{miss}.")
                elem = ty.attrs[str(at)]
            if value is UNKNOWN:
                return UNKNOWN, elem
            if isinstance(value, list) and isinstance(at, int):
                return value[at], elem
            assert isinstance(value, dict)
            return value[str(at)], elem
        if isinstance(ty, cty.List | cty.Map | cty.Set):
            raise Unsupported("indexing a list, map or set")
        return self.fail("Invalid index", "This value does not have any indices.")

    def attribute(self, obj: TV, name: str) -> TV:
        """``o.name`` as ``hcl.GetAttr`` does it (an unknown object checked by its type)."""
        value, ty = obj
        if value is None:
            return self.fail(
                "Attempt to get attribute from null value",
                "This value is null, so it does not have any attributes.",
            )
        if ty is cty.DYNAMIC:
            return UNKNOWN, cty.DYNAMIC
        if isinstance(ty, cty.Object):
            if name not in ty.attrs:
                return self.fail(
                    "Unsupported attribute",
                    f"This object does not have an attribute named {go_quote(name)}.",
                )
            if value is UNKNOWN:
                return UNKNOWN, ty.attrs[name]
            assert isinstance(value, dict)
            return value[name], ty.attrs[name]
        if isinstance(ty, cty.List | cty.Map | cty.Set | cty.Tuple):
            raise Unsupported("an attribute of a collection")
        return self.fail(
            "Unsupported attribute",
            f"Can't access attributes on a primitive-typed value ({friendly(ty)}).",
        )

    def operand(self, got: TV, want: cty.CtyType, side: str) -> object:
        """An operand converted to its parameter type; UNKNOWN (and an error) if it does not."""
        value, ty = got
        try:
            return convert(value, ty, want)[0]
        except ConversionError as exc:
            self.fail("Invalid operand", f"Unsuitable value for {side} operand: {exc}.")
            return UNKNOWN

    def unary(self, op: str, got: TV) -> TV:
        want = cty.BOOL if op == "!" else cty.NUMBER
        value = self.operand(got, want, "unary")
        if value is UNKNOWN:
            return UNKNOWN, want
        if value is None:
            return self.fail(
                "Operation failed", "Error during operation: argument must not be null.", want
            )
        if op == "!":
            return not value, cty.BOOL
        if _is_zero(value):
            return (0 if _negative(value) else -0.0), cty.NUMBER  # go-cty keeps the sign of 0
        if isinstance(value, int):
            return -value, cty.NUMBER
        return cty.normalize_number(-Decimal(number_text(value))), cty.NUMBER

    def binary(self, op: str, left: TV, right: TV) -> TV:
        if op in ("==", "!="):
            return self.equality(op, left, right)
        want = cty.BOOL if op in ("&&", "||") else cty.NUMBER
        result_ty = cty.NUMBER if op in ("+", "-", "*", "/", "%") else cty.BOOL
        a = self.operand(left, want, "left")
        b = self.operand(right, want, "right")
        if a is UNKNOWN or b is UNKNOWN:
            return UNKNOWN, result_ty
        if a is None or b is None:
            return self.fail(
                "Operation failed", "Error during operation: argument must not be null.", result_ty
            )
        if op in ("&&", "||"):
            return (bool(a and b) if op == "&&" else bool(a or b)), cty.BOOL
        return _arithmetic(op, a, b)

    def equality(self, op: str, left: TV, right: TV) -> TV:
        if left[0] is UNKNOWN or right[0] is UNKNOWN:
            return UNKNOWN, cty.BOOL
        for value, ty in (left, right):
            if ty not in (cty.STRING, cty.NUMBER, cty.BOOL) and value is not None:
                raise Unsupported("comparing collections")
        same = left[1] == right[1] and _number_key(left) == _number_key(right)
        if left[0] is None or right[0] is None:
            same = left[0] is None and right[0] is None
        return (same if op == "==" else not same), cty.BOOL

    def call(self, name: str, arg_exprs: Sequence[Node], expand: bool) -> TV:
        """A function call in HCL's order: the name, the count, the arguments and their
        conversion (every error), then nulls, then the function's own checks."""
        function = FUNCTIONS.get(name)
        if function is None:
            return self.fail(
                "Call to unknown function", f"There is no function named {go_quote(name)}."
            )
        exprs: list[Node] = list(arg_exprs)
        if expand:
            last, last_ty = self.eval(arg_exprs[-1])
            if last is UNKNOWN:
                return UNKNOWN, cty.DYNAMIC
            if not isinstance(last_ty, cty.Tuple) or not isinstance(last, list):
                raise Unsupported("expanding (...) anything but a tuple")
            exprs[-1:] = [("lit", 0, tv) for tv in zip(last, last_ty.elems, strict=True)]
        params = function.params
        if len(exprs) < len(params):
            missing = params[len(exprs)][0]
            return self.fail(
                "Not enough function arguments",
                f"Function {go_quote(name)} expects {len(params)} argument(s). Missing value "
                f"for {go_quote(missing)}.",
            )
        if function.var is None and len(exprs) > len(params):
            return self.fail(
                "Too many function arguments",
                f"Function {go_quote(name)} expects only {len(params)} argument(s).",
            )
        before = len(self.errors)
        args: list[TV] = []
        for i, item in enumerate(exprs):
            value, ty = self.eval(item)
            pname, ptype = function.param(i)
            try:
                args.append(convert(value, ty, ptype))
            except ConversionError as exc:
                self.fail(
                    "Invalid function argument",
                    f"Invalid value for {go_quote(pname)} parameter: {exc}.",
                )
        if len(self.errors) > before:
            return UNKNOWN, cty.DYNAMIC
        for i, (value, _) in enumerate(args):
            pname = function.param(i)[0]
            if value is None and not function.allow_null:
                return self.fail(
                    "Invalid function argument",
                    f"Invalid value for {go_quote(pname)} parameter: argument must not be null.",
                )
        try:
            return function.impl(args)
        except EvalError as exc:
            return self.fail(exc.summary, exc.detail)


def _exact(value: object, what: str) -> Fraction:
    """A number whose 512-bit binary form is exactly itself, or Unsupported."""
    number = Fraction(value) if isinstance(value, int) else Fraction(Decimal(number_text(value)))
    if not _fits(number):
        raise Unsupported(
            f"{what} with {number_text(value)}, which go-cty rounds to 512 binary digits"
        )
    return number


def _fits(number: Fraction) -> bool:
    denominator = number.denominator
    if denominator & (denominator - 1):
        return False  # not a binary fraction: 0.1, 1/3
    odd = abs(number.numerator)
    while odd and not odd & 1:
        odd >>= 1
    return odd.bit_length() <= 512


def _number_result(number: Fraction, what: str) -> object:
    """An exact result as the decoder keeps numbers; Unsupported where go-cty would round."""
    if not _fits(number):
        raise Unsupported(f"{what}: its result is rounded by go-cty to 512 binary digits")
    magnitude = abs(number.numerator).bit_length() - number.denominator.bit_length()
    if number and abs(magnitude) > _MAX_BITS:
        raise Unsupported(
            f"{what}: its result is past the launcher's limit (exponents up to {MAX_EXPONENT})"
        )
    if number.denominator == 1:
        return int(number)
    as_float = float(number)
    if Fraction(as_float) != number:
        raise Unsupported(f"{what}: its result has more binary digits than a float64")
    return as_float


#: :data:`MAX_EXPONENT` in binary digits.
_MAX_BITS: Final = int(MAX_EXPONENT * 3.33)


def _is_zero(value: object) -> bool:
    return Decimal(number_text(value)).is_zero()


def _negative(value: object) -> bool:
    """Below zero, or -0 (which go-cty's big.Float keeps, and prints as "-0")."""
    return Decimal(number_text(value)).is_signed()


def _arithmetic(op: str, a: object, b: object) -> TV:
    """A comparison or arithmetic on two numbers, exact or Unsupported."""
    if op in ("<", ">", "<=", ">="):
        x, y = Decimal(number_text(a)), Decimal(number_text(b))
        return {"<": x < y, ">": x > y, "<=": x <= y, ">=": x >= y}[op], cty.BOOL
    what = f"the {op} operator"
    if op == "%":
        return _remainder(a, b, what), cty.NUMBER
    p, q = _exact(a, what), _exact(b, what)
    if op == "/" and q == 0:
        raise Unsupported("a division by zero (go-cty gives an infinity)")
    total = p / q if op == "/" else {"+": p + q, "-": p - q, "*": p * q}[op]
    if total == 0 and (_negative(a) or _negative(b)):
        raise Unsupported(f"{what} with a zero result whose sign go-cty keeps")
    return _number_result(total, what), cty.NUMBER


def _remainder(a: object, b: object, what: str) -> int:
    """go-cty's ``%``: ``a - b * trunc(a / b)`` (the sign of ``a``), ``a`` itself for 0.

    Whole numbers below 2**64 only: there its rounded quotient truncates exactly.
    """
    if not all(isinstance(n, int) and not isinstance(n, bool) and abs(n) < 2**64 for n in (a, b)):
        raise Unsupported(f"{what} with fractions or huge numbers (go-cty rounds their quotient)")
    assert isinstance(a, int) and isinstance(b, int)
    if b == 0:
        return a
    quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return a - b * quotient


def _number_key(got: TV) -> object:
    value, ty = got
    return Decimal(number_text(value)) if ty is cty.NUMBER else value
