"""PCIe AER in a real kernel: errors injected from QEMU's monitor make the affected
devices unhealthy, with the kernel's counts in the reason, and a recovery the kernel
reports failed keeps them so past the quiet period, until they are removed and
rescanned.

What QEMU 7.2 (Debian 12) delivers: a non-fatal error injected into an endpoint
raises that endpoint's ``aer_dev_nonfatal``; a fatal one is counted only on a
root port (``aer_dev_fatal`` of the port), while the link below it is reset.
virtio-pci has no error callbacks, so the kernel's recovery fails either way:
``FAILED_RECOVERY`` for each device below the port it ran from (Debian's 6.1.0-57
has the 2025 fix "PCI/ERR: Fix uevent on failure to recover"; kernels without it
send it for the port). After the fatal one the function's Command register reads
0, the reset's work, which nothing restores. Correctable errors arrive only from
QEMU 8 on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from support.kernel.guest import devices, uevent_index, write
from support.kernel.kernel_vm import Groups, GuestPlugin, Vm, qemu_version

from kernel.conftest import QUIET_SECONDS, agent_config

pytestmark = pytest.mark.timeout(900)

AER = "generic/aer/aer"
FAILED = "the kernel's PCIe error recovery failed"
UNTIL = "; unhealthy until the function is removed and rescanned, bound again, or recovered"
#: The Command register's I/O and memory space enables.
DECODING = 0x3


def total(vm: Vm, function: str, which: str) -> int:
    text = vm.read(f"/sys/bus/pci/devices/{function}/aer_dev_{which}")
    (line,) = [x for x in text.splitlines() if x.startswith("TOTAL_ERR_")]
    return int(line.split()[1])


def command(vm: Vm, function: str) -> int:
    """The function's Command register, read from its config space in the guest."""
    return int(vm.sh(f"od -An -tx2 -j4 -N2 /sys/bus/pci/devices/{function}/config"), 16)


def failed_at(events: list[dict[str, str]], function: str, port: str) -> str:
    """How the plugin names where the kernel said a recovery of ``function`` failed:
    ``""`` for the function itself, `` on <port> (the port above it)`` for its port;
    ``"?"`` while it has said neither."""
    failed = {
        e.get("DEVPATH", "").rsplit("/", 1)[-1]
        for e in events
        if e.get("ERROR_EVENT") == "FAILED_RECOVERY"
    }
    if function in failed:
        return ""
    return f" on {port} (the port above it)" if port in failed else "?"


def remove_and_rescan(vm: Vm, functions: Sequence[str]) -> None:
    """What makes a function anew: ``remove``, then a rescan of the buses."""
    for function in functions:
        write(vm, f"/sys/bus/pci/devices/{function}/remove", "1")
    write(vm, "/sys/bus/pci/rescan", "1")


def test_errors_make_the_affected_devices_unhealthy_and_a_failed_recovery_keeps_them_so(
    vm: Vm, plugin: GuestPlugin, addresses: dict[str, str]
) -> None:
    endpoint, below = addresses["aer1"], addresses["aer2"]
    port1, port2 = addresses["rp-aer1"], addresses["rp-aer2"]
    groups = plugin.current()
    assert all(d.healthy for d in devices(groups, AER).values()), groups
    assert set(devices(groups, AER)) == {endpoint, below}
    assert command(vm, below) & DECODING
    since = uevent_index(vm)

    # A non-fatal error on one endpoint, a fatal one on the other's root port, at once.
    vm.qmp.hmp("pcie_aer_inject_error aer1 POISON_TLP")
    vm.qmp.hmp("pcie_aer_inject_error rp-aer2 DLP")
    pairs = ((endpoint, port1), (below, port2))
    events = vm.wait_uevents(lambda es: all(failed_at(es, f, p) != "?" for f, p in pairs), since)
    where = {f: failed_at([e for _, e in events], f, p) for f, p in pairs}

    def both_failed(groups: Groups) -> bool:
        found = devices(groups, AER)
        return all(FAILED in found[a].health_description for a in (endpoint, below))

    found = devices(plugin.wait_for(both_failed), AER)
    assert total(vm, endpoint, "nonfatal") == 1
    assert total(vm, port2, "fatal") == 1
    assert total(vm, below, "fatal") == 0  # the kernel counts it on the port only
    first, second = found[endpoint].health_description, found[below].health_description
    assert first.startswith("PCIe AER reported 1 non-fatal error at "), first
    assert f"; {FAILED}{where[endpoint]} at " in first, first
    assert second.startswith(f"PCIe AER reported 1 fatal error on {port2} (the port above it) at ")
    assert f"; {FAILED}{where[below]} at " in second, second

    # The quiet period passes (the plugin's own scan: its fingerprint_period is an
    # hour): the AER counts leave the reasons, the failed recoveries stay.
    groups = plugin.wait_for(
        lambda gs: all("PCIe AER" not in d.health_description for d in devices(gs, AER).values()),
        timeout=QUIET_SECONDS + 300,
    )
    for function, _ in pairs:
        device = devices(groups, AER)[function]
        assert not device.healthy, device
        assert device.health_description.startswith(f"{FAILED}{where[function]} at "), device
        assert device.health_description.endswith(UNTIL), device

    # What each left: the fatal error's link reset cleared the Command register below
    # that port, which nothing restored; the non-fatal one reset nothing.
    assert command(vm, below) & DECODING == 0
    assert command(vm, endpoint) & DECODING

    # A plugin started now heard none of it: it sees the cleared register, and only that.
    restarted = vm.launch(agent_config(addresses))
    try:
        found = devices(restarted.current(), AER)
        assert found[below].health_description == (
            f"{below} lost its configuration: virtio-pci enabled it, yet it decodes neither"
            " memory nor I/O (as a reset leaves it: a failed error recovery?)"
        )
        assert found[endpoint].healthy, found[endpoint]

        # Removed and rescanned: new devices, configured anew, healthy for both plugins.
        remove_and_rescan(vm, (endpoint, below))

        def anew(groups: Groups) -> bool:
            found = devices(groups, AER)
            return set(found) == {endpoint, below} and all(d.healthy for d in found.values())

        for hosted in (plugin, restarted):
            hosted.wait_for(anew)
        assert command(vm, below) & DECODING
    finally:
        restarted.kill()


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
    # Its recovery fails (virtio-pci): past the quiet period that alone is left.
    plugin.wait_for(
        lambda gs: devices(gs, AER)[endpoint].health_description.startswith(FAILED),
        timeout=QUIET_SECONDS + 300,
    )
    remove_and_rescan(vm, (endpoint,))
    plugin.wait_for(
        lambda gs: devices(gs, AER).get(endpoint) is not None and devices(gs, AER)[endpoint].healthy
    )
