"""The uevent source: parsing, and real kernel events from writes to ``/sys``.

This machine has no udevd. The kernel's stream is tested with real events:
as root, writing ``change <uuid>`` to a device's ``uevent`` file makes the
kernel emit a synthetic uevent tagged ``SYNTH_UUID=<uuid>``, so each test
recognises its own events even while other tests on the machine write
uevents too (extra events are tolerated, never counted). The udev stream is
tested with a libudev-format message that the test itself multicasts on
netlink group 2, as udevd would.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import struct
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest
from support.sources import needs_root, next_within

from nomad_device.sources import DISABLE_ENV, UEvent, UEvents, udev_running, uevents
from nomad_device.sources import _uevent as ue

LOGGER = "nomad_device.sources.uevent"

# Captured on this machine (Linux 6.18) after `echo change > /sys/devices/virtual/misc/fuse/uevent`.
CAPTURED = (
    b"change@/devices/virtual/misc/fuse\x00ACTION=change\x00DEVPATH=/devices/virtual/misc/fuse"
    b"\x00SUBSYSTEM=misc\x00SYNTH_UUID=0\x00MAJOR=10\x00MINOR=229\x00DEVNAME=fuse\x00SEQNUM=822\x00"
)

# A device whose synthetic events bother nobody: /dev/null exists with or without them.
DEVICE = Path("/sys/devices/virtual/mem/null")
SUBSYSTEM = "mem"


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= 30]


def libudev_message(properties: dict[str, str], magic: int = ue.LIBUDEV_MAGIC) -> bytes:
    """A message as udevd multicasts it: the libudev header, then KEY=value\\0 pairs."""
    blob = b"".join(f"{k}={v}".encode() + b"\0" for k, v in properties.items())
    header = b"libudev\0" + struct.pack(">I", magic)
    header += struct.pack("=IIIIIII", 40, 40, len(blob), 0x1234, 0, 0, 0)
    return header + blob


def synthesise(action: str = "change", device: Path = DEVICE, **args: str) -> str:
    """Make the kernel emit a uevent for ``device``; its SYNTH_UUID."""
    tag = str(uuid.uuid4())
    extra = "".join(f" {k}={v}" for k, v in args.items())
    (device / "uevent").write_text(f"{action} {tag}{extra}")
    return tag


def own(source: UEvents, tags: Iterable[str], timeout: float = 10.0) -> UEvent:
    """The next event carrying one of ``tags``, skipping anyone else's."""
    wanted = set(tags)
    while True:
        event = next_within(source, timeout)
        if event.properties.get("SYNTH_UUID") in wanted:
            return event


# ------------------------------------------------------------------ parsing


def test_parse_a_captured_kernel_message() -> None:
    event = ue.parse(CAPTURED)
    assert event == UEvent(
        action="change",
        devpath="/devices/virtual/misc/fuse",
        subsystem="misc",
        devname="fuse",
        devtype="",
        seqnum=822,
        properties=event.properties if event else {},
        source="kernel",
    )
    assert event is not None
    assert event.properties["MAJOR"] == "10"
    assert event.devnode == "/dev/fuse"
    assert event.sysfs_path == "/sys/devices/virtual/misc/fuse"


def test_parse_a_synthetic_libudev_message() -> None:
    message = libudev_message(
        {
            "ACTION": "add",
            "DEVPATH": "/devices/pci0000:00/0000:00:14.0/usb1/1-2",
            "SUBSYSTEM": "usb",
            "DEVTYPE": "usb_device",
            "DEVNAME": "/dev/bus/usb/001/004",
            "SEQNUM": "4711",
            "ID_VENDOR_ID": "0781",
            "DEVLINKS": "/dev/disk/by-id/usb-x /dev/disk/by-path/y",
        }
    )
    event = ue.parse(message)
    assert event is not None
    assert (event.action, event.subsystem, event.devtype, event.seqnum, event.source) == (
        "add",
        "usb",
        "usb_device",
        4711,
        "udev",
    )
    assert event.devnode == "/dev/bus/usb/001/004"
    assert event.properties["ID_VENDOR_ID"] == "0781"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"no at sign\0ACTION=add\0",
        libudev_message({"ACTION": "add", "DEVPATH": "/x"}, magic=0x12345678),
        libudev_message({"ACTION": "add"}),  # no DEVPATH
        b"libudev\0short",
    ],
)
def test_parse_rejects_what_is_not_a_uevent(data: bytes) -> None:
    assert ue.parse(data) is None


def test_udev_running_looks_for_the_control_socket(tmp_path: Path) -> None:
    assert not udev_running(str(tmp_path / "control"))
    (tmp_path / "control").touch()
    assert udev_running(str(tmp_path / "control"))


# ------------------------------------------------------------------ real kernel events


@needs_root
def test_a_real_kernel_uevent_reaches_the_iterator() -> None:
    with uevents(subsystems=[SUBSYSTEM]) as source:
        tag = synthesise("change", SEENBY="test")
        event = own(source, [tag])
    assert event.action == "change"
    assert event.devpath == "/devices/virtual/mem/null"
    assert event.subsystem == "mem"
    assert event.devname == "null"
    assert event.seqnum > 0
    assert event.properties["SYNTH_ARG_SEENBY"] == "test"
    assert event.source == "kernel" and not event.overflow


@needs_root
def test_a_real_kernel_uevent_async() -> None:
    async def main() -> UEvent:
        async with uevents(subsystems=[SUBSYSTEM], actions=["change"]) as source:
            tag = synthesise()
            async for event in source:
                if event.properties.get("SYNTH_UUID") == tag:
                    return event
        raise AssertionError("the source ended")

    event = asyncio.run(asyncio.wait_for(main(), 30))
    assert event.devpath == "/devices/virtual/mem/null"


@needs_root
def test_filters_by_action_and_subsystem() -> None:
    with (
        uevents(subsystems=[SUBSYSTEM], actions=["add"]) as adds,
        uevents(subsystems=["misc"]) as misc,
    ):
        change = synthesise("change")
        add = synthesise("add")
        fuse = Path("/sys/devices/virtual/misc/fuse")
        other = synthesise("change", fuse) if fuse.exists() else None
        # The change came first, yet only the add gets through.
        assert own(adds, [change, add]).properties["SYNTH_UUID"] == add
        if other is not None:
            assert own(misc, [change, add, other]).properties["SYNTH_UUID"] == other


def test_a_lone_string_is_one_name() -> None:
    with uevents("usb", "add") as source:
        assert source._wanted(UEvent("add", "/devices/x", subsystem="usb"))
        assert not source._wanted(UEvent("add", "/devices/x", subsystem="u"))
        assert not source._wanted(UEvent("remove", "/devices/x", subsystem="usb"))


@needs_root
def test_kernel_stream_ignores_messages_from_userspace() -> None:
    # A process with CAP_NET_ADMIN could multicast a forged "kernel" event on
    # group 1; only port 0, the kernel, is believed.
    with uevents(subsystems=[SUBSYSTEM]) as source:
        forged = str(uuid.uuid4())
        message = (
            f"change@/devices/virtual/mem/null\0ACTION=change\0DEVPATH=/devices/virtual/mem/null"
            f"\0SUBSYSTEM=mem\0SYNTH_UUID={forged}\0SEQNUM=1\0"
        ).encode()
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, ue.NETLINK_KOBJECT_UEVENT) as s:
            s.bind((0, 0))
            s.sendto(message, (0, ue.GROUP_KERNEL))
        real = synthesise()
        assert own(source, [forged, real]).properties["SYNTH_UUID"] == real


@needs_root
def test_dropped_events_say_rescan(caplog: pytest.LogCaptureFixture) -> None:
    # The smallest receive buffer the kernel allows, and 300 events nobody
    # reads meanwhile: the kernel drops some and recvmsg says ENOBUFS.
    with uevents(subsystems=[SUBSYSTEM], buffer_size=1) as source:
        tags = [synthesise() for _ in range(300)]
        last = synthesise()
        seen: list[UEvent] = []
        while not any(e.properties.get("SYNTH_UUID") == last for e in seen):
            seen.append(next_within(source))
            if seen[-1].overflow:
                break
        overflow = next(e for e in seen if e.overflow)
    assert overflow.action == "overflow" and overflow.devpath == ""
    assert len([e for e in seen if e.properties.get("SYNTH_UUID") in tags]) < 300
    [warning] = warnings(caplog)
    assert "dropped device events" in warning


# ------------------------------------------------------------------ the udev stream


@needs_root
def test_udev_stream_reads_libudev_messages(caplog: pytest.LogCaptureFixture) -> None:
    tag = str(uuid.uuid4())
    properties = {
        "ACTION": "add",
        "DEVPATH": f"/devices/virtual/sources-test/{tag}",
        "SUBSYSTEM": "sources-test",
        "DEVNAME": "/dev/sources-test",
        "SEQNUM": "7",
        "TAG": tag,
    }
    with uevents(subsystems=["sources-test"], udev=True) as source:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, ue.NETLINK_KOBJECT_UEVENT) as s:
            s.bind((0, 0))
            s.sendto(libudev_message({**properties, "TAG": "not-ours"}, magic=1), (0, 2))
            s.sendto(libudev_message(properties), (0, ue.GROUP_UDEV))
        while (event := next_within(source)).properties.get("TAG") != tag:
            pass
    assert event.source == "udev"
    assert event.devpath == properties["DEVPATH"]
    assert event.devnode == "/dev/sources-test"
    if not udev_running():
        [warning] = warnings(caplog)
        assert "udevd does not seem to run" in warning


# ------------------------------------------------------------------ fallback


def _blocks_until_closed(source: UEvents) -> None:
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(list(source)), daemon=True)
    reader.start()
    reader.join(0.3)  # not a timing assertion: it must not have returned at all
    assert reader.is_alive() and not result
    source.close()
    reader.join(10)
    assert result == [[]]


def test_disabled_by_environment(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(DISABLE_ENV, "uevent")
    source = uevents(subsystems=[SUBSYSTEM])
    assert not source.available
    _blocks_until_closed(source)
    assert warnings(caplog) == [
        f"kernel device events unavailable (disabled by {DISABLE_ENV});"
        " device changes are seen at the poll period only"
    ]


@pytest.mark.parametrize("code", [errno.EPERM, errno.EPROTONOSUPPORT, errno.EAFNOSUPPORT])
def test_netlink_unavailable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    def refuse(*args: object, **kwargs: object) -> socket.socket:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(ue.socket, "socket", refuse)
    _blocks_until_closed(uevents())
    assert warnings(caplog) == [
        f"kernel device events unavailable (netlink: {os.strerror(code).lower()});"
        " device changes are seen at the poll period only"
    ]


def test_async_fallback_waits_until_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV, "all")

    async def main() -> None:
        with uevents() as source:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(source.__anext__(), 0.2)
            assert not source.closed

    asyncio.run(main())


def test_close_releases_the_socket() -> None:
    before = set(os.listdir("/proc/self/fd"))
    with uevents() as source:
        if source.available:
            assert len(set(os.listdir("/proc/self/fd")) - before) == 2  # socket + eventfd
    assert set(os.listdir("/proc/self/fd")) <= before
