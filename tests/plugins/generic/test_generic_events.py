"""Detection is event-driven: changes show up long before the fingerprint period.

Every test here runs with ``fingerprint_period = "1h"``, so polling cannot be
what reports a change; each change must come in through ``watch()``: inotify
on the fake /dev, or a real kernel uevent.
"""

from __future__ import annotations

import glob
import os
from datetime import timedelta
from pathlib import Path

import pytest
from support.fake_tree import FakeTree, require_root
from support.generic import devices, logged, start, wait_for
from support.processes import Launcher

from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig, PciBlock, UsbBlock

pytestmark = pytest.mark.timeout(120)

HOUR = timedelta(hours=1)


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    require_root()
    return FakeTree(tmp_path / "root")


def test_nodes_and_links_are_seen_through_inotify(launch: Launcher, tree: FakeTree) -> None:
    config = GenericConfig(
        device={
            "modem": DeviceBlock(paths=["/dev/ttyACM*"]),
            "ftdi": DeviceBlock(paths=["/dev/serial/by-id/*"]),
            "raw": DeviceBlock(paths=["/dev/bus/usb/*/*"]),
        },
        fingerprint_period=HOUR,
    )
    launched = start(launch, config, tree.env)
    with launched.client.fingerprint() as stream:
        assert stream.next(15) == []
        tree.char("ttyACM0", 166, 0, subsystem="tty")
        wait_for(stream, lambda g: list(devices(g, "generic/modem/modem")) == ["ttyACM0"])
        # /dev/serial/by-id does not exist yet: udev makes it with the first link.
        tree.char("ttyUSB0", 188, 0, subsystem="tty")
        tree.link("serial/by-id/usb-FTDI_X-if00-port0", "../../ttyUSB0")
        wait_for(
            stream, lambda g: list(devices(g, "generic/ftdi/ftdi")) == ["usb-FTDI_X-if00-port0"]
        )
        # A node two levels below the pattern's fixed directory.
        tree.node("bus/usb/003/007", "char", 189, 262)
        wait_for(stream, lambda g: list(devices(g, "generic/raw/raw")) == ["003/007"])
        tree.remove("ttyACM0")
        wait_for(stream, lambda g: not devices(g, "generic/modem/modem"))
        (tree.dev / "ttyUSB0").chmod(0o000)
        # chmod alone changes nothing for root's access(); replacing the node by a file does.
        tree.remove("ttyUSB0")
        (tree.dev / "ttyUSB0").write_text("")
        wait_for(
            stream,
            lambda g: (
                "now a regular file"
                in devices(g, "generic/ftdi/ftdi")["usb-FTDI_X-if00-port0"].health_description
            ),
        )


def _uevent_file() -> str:
    for pattern in ("/sys/devices/virtual/mem/null/uevent", "/sys/devices/virtual/misc/*/uevent"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    reason = "no /sys/devices/virtual/misc/*/uevent on this machine"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI must synthesise a real kernel uevent")
    pytest.skip(reason)


def test_a_real_kernel_uevent_triggers_a_rescan(launch: Launcher, tree: FakeTree) -> None:
    """The USB device is added to the fake sysfs only, which nothing watches; then a
    real uevent is made by writing ``change`` to a real device's ``uevent`` file."""
    trigger = _uevent_file()
    config = GenericConfig(
        device={
            "ch340": DeviceBlock(usb=[UsbBlock(vendor_id="1a86")]),
            "ready": DeviceBlock(paths=["/dev/ready*"]),
        },
        fingerprint_period=HOUR,
    )
    # Its node exists before the plugin starts (as if udev had made it long ago).
    tree.node("bus/usb/001/002", "char", 189, 1)
    launched = start(launch, config, tree.env)
    with launched.client.fingerprint() as stream:
        assert stream.next(15) == []
        # A node through inotify proves the watches (and the uevent socket, opened
        # before them) are up.
        tree.char("ready0", 240, 0)
        wait_for(stream, lambda g: bool(devices(g, "generic/ready/ready")))
        handle = tree.usb("1-1", 0x1A86, 0x7523, make_nodes=False)
        assert handle.nodes == [tree.dev / "bus/usb/001/002"]
        with open(trigger, "w") as f:
            f.write("change")
        groups = wait_for(stream, lambda g: bool(devices(g, "generic/ch340/ch340")))
    (device,) = devices(groups, "generic/ch340/ch340").values()
    assert device.id == "1a86:7523@1-1"
    assert device.healthy, device.health_description
    assert logged(launched, "device found")


def test_the_directories_watched_follow_the_patterns() -> None:
    from nomad_device.plugins.generic.config import settings_from
    from nomad_device.plugins.generic.events import Tree, watch_dirs
    from nomad_device.plugins.generic.roots import Roots

    kinds = settings_from(
        GenericConfig(
            device={
                "kvm": DeviceBlock(paths=["/dev/kvm", "/dev/net/tun"]),
                "byid": DeviceBlock(paths=["/dev/serial/by-id/*"]),
                "raw": DeviceBlock(paths=["/dev/bus/usb/*/*"], max_watches=9),
                "stick": DeviceBlock(usb=[UsbBlock(vendor_id="10c4")]),
                "pcsc": DeviceBlock(paths=["/run/pcscd/pcscd.comm"]),
                "gpu": DeviceBlock(
                    pci=[PciBlock(driver="amdgpu")], companions=["/dev/kfd", "/dev/hl/ctl*"]
                ),
            }
        )
    ).kinds
    flat, trees = watch_dirs(kinds, Roots("/r/dev", "/r/sys"))
    from nomad_device.plugins.generic.events import SUBSYSTEMS

    # A PCI hot-plug, driver (un)bind and AER recovery are pci uevents; nodes come as
    # drm, accel and VFIO ones.
    assert {"pci", "drm", "accel", "vfio", "vfio-dev"} <= set(SUBSYSTEMS)
    # PCI nodes appear in /dev, /dev/dri, /dev/accel, /dev/vfio; companions are patterns.
    assert sorted(flat) == [
        "/r/dev", "/r/dev/accel", "/r/dev/dri", "/r/dev/hl", "/r/dev/net", "/r/dev/serial/by-id",
        "/r/dev/vfio", "/run/pcscd",
    ]  # fmt: skip
    # Each block's trees are its own, with its own cap.
    assert trees == [
        Tree("raw", ("/r/dev/bus/usb",), ("/dev/bus/usb/*/*",), 9),
        Tree("stick", ("/r/dev/bus/usb",), ("/dev/bus/usb/*/*",), 256),
    ]


def test_without_event_sources_the_period_still_finds_changes(
    launch: Launcher, tree: FakeTree
) -> None:
    from nomad_device.sources import DISABLE_ENV

    config = GenericConfig(
        device={"modem": DeviceBlock(paths=["/dev/ttyACM*"])},
        fingerprint_period=timedelta(milliseconds=200),
    )
    launched = start(launch, config, {**tree.env, DISABLE_ENV: "all"})
    with launched.client.fingerprint() as stream:
        assert stream.next(15) == []
        tree.char("ttyACM0", 166, 0, subsystem="tty")
        wait_for(stream, lambda g: list(devices(g, "generic/modem/modem")) == ["ttyACM0"])
    assert logged(launched, "inotify disabled by")
    assert logged(launched, "(disabled by NOMAD_DEVICE_SOURCES_DISABLE)")  # uevents
