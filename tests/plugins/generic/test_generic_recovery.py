"""The kernel's PCIe error recovery, over the real wire: a recovery that failed keeps a
function unhealthy until it is made anew, and a plugin started later sees what it left.

The uevents are the kernel's own: handed to it in the plugin's network namespace,
which it broadcasts as it broadcasts those of a real recovery (support.generic's
KernelUevents), each with the ``ERROR_EVENT`` and ``DEVICE_ONLINE`` of
``pci_uevent_ers``. The function directories are a fake sysfs (fake_tree.py), laid
out as a real kernel lays them out, so each uevent's ``DEVPATH`` names a function or
port there. ``fingerprint_period`` is an hour: what changes is seen from the uevents,
or from the plugin's own timer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fake_tree import FakeTree, require_root
from support.generic import (
    COMMAND,
    NETNS,
    Groups,
    KernelUevents,
    announce,
    devices,
    pci_uevent_file,
    preset_config_with,
    require_netns,
    wait_for,
)
from support.pci_layouts import PCI_IDS, amd_rocm
from support.processes import Launched, Launcher

pytestmark = pytest.mark.timeout(180)

KEY = "amd/gpu/instinct"
GPU, OTHER = "0000:03:00.0", "0000:c3:00.0"
#: The root port above GPU, and the GPU, as a uevent's DEVPATH names them.
PORT_PATH = "/devices/pci0000:00/0000:00:01.1"
GPU_PATH = f"{PORT_PATH}/0000:01:00.0/0000:02:00.0/{GPU}"
OTHER_PATH = f"/devices/pci0000:c0/0000:c0:01.1/0000:c1:00.0/0000:c2:00.0/{OTHER}"
FAILED = {"ERROR_EVENT": "FAILED_RECOVERY", "DEVICE_ONLINE": "0"}
RECOVERED = {"ERROR_EVENT": "SUCCESSFUL_RECOVERY", "DEVICE_ONLINE": "1"}
UNTIL = "; unhealthy until the function is removed and rescanned, bound again, or recovered"


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    require_root()
    fake = FakeTree(tmp_path / "root")
    fake.pci_ids(PCI_IDS)
    return fake


def reason(groups: Groups, device: str) -> str:
    found = devices(groups, KEY).get(device)
    return "(absent)" if found is None else found.health_description


def healthy(groups: Groups, device: str) -> bool:
    found = devices(groups, KEY).get(device)
    return found is not None and found.healthy


def start_amd(launch: Launcher, tree: FakeTree, command: list[str] = NETNS) -> Launched:
    launched = launch(command, env={**os.environ, **tree.env})
    launched.client.set_config(
        preset_config_with("amd", 'recovery_quiet_period = "1s"\n    fingerprint_period = "1h"')
    )
    return launched


@pytest.fixture
def kernel(launch: Launcher, tree: FakeTree) -> Iterator[tuple[Launched, KernelUevents]]:
    """The amd preset's plugin on two MI210s, each behind a switch below a root port of
    its own, in a network namespace of its own; and the kernel's uevents there."""
    require_netns()
    amd_rocm(tree)
    launched = start_amd(launch, tree)
    uevents = KernelUevents(launched.client.process.pid)
    try:
        yield launched, uevents
    finally:
        uevents.close()


def test_a_failed_recovery_on_the_port_above_outlasts_the_quiet_period(
    kernel: tuple[Launched, KernelUevents], tree: FakeTree
) -> None:
    """A real kernel (tests/kernel/test_kernel_aer.py) counts a fatal error on the root
    port, resets the link below and, the device's driver having no say, sends
    FAILED_RECOVERY for the port: the GPU below stays unhealthy past the 1 s quiet
    period, until it is removed and rescanned (``remove``, then ``add``)."""
    launched, uevents = kernel
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
        assert healthy(groups, GPU) and healthy(groups, OTHER), groups
        tree.aer(tree.sys / PORT_PATH.lstrip("/"), 1, 0)
        uevents.send("change", PORT_PATH, **FAILED)
        groups = wait_for(stream, lambda g: "recovery failed" in reason(g, GPU))
        assert healthy(groups, OTHER)
        failed = re.fullmatch(
            r"PCIe AER reported 1 fatal error on 0000:00:01.1 \(the port above it\) at (\S+);"
            r" the kernel's PCIe error recovery failed on 0000:00:01.1 \(the port above it\)"
            r" at (\S+)" + re.escape(UNTIL),
            reason(groups, GPU),
        )
        assert failed is not None, reason(groups, GPU)
        # The quiet period ends (the plugin's own timer: no uevent, a period of an
        # hour): the AER part goes, the failed recovery stays.
        groups = wait_for(stream, lambda g: "PCIe AER" not in reason(g, GPU))
        assert reason(groups, GPU) == (
            "the kernel's PCIe error recovery failed on 0000:00:01.1 (the port above it)"
            f" at {failed.group(2)}{UNTIL}"
        )
        # A driver bound to the port, or a port's recovery that began, lifts nothing.
        uevents.send("bind", PORT_PATH, DRIVER="pcieport")
        uevents.send("change", PORT_PATH, ERROR_EVENT="BEGIN_RECOVERY", DEVICE_ONLINE="0")
        uevents.send("remove", GPU_PATH)
        uevents.send("add", GPU_PATH)
        groups = wait_for(stream, lambda g: healthy(g, GPU))
        assert healthy(groups, OTHER)


def test_a_failed_recovery_of_the_function_until_it_is_bound_again_or_recovers(
    kernel: tuple[Launched, KernelUevents],
) -> None:
    """FAILED_RECOVERY for the function itself (its driver gave up on it): unhealthy
    until a driver is bound to it again; again until a recovery of it succeeds."""
    launched, uevents = kernel
    with launched.client.fingerprint() as stream:
        assert healthy(stream.next(15), OTHER)
        uevents.send("change", OTHER_PATH, **FAILED)
        groups = wait_for(stream, lambda g: not healthy(g, OTHER))
        text = reason(groups, OTHER)
        assert re.fullmatch(
            r"the kernel's PCIe error recovery failed at \S+" + re.escape(UNTIL), text
        ), text
        assert healthy(groups, GPU)
        uevents.send("unbind", OTHER_PATH)
        uevents.send("bind", OTHER_PATH, DRIVER="amdgpu")
        wait_for(stream, lambda g: healthy(g, OTHER))
        uevents.send("change", OTHER_PATH, **FAILED)
        wait_for(stream, lambda g: not healthy(g, OTHER))
        uevents.send("change", OTHER_PATH, **RECOVERED)
        wait_for(stream, lambda g: healthy(g, OTHER))


def test_a_restarted_plugin_sees_what_a_failed_recovery_left(
    launch: Launcher, tree: FakeTree
) -> None:
    """A plugin started after the recovery failed heard none of its uevents, but the
    function shows it: the link reset cleared its Command register, which nothing
    restored (a real kernel, tests/kernel/test_kernel_aer.py), or it does not answer at
    all. Removed and rescanned, it is configured anew and healthy."""
    layout = amd_rocm(tree)
    trigger = pci_uevent_file()
    gpu, other = layout.functions[GPU], layout.functions[OTHER]
    tree.config(gpu, command=0)
    tree.config(other, dead=True)
    launched = start_amd(launch, tree, COMMAND)
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
        assert reason(groups, GPU) == (
            f"{GPU} lost its configuration: amdgpu enabled it, yet it decodes neither memory"
            " nor I/O (as a reset leaves it: a failed error recovery?)"
        )
        assert reason(groups, OTHER) == f"{OTHER} does not answer: its config space reads all ones"
        tree.config(gpu)
        tree.config(other)
        announce(trigger)
        wait_for(stream, lambda g: healthy(g, GPU) and healthy(g, OTHER))
