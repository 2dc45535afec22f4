"""PCIe AER in a real kernel: errors injected from QEMU's monitor make the affected
devices unhealthy, with the kernel's counts in the reason, until the quiet period passes.

What QEMU 7.2 (Debian 12) delivers: a non-fatal error injected into an endpoint
raises that endpoint's ``aer_dev_nonfatal``; a fatal one is counted only on a
root port (``aer_dev_fatal`` of the port), while the link below it is reset and
the device's recovery fails. Correctable errors arrive only from QEMU 8 on.
"""

from __future__ import annotations

import time

import pytest

from kernel.conftest import QUIET_SECONDS
from kernel.guest import devices
from kernel.kernel_vm import Groups, GuestPlugin, Vm, qemu_version

pytestmark = pytest.mark.timeout(900)

AER = "generic/aer/aer"


def total(vm: Vm, function: str, which: str) -> int:
    text = vm.read(f"/sys/bus/pci/devices/{function}/aer_dev_{which}")
    (line,) = [x for x in text.splitlines() if x.startswith("TOTAL_ERR_")]
    return int(line.split()[1])


def test_errors_make_the_affected_devices_unhealthy_until_the_quiet_period_passes(
    vm: Vm, plugin: GuestPlugin, addresses: dict[str, str]
) -> None:
    endpoint, below = addresses["aer1"], addresses["aer2"]
    port = addresses["rp-aer2"]
    groups = plugin.current()
    assert all(d.healthy for d in devices(groups, AER).values()), groups
    assert set(devices(groups, AER)) == {endpoint, below}

    # A non-fatal error on one endpoint, a fatal one on the other's root port, at once:
    # both wait out the same quiet period.
    vm.qmp.hmp("pcie_aer_inject_error aer1 POISON_TLP")
    vm.qmp.hmp("pcie_aer_inject_error rp-aer2 DLP")

    def both_sick(groups: Groups) -> bool:
        found = devices(groups, AER)
        return all(not found[a].healthy for a in (endpoint, below))

    found = devices(plugin.wait_for(both_sick), AER)
    assert total(vm, endpoint, "nonfatal") == 1
    assert total(vm, port, "fatal") == 1
    assert total(vm, below, "fatal") == 0  # the kernel counts it on the port only
    assert found[endpoint].health_description.startswith("PCIe AER reported 1 non-fatal error at ")
    assert found[below].health_description.startswith(
        f"PCIe AER reported 1 fatal error on {port} (the port above it) at "
    ), found[below]

    # Healthy again once the quiet period has passed without another error: the
    # plugin's fingerprint_period is an hour, so this is the scan it schedules itself.
    plugin.wait_for(
        lambda gs: all(d.healthy for d in devices(gs, AER).values()),
        timeout=QUIET_SECONDS + 300,
    )


def test_correctable_errors_are_not_held_against_a_device(
    vm: Vm, plugin: GuestPlugin, addresses: dict[str, str]
) -> None:
    """A correctable error (the link recovered by itself) and then a non-fatal one: the
    reason counts the non-fatal one alone."""
    version = qemu_version()
    if version < (8, 0):
        pytest.skip(f"QEMU {version[0]}.{version[1]} delivers no correctable errors (8.0 does)")
    endpoint = addresses["aer1"]
    before = total(vm, endpoint, "correctable")
    plugin.current()
    vm.qmp.hmp("pcie_aer_inject_error -c aer1 0x40")  # Bad TLP (by name: not with -c)
    deadline = time.monotonic() + 120
    while total(vm, endpoint, "correctable") == before:  # no uevent tells of it
        assert time.monotonic() < deadline, "the kernel never counted the correctable error"
        time.sleep(0.2)
    vm.qmp.hmp("pcie_aer_inject_error aer1 POISON_TLP")
    groups = plugin.wait_for(lambda gs: not devices(gs, AER)[endpoint].healthy)
    sick = devices(groups, AER)[endpoint]
    assert sick.health_description.startswith("PCIe AER reported 1 non-fatal error at "), sick
    plugin.wait_for(lambda gs: devices(gs, AER)[endpoint].healthy, timeout=QUIET_SECONDS + 300)
