"""MockDevicePlugin over real gRPC, following the contract of Nomad's plugin_test.go:
every hook's answer reaches the host unchanged, and every request reaches the hook."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

import grpc
import msgpack
import pytest

from nomad_device import DeviceGroup, InvalidArgument, Mount, NotFound, PluginInfo, Reservation
from nomad_device.host import CallError
from nomad_device.testing import (
    TEST_SPEC,
    InProcessHarness,
    MockCall,
    MockDevicePlugin,
    device_group,
    error_fingerprint,
    error_reserve,
    group_stats,
    static_fingerprint,
    static_fingerprint_stream,
    static_info,
    static_reservation,
    static_schema,
    static_stats,
    static_stats_stream,
)
from nomad_device.wire import hclspec

DEVICES1 = [device_group("nvidia", "gpu", "foo", ["0"], {"memory": (4, "GiB")})]
DEVICES2 = [
    device_group("nvidia", "gpu", "foo", ["0"]),
    device_group("nvidia", "gpu", "bar", ["1"]),
]


def test_plugin_info_and_swapping_it_at_runtime() -> None:
    mock = MockDevicePlugin(info_fn=static_info("mock_device", "v0.2.1"))
    with InProcessHarness(mock) as h:
        assert h.info() == PluginInfo("mock_device", "v0.2.1")
        mock.info_fn = lambda: PluginInfo("renamed", "v0.3.0")
        assert h.info().name == "renamed"


def test_config_schema_round_trips() -> None:
    with InProcessHarness(MockDevicePlugin(schema_fn=static_schema(TEST_SPEC))) as h:
        assert h.schema() == TEST_SPEC
        assert h.schema_proto() == hclspec.to_proto(TEST_SPEC)


def test_set_config_delivers_the_exact_bytes() -> None:
    received: list[bytes] = []

    def decode(data: bytes) -> object:
        received.append(data)
        return msgpack.unpackb(data)

    mock = MockDevicePlugin(schema_fn=static_schema(), decode_fn=decode)
    with InProcessHarness(mock) as h:
        sent = h.set_config({"foo": "v1", "bar": 1337, "baz": True})
    assert received == [sent] == mock.config_bytes
    assert mock.calls_to("configure") == [
        MockCall("configure", ({"bar": 1337, "baz": True, "foo": "v1"},))
    ]


def test_set_config_errors_reach_the_host() -> None:
    def refuse(config: object) -> None:
        raise InvalidArgument("foo: must not be empty")

    mock = MockDevicePlugin(schema_fn=static_schema(), configure_fn=refuse)
    with InProcessHarness(mock) as h, pytest.raises(CallError) as raised:
        h.set_config()
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details.endswith("foo: must not be empty")


def test_fingerprint_sends_each_state_in_order() -> None:
    mock = MockDevicePlugin(fingerprint_fn=static_fingerprint_stream(DEVICES1, DEVICES2))
    with InProcessHarness(mock) as h, h.fingerprint() as stream:
        assert stream.next(5) == DEVICES1
        assert stream.next(5) == DEVICES2
        # Unlike the Go mock's channel, the SDK never closes the stream towards Nomad.
        with pytest.raises(TimeoutError):
            stream.next(0.3)


def test_detect_hook_can_change_between_scans() -> None:
    mock = MockDevicePlugin(detect_fn=static_fingerprint(*DEVICES1), fingerprint_period=0.05)
    with InProcessHarness(mock) as h, h.fingerprint() as stream:
        assert stream.next(5) == DEVICES1
        mock.detect_fn = static_fingerprint(*DEVICES2)
        assert stream.next(5) == DEVICES2


def test_failing_detect_still_sends_a_first_message() -> None:
    mock = MockDevicePlugin(detect_fn=error_fingerprint(OSError("mock fingerprinting failed")))
    with InProcessHarness(mock) as h:
        assert h.first_fingerprint() == []
        assert h.health() == "SERVING"


def test_reserve_passes_ids_and_returns_the_reservation() -> None:
    reservation = Reservation({"FOO": "BAR"}, (Mount("/dev/gpu0", "/dev/nvidia0", True),))
    mock = MockDevicePlugin(reserve_fn=static_reservation(reservation))
    with InProcessHarness(mock) as h:
        assert h.reserve(["a", "b"]) == reservation
        mock.reserve_fn = error_reserve(NotFound("no device a"))
        with pytest.raises(CallError) as raised:
            h.reserve(["a"])
    assert raised.value.code == grpc.StatusCode.NOT_FOUND
    assert [c.args for c in mock.calls_to("reserve")] == [(("a", "b"),), (("a",),)]


def test_stats_hook_and_interval() -> None:
    report = group_stats(DEVICES1[0])
    mock = MockDevicePlugin(stats_fn=static_stats(report))
    with InProcessHarness(mock) as h:
        with h.stats(0.05) as stream:
            assert [stream.next(5), stream.next(5)] == [[report], [report]]
        with h.stats(0) as stream:
            stream.next(5)
    # Nomad's convention: interval 0 means one second.
    assert [c.args for c in mock.calls_to("stats_stream")] == [(0.05,), (1.0,)]


def test_raw_stats_stream() -> None:
    report = group_stats(DEVICES1[0])
    seen: list[float] = []

    def stream_fn(interval: float) -> AsyncIterator[Sequence[object]]:
        seen.append(interval)
        return static_stats_stream(report)(interval)  # type: ignore[return-value]

    mock = MockDevicePlugin(stats_stream_fn=stream_fn)  # type: ignore[arg-type]
    with InProcessHarness(mock) as h, h.stats(0.02) as stream:
        start = time.monotonic()
        assert [stream.next(5) for _ in range(3)] == [[report]] * 3
        assert time.monotonic() - start >= 0.03
    assert seen == [0.02]


def test_unset_hooks_behave_like_an_empty_plugin() -> None:
    with InProcessHarness(MockDevicePlugin()) as h:
        assert h.info() == PluginInfo("mock-device", "0.1.0")
        h.set_config()
        assert h.first_fingerprint() == []
        assert h.reserve(["x"]) == Reservation()


def test_async_hooks() -> None:
    async def detect() -> list[DeviceGroup]:
        return DEVICES2

    async def reserve(ids: Sequence[str]) -> Reservation:
        return Reservation({"IDS": ",".join(ids)})

    with InProcessHarness(MockDevicePlugin(detect_fn=detect, reserve_fn=reserve)) as h:
        assert h.first_fingerprint() == DEVICES2
        assert h.reserve(["0", "1"]).envs == {"IDS": "0,1"}
