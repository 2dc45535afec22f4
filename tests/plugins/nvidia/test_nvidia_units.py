"""The nvidia plugin's pure logic, in-process: config, health, MIG minors, stats."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import pytest

from nomad_device.config import config_spec, decode_config
from nomad_device.errors import InvalidArgument
from nomad_device.plugins.nvidia.config import (
    DEFAULT_IGNORED_XIDS,
    NvidiaConfig,
    settings_from,
)
from nomad_device.plugins.nvidia.health import MIN_SHOWN, HealthMarks, describe_xid, verdict
from nomad_device.plugins.nvidia.mig import (
    MigMinorsError,
    capability_minors,
    group_name,
    read_mig_minors,
)
from nomad_device.plugins.nvidia.nvml import StatsReading, pci_bandwidth
from nomad_device.plugins.nvidia.stats import STAT_NAMES, device_stats
from nomad_device.testing import config_from_json, defaults_only_config


def test_the_schema_defaults_decode_to_the_dataclass_defaults() -> None:
    spec = config_spec(NvidiaConfig)
    assert decode_config(NvidiaConfig, defaults_only_config(spec)) == NvidiaConfig()
    custom = config_from_json(spec, {"ignored_xids": [48], "share": 4})
    assert decode_config(NvidiaConfig, custom) == NvidiaConfig(ignored_xids=[48], share=4)


def test_settings() -> None:
    settings = settings_from(NvidiaConfig(fingerprint_period="90s", recovery_quiet_period="0s"))
    assert (settings.period, settings.period_text, settings.quiet_period) == (90.0, "1m30s", 0.0)
    assert settings.ignored_xids == frozenset(DEFAULT_IGNORED_XIDS)
    assert settings_from(NvidiaConfig(dev_root="/run/nvidia/driver/dev/")).dev_root == (
        "/run/nvidia/driver/dev"
    )
    with pytest.raises(InvalidArgument, match="ignored_xids: XIDs are positive numbers, got -1"):
        settings_from(NvidiaConfig(ignored_xids=[13, -1]))
    with pytest.raises(InvalidArgument, match="temperature_limit must be 0"):
        settings_from(NvidiaConfig(temperature_limit=-5))


def test_xid_reasons() -> None:
    assert describe_xid(79) == "XID 79: GPU has fallen off the bus"
    assert describe_xid(4242) == "XID 4242 (see NVIDIA's XID catalogue)"
    # Every XID skipped by default has a meaning that says why.
    assert all("application" in describe_xid(x) or x == 45 for x in DEFAULT_IGNORED_XIDS)


def test_marks_clear_only_when_quiet_and_queried_fine() -> None:
    marks = HealthMarks()
    marks.mark(["a", "b"], "XID 48: double-bit ECC error", now=100.0)
    assert marks.next_expiry(30.0) == 130.0
    # The scan the event wakes reports it.
    for device_id in ("a", "b"):
        assert marks.settle(device_id, query_ok=True, quiet_period=30.0, now=100.0) is not None
    assert marks.settle("a", query_ok=True, quiet_period=30.0, now=129.0) is not None  # not quiet
    assert marks.settle("a", query_ok=False, quiet_period=30.0, now=140.0) is not None  # not fine
    marks.mark(["b"], "XID 94: contained ECC error", now=120.0)  # restarts b's quiet period
    assert marks.settle("a", query_ok=True, quiet_period=30.0, now=140.0) is None
    for now in (140.0, 145.0):  # shown at 140; still within its quiet period at 145
        b = marks.settle("b", query_ok=True, quiet_period=30.0, now=now)
        assert b is not None and b.reason == "XID 94: contained ECC error"
    assert marks.settle("b", query_ok=True, quiet_period=30.0, now=150.0) is None
    marks.forget(keep=[])
    assert marks.next_expiry(30.0) is None


def test_a_short_quiet_period_clears_soon_after_the_event_was_shown() -> None:
    marks = HealthMarks()
    marks.mark(["a"], "XID 48: double-bit ECC error", now=10.0)
    assert marks.settle("a", query_ok=True, quiet_period=0.0, now=10.02) is not None
    # Shown at 10.02: the next scan is due MIN_SHOWN later, not after a whole period
    # (the quiet period alone ended at 10.0, before the scan that showed it).
    assert marks.next_expiry(0.0) == pytest.approx(10.02 + MIN_SHOWN)
    assert marks.settle("a", query_ok=True, quiet_period=0.0, now=10.5) is not None
    assert marks.settle("a", query_ok=True, quiet_period=0.0, now=10.02 + MIN_SHOWN) is None


def test_verdict_puts_the_event_first_and_dedupes() -> None:
    marks = HealthMarks()
    marks.mark(["a"], "XID 79: GPU has fallen off the bus", now=0.0)
    assert verdict(["x", "x", "y"], marks.current("a")) == (
        False,
        "XID 79: GPU has fallen off the bus; x; y",
    )
    assert verdict([], None) == (True, "")


def test_mig_minors(tmp_path: Path) -> None:
    assert read_mig_minors(str(tmp_path)) == {}  # no MIG on this host
    caps = tmp_path / "driver" / "nvidia-caps"
    caps.mkdir(parents=True)
    (caps / "mig-minors").write_text(
        "config 1\nmonitor 2\ngpu0/gi7/access 66\ngpu0/gi7/ci0/access 67\ngarbage\n"
    )
    minors = read_mig_minors(str(tmp_path))
    assert minors["gpu0/gi7/ci0/access"] == 67 and "garbage" not in minors
    assert capability_minors(minors, 0, 7, 0) == (66, 67)
    with pytest.raises(MigMinorsError, match="gpu1/gi7/access"):
        capability_minors(minors, 1, 7, 0)
    assert (
        group_name("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "x") == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    )
    assert group_name(None, "NVIDIA H100") == "NVIDIA H100 MIG"


def test_pci_bandwidth_as_the_go_plugin_computes_it() -> None:
    assert [pci_bandwidth(gen, 16) for gen in (1, 2, 3, 4, 5, 6)] == [
        0,
        0,
        16384,
        32768,
        49152,
        65536,
    ]


def test_stats_leave_out_what_nvml_cannot_give() -> None:
    now = _dt.datetime.now(_dt.UTC)
    full = device_stats(
        StatsReading(memory_used_mib=10, memory_total_mib=100, power_w=70.1234), now
    )
    assert full.stats is not None
    assert sorted(full.stats.attributes) == ["Memory state", "Power usage"]
    power = full.stats.attributes["Power usage"]
    # No limit known: the draw alone.
    assert (power.float_numerator, power.float_denominator, power.unit) == (70.123, None, "W")
    assert full.summary is not None and (full.summary.int_numerator, full.summary.unit) == (
        10,
        "MiB",
    )
    limited = device_stats(StatsReading(power_w=70.1234, power_limit_w=300.0), now)
    assert limited.stats is not None
    watts = limited.stats.attributes["Power usage"]
    assert (watts.float_numerator, watts.float_denominator) == (70.123, 300.0)
    assert limited.summary is None  # no memory figures: no summary
    assert set(STAT_NAMES) >= set(full.stats.attributes)
