"""nomad-device-nvidia resets a GPU after the allocation holding it ended (``reset_on_release``).

Against the fake NVML (which writes down every device command it carries out,
``FAKE_NVML_CALLS``) and the SDK's fake agent API: the clocks a task may have
locked go back to their defaults, each where the GPU has the call; a process
that outlived its task keeps the GPU unhealthy until it is gone; a refusal
by NVML is the reason shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fakenvml import A100, gpu, gpu_uuid
from support.nvidia import Scenarios, devices, until

from nomad_device.errors import InvalidArgument
from nomad_device.plugin.nomadapi import NomadConfig
from nomad_device.plugins.nvidia.config import NvidiaConfig, settings_from
from nomad_device.testing.nomadagent import FakeNomadAgent

pytest.importorskip("pynvml")

GROUP = ("nvidia", "gpu", A100)
G0, G1 = gpu_uuid(0), gpu_uuid(1)
ALL = [
    "nvmlDeviceResetGpuLockedClocks",
    "nvmlDeviceResetMemoryLockedClocks",
    "nvmlDeviceResetApplicationsClocks",
]


@pytest.fixture
def agent() -> Iterator[FakeNomadAgent]:
    fake = FakeNomadAgent(heartbeat=0.2)
    fake.start()
    yield fake
    fake.stop()


def health(groups: list[Any], device_id: str) -> tuple[bool, str]:
    device = devices(groups)[device_id]
    return device.healthy, device.health_description


def calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def start(
    nvidia: Any, scenario: Any, agent: FakeNomadAgent, tmp_path: Path, **settings: Any
) -> tuple[Any, Path]:
    record = tmp_path / "nvml-calls"
    nomad = {"address": agent.address, "state_dir": str(tmp_path / "state")}
    plugin = nvidia(
        scenario.env(FAKE_NVML_CALLS=str(record)),
        reset_on_release=True,
        nomad=nomad,
        **settings,
    )
    return plugin, record


def test_a_released_gpu_gets_its_clocks_back_before_it_is_healthy(
    scenario: Scenarios, nvidia: Any, agent: FakeNomadAgent, tmp_path: Path
) -> None:
    live = scenario({"gpus": [gpu(0), gpu(1, processes=1), gpu(2, arch=60)]})
    plugin, record = start(nvidia, live, agent, tmp_path)
    with plugin.client.fingerprint() as stream:
        until(stream, lambda g: len(devices(g)) == 3)
        agent.place("a1", [(*GROUP, [G0])], status="running")
        agent.place("a2", [(*GROUP, [G1])], status="running")
        agent.place("a3", [(*GROUP, [gpu_uuid(2)])], status="running")
        plugin.wait_for_log(lambda e: "following the allocations" in e.message, 30)
        for alloc in ("a1", "a2", "a3"):
            agent.set_status(alloc, "complete")
        # A task's process still holds GPU 1: not ready for the next one.
        stuck = "cleaning after a2 failed: 1 process(es) still use it (pid 4000)"
        until(stream, lambda g: health(g, G1) == (False, stuck), timeout=60)
        live.set(1, processes=0)
        every = (G0, G1, gpu_uuid(2))
        until(stream, lambda g: all(health(g, i) == (True, "") for i in every), timeout=60)
    done = calls(record)
    assert [c for c in done if c.endswith(" gpu0")] == [f"{name} gpu0" for name in ALL]
    assert [c for c in done if c.endswith(" gpu1")] == [f"{name} gpu1" for name in ALL]
    # A Pascal GPU has no locked clocks: only what it has is reset.
    assert [c for c in done if c.endswith(" gpu2")] == ["nvmlDeviceResetApplicationsClocks gpu2"]


def test_nvml_refusing_a_reset_is_the_reason_shown(
    scenario: Scenarios, nvidia: Any, agent: FakeNomadAgent, tmp_path: Path
) -> None:
    live = scenario({"root": 0, "gpus": [gpu(0)]})
    plugin, record = start(nvidia, live, agent, tmp_path)
    with plugin.client.fingerprint() as stream:
        until(stream, lambda g: G0 in devices(g))
        agent.place("a1", [(*GROUP, [G0])], status="running")
        plugin.wait_for_log(lambda e: "following the allocations" in e.message, 30)
        agent.set_status("a1", "failed")
        reason = (
            "cleaning after a1 failed: nvmlDeviceResetGpuLockedClocks failed:"
            " NVML_ERROR_NO_PERMISSION (4)"
        )
        until(stream, lambda g: health(g, G0) == (False, reason), timeout=60)
    assert calls(record) == []


def test_reset_on_release_needs_the_nomad_block_and_a_gpu_of_its_own() -> None:
    with pytest.raises(InvalidArgument, match="needs the nomad block"):
        settings_from(NvidiaConfig(reset_on_release=True))
    with pytest.raises(InvalidArgument, match="share > 1"):
        settings_from(NvidiaConfig(reset_on_release=True, share=2, nomad=NomadConfig()))
    assert settings_from(NvidiaConfig(reset_on_release=True, nomad=NomadConfig())).reset_on_release
