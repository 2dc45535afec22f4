"""Every class of GPU over the real wire: healthy GPUs stay healthy, every fault signal shows.

One plugin process per profile (``profiles.py``), loading the fake NVML
through the real ``pynvml``. First it must report the profile's devices,
healthy in every message for several scans, with exactly the attributes and
statistics NVML gives for that class. Then each fault signal that class can
give is raised on its first GPU, one after the other: the GPU must turn
unhealthy with a reason that names the source, the other GPUs must stay
healthy, and it must recover once the signal is gone (``recovery_quiet_period
= "0s"``). The conformance suite runs on every profile as well, and on a
node without the driver library at all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support import nvidia_profiles as profiles
from support.fakenvml import (
    DOUBLE_BIT_ECC,
    ERROR_UNKNOWN,
    GPU_RECOVERY_ACTION,
    GPU_UNAVAILABLE,
    XID,
    Scenario,
)
from support.nvidia import PLUGIN, Scenarios, devices, until

from nomad_device.model import DeviceGroup
from nomad_device.plugins.nvidia.stats import STAT_NAMES
from nomad_device.testing.conformance import SuiteOptions, run_conformance

pytest.importorskip("pynvml")

#: The attributes of the Go plugin, which a GPU has unless its class lacks one.
ATTRIBUTES = frozenset(
    {
        "memory",
        "power",
        "bar1",
        "cores_clock",
        "memory_clock",
        "pci_bandwidth",
        "driver_version",
        "display_state",
        "persistence_mode",
    }
)

SETTINGS = {"fingerprint_period": "200ms", "recovery_quiet_period": "0s", "temperature_limit": 90}

Apply = Callable[[Scenario], object]


def _nothing(live: Scenario) -> None:
    """Events are moments: nothing to undo, the quiet period of zero ends the mark."""


def _recovery(action: int) -> Apply:
    def apply(live: Scenario) -> None:
        live.set(0, recovery_action=action)
        live.fire(0, GPU_RECOVERY_ACTION)

    return apply


def _more_ecc_errors(live: Scenario) -> None:
    live.set(0, ecc_uncorrected_total=int(live.data["gpus"][0]["ecc_uncorrected_total"]) + 2)


#: For each fault signal: how to raise it on GPU 0, how to end it, and the start of the reason.
FAULTS: dict[str, tuple[Apply, Apply, str]] = {
    profiles.XID: (
        lambda s: s.fire(0, XID, 79),
        _nothing,
        "XID 79: GPU has fallen off the bus (NVML XID event); ",
    ),
    profiles.DBE: (
        lambda s: s.fire(0, DOUBLE_BIT_ECC),
        _nothing,
        "double-bit ECC error (NVML event); ",
    ),
    profiles.UNAVAILABLE: (
        lambda s: s.fire(0, GPU_UNAVAILABLE),
        _nothing,
        "GPU unavailable (NVML event); ",
    ),
    profiles.RECOVERY: (
        _recovery(1),
        _recovery(0),
        "NVML asks to reset the GPU (nvmlDeviceGetFieldValues: GPU_RECOVERY_ACTION = 1)",
    ),
    profiles.ECC_COUNT: (_more_ecc_errors, _nothing, "uncorrectable ECC errors rose from "),
    profiles.RETIRED_PAGES: (
        lambda s: s.set(0, retired_pages_pending=1),
        lambda s: s.set(0, retired_pages_pending=0),
        "retired memory pages pending (nvmlDeviceGetRetiredPagesPendingStatus); ",
    ),
    profiles.REMAPPED_ROWS: (
        lambda s: s.set(0, remapped_rows_pending=1),
        lambda s: s.set(0, remapped_rows_pending=0),
        "memory row remapping pending (nvmlDeviceGetRemappedRows); ",
    ),
    profiles.IDENTITY: (
        lambda s: s.update(
            errors=[{"call": "nvmlDeviceGetName", "target": "gpu0", "code": ERROR_UNKNOWN}]
        ),
        lambda s: s.update(errors=[]),
        "nvmlDeviceGetName answered NVML_ERROR_UNKNOWN (999) in 3 scans in a row; ",
    ),
    profiles.TEMPERATURE: (
        lambda s: s.set(0, temperature=95),
        lambda s: s.set(0, temperature=31),
        "temperature 95 C at or above the limit of 90 C (nvmlDeviceGetTemperature, ",
    ),
    profiles.LOST: (
        lambda s: s.set(0, lost=1),
        lambda s: s.set(0, lost=None),
        "GPU is lost: nvmlDeviceGetHandleByIndex answered NVML_ERROR_GPU_IS_LOST (15); ",
    ),
}


def _on_gpu0(profile: profiles.Profile) -> set[str]:
    """The devices of the profile's first GPU: the GPU, or its MIG instances."""
    first = profile.scenario["gpus"][0]
    if first.get("mig_mode") == 1:
        return {m["uuid"] for m in first["mig"] if m}
    return {first["uuid"]}


def _all_healthy(groups: list[DeviceGroup]) -> bool:
    return all(device.healthy for group in groups for device in group.devices)


@pytest.mark.parametrize("name", list(profiles.PROFILES))
def test_a_profile_is_healthy_and_shows_every_fault_it_can_give(
    name: str, scenario: Scenarios, nvidia: Any
) -> None:
    profile = profiles.PROFILES[name]()
    live = scenario(profile.scenario)
    plugin = nvidia(live.env(), **SETTINGS)
    with plugin.client.fingerprint() as stream, plugin.client.fingerprint() as window:
        # Healthy in every message for six scans: the engine sends a message only
        # when something changed, so any unhealthy verdict would arrive here.
        groups = list(window.next(timeout=20))
        if set(devices(groups)) != set(profile.devices):  # the first scan may see less
            groups = until(window, lambda gs: set(devices(gs)) == set(profile.devices))
        deadline = time.monotonic() + 1.2
        while (left := deadline - time.monotonic()) > 0:
            assert _all_healthy(groups), [d for g in groups for d in g.devices if not d.healthy]
            try:
                groups = list(window.next(timeout=left))
            except TimeoutError:
                break  # no change: still healthy (the window stream is closed now)
        assert _all_healthy(groups)
        assert set(devices(groups)) == set(profile.devices)
        assert sorted(g.name for g in groups) == sorted(profile.groups)
        for group in groups:
            assert set(group.attributes) == ATTRIBUTES - profile.absent_attributes, group.name
        if not profile.devices:
            (line,) = plugin.wait_for_log(lambda e: profile.empty_reason in e.message)
            assert line.level == ("error" if name == "mismatch" else "info")
            return
        with plugin.client.stats(interval=0.2) as stats:
            for group_stats in stats.next(timeout=20):
                for instance, values in group_stats.instance_stats.items():
                    assert values.stats is not None
                    assert set(values.stats.attributes) == set(STAT_NAMES) - profile.absent_stats, (
                        instance
                    )
        assert not [e for e in plugin.logs if e.level == "error"], plugin.messages()

        targets = _on_gpu0(profile)
        others = set(profile.devices) - targets
        if profile.faults & {profiles.XID, profiles.DBE, profiles.UNAVAILABLE, profiles.RECOVERY}:
            assert plugin.wait_for_log(lambda e: e.message.startswith("watching NVML events"), 30)
        # Events first: a lost GPU leaves the event set, and events that happen
        # before it is watched again are not delivered (nvml.h).
        for fault in [f for f in FAULTS if f in profile.faults]:
            raise_it, end_it, reason = FAULTS[fault]
            raise_it(live)
            sick = until(
                stream, lambda gs: targets <= {d for d, v in devices(gs).items() if not v.healthy}
            )
            for device_id in targets:
                assert devices(sick)[device_id].health_description.startswith(reason), fault
            assert all(devices(sick)[device_id].healthy for device_id in others), fault
            end_it(live)
            until(stream, _all_healthy)


def test_the_conformance_suite_passes_on_every_profile(scenario: Scenarios, tmp_path: Path) -> None:
    envs = {name: scenario(make().scenario).env() for name, make in profiles.PROFILES.items()}
    # And on a node without the driver: the binding installed, no libnvidia-ml.so.1.
    empty = tmp_path / "no-driver"
    empty.mkdir()
    envs["no-library"] = {**os.environ, "LD_LIBRARY_PATH": str(empty)}
    envs["no-library"].pop("FAKE_NVML_SCENARIO", None)
    with ThreadPoolExecutor(3) as pool:
        runs = {
            name: pool.submit(run_conformance, PLUGIN, SuiteOptions(env=env))
            for name, env in envs.items()
        }
        reports = {name: run.result() for name, run in runs.items()}
    for name, report in reports.items():
        make = profiles.PROFILES.get(name)
        expected = len(make().devices) if make else 0
        report.assert_ok(allow_warnings=False)
        assert report.result("stable-ids").summary == (
            f"the same {expected} device ID(s) after a restart"
        ), name
