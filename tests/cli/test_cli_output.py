"""Output shapes: Nomad's JSON field names, human tables, colour rules, the schema tree."""

from __future__ import annotations

import datetime as _dt
import io
import json

import pytest

from nomad_device.cli import nomadjson, render
from nomad_device.cli.console import Console
from nomad_device.model import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DeviceSpec,
    DeviceStats,
    Mount,
    PluginInfo,
    Reservation,
    StatObject,
    StatValue,
)
from nomad_device.wire.hclspec import (
    Attr,
    Block,
    BlockAttrs,
    BlockList,
    BlockMap,
    Default,
    Literal,
    Object,
)

GROUP = DeviceGroup(
    "nvidia",
    "gpu",
    "1080ti",
    (Device("GPU-1", True, "", "0000:02:00.1"), Device("GPU-2", False, "too hot")),
    {
        "memory": Attribute(11, "GiB"),
        "clock": Attribute(1.5, "GHz"),
        "model": Attribute("1080ti"),
        "ecc": Attribute(False),
    },
)
WHEN = _dt.datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=_dt.UTC)


def test_devices_json_matches_node_resources_devices() -> None:
    assert nomadjson.devices_json([GROUP]) == [
        {
            "Vendor": "nvidia",
            "Type": "gpu",
            "Name": "1080ti",
            "Instances": [
                {
                    "ID": "GPU-1",
                    "Healthy": True,
                    "HealthDescription": "",
                    "Locality": {"PciBusID": "0000:02:00.1"},
                },
                {"ID": "GPU-2", "Healthy": False, "HealthDescription": "too hot", "Locality": None},
            ],
            "Attributes": {
                "clock": {"Float": 1.5, "Unit": "GHz"},
                "ecc": {"Bool": False, "Unit": ""},
                "memory": {"Int": 11, "Unit": "GiB"},
                "model": {"String": "1080ti", "Unit": ""},
            },
        }
    ]


def test_empty_instances_and_attributes_are_null_as_in_go() -> None:
    out = nomadjson.devices_json([DeviceGroup("v", "t", "n")])
    assert out == [{"Vendor": "v", "Type": "t", "Name": "n", "Instances": None, "Attributes": None}]


def test_stats_json_matches_device_stats() -> None:
    stats = DeviceGroupStats(
        "nvidia",
        "gpu",
        "1080ti",
        {
            "GPU-1": DeviceStats(
                summary=StatValue(int_numerator=3, int_denominator=8, unit="GiB", desc="memory"),
                stats=StatObject(
                    {"temp": StatValue(float_numerator=41.5, unit="C")},
                    {"fan": StatObject({"on": StatValue(bool_value=True)})},
                ),
                timestamp=WHEN,
            ),
            "GPU-2": DeviceStats(timestamp=WHEN.replace(microsecond=0)),
        },
    )
    assert nomadjson.stats_json([stats]) == [
        {
            "Vendor": "nvidia",
            "Type": "gpu",
            "Name": "1080ti",
            "InstanceStats": {
                "GPU-1": {
                    "Summary": {
                        "IntNumeratorVal": 3,
                        "IntDenominatorVal": 8,
                        "Unit": "GiB",
                        "Desc": "memory",
                    },
                    "Stats": {
                        "Nested": {
                            "fan": {"Nested": None, "Attributes": {"on": {"BoolVal": True}}}
                        },
                        "Attributes": {"temp": {"FloatNumeratorVal": 41.5, "Unit": "C"}},
                    },
                    "Timestamp": "2026-01-02T03:04:05.12Z",
                },
                "GPU-2": {"Summary": None, "Stats": None, "Timestamp": "2026-01-02T03:04:05Z"},
            },
        }
    ]


def test_reservation_and_info_json() -> None:
    res = Reservation(
        {"A": "1"}, (Mount("/task", "/host", True),), (DeviceSpec("/dev/t", "/dev/h", "rwm"),)
    )
    assert nomadjson.reservation_json(res) == {
        "Envs": {"A": "1"},
        "Mounts": [{"TaskPath": "/task", "HostPath": "/host", "ReadOnly": True}],
        "Devices": [{"TaskPath": "/dev/t", "HostPath": "/dev/h", "CgroupPerms": "rwm"}],
    }
    assert nomadjson.reservation_json(Reservation()) == {
        "Envs": None,
        "Mounts": None,
        "Devices": None,
    }
    assert nomadjson.info_json(PluginInfo("p", "1.0.0")) == {
        "Name": "p",
        "PluginVersion": "1.0.0",
        "PluginApiVersions": ["v0.1.0"],
        "Type": "device",
    }


@pytest.mark.parametrize(
    ("value", "text"),
    [(1.5, "1.5"), (1e21, "1e+21"), (1e20, "100000000000000000000"), (1e-7, "1e-7"),
     (0.000001, "0.000001"), (0.0, "0"), (-2.5e-10, "-2.5e-10")],
)  # fmt: skip
def test_floats_are_written_as_go_writes_them(value: float, text: str) -> None:
    assert nomadjson.dumps(value) == text
    assert json.loads(text) == value


def test_dumps_pretty_and_compact() -> None:
    data = {"a": [1, {"b": None}], "c": "é"}
    assert json.loads(nomadjson.dumps(data)) == data
    assert nomadjson.dumps(data, indent=None) == '{"a":[1,{"b":null}],"c":"é"}'
    assert nomadjson.dumps(data).splitlines()[1] == '    "a": ['


def test_attribute_and_stat_values_read_like_nomads() -> None:
    assert render.format_attribute(Attribute(11, "GiB")) == "11 GiB"
    assert render.format_attribute(Attribute(1.23456, "GHz")) == "1.234 GHz"
    assert render.format_attribute(Attribute(True)) == "true"
    assert render.format_stat_value(StatValue(int_numerator=3, int_denominator=8, unit="GiB")) == (
        "3 / 8 GiB"
    )
    assert render.format_stat_value(StatValue(float_numerator=41.55555, unit="C")) == "41.555 C"
    assert render.format_stat_value(StatValue(string_value="ok")) == "ok"
    assert render.format_stat_value(None) == "<none>"


def test_device_table() -> None:
    text = render.render_groups([GROUP], render.Style(False))
    assert text.splitlines()[0] == "nvidia/gpu/1080ti  (2 devices, 1 healthy)"
    assert "    memory  11 GiB" in text
    assert "  GPU-1  healthy    0000:02:00.1" in text
    assert "  GPU-2  unhealthy                too hot" in text
    assert "\x1b[" not in text


def test_health_is_coloured_only_when_asked() -> None:
    text = render.render_groups([GROUP], render.Style(True))
    assert "\x1b[32mhealthy\x1b[0m" in text
    assert "\x1b[31munhealthy\x1b[0m" in text


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    assert render.color_wanted(FakeTty()) is True
    assert render.color_wanted(io.StringIO()) is False
    assert render.color_wanted(io.StringIO(), "always") is True
    assert render.color_wanted(FakeTty(), "never") is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert render.color_wanted(FakeTty()) is False


def test_schema_tree() -> None:
    spec = Object(
        {
            "dir": Default(Attr("dir", "string"), Literal('"."')),
            "token": Attr("token", "string", required=True),
            "limits": Block("limits", Object({"max": Attr("max", "number")})),
            "rule": BlockList("rule", Object({"path": Attr("path", "string")}), 1, 3),
            "device": BlockMap("device", ["name"], Object({"n": Attr("n", "number")})),
            "env": BlockAttrs("env", "string"),
        }
    )
    text = render.render_schema(spec, render.Style(False))
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines[0] == "config {"
    assert lines[-1] == "}"
    body = "\n".join(lines)
    assert 'device "<name>" {' in body
    assert "dir = string" in body and '# default "."' in body
    assert "# required" in body
    assert "# repeatable block (list, 1 to 3)" in body
    assert "<name> = string" in body
    # notes line up in one column
    columns = {line.index("#") for line in lines if "#" in line}
    assert len(columns) == 1


def test_console_redraws_the_prompt_on_a_terminal() -> None:
    out = FakeTty()
    console = Console(out, out, render.Style(False), render.Style(False))
    console.set_prompt("> ", lambda: "reser")
    console.print("stats #1")
    assert out.getvalue() == "\r\x1b[Kstats #1\n> reser"


def test_console_writes_no_escapes_to_a_pipe() -> None:
    out = io.StringIO()
    console = Console(out, out, render.Style(False), render.Style(False))
    console.set_prompt("> ", lambda: "x")
    console.print("line")
    console.live("a\nb")
    console.live("c")
    assert out.getvalue() == "line\na\nb\nc\n"


def test_console_live_region_is_replaced_in_place() -> None:
    out = FakeTty()
    console = Console(out, out, render.Style(False), render.Style(False))
    console.live("a\nb")
    console.live("c")
    console.log("log line")
    assert out.getvalue() == "a\nb\n\x1b[2A\r\x1b[Jc\n\x1b[1A\r\x1b[Jlog line\nc\n"


def test_info_problems_are_what_nomad_would_refuse() -> None:
    from nomad_device.cli.commands import info_problems

    assert info_problems(PluginInfo("p", "v1.2.3")) == []
    assert info_problems(PluginInfo("p", "0.1.0-beta.1+build")) == []
    problems = info_problems(PluginInfo("", "latest", ("v0.2.0",), 1))
    assert len(problems) == 4
    assert any("not a semantic version" in p for p in problems)
    assert any("lack v0.1.0" in p for p in problems)
