"""The in-process and subprocess harnesses."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Sequence

import grpc
import msgpack
import pytest
from support import SDK_PLUGIN

from nomad_device import (
    Device,
    DeviceGroup,
    DevicePlugin,
    InvalidArgument,
    Reservation,
    StatValue,
)
from nomad_device.config import encode_config
from nomad_device.host import CallError
from nomad_device.testing import ConfigBodyError, InProcessHarness, SubprocessHarness, group_stats


@dataclasses.dataclass
class CounterConfig:
    devices: int = 2
    prefix: str = "c"


class CounterPlugin(DevicePlugin[CounterConfig]):
    name = "counter"
    version = "0.3.0"
    Config = CounterConfig

    def detect(self) -> list[DeviceGroup]:
        ids = [f"{self.config.prefix}{i}" for i in range(self.config.devices)]
        return [DeviceGroup("test", "counter", "c1", tuple(Device(i) for i in ids))]

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        if not device_ids:
            raise InvalidArgument("no device IDs")
        if "boom" in device_ids:
            raise RuntimeError("unexpected")
        self.log.info("reserving", extra={"ids": list(device_ids)})
        return Reservation({"COUNTERS": ",".join(device_ids)})

    def stats(self) -> list[object]:
        return [group_stats(g, StatValue(int_numerator=1)) for g in self.detect()]


def test_in_process_round_trip() -> None:
    with InProcessHarness(CounterPlugin) as h:
        assert isinstance(h.plugin, CounterPlugin)
        assert (h.info().name, h.health()) == ("counter", "SERVING")
        h.set_config()  # defaults only, as Nomad sends with no config block
        assert h.plugin.config == CounterConfig()
        (group,) = h.first_fingerprint()
        assert [d.id for d in group.devices] == ["c0", "c1"]
        assert h.reserve(["c0"]).envs == {"COUNTERS": "c0"}
        with h.stats(0.05) as stream:
            (stats,) = stream.next(5)
        assert sorted(stats.instance_stats) == ["c0", "c1"]


@pytest.mark.parametrize(
    "config",
    [
        CounterConfig(devices=3, prefix="x"),
        {"devices": 3, "prefix": "x"},
        encode_config(CounterConfig(devices=3, prefix="x")),
    ],
    ids=["dataclass", "mapping", "bytes"],
)
def test_set_config_accepts_every_form(config: object) -> None:
    with InProcessHarness(CounterPlugin()) as h:
        sent = h.set_config(config)
        assert sent == encode_config(CounterConfig(devices=3, prefix="x"))
        assert [d.id for d in h.first_fingerprint()[0].devices] == ["x0", "x1", "x2"]


def test_errors_keep_their_status_codes() -> None:
    with InProcessHarness(CounterPlugin()) as h:
        with pytest.raises(CallError) as empty:
            h.reserve([])
        assert empty.value.code == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(CallError) as crash:
            h.reserve(["boom"])
        assert crash.value.code == grpc.StatusCode.INTERNAL
        with pytest.raises(ConfigBodyError):  # the host side refuses it, as Nomad would
            h.set_config({"devices": "lots"})
        with pytest.raises(CallError) as bad:
            h.set_config(msgpack.packb({"devices": "lots", "prefix": "x"}))
        assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "devices" in bad.value.details


def test_logs_reach_the_tests_logging(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with InProcessHarness(CounterPlugin()) as h:
        h.reserve(["c1"])
    assert any(r.message == "reserving" and r.ids == ["c1"] for r in caplog.records)  # type: ignore[attr-defined]


def test_close_cleans_up_and_is_idempotent() -> None:
    h = InProcessHarness(CounterPlugin())
    socket_dir = os.path.dirname(h.address)
    assert os.path.exists(h.address)
    h.close()
    h.close()
    assert not os.path.exists(socket_dir)


def test_streams_open_at_close_do_not_hang() -> None:
    h = InProcessHarness(CounterPlugin())
    stream = h.fingerprint()
    stream.next(5)
    h.close()
    with pytest.raises((StopIteration, CallError)):
        stream.next(5)


def test_subprocess_harness() -> None:
    with SubprocessHarness([sys.executable, str(SDK_PLUGIN)]) as h:
        assert h.info().name == "sdk-test"
        h.set_config()
        groups = h.first_fingerprint()
        assert [d.id for d in groups[0].devices] == ["dev0", "dev1"]
        assert h.pid != os.getpid()
        result = h.kill()
        assert result.outcome == "graceful"
        assert h.kill() is result
    assert "config set" in h.messages()
    assert not [e for e in h.logs if e.raw]


def test_in_process_kill_closes_the_server_not_the_test_process() -> None:
    """kill() and ``with h.client:`` behave like a host's kill, on the server only."""
    with InProcessHarness(CounterPlugin) as h:
        assert h.client.reattach_config.pid == os.getpid()
        result = h.client.kill()  # before the fix: SIGKILL to this very process
        assert result.outcome == "graceful", result
        assert not os.path.exists(h.address)
        assert h.client.kill().outcome == "gone"
    with InProcessHarness(CounterPlugin) as h, h.client:
        assert h.health() == "SERVING"
    assert not os.path.exists(h.address)


class _BigPlugin(DevicePlugin[None]):
    """A fingerprint, and a Reserve request, well over gRPC's default 4 MiB."""

    name = "big"

    def detect(self) -> list[DeviceGroup]:
        devices = tuple(Device(f"{i:08d}-" + "x" * 60) for i in range(80_000))
        return [DeviceGroup("test", "big", "b", devices)]

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        return Reservation({"COUNT": str(len(device_ids))})


def test_in_process_server_has_the_production_options() -> None:
    with InProcessHarness(_BigPlugin) as h:
        (group,) = h.first_fingerprint(timeout=60)
        assert len(group.devices) == 80_000
        ids = [d.id for d in group.devices]
        assert h.reserve(ids).envs == {"COUNT": "80000"}
