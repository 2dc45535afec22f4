"""The SDK's Nomad services over the real wire against real plugin subprocesses."""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import msgpack
import pytest
from support import PLUGINS, SDK_PLUGIN
from support.processes import Launched, Launcher, OwnTime

from nomad_device.config import config_spec
from nomad_device.host import CallError
from nomad_device.model import Attribute
from nomad_device.wire import cty, hclspec

CONFIG_PLUGIN = PLUGINS / "config_plugin.py"


def _sdk_config(**values: object) -> bytes:
    """Encode the SDK test plugin's config exactly as Nomad would."""
    full: dict[str, object] = {
        "devices": 2,
        "period_ms": 100,
        "flaky": False,
        "invalid_group": False,
        "stats_fail": False,
    }
    full.update(values)
    sys.path.insert(0, str(SDK_PLUGIN.parent))
    try:
        from sdk_plugin import Config
    finally:
        sys.path.pop(0)
    return cty.marshal(full, hclspec.implied_type(config_spec(Config)))


def _echo(plugin: Launched) -> dict[str, object]:
    reservation = plugin.client.reserve(["d0"])
    return dict(json.loads(reservation.envs["CONFIG"]))


@pytest.fixture(params=["sync", "async"])
def sdk(request: pytest.FixtureRequest, launch: Launcher) -> Launched:
    args = [sys.executable, str(SDK_PLUGIN)] + (["async"] if request.param == "async" else [])
    return launch(args)


# -- base plugin ---------------------------------------------------------------


def test_plugin_info_and_schema(sdk: Launched) -> None:
    info = sdk.client.info()
    assert info.name in ("sdk-test", "sdk-test-async")
    assert info.version == "1.2.3"
    assert info.api_versions == ("v0.1.0",)
    assert info.type == 3
    schema = sdk.client.schema()
    assert isinstance(schema, hclspec.Object)
    assert set(schema.attributes) == {
        "devices",
        "period_ms",
        "flaky",
        "invalid_group",
        "stats_fail",
    }
    devices = schema.attributes["devices"]
    assert devices == hclspec.Default(
        hclspec.Attr("devices", "number", False), hclspec.Literal("2")
    )


def test_set_config_malformed_bytes(launch: Launcher) -> None:
    client = launch().client
    for junk in (b"\xc1", b"\x93\x01", b"\x81\xa1a", b"\x82\xa3abc\x01"):
        with pytest.raises(CallError) as info:
            client.set_config(junk)
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details.startswith("SetConfig failed: ")
    # The plugin is still fine after all that.
    client.set_config(_sdk_config())
    assert client.health() == "SERVING"


def test_set_config_wrong_type_names_the_field(launch: Launcher) -> None:
    client = launch().client
    with pytest.raises(CallError) as info:
        client.set_config(msgpack.packb({"devices": "lots", "flaky": False}))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "devices" in info.value.details
    with pytest.raises(CallError) as info:
        client.set_config(msgpack.packb({"devices": 1.5}))
    assert "devices" in info.value.details and "1.5" in info.value.details


def test_set_config_refused_by_author_hook(launch: Launcher) -> None:
    client = launch().client
    with pytest.raises(CallError) as info:
        client.set_config(_sdk_config(devices=-1))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details == "SetConfig failed: devices: must not be negative"


def test_set_config_every_cty_encoding(launch: Launcher) -> None:
    """Hand-built bytes in each encoding Nomad may send, decoded by a real plugin."""
    plugin = launch([sys.executable, str(CONFIG_PLUGIN)])
    client = plugin.client
    # Nomad's own form for the defaults: every attribute, sorted keys, nil limits, [] rules.
    spec = client.schema()
    defaults_bytes = cty.marshal(
        {
            "label": "default",
            "count": 3,
            "ratio": 1.5,
            "enabled": True,
            "period": "5s",
            "tags": [],
            "extra": {},
            "limits": None,
            "rules": [],
        },
        hclspec.implied_type(spec),
    )
    assert defaults_bytes[:1] == b"\x89"  # a 9-entry fixmap
    client.set_config(defaults_bytes)
    assert _echo(plugin) == {
        "count": 3,
        "enabled": True,
        "extra": {},
        "label": "default",
        "limits": None,
        "period": 5.0,
        "ratio": 1.5,
        "rules": [],
        "tags": [],
    }

    def send(doc: dict[str, object]) -> dict[str, object]:
        client.set_config(msgpack.packb(doc, use_bin_type=True))
        return _echo(plugin)

    base: dict[str, object] = {
        "label": "x",
        "count": 3,
        "ratio": 1.5,
        "enabled": True,
        "period": "5s",
        "tags": [],
        "extra": {},
        "limits": None,
        "rules": [],
    }
    # compact ints: uint8, uint16, uint32 forms
    for n in (200, 60000, 70000):
        assert send({**base, "count": n})["count"] == n
    # float64 for a non-integer that float64 represents exactly
    assert send({**base, "ratio": 2.25})["ratio"] == 2.25
    # numbers sent as strings (cty does this for 0.1 and huge numbers)
    assert send({**base, "ratio": "0.1"})["ratio"] == 0.1
    assert send({**base, "count": "12"})["count"] == 12
    # an integral number in a float field, and a float64 that is integral in an int field
    assert send({**base, "ratio": 3})["ratio"] == 3
    assert send({**base, "count": 4.0})["count"] == 4
    # nested optional block present, and block lists as arrays of objects
    got = send(
        {
            **base,
            "limits": {"max_devices": 7, "ratio": "0.25"},
            "rules": [{"name": "a", "weight": 2}, {"name": "b", "weight": 0.5}],
            "tags": ["t1", "t2"],
            "extra": {"k": 1},
            "period": "1m30s",
        }
    )
    assert got["limits"] == {"max_devices": 7, "ratio": 0.25}
    assert got["rules"] == [{"name": "a", "weight": 2.0}, {"name": "b", "weight": 0.5}]
    assert got["tags"] == ["t1", "t2"] and got["extra"] == {"k": 1}
    assert got["period"] == 90.0
    # Errors name the field.
    with pytest.raises(CallError) as info:
        send({**base, "period": "5 minutes"})
    assert info.value.details.startswith("SetConfig failed: period: ")
    with pytest.raises(CallError) as info:
        send({**base, "rules": [{"name": True, "weight": 1}]})
    assert "rules[0].name" in info.value.details


# -- fingerprint -----------------------------------------------------------------


def test_first_fingerprint_arrives_promptly_even_when_empty(launch: Launcher) -> None:
    client = launch().client
    client.set_config(_sdk_config(devices=0, period_ms=3_600_000))
    with client.fingerprint() as stream:
        groups = stream.next(30)  # the period is an hour: only the first scan explains this
    assert [g.key for g in groups] == ["sdk/test/widget"]
    assert groups[0].devices == ()


def test_fingerprint_content(sdk: Launched) -> None:
    sdk.client.set_config(_sdk_config())
    with sdk.client.fingerprint() as stream:
        groups = stream.next(10)
    (group,) = groups
    assert [d.id for d in group.devices] == ["dev0", "dev1"]
    assert group.attributes == {"memory": Attribute(2, "GiB"), "model": Attribute("w1")}


def test_flaky_detect_keeps_stream_and_devices(sdk: Launched) -> None:
    sdk.client.set_config(_sdk_config(flaky=True, period_ms=50))
    received: list[list[str]] = []
    with sdk.client.fingerprint() as stream:
        received.append([d.id for g in stream.next(10) for d in g.devices])
        # Two failures while the stream is open (retries back off about a second each,
        # so wait for them by count, not by a fixed time that a loaded machine misses).
        failures = sdk.wait_for_log(
            lambda e: e.message.startswith("detect() failed"), timeout=30, count=2
        )
        assert len(failures) >= 2
        # Unchanged state: nothing more arrived through them, and the stream stays open.
        with pytest.raises(TimeoutError):
            stream.next(0.5)
    assert received == [["dev0", "dev1"]]
    assert all(
        e.level == "error" and "flaky detect" in str(e.fields["traceback"]) for e in failures
    )


def test_invalid_group_is_logged_and_never_sent(launch: Launcher) -> None:
    plugin = launch()
    plugin.client.set_config(_sdk_config(invalid_group=True))
    with plugin.client.fingerprint() as stream:
        groups = stream.next(10)
    assert [g.key for g in groups] == ["sdk/test/widget"]
    errors = plugin.wait_for_log(lambda e: "invalid device group" in e.message)
    assert errors and errors[0].level == "error"
    assert "device vendor must be specified" in errors[0].message
    # The valid units are named, and the record says what was dropped (for hosts).
    assert "unrecognized unit 'A': Nomad knows only KiB MiB GiB" in errors[0].message
    assert "MHz GHz, mW W kW MW GW" in errors[0].message
    assert errors[0].fields["dropped"] == "device_group"


def test_two_concurrent_streams_each_get_the_state(sdk: Launched) -> None:
    sdk.client.set_config(_sdk_config(devices=3))
    first = sdk.client.fingerprint()
    second = sdk.client.fingerprint()
    try:
        a = first.next(10)
        b = second.next(10)
        assert a == b and len(a[0].devices) == 3
        # A third stream opened later still gets the state at once.
        with sdk.client.fingerprint() as third:
            assert third.next(5) == a
    finally:
        first.cancel()
        second.cancel()


def test_cancelled_stream_then_new_stream(launch: Launcher) -> None:
    client = launch().client
    client.set_config(_sdk_config())
    with client.fingerprint() as stream:
        stream.next(10)
    with client.fingerprint() as stream:
        assert stream.next(5)[0].devices
    assert client.health() == "SERVING"


# -- reserve ------------------------------------------------------------------------


def test_fifty_concurrent_reserves(sdk: Launched) -> None:
    sdk.client.set_config(_sdk_config(devices=100))
    ids = [[f"dev{i}", f"dev{99 - i}"] for i in range(50)]
    barrier = threading.Barrier(50)

    def reserve(pair: list[str]) -> str:
        barrier.wait(10)
        return sdk.client.reserve(pair).envs["SDK_DEVICES"]

    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(reserve, ids))
    assert results == [",".join(pair) for pair in ids]


def test_reserve_errors(sdk: Launched) -> None:
    with pytest.raises(CallError) as info:
        sdk.client.reserve([])
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details == "no device ids given"
    with pytest.raises(CallError) as info:
        sdk.client.reserve(["dev0", "nope"])
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details == "unknown devices ['nope']"
    with pytest.raises(CallError) as info:
        sdk.client.reserve(["!raise"])
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert sdk.client.health() == "SERVING"


# -- stats ----------------------------------------------------------------------------


def test_stats_interval_zero_means_one_second(sdk: Launched) -> None:
    sdk.client.set_config(_sdk_config())
    with sdk.client.stats(0) as stream:
        first = stream.next(5)
        with OwnTime(sdk.client.process.pid) as own:
            second = stream.next(5)
    # Not a busy loop (0 s): by the plugin's stamps, which no delay on the way shortens.
    stamps = [m[0].instance_stats["dev1"].timestamp for m in (first, second)]
    assert (stamps[1] - stamps[0]).total_seconds() > 0.7, stamps
    # Not a longer default: in the plugin's own time, which a busy machine does not stretch.
    assert own.seconds < 3, own.seconds
    assert first[0].instance_stats["dev1"].summary is not None
    assert second[0].instance_stats["dev1"].summary.int_numerator == 1  # type: ignore[union-attr]


def test_stats_short_interval(launch: Launcher) -> None:
    client = launch().client
    client.set_config(_sdk_config())
    with client.stats(0.05) as stream, OwnTime(client.process.pid) as own:
        for _ in range(5):
            stream.next(5)
    # Five at 0.05 s: well under the 4 s that a one-second floor would take (the plugin's
    # own time: it sleeps through the intervals, and a busy machine does not stretch it).
    assert own.seconds < 3, own.seconds


def test_stats_negative_interval_is_invalid(launch: Launcher) -> None:
    client = launch().client
    with pytest.raises(CallError) as info:
        client.stats(-1).next(5)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_failing_stats_keep_the_stream_open(launch: Launcher) -> None:
    plugin = launch()
    plugin.client.set_config(_sdk_config(stats_fail=True))
    with plugin.client.stats(0.05) as stream, pytest.raises(TimeoutError):
        stream.next(1.0)
    failures = plugin.wait_for_log(lambda e: e.message.startswith("stats() failed"))
    assert failures and failures[0].level == "error"
    assert plugin.client.health() == "SERVING"


# -- event sources and raw streams ------------------------------------------------------

WATCH_PLUGIN = PLUGINS / "watch_plugin.py"


def test_watch_wakes_detection(launch: Launcher, tmp_path: Path) -> None:
    from nomad_device.config import encode_config

    sys.path.insert(0, str(WATCH_PLUGIN.parent))
    try:
        from watch_plugin import Config as WatchConfig
    finally:
        sys.path.pop(0)
    plugin = launch([sys.executable, str(WATCH_PLUGIN)])
    plugin.client.set_config(encode_config(WatchConfig(dir=str(tmp_path))))
    with plugin.client.fingerprint() as stream:
        assert stream.next(10)[0].devices == ()
        (tmp_path / "gpu0").write_text("")
        (group,) = stream.next(30)  # the period is an hour: only watch() can explain this
        assert [d.id for d in group.devices] == ["gpu0"]


def test_raw_stream_that_ends_is_restarted_not_ended(launch: Launcher) -> None:
    plugin = launch([sys.executable, str(WATCH_PLUGIN), "raw"])
    with plugin.client.fingerprint() as stream:
        counts = [len(stream.next(10)[0].devices) for _ in range(4)]
    assert counts == [1, 2, 1, 2]  # ended, logged, restarted after back-off
    ended = plugin.wait_for_log(lambda e: "fingerprint stream ended" in e.message)
    assert ended and ended[0].level == "warn"


def test_detection_stops_when_the_last_stream_closes(launch: Launcher) -> None:
    plugin = launch()
    plugin.client.set_config(_sdk_config(period_ms=20))
    with plugin.client.fingerprint() as stream:
        stream.next(10)
    paused = plugin.wait_for_log(lambda e: "detection paused" in e.message)
    assert paused and paused[0].level == "debug"


def test_stats_conversion_round_trips_every_value_kind() -> None:
    """Zero-valued wrappers stay present; nested objects and timestamps survive."""
    import datetime as dt

    from nomad_device.model import DeviceGroupStats, DeviceStats, StatObject, StatValue
    from nomad_device.proto import device_pb2
    from nomad_device.wire import convert

    now = dt.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=dt.UTC)
    zero = StatValue(
        float_numerator=0.0,
        float_denominator=0.0,
        int_numerator=0,
        int_denominator=0,
        string_value="",
        bool_value=False,
        unit="u",
        desc="d",
    )
    group = DeviceGroupStats(
        "v",
        "t",
        "n",
        {
            "a": DeviceStats(zero, StatObject({"x": zero}, {"deep": StatObject({"y": zero})}), now),
            "b": DeviceStats(None, None, now),
        },
    )
    response = device_pb2.StatsResponse()
    convert.group_stats_to_proto(group, into=response.groups.add())
    wire = device_pb2.StatsResponse.FromString(response.SerializeToString())
    assert wire.groups[0].instance_stats["a"].summary.HasField("int_numerator_val")
    assert convert.group_stats_from_proto(wire.groups[0]) == group
