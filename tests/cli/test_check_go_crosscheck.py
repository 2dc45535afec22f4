"""Cross-check the checker's Go re-implementations against Go itself.

A small Go program (written for this test) answers, line by line, what Go's
``strconv.ParseInt``/``ParseFloat``/``ParseBool``, ``math/big`` at 256 bits
(as Nomad's ``Attribute.getBigFloat`` uses it), ``regexp`` and
hashicorp/go-version (the version Nomad pins) say for generated inputs; the
Python side must say the same. Nomad itself is not built or imported.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from nomad_device.placement.attribute import Attribute
from nomad_device.placement.gostrconv import parse_bool, parse_float, parse_int
from nomad_device.placement.operators import compile_regexp
from nomad_device.placement.version import parse_constraint, parse_version

pytestmark = pytest.mark.slow

_CHECKER = r"""
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"regexp"
	"strconv"

	version "github.com/hashicorp/go-version"
)

type side struct {
	I   *int64   `json:"i"`
	F   *float64 `json:"f"`
	M   int64    `json:"m"`
	Inv bool     `json:"inv"`
}

type req struct {
	Op string `json:"op"`
	S  string `json:"s"`
	T  string `json:"t"`
	A  side   `json:"a"`
	B  side   `json:"b"`
}

func big256(s side) *big.Float {
	f := new(big.Float)
	f.SetPrec(256)
	if s.I != nil {
		f.SetInt64(*s.I)
	} else {
		f.SetFloat64(*s.F)
	}
	if s.M == 0 {
		return f
	}
	m := new(big.Float)
	m.SetPrec(256)
	m.SetInt64(s.M)
	if s.Inv {
		one := big.NewFloat(1.0)
		one.SetPrec(256)
		m = m.Quo(one, m)
	}
	return f.Mul(f, m)
}

func answer(r req) string {
	switch r.Op {
	case "int":
		v, err := strconv.ParseInt(r.S, 10, 64)
		if err != nil {
			return "ERR"
		}
		return strconv.FormatInt(v, 10)
	case "float":
		v, err := strconv.ParseFloat(r.S, 64)
		if err != nil {
			return "ERR"
		}
		if math.IsNaN(v) {
			return "NaN"
		}
		return fmt.Sprintf("%016x", math.Float64bits(v))
	case "bool":
		v, err := strconv.ParseBool(r.S)
		if err != nil {
			return "ERR"
		}
		return strconv.FormatBool(v)
	case "big":
		return strconv.Itoa(big256(r.A).Cmp(big256(r.B)))
	case "regexp":
		re, err := regexp.Compile(r.S)
		if err != nil {
			return "ERR"
		}
		return strconv.FormatBool(re.MatchString(r.T))
	case "version":
		v, err := version.NewVersion(r.S)
		if err != nil {
			return "ERRV"
		}
		c, err := version.NewConstraint(r.T)
		if err != nil {
			return "ERRC"
		}
		return strconv.FormatBool(c.Check(v))
	case "vcmp":
		a, err := version.NewVersion(r.S)
		if err != nil {
			return "ERRV"
		}
		b, err := version.NewVersion(r.T)
		if err != nil {
			return "ERRV"
		}
		return strconv.Itoa(a.Compare(b))
	case "semverparse":
		if _, err := version.NewSemver(r.S); err != nil {
			return "ERR"
		}
		return "ok"
	}
	return "?"
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	for in.Scan() {
		var r req
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			fmt.Println("BAD", err)
			continue
		}
		fmt.Println(answer(r))
	}
}
"""


def _float_bits(value: float) -> str:
    """The float64's bits as Go's ``%016x`` of ``math.Float64bits`` prints them."""
    if value != value:
        return "NaN"
    return struct.pack(">d", value).hex()


def _python_answer(case: dict[str, object]) -> str:
    op = case["op"]
    s = str(case.get("s", ""))
    t = str(case.get("t", ""))
    if op == "int":
        v = parse_int(s)
        return "ERR" if v is None else str(v)
    if op == "float":
        f = parse_float(s)
        return "ERR" if f is None else _float_bits(f)
    if op == "bool":
        b = parse_bool(s)
        return "ERR" if b is None else str(b).lower()
    if op == "big":
        return str(_big_cmp(case["a"], case["b"]))  # type: ignore[arg-type]
    if op == "regexp":
        try:
            pattern = compile_regexp(s)
        except ValueError:
            return "ERR"
        return str(pattern.search(t) is not None).lower()  # type: ignore[attr-defined]
    if op == "version":
        v = parse_version(s)
        if v is None:
            return "ERRV"
        c = parse_constraint(t, semver=False)
        if c is None:
            return "ERRC"
        return str(c.check(v)).lower()
    if op == "vcmp":
        a, b = parse_version(s), parse_version(t)
        if a is None or b is None:
            return "ERRV"
        return str(a.compare(b))
    if op == "semverparse":
        return "ok" if parse_version(s, strict=True) is not None else "ERR"
    raise AssertionError(op)


_UNITS = {(1000, True): "mW", (1, False): "W", (1000, False): "kW", (1 << 20, False): "MiB"}


def _big_cmp(a: dict[str, object], b: dict[str, object]) -> int:
    def attr(side: dict[str, object]) -> Attribute:
        unit = _UNITS[(int(side["m"]), bool(side["inv"]))]  # type: ignore[call-overload]
        if side.get("i") is not None:
            # force the big.Float path: an int against a float never takes intComparator
            return Attribute(int_value=int(side["i"]), unit=unit)  # type: ignore[call-overload]
        return Attribute(float_value=float(side["f"]), unit=unit)  # type: ignore[arg-type]

    left, right = attr(a), attr(b)
    fa, fb = left._base_float(), right._base_float()
    assert fa is not None and fb is not None
    fa, fb = Fraction(fa), Fraction(fb)
    return (fa > fb) - (fa < fb)


def _cases() -> list[dict[str, object]]:
    rng = random.Random(20261201)
    alphabet = "0123456789+-._eExXpPaAfFnNiItTyY "
    cases: list[dict[str, object]] = []
    fixed = ["1_000", "0x1p-2", "1e400", "-1e-400", "+Inf", "nan", "+nan", "Infinity", "infinity"]
    fixed += [
        "0x1.8p1",
        "1__0",
        "_1",
        "1_",
        "0x_1p0",
        "0b101",
        "0o17",
        "1e1_0",
        "9223372036854775808",
    ]
    fixed += ["-9223372036854775808", "00012", "1.", ".5", ".", "e5", "1e", "0x", "0xp1", ""]
    fixed += ["true", "T", "FALSE", "tRuE", "1", "0", "f", "yes"]
    words = fixed + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(600)
    ]
    for w in words:
        cases += [{"op": "int", "s": w}, {"op": "float", "s": w}, {"op": "bool", "s": w}]
    for _ in range(300):

        def side() -> dict[str, object]:
            m, inv = rng.choice(list(_UNITS))
            if rng.random() < 0.5:
                return {"i": rng.randint(-(10**6), 10**6), "m": m, "inv": inv}
            return {
                "f": rng.choice([1.5, 0.003, 2.0, 1e-3, 123.456, -0.5, 1 / 3])
                * rng.randint(1, 2000),
                "m": m,
                "inv": inv,
            }

        a = side()
        b = dict(a)
        if rng.random() < 0.7:
            b = side()
        if "f" in a and "f" in b:
            b = {"i": rng.randint(1, 5000), "m": b["m"], "inv": b["inv"]}
        cases.append({"op": "big", "a": a, "b": b})
    patterns = [
        "^T4$",
        r"T\d",
        "(?i)tesla",
        "a|b",
        "[[:alpha:]]+",
        r"\pL",
        "(?=x)",
        r"(a)\1",
        "x{1001}",
    ]
    patterns += ["(?P<n>a)", "(?<n>a)", r"\z", r"\Z", r"\C", "[a-", "a**", r"\Qa.b\E", "(?U)a+"]
    for p in patterns:
        for text in ("T4", "tesla-V100", "a.b", "", "xyz", "ab"):
            cases.append({"op": "regexp", "s": p, "t": text})
    segs = ["0", "1", "2", "10", "01"]
    pres = ["", "-alpha", "-alpha.1", "-1", "beta", "-rc.10", "-x-y", "+meta", "-a+b", "~x"]
    versions = ["v1.2", "1.2.3.4", "1", "1.x", "1..2", " 1.2", "1.2 "]
    for _ in range(250):
        versions.append(
            ".".join(rng.choice(segs) for _ in range(rng.randint(1, 4))) + rng.choice(pres)
        )
    ops = ["", "=", "!=", ">", "<", ">=", "<=", "~>", "=>"]
    for v in versions:
        cases.append({"op": "semverparse", "s": v})
        other = rng.choice(versions)
        cases.append({"op": "vcmp", "s": v, "t": other})
        pad = [" ", ""]
        cons = ",".join(
            f"{rng.choice(pad)}{rng.choice(ops)}{rng.choice(pad)}{rng.choice(versions).strip()}"
            for _ in range(rng.randint(1, 2))
        )
        cases.append({"op": "version", "s": v, "t": cons})
    return cases


def test_go_semantics_match(tmp_path: Path) -> None:
    go = shutil.which("go")
    if go is None:
        if os.environ.get("CI") == "true":
            pytest.fail("go is required in CI for the Go cross-check")
        pytest.skip("go is not installed")
    version = os.environ.get("NOMAD_DEVICE_GO_VERSION_MODULE", "v1.9.0")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off", "GOTOOLCHAIN": "local"}
    (tmp_path / "main.go").write_text(_CHECKER)

    def run(*args: str) -> None:
        subprocess.run([go, *args], cwd=tmp_path, env=env, check=True, capture_output=True)

    try:
        run("mod", "init", "checkcross")
        run("get", f"github.com/hashicorp/go-version@{version}")
        run("build", "-o", "checkcross", ".")
    except subprocess.CalledProcessError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"cannot build the Go checker: {exc.stderr.decode()[-300:]}")
    cases = _cases()
    result = subprocess.run(
        [str(tmp_path / "checkcross")],
        input="\n".join(json.dumps(c) for c in cases) + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    answers = result.stdout.splitlines()
    assert len(answers) == len(cases)
    mismatches = [
        (case, go_says, _python_answer(case))
        for case, go_says in zip(cases, answers, strict=True)
        if _python_answer(case) != go_says
    ]
    assert not mismatches, mismatches[:20]
