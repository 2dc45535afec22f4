"""The SDK decodes agent files exactly as a Nomad v2.0.5 agent does: checked against Go.

``interop/bin/agentcfg`` runs the agent's path on the libraries and versions
Nomad pins (HCL 1 ``v1.0.1-nomad-1``, ``hcl/v2 v2.20.2-nomad-1``, go-cty
``v1.19.0``), fed each plugin's spec as the plugin sends it over the wire
(the ``ConfigSchema`` message). Generated agent files for every ready-made
plugin and the SDK's test plugins go through both; they must agree on
accepting, refusing or crashing, and on the SetConfig bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import ROOT
from support.agentgen import (
    TEMPLATED,
    Case,
    cases,
    declined,
    disagreement,
    python,
    spec_b64,
    template_cases,
)

from nomad_device.host import DevicePluginClient
from nomad_device.wire import hclspec

pytestmark = [pytest.mark.interop, pytest.mark.slow]

PY = sys.executable

#: Every plugin whose schema is checked: the ready-made ones and the SDK's test plugins.
PLUGINS: dict[str, list[str]] = {
    "nomad-device-example": [PY, "-m", "nomad_device.plugins.example"],
    "nomad-device-generic": [PY, "-m", "nomad_device.plugins.generic"],
    "nomad-device-nvidia": [PY, "-m", "nomad_device.plugins.nvidia"],
    "config_plugin": [PY, str(ROOT / "tests/support/plugins/config_plugin.py")],
    "sdk_plugin": [PY, str(ROOT / "tests/support/plugins/sdk_plugin.py")],
    "needs_config": [PY, str(ROOT / "tests/support/plugins/conformance/needs_config.py")],
    "unsafe_schema": [PY, str(ROOT / "tests/support/plugins/conformance/unsafe_schema.py")],
}

#: Generated files per plugin; with the fixed corpus below, a few thousand in all.
EXAMPLES = 400

COMPARED: dict[str, int] = {}

#: How generated cases run: derandomized (CI sees the same files each time), no deadline.
_GENERATED = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def wire_specs() -> dict[str, tuple[Any, hclspec.Spec]]:
    """Each plugin's ConfigSchema message, fetched from the running plugin."""
    out = {}
    for label, command in PLUGINS.items():
        with DevicePluginClient.launch(command, start_timeout=60) as client:
            pb = client.schema_proto()
        out[label] = (pb, hclspec.from_proto(pb))
    return out


@pytest.fixture(scope="module")
def go_agent(interop_bin: Path) -> Iterator[Callable[[Case, Any], dict[str, Any]]]:
    proc = subprocess.Popen(
        [str(interop_bin / "agentcfg")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="surrogateescape",
    )
    assert proc.stdin is not None and proc.stdout is not None

    def ask(case: Case, spec_pb: Any) -> dict[str, Any]:
        request = {"id": "1", "spec": spec_b64(spec_pb), "file": case.text, "plugin": case.label}
        proc.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line, "agentcfg exited"
        answer: dict[str, Any] = json.loads(line)
        return answer

    yield ask
    proc.stdin.close()
    proc.wait(10)


def _check(case: Case, label: str, specs: dict[str, tuple[Any, hclspec.Spec]], go: Any) -> None:
    spec_pb, spec = specs[label]
    py_answer = python(case, spec)
    go_answer = go(case, spec_pb)
    COMPARED[label] = COMPARED.get(label, 0) + 1
    problem = disagreement(py_answer, go_answer)
    assert problem is None, f"{label} ({case.note}):\n{case.text}\n{problem}"


@pytest.mark.parametrize("label", list(PLUGINS))
@_GENERATED
@given(data=st.data())
def test_generated_agent_files_decode_as_in_go(
    label: str, data: st.DataObject, wire_specs: dict[str, tuple[Any, hclspec.Spec]], go_agent: Any
) -> None:
    case = data.draw(cases(wire_specs[label][1], label), label="case")
    _check(case, label, wire_specs, go_agent)


# ------------------------------------------------------------- a fixed corpus

_SERIAL = (
    'device "serial" {\n      usb {\n        vendor_id  = "1a86"\n'
    '        product_id = "7523"\n      }\n    }'
)
_KVM = 'device "kvm" {\n      paths = ["/dev/kvm"]\n      share = 4\n    }'


def _file(label: str, *items: str) -> str:
    inner = "".join(f"    {item}\n" for item in items)
    return f'plugin "{label}" {{\n  config {{\n{inner}  }}\n}}\n'


_G = "nomad-device-generic"
_U = "unsafe_schema"
#: The classes of the issue's corpus, each for the plugin whose schema it concerns:
#: (plugin, file text, the outcome a Nomad v2.0.5 agent gives).
CORPUS: list[tuple[str, str, str]] = [
    (_G, _file(_G, _SERIAL, _KVM), "accept"),
    (_G, _file(_G, _KVM, _SERIAL), "accept"),
    (_G, _file(_G, _KVM, 'device "empty" {}'), "accept"),
    (_G, _file(_G, 'device "a" {\n paths = []\n }', 'device "b" {}', _KVM), "accept"),
    (_G, _file(_G, _SERIAL, _KVM, 'device "p" {\n probe {\n command = ["true"]\n }\n }'), "accept"),
    (
        _G,
        _file(_G, 'device "e" {\n env {\n A = "1"\n }\n attributes {\n x = "1"\n }\n }', _KVM),
        "accept",
    ),
    (_G, _file(_G, 'device "u" {\n usb {}\n usb {}\n group_per_device = true\n }', _KVM), "accept"),
    (_U, _file(_U, 'slot "a" {\n names = ["x"]\n }', 'slot "b" {}'), "panic"),
    (_U, _file(_U, 'slot "b" {}', 'slot "a" {\n names = ["x"]\n }'), "panic"),
    (_U, _file(_U, 'slot "a" {\n names = []\n }', 'slot "b" {}'), "panic"),
    (_U, _file(_U, 'slot "a" {}', 'slot "b" {}', 'slot "c" {\n names = ["x"]\n }'), "panic"),
    (_U, _file(_U, 'slot "a" {\n names = ["x"]\n }', 'slot "b" {\n names = []\n }'), "accept"),
    (_U, _file(_U, 'queue {\n names = ["x"]\n }', "queue {}"), "accept"),
    (
        _G,
        '{"plugin": [{"nomad-device-generic": [{"config": [{"device": '
        '[{"kvm": [{"paths": ["/dev/kvm"], "share": 4}]}]}]}]}]}',
        "accept",
    ),
    (
        _G,
        '{"plugin": {"nomad-device-generic": {"config": {"fingerprint_period": "5s"}}}}',
        "accept",
    ),
    (
        _G,
        '{"plugin": {"nomad-device-generic": {"config": {"device": {"kvm": '
        '{"paths": ["/dev/kvm"], "share": 4}}}}}}',
        "refuse",
    ),
    (_G, _file(_G, _KVM) + _file(_G, 'device "null" {\n paths = ["/dev/null"]\n }'), "accept"),
    (
        _G,
        f'plugin "{_G}" {{\n  config {{\n    fingerprint_period = "1s"\n    {_KVM}\n  }}\n'
        f'  config {{\n    fingerprint_period = "2s"\n    {_SERIAL}\n  }}\n}}\n',
        "accept",
    ),
    (_G, _file(_G, 'device "x" {\n paths = ["${attr.kernel.name}"]\n }'), "refuse"),
    (_G, _file(_G, 'fingerprint_period = "${node.unique.id}"'), "refuse"),
]


@pytest.mark.parametrize(("label", "text", "outcome"), CORPUS)
def test_the_issue_corpus_decodes_as_in_go(
    label: str,
    text: str,
    outcome: str,
    wire_specs: dict[str, tuple[Any, hclspec.Spec]],
    go_agent: Any,
) -> None:
    case = Case(label, text, text.startswith("{"), "corpus")
    _check(case, label, wire_specs, go_agent)
    assert python(case, wire_specs[label][1])["outcome"] == outcome


#: Templates the launcher evaluates (functions, operators, conditionals), each
#: with the outcome a Nomad v2.0.5 agent gives; both sides must agree on bytes or errors.
TEMPLATES: list[tuple[str, str]] = [
    ('label = "${upper("kvm")}"', "accept"),
    ('label = "x${lower("AB")}-${strlen("abc")}"', "accept"),
    ('label = "${substr("abcdef", -2, -1)}${substr("abcdef", -10, 2)}"', "accept"),
    (
        'label = "${substr("abcdef", -2, 0)}${substr("abcdef", 6, 1)}${substr("ab", 1, 9)}"',
        "accept",
    ),
    ('label = "${reverse("añb\\r\\n")}"', "accept"),
    ('label = "${upper("e\\u0301")}${strlen("e\\u0301")}"', "accept"),
    ('label = "${"\\ud800"}"', "refuse"),
    ('label = "${upper("éσ")}${lower("ÉΣ")}"', "accept"),
    ('label = "${coalesce(null, 1)}"', "accept"),
    ('label = "${jsonencode({b = [1.50, "<&>"], a = null, c = true})}"', "accept"),
    ('label = "${jsonencode("a\\tb\\u2028")}"', "accept"),
    ('label = "${true ? "yes" : 1}${"true" ? 1 : 2}"', "accept"),
    ('label = "${1 == "1"}${2 < 3}${"a" != "b"}${!true || false}"', "accept"),
    ('label = "a${1.50}b${true}c${-0.5}"', "accept"),
    ('count = "${max(1, "7", 3)}"', "accept"),
    ('count = "${-7 % 3 + 7 % -3 * 10 + 7 % 0}"', "accept"),
    ('label = "${-0}${jsonencode(-0)}${abs(-0)}${jsondecode("-0")}${-0 == 0}"', "accept"),
    ('count = "${int(-2.7) * 3 + abs(-1)}"', "accept"),
    ('count = "${max([1, 7, 3]...)}"', "accept"),
    ('ratio = "${7 / 2}"', "accept"),
    ('ratio = "${0.5 * 3 - 0.25}"', "accept"),
    ('ratio = "${min(2.25, 10)}"', "accept"),
    ('ratio = "${jsondecode("1.5")}"', "accept"),
    ('count = "${length(concat(["a"], ["b", "c"]))}"', "accept"),
    ('paths = "${concat(["/dev/kvm"], ["/dev/net/tun"])}"', "accept"),
    ('paths = "${jsondecode("[\\"/dev/kvm\\", 1]")}"', "accept"),
    ('paths = "${["a", 1, true]}"', "accept"),
    ('env = "${{"x" = 1, b = true}}"', "accept"),
    ('env = "${jsondecode("{\\"a\\": \\"b\\"}")}"', "accept"),
    ('on = "${hasindex(["a"], 0) && !hasindex(["a"], 1)}"', "accept"),
    ('label = "${null}"', "accept"),
    ('label = "${["a", "b"][1]}${{a = "x"}.a}${[["q"]][0][0]}${["z"].0}"', "accept"),
    ('paths = "${jsondecode("{\\"p\\": [\\"/dev/kvm\\"]}").p}"', "accept"),
    ('label = "${["a"][1 + 1]}"', "refuse"),
    ('label = "${{a = 1}.b}"', "refuse"),
    ('label = "${null[0]}"', "refuse"),
    ('label = "${"s".a}"', "refuse"),
    ('label = "${nope("x")}"', "refuse"),
    ('label = "${nope(upper(null))}"', "refuse"),
    ('label = "${upper(null)}"', "refuse"),
    ('label = "${upper([1])}"', "refuse"),
    ('label = "${upper("a", "b")}"', "refuse"),
    ('label = "${substr("abc", 1)}"', "refuse"),
    ('label = "${substr("abc", 1.5, 1)}"', "refuse"),
    ('label = "${max()}"', "refuse"),
    ('label = "${length("abc")}"', "refuse"),
    ('label = "${length({a = 1})}"', "refuse"),
    ('label = "${coalesce(true, 1)}"', "refuse"),
    ('label = "${coalesce(null, null)}"', "refuse"),
    ('label = "${concat(["a"], 1)}"', "refuse"),
    ('label = "${jsondecode("nope")}"', "refuse"),
    ('label = "a${null}b"', "refuse"),
    ('label = "a${["x"]}b"', "refuse"),
    ('label = "${false ? 1 : true}"', "refuse"),
    ('label = "${null ? 1 : 2}"', "refuse"),
    ('label = "${"x" ? 1 : 2}"', "refuse"),
    ('label = "${concat(["a"], ["b"])}"', "refuse"),
    ('count = "${upper("a")}"', "refuse"),
]


@pytest.mark.parametrize(("body", "outcome"), TEMPLATES)
def test_templates_evaluate_as_in_go(body: str, outcome: str, go_agent: Any) -> None:
    text = f'plugin "templated" {{\n  config {{\n    {body}\n  }}\n}}\n'
    case = Case("templated", text, False, "template")
    py_answer = python(case, TEMPLATED)
    go_answer = go_agent(case, hclspec.to_proto(TEMPLATED))
    COMPARED["templated"] = COMPARED.get("templated", 0) + 1
    problem = disagreement(py_answer, go_answer)
    assert problem is None, f"{body}\n{problem}"
    assert py_answer["outcome"] == outcome, py_answer


DECLINED: list[str] = []


@_GENERATED
@given(case=template_cases(list(TEMPLATED.attributes)))
def test_generated_templates_evaluate_as_in_go(case: Case, go_agent: Any) -> None:
    """Random expressions (functions, operators, conditionals, nested) on every type.

    Where the launcher declines a template it does not reproduce exactly, the
    agent's answer is not compared; every other one must be the agent's.
    """
    py_answer = python(case, TEMPLATED)
    go_answer = go_agent(case, hclspec.to_proto(TEMPLATED))
    COMPARED["templated"] = COMPARED.get("templated", 0) + 1
    if declined(py_answer):
        DECLINED.append(case.note)
        return
    problem = disagreement(py_answer, go_answer)
    assert problem is None, f"{case.note}\n{problem}"


def test_few_generated_templates_are_declined() -> None:
    """The comparison above means little if the launcher declines most templates.

    (It runs after that test, in this module's order, and counts what it declined.)
    """
    print(f"\ngenerated templates declined: {len(DECLINED)} of {EXAMPLES}")
    assert len(DECLINED) < EXAMPLES * 0.25, DECLINED[:10]


def test_the_failing_configs_the_safety_check_prints_crash_go_too(
    wire_specs: dict[str, tuple[Any, hclspec.Spec]], go_agent: Any
) -> None:
    from nomad_device.agentconfig import schemasafety

    for label, (_, spec) in wire_specs.items():
        for hazard in schemasafety.hazards(spec, label):
            answer = go_agent(Case(label, hazard.config, False, "hazard"), wire_specs[label][0])
            assert answer["outcome"] == "panic", (label, hazard.config, answer)
            COMPARED[label] = COMPARED.get(label, 0) + 1


def test_report_how_many_configs_were_compared() -> None:
    """Not a check: prints the count the closing note quotes (run with -s)."""
    total = sum(COMPARED.values())
    print(f"\nagent configs compared with Go: {total} ({COMPARED})")
    assert total > 0 or not COMPARED
