"""Static builders: canned hooks and terse model values."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

import pytest

from nomad_device import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceSpec,
    Mount,
    NotFound,
    PluginInfo,
    Reservation,
    StatValue,
)
from nomad_device.testing import (
    TEST_SPEC,
    device_group,
    error_fingerprint,
    error_reserve,
    error_stats,
    group_stats,
    noop_configure,
    static_fingerprint,
    static_fingerprint_stream,
    static_info,
    static_reservation,
    static_schema,
    static_stats,
    static_stats_stream,
)

T = TypeVar("T")

GPU = device_group(
    "nvidia", "gpu", "t4", ["0", "1"], {"memory": (16, "GiB"), "cuda": True, "arch": "turing"}
)


def test_device_group_builds_model_values() -> None:
    expected = DeviceGroup(
        "nvidia",
        "gpu",
        "t4",
        (Device("0"), Device("1")),
        {
            "memory": Attribute(16, "GiB"),
            "cuda": Attribute(True),
            "arch": Attribute("turing"),
        },
    )
    assert expected == GPU
    assert GPU.validate() == []
    sick = device_group("a", "b", "c", ["x", Device("y")], unhealthy={"x": "too hot"})
    assert sick.devices == (Device("x", False, "too hot"), Device("y"))


def test_group_stats_covers_every_device() -> None:
    stats = group_stats(GPU, lambda device_id: StatValue(int_numerator=int(device_id), unit="%"))
    assert (stats.vendor, stats.type, stats.name) == ("nvidia", "gpu", "t4")
    assert {k: v.summary for k, v in stats.instance_stats.items()} == {
        "0": StatValue(int_numerator=0, unit="%"),
        "1": StatValue(int_numerator=1, unit="%"),
    }
    fixed = group_stats(GPU, StatValue(string_value="ok"))
    assert all(s.summary == StatValue(string_value="ok") for s in fixed.instance_stats.values())


def test_base_plugin_helpers() -> None:
    assert static_info("x", "1.2.3")() == PluginInfo("x", "1.2.3")
    assert static_schema()() is TEST_SPEC
    assert noop_configure()({"anything": 1}) is None


def test_static_hooks_answer_the_same_every_time() -> None:
    detect = static_fingerprint(GPU)
    assert detect() == [GPU] and detect() == [GPU]
    reserve = static_reservation(envs={"A": "1"}, mounts=[Mount("/t", "/h")])
    assert reserve(["0"]) == Reservation({"A": "1"}, (Mount("/t", "/h"),))
    given = Reservation(devices=(DeviceSpec("/dev/x", "/dev/x", "rwm"),))
    assert static_reservation(given)([]) is given
    report = group_stats(GPU)
    stats = static_stats(report)
    assert stats() == [report] and stats() == [report]


def test_error_hooks_raise() -> None:
    with pytest.raises(OSError, match="bus"):
        error_fingerprint(OSError("bus error"))()
    with pytest.raises(NotFound):
        error_reserve(NotFound("no such device"))(["9"])
    with pytest.raises(TimeoutError):
        error_stats(TimeoutError())()


async def _take(stream: AsyncIterator[T], n: int, timeout: float = 2.0) -> list[T]:
    out: list[T] = []
    async with asyncio.timeout(timeout):
        async for item in stream:
            out.append(item)
            if len(out) == n:
                break
    return out


def test_static_fingerprint_stream_sends_states_then_stays_open() -> None:
    other = device_group("nvidia", "gpu", "a100", ["2"])

    async def scenario() -> tuple[list[Sequence[DeviceGroup]], bool]:
        stream = static_fingerprint_stream([GPU], [GPU, other])()
        states = await _take(stream, 2)
        try:
            await asyncio.wait_for(anext(stream), 0.1)
        except TimeoutError:
            return states, True
        return states, False

    states, still_open = asyncio.run(scenario())
    assert states == [[GPU], [GPU, other]]
    assert still_open


def test_static_fingerprint_stream_without_states_sends_one_empty_message() -> None:
    assert asyncio.run(_take(static_fingerprint_stream()(), 1)) == [[]]


def test_static_stats_stream_repeats_at_the_interval() -> None:
    stats = group_stats(GPU)

    async def scenario() -> tuple[list[object], float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        got = await _take(static_stats_stream(stats)(0.05), 3)
        return list(got), loop.time() - start

    got, elapsed = asyncio.run(scenario())
    assert got == [[stats]] * 3
    assert elapsed >= 0.09  # first at once, then two intervals
