"""Values the wire cannot carry never end a stream: validated away, or skipped.

Over the real wire against ``tests/support/plugins/engine_plugin.py badvalues``, plus
unit tests of the per-group conversion guard for what ``validate()`` misses.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import pytest
from support import PLUGINS
from support.processes import Launcher

from nomad_device.model import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DeviceStats,
    StatValue,
)

ENGINE_PLUGIN = PLUGINS / "engine_plugin.py"


def _config(directory: Path) -> bytes:
    from nomad_device.config import config_spec
    from nomad_device.wire import cty, hclspec

    sys.path.insert(0, str(ENGINE_PLUGIN.parent))
    try:
        from engine_plugin import Config
    finally:
        sys.path.pop(0)
    return cty.marshal({"dir": str(directory)}, hclspec.implied_type(config_spec(Config)))


def test_unsendable_groups_are_skipped_and_logged_once(launch: Launcher, tmp_path: Path) -> None:
    (tmp_path / "a").write_text("")
    plugin = launch([sys.executable, str(ENGINE_PLUGIN), "badvalues"])
    plugin.client.set_config(_config(tmp_path))
    with plugin.client.fingerprint() as stream:
        groups = stream.next(10)
        assert [g.key for g in groups] == ["test/engine/file"]

        # Many periods later the stream is still open, and nothing was resent.
        def detects() -> int:
            return int(plugin.client.reserve(["!counts"]).envs["detect_calls"])

        calls, deadline = detects(), time.monotonic() + 30
        while detects() < calls + 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert detects() >= calls + 5
        with pytest.raises(TimeoutError):
            stream.next(0.5)
    problems = [e.message for e in plugin.logs if "invalid device group" in e.message]
    assert len(problems) == 4, problems
    text = "\n".join(problems)
    assert "integer value 18446744073709551616 does not fit in int64" in text
    assert "float value must be finite, not nan" in text
    assert "device ID '\\udcff' is not valid UTF-8" in text
    assert "device attribute key 7 must be a string, not int" in text


def test_unsendable_stats_are_skipped_and_logged_once(launch: Launcher, tmp_path: Path) -> None:
    (tmp_path / "a").write_text("")
    plugin = launch([sys.executable, str(ENGINE_PLUGIN), "badvalues"])
    plugin.client.set_config(_config(tmp_path))
    with plugin.client.stats(0.05) as stream:
        for _ in range(5):
            groups = stream.next(10)
            assert [(g.vendor, g.type, g.name) for g in groups] == [("test", "engine", "file")]
    problems = [e.message for e in plugin.logs if "invalid stats group" in e.message]
    assert len(problems) == 4, problems
    text = "\n".join(problems)
    assert "int_numerator 9223372036854775808 does not fit in int64" in text
    assert "float_numerator must be finite, not inf" in text
    assert "timestamp must be a datetime, not str" in text
    assert "string_value must be a string, not bytes" in text


class _Unchecked(DeviceGroup):
    """A group that claims to be valid: only the conversion guard stands in its way."""

    def validate(self) -> list[str]:
        return []


class _UncheckedStats(DeviceGroupStats):
    def validate(self) -> list[str]:
        return []


def test_a_group_that_fails_conversion_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    from nomad_device.plugin.engine import ProblemLog
    from nomad_device.plugin.servicer import fingerprint_response

    caplog.set_level(logging.ERROR, "nomad_device.engine")
    good = DeviceGroup("v", "t", "good", (Device("d0"),), {"n": Attribute(1)})
    bad = _Unchecked("v", "t", "bad", (Device("d1"),), {"n": Attribute(2**64)})
    problems = ProblemLog()
    for _ in range(3):
        response = fingerprint_response([bad, good, bad], problems)
        assert [g.device_name for g in response.device_group] == ["good"]
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1, logged
    assert "group 'v/t/bad' does not convert: ValueError: Value out of range" in logged[0]


def test_a_stats_group_that_fails_conversion_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from nomad_device.plugin.engine import ProblemLog
    from nomad_device.plugin.servicer import stats_response

    caplog.set_level(logging.ERROR, "nomad_device.engine")
    good = DeviceGroupStats("v", "t", "good", {"d0": DeviceStats(StatValue(int_numerator=1))})
    bad = _UncheckedStats("v", "t", "bad", {"d1": DeviceStats(StatValue(int_numerator=2**64))})
    problems = ProblemLog()
    for _ in range(3):
        response = stats_response([good, bad], problems)
        assert [g.name for g in response.groups] == ["good"]
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and "stats group 'v/t/bad' does not convert" in logged[0], logged
