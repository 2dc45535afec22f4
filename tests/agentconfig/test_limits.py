"""The agent-file and template readers on hostile sizes: linear work, clear refusals.

Each input here once took minutes (20,000 ``plugin`` blocks: the unused-key
bookkeeping was quadratic) or ended in a raw traceback (``RecursionError``,
``decimal.Overflow``). Now each is read in linear time or refused with a
message that names the limit; nothing is judged by the wall clock, only by
pytest's generous timeout, which quadratic work at these sizes would exceed
many times over.
"""

from __future__ import annotations

import pytest

from nomad_device.agentconfig import agentfile, setconfig
from nomad_device.agentconfig.ctyfuncs import MAX_EXPONENT
from nomad_device.agentconfig.hcl1 import MAX_NESTING
from nomad_device.hclexpr import MAX_DEPTH
from nomad_device.wire import hclspec as h

SPEC = h.Object(
    {
        "a": h.Attr("a", "any"),
        "label": h.Attr("label", "string"),
        "count": h.Attr("count", "number"),
    }
)


def agent(body: str, label: str = "p") -> str:
    return f'plugin "{label}" {{\n  config {{\n    {body}\n  }}\n}}\n'


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_forty_thousand_plugin_blocks_are_read_in_linear_time() -> None:
    # 2.8 MB: the quadratic reader needed 84 s for half of this, about six minutes of
    # CPU here; the linear one about 20 s, a minute of wall time at a load of 10.
    n = 40_000
    text = "".join(
        f'plugin "nomad-device-{i}" {{\n  config {{\n    dir = "/srv/{i}"\n  }}\n}}\n'
        for i in range(n)
    )
    parsed = agentfile.parse_agent_text(text, "big.hcl")
    assert len(parsed.plugins) == n
    assert parsed.select(["nomad-device-39999"], None).line == 5 * 39_999 + 1


def test_unused_keys_are_still_reported_in_the_agents_order() -> None:
    # The linear bookkeeping keeps the agent's choice among keys equal but for case.
    text = '{"plugin": {"P": {"config": {"device": {"kvm": {"a": 1}}}}}, "Plugin": []}'
    with pytest.raises(agentfile.ConfigFileError, match="unexpected keys device, kvm"):
        agentfile.parse_agent_text(text, "agent.json")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("blocks", agent("a {\n" * 100_000 + "}\n" * 100_000)),
        ("lists", agent("a = " + "[" * 100_000 + "]" * 100_000)),
        ("keys of one block", agent("a " * 100_000 + "{}")),
        ("objects", agent("a = " + "{b = " * 100_000 + "1" + "}" * 100_000)),
        (
            "JSON objects",
            '{"plugin": {"p": {"config": {"a": '
            + '{"a": ' * 100_000
            + "1"
            + "}" * 100_000
            + "}}}}",
        ),
    ],
)
def test_deep_nesting_is_refused_naming_the_limit(name: str, text: str) -> None:
    with pytest.raises(agentfile.ConfigFileError) as refused:
        agentfile.parse_agent_text(text, "deep.hcl")
    message = str(refused.value)
    assert message.startswith("deep.hcl:"), message
    assert f"nested deeper than {MAX_NESTING} levels" in message
    assert "the launcher reads no deeper" in message
    assert refused.value.agent == ""  # nothing the agent says: the launcher's own limit
    result = setconfig.from_agent_text(text, SPEC, "p")
    assert (result.outcome, result.stage) == ("refuse", "limit")


def test_nesting_below_the_limit_is_read() -> None:
    depth = MAX_NESTING - 5
    parsed = agentfile.parse_agent_text(agent("a {\n" * depth + "}\n" * depth), "ok.hcl")
    assert parsed.plugins[0].config is not None
    assert setconfig.from_agent_text(agent("a = " + "[" * 90 + "]" * 90), SPEC, "p").ok


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("${1" + "+1" * 1_500 + "}", f"nests deeper than {MAX_DEPTH} levels"),
        ("${" + "[" * 100_000 + "]" * 100_000 + "}", f"nests deeper than {MAX_DEPTH} levels"),
        ("${1e1000000000}", f"exponents up to {MAX_EXPONENT}"),
        ("${-1e1000000000 + 1}", f"exponents up to {MAX_EXPONENT}"),
        ('${jsondecode("1e1000000000")}', f"exponents up to {MAX_EXPONENT}"),
        ('${jsondecode("' + "[" * 5_000 + "]" * 5_000 + '")}', f"deeper than {MAX_DEPTH}"),
    ],
)
def test_templates_past_the_evaluators_limits_are_declined_naming_them(
    value: str, why: str
) -> None:
    result = setconfig.from_agent_text(agent(f'label = "{value}"'), SPEC, "p")
    assert result.outcome == "refuse", result
    assert result.messages[0].startswith("Unsupported template: "), result.messages
    assert why in result.messages[0], result.messages[0][-300:]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('{"label": 1e1000000000}', f"exponents up to {MAX_EXPONENT}"),
        ('{"label": ' + "9" * 5_000 + "}", f"exponents up to {MAX_EXPONENT}"),
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", f"deeper than {MAX_DEPTH} levels"),
        ('{"a": ' + "[" * 500 + "]" * 500 + "}", f"deeper than {MAX_DEPTH} levels"),
    ],
)
def test_json_config_bodies_past_the_limits_are_refused(body: str, why: str) -> None:
    with pytest.raises(agentfile.ConfigFileError, match=why):
        agentfile.load_json_config(body)
    with pytest.raises(setconfig.ConfigBodyError, match=why):
        setconfig.config_from_json(SPEC, body)


def test_long_integers_within_the_limits_still_decode() -> None:
    assert setconfig.config_from_json(SPEC, '{"count": 12345678901234567890}')
    body = agentfile.load_json_config('{"count": 1e300}')
    assert setconfig.from_body(body, SPEC).ok
