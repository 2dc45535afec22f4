"""nomad-device-generic over the real wire, on a fake /dev and /sys (see fake_tree.py).

The plugin runs as a subprocess, launched and driven the way a Nomad client
does it; only the roots it looks at are fakes, because this machine has no USB
bus and no udevd.
"""

from __future__ import annotations

import re
import shutil
import time
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from support.fake_tree import TTY_USB_MAJOR, FakeTree, require_root
from support.generic import Groups, by_key, devices, logged, start, wait_for
from support.processes import Launcher

from nomad_device.config import encode_config
from nomad_device.host import CallError
from nomad_device.model import Attribute, DeviceSpec, Mount
from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig, ProbeBlock, UsbBlock

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    require_root()
    return FakeTree(tmp_path / "root")


def config(**blocks: DeviceBlock) -> GenericConfig:
    return GenericConfig(device=blocks, fingerprint_period=_ms(200))


def _ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


# ------------------------------------------------------------------------------ USB


def test_usb_devices_with_and_without_serial(launch: Launcher, tree: FakeTree) -> None:
    stick = tree.usb(
        "1-1.4", 0x10C4, 0xEA60, serial="0001", manufacturer="Silicon Labs",
        product="CP2102 USB to UART", tty=("ttyUSB0", 0),
    )  # fmt: skip
    tree.usb("1-1.2", 0x1A86, 0x7523, product="USB Serial", tty=("ttyUSB1", 1))
    launched = start(
        launch,
        config(
            zigbee=DeviceBlock(usb=[UsbBlock(vendor_id="10c4", product_id="ea60")]),
            ch340=DeviceBlock(usb=[UsbBlock(vendor_id="1A86")], type="serial", name="ch340"),
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
    zigbee = by_key(groups)["generic/zigbee/zigbee"]
    (device,) = zigbee.devices
    assert device.id == "10c4:ea60:0001"
    assert device.healthy, device.health_description
    assert device.pci_bus_id == "0000:00:14.0"
    assert zigbee.attributes["usb_vendor_id"] == Attribute(0x10C4)
    assert zigbee.attributes["usb_product_id"] == Attribute(0xEA60)
    assert zigbee.attributes["usb_serial"] == Attribute("0001")
    assert zigbee.attributes["usb_manufacturer"] == Attribute("Silicon Labs")
    assert zigbee.attributes["usb_product"] == Attribute("CP2102 USB to UART")
    ch340 = by_key(groups)["generic/serial/ch340"]
    assert [d.id for d in ch340.devices] == ["1a86:7523@1-1.2"]
    assert "usb_serial" not in ch340.attributes

    reservation = launched.client.reserve(["10c4:ea60:0001"])
    bus_node = stick.nodes[0]
    assert reservation.devices == (
        DeviceSpec("/dev/ttyUSB0", str(tree.dev / "ttyUSB0"), "rw"),
        DeviceSpec("/dev/" + str(bus_node.relative_to(tree.dev)), str(bus_node), "rw"),
    )
    assert reservation.mounts == ()
    assert dict(reservation.envs) == {
        "GENERIC_ZIGBEE_IDS": "10c4:ea60:0001",
        "GENERIC_ZIGBEE_PATHS": "/dev/ttyUSB0",
    }


def test_the_same_device_replugged_elsewhere_keeps_its_id(launch: Launcher, tree: FakeTree) -> None:
    stick = tree.usb("1-1.4", 0x10C4, 0xEA60, serial="A10K", tty=("ttyUSB0", 0))
    plain = tree.usb("1-1.2", 0x1A86, 0x7523, tty=("ttyUSB1", 1))
    launched = start(
        launch,
        config(
            zigbee=DeviceBlock(usb=[UsbBlock(vendor_id="10c4")]),
            ch340=DeviceBlock(usb=[UsbBlock(vendor_id="1a86", product_id="7523")]),
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        first = stream.next(15)
        assert list(devices(first, "generic/zigbee/zigbee")) == ["10c4:ea60:A10K"]
        assert list(devices(first, "generic/ch340/ch340")) == ["1a86:7523@1-1.2"]
        tree.unplug(stick)
        tree.unplug(plain)
        wait_for(stream, lambda g: not g)
        # The serial one goes into another bus and port, and enumerates as ttyUSB3;
        # the one without a serial comes back into its own port with a new devnum.
        moved = tree.usb("2-1", 0x10C4, 0xEA60, serial="A10K", tty=("ttyUSB3", 3))
        tree.usb("1-1.2", 0x1A86, 0x7523, tty=("ttyUSB1", 1))
        groups = wait_for(stream, lambda g: len(g) == 2)
    assert list(devices(groups, "generic/zigbee/zigbee")) == ["10c4:ea60:A10K"]
    assert list(devices(groups, "generic/ch340/ch340")) == ["1a86:7523@1-1.2"]
    reservation = launched.client.reserve(["10c4:ea60:A10K"])
    assert [d.host_path for d in reservation.devices] == [
        str(tree.dev / "ttyUSB3"),
        str(moved.nodes[0]),
    ]
    assert reservation.envs["GENERIC_ZIGBEE_PATHS"] == "/dev/ttyUSB3"


def test_hot_plug_and_unplug_under_a_live_stream(launch: Launcher, tree: FakeTree) -> None:
    launched = start(
        launch,
        config(
            modem=DeviceBlock(paths=["/dev/ttyACM*"]),
            ch340=DeviceBlock(usb=[UsbBlock(vendor_id="1a86")]),
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        assert stream.next(15) == []
        assert logged(launched, "pattern matches nothing")
        tree.char("ttyACM0", 166, 0, subsystem="tty")
        groups = wait_for(stream, lambda g: bool(devices(g, "generic/modem/modem")))
        assert list(devices(groups, "generic/modem/modem")) == ["ttyACM0"]
        plugged = tree.usb("3-2", 0x1A86, 0x7523, tty=("ttyUSB0", 0))
        groups = wait_for(stream, lambda g: bool(devices(g, "generic/ch340/ch340")))
        assert list(devices(groups, "generic/ch340/ch340")) == ["1a86:7523@3-2"]
        tree.remove("ttyACM0")
        wait_for(stream, lambda g: not devices(g, "generic/modem/modem"))
        tree.unplug(plugged)
        wait_for(stream, lambda g: g == [])
        assert logged(launched, "device gone")


def test_a_usb_node_udev_has_not_made_yet_is_unhealthy_until_it_is(
    launch: Launcher, tree: FakeTree
) -> None:
    handle = tree.usb("1-3", 0x0403, 0x6001, serial="FT1", tty=("ttyUSB0", 0))
    tty = tree.dev / "ttyUSB0"
    tty.unlink()
    launched = start(launch, config(ftdi=DeviceBlock(usb=[UsbBlock(vendor_id="0403")])), tree.env)
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
        (device,) = devices(groups, "generic/ftdi/ftdi").values()
        assert not device.healthy
        assert device.health_description == "/dev/ttyUSB0 does not exist"
        tree.node("ttyUSB0", "char", TTY_USB_MAJOR, 5)  # a stale node, wrong minor
        groups = wait_for(stream, lambda g: "stale" in _reason(g, "generic/ftdi/ftdi"))
        assert _reason(groups, "generic/ftdi/ftdi") == (
            "/dev/ttyUSB0 is 188:5, but the kernel's device is 188:0 (a stale node?)"
        )
        tree.node("ttyUSB0", "char", TTY_USB_MAJOR, 0)
        wait_for(stream, lambda g: devices(g, "generic/ftdi/ftdi")["0403:6001:FT1"].healthy)
    assert handle.port == "1-3"


def _reason(groups: Groups, key: str) -> str:
    found = devices(groups, key)
    return next(iter(found.values())).health_description if found else ""


# ------------------------------------------------------------------------- /dev globs


def test_by_id_links_name_their_devices(launch: Launcher, tree: FakeTree) -> None:
    tree.usb("1-1", 0x0403, 0x6001, serial="A10K1X2B", tty=("ttyUSB0", 0))
    name = "usb-FTDI_FT232R_USB_UART_A10K1X2B-if00-port0"
    tree.link(f"serial/by-id/{name}", "../../ttyUSB0")
    launched = start(
        launch,
        config(serial=DeviceBlock(paths=["/dev/ttyUSB*", "/dev/serial/by-id/*"])),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
    (group,) = groups
    assert [d.id for d in group.devices] == [name]
    assert group.attributes["major"] == Attribute(TTY_USB_MAJOR)
    assert group.attributes["minor"] == Attribute(0)
    assert group.attributes["subsystem"] == Attribute("tty")
    # The tty belongs to a USB device: its attributes come along.
    assert group.attributes["usb_vendor_id"] == Attribute(0x0403)
    assert group.attributes["usb_serial"] == Attribute("A10K1X2B")
    assert group.devices[0].pci_bus_id == "0000:00:14.0"
    reservation = launched.client.reserve([name])
    assert reservation.devices == (
        DeviceSpec(f"/dev/serial/by-id/{name}", str(tree.dev / "ttyUSB0"), "rw"),
    )


def test_sharing_offers_instances_that_reserve_one_device(launch: Launcher, tree: FakeTree) -> None:
    tree.char("kvm", 10, 232)
    launched = start(
        launch, config(kvm=DeviceBlock(paths=["/dev/kvm"], share=3, permissions="wr")), tree.env
    )
    with launched.client.fingerprint() as stream:
        (group,) = stream.next(15)
    assert group.key == "generic/kvm/kvm"
    assert [d.id for d in group.devices] == ["kvm::0", "kvm::1", "kvm::2"]
    assert all(d.healthy for d in group.devices)
    reservation = launched.client.reserve(["kvm::2", "kvm::0"])
    assert reservation.devices == (DeviceSpec("/dev/kvm", str(tree.dev / "kvm"), "rw"),)
    assert reservation.envs["GENERIC_KVM_IDS"] == "kvm"
    with launched.client.stats(0.2) as stats:
        (stat_group,) = stats.next(15)
    assert sorted(stat_group.instance_stats) == ["kvm::0", "kvm::1", "kvm::2"]
    details = stat_group.instance_stats["kvm::1"].stats
    assert details is not None
    assert details.attributes["reservations"].int_numerator == 1
    assert details.attributes["nodes"].string_value == "/dev/kvm"


def test_node_checks(launch: Launcher, tree: FakeTree) -> None:
    tree.char("good0", 240, 0)
    tree.node("stale0", "char", 240, 9)  # no device in sysfs has 240:9
    tree.char("turns0", 240, 1)
    (tree.dev / "notes0").write_text("a file, mounted rather than granted\n")
    launched = start(
        launch,
        config(
            thing=DeviceBlock(paths=["/dev/good*", "/dev/stale*", "/dev/turns*", "/dev/notes*"])
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
        found = devices(groups, "generic/thing/thing")
        assert found["good0"].healthy
        assert found["notes0"].healthy
        assert found["stale0"].health_description == (
            "/dev/stale0 is character device 240:9, which no device in the kernel has"
            " (a stale node?)"
        )
        assert found["turns0"].healthy
        tree.remove("turns0")
        (tree.dev / "turns0").write_text("")
        groups = wait_for(stream, lambda g: not devices(g, "generic/thing/thing")["turns0"].healthy)
    assert devices(groups, "generic/thing/thing")["turns0"].health_description == (
        "/dev/turns0 is now a regular file, it was a character device"
    )
    reservation = launched.client.reserve(["good0", "notes0"])
    assert reservation.devices == (DeviceSpec("/dev/good0", str(tree.dev / "good0"), "rw"),)
    # Read-only: no "w" asked for (the default "rw" is for device nodes only).
    assert reservation.mounts == (Mount("/dev/notes0", str(tree.dev / "notes0"), True),)


def test_block_devices_carry_their_size(launch: Launcher, tree: FakeTree) -> None:
    tree.block("sdz", 8, 240, 2 * 1024 * 1024, sysdir="pci0000:00/0000:00:17.0/ata1/block/sdz")
    launched = start(launch, config(disk=DeviceBlock(paths=["/dev/sdz"])), tree.env)
    with launched.client.fingerprint() as stream:
        (group,) = stream.next(15)
    assert group.attributes["size"] == Attribute(1, "GiB")
    assert group.devices[0].pci_bus_id == "0000:00:17.0"
    with launched.client.stats(0.2) as stats:
        (stat_group,) = stats.next(15)
    details = stat_group.instance_stats["sdz"].stats
    assert details is not None
    assert details.attributes["size"].int_numerator == 1 << 30


def test_a_node_claimed_by_two_blocks_is_offered_by_the_first(
    launch: Launcher, tree: FakeTree
) -> None:
    tree.char("ttyS9", 4, 73, subsystem="tty")
    launched = start(
        launch,
        config(
            console=DeviceBlock(paths=["/dev/ttyS*"]),
            modem=DeviceBlock(paths=["/dev/ttyS9"]),
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
    assert list(by_key(groups)) == ["generic/console/console"]
    assert logged(launched, 'only device "console" offers it')


# ----------------------------------------------------------------------------- health


def test_probe_failure_and_recovery(launch: Launcher, tree: FakeTree, tmp_path: Path) -> None:
    tree.char("hsm0", 241, 0)
    flag = tmp_path / "online"
    script = f'test -e {flag} || {{ echo "token not inserted"; echo more; exit 3; }}'
    probe = ProbeBlock(command=["sh", "-c", script], interval=_ms(100), timeout=_ms(5000))
    launched = start(
        launch, config(hsm=DeviceBlock(paths=["/dev/hsm*"], probe=probe, share=2)), tree.env
    )

    def verdicts(groups: Groups) -> set[tuple[bool, str]]:
        """One verdict for every instance: each carries its device's health."""
        return {
            (d.healthy, d.health_description) for d in devices(groups, "generic/hsm/hsm").values()
        }

    with launched.client.fingerprint() as stream:
        groups = wait_for(stream, lambda g: verdicts(g) == {(False, "token not inserted")})
        assert list(devices(groups, "generic/hsm/hsm")) == ["hsm0::0", "hsm0::1"]
        flag.touch()
        wait_for(stream, lambda g: verdicts(g) == {(True, "")})
        flag.unlink()
        wait_for(stream, lambda g: verdicts(g) == {(False, "token not inserted")})
    with launched.client.stats(0.2) as stats:
        (stat_group,) = stats.next(15)
    details = stat_group.instance_stats["hsm0::1"].stats
    assert details is not None
    assert details.attributes["probe_result"].string_value == "token not inserted"
    assert details.attributes["probe_duration"].unit == "ms"
    assert logged(launched, "device healthy again")


def test_probe_timeout_and_environment(launch: Launcher, tree: FakeTree, tmp_path: Path) -> None:
    tree.char("slow0", 242, 0)
    tree.char("env0", 242, 1)
    seen = tmp_path / "seen"
    record = f'echo "$GENERIC_DEVICE_ID $GENERIC_DEVICE_KIND $GENERIC_DEVICE_PATH" >> {seen}'
    launched = start(
        launch,
        config(
            slow=DeviceBlock(
                paths=["/dev/slow0"],
                probe=ProbeBlock(command=["sleep", "30"], timeout=_ms(300), interval=_ms(200)),
            ),
            env=DeviceBlock(
                paths=["/dev/env0"],
                probe=ProbeBlock(command=["sh", "-c", record], interval=_ms(200)),
            ),
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        groups = wait_for(
            stream,
            lambda g: (
                _reason(g, "generic/slow/slow") == "probe timed out after 0.3s"
                and devices(g, "generic/env/env")["env0"].healthy
            ),
        )
    assert len(groups) == 2
    line = seen.read_text().splitlines()[0]
    assert line == f"env0 env {tree.dev / 'env0'}"


def test_a_device_that_vanishes_after_it_was_reserved(launch: Launcher, tree: FakeTree) -> None:
    tree.char("cam0", 81, 0, subsystem="video4linux")
    tree.char("cam1", 81, 1, subsystem="video4linux")
    cfg = config(cam=DeviceBlock(paths=["/dev/cam*"]))
    cfg = GenericConfig(cfg.device, cfg.fingerprint_period, vanished_grace=_ms(3000))
    launched = start(launch, cfg, tree.env)
    with launched.client.fingerprint() as stream:
        assert list(devices(stream.next(15), "generic/cam/cam")) == ["cam0", "cam1"]
        launched.client.reserve(["cam0"])
        before = time.time()
        tree.remove("cam0")
        tree.remove("cam1")
        # cam1 was never reserved: it goes at once. cam0 stays, unhealthy, saying since when.
        groups = wait_for(stream, lambda g: list(devices(g, "generic/cam/cam")) == ["cam0"])
        cam0 = devices(groups, "generic/cam/cam")["cam0"]
        assert not cam0.healthy
        since = re.fullmatch(r"not present since (\S+)", cam0.health_description)
        assert since is not None, cam0.health_description
        stamp = time.mktime(time.strptime(since.group(1), "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        assert before - 2 <= stamp <= time.time() + 1
        with pytest.raises(CallError) as refused:
            launched.client.reserve(["cam0"])
        assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "not present since" in refused.value.details
        assert logged(launched, "device gone after it was reserved")
        # After the grace period it is dropped.
        wait_for(stream, lambda g: g == [], timeout=20)
        assert logged(launched, "dropped after its grace")


def test_a_vanished_device_that_comes_back_is_healthy_again(
    launch: Launcher, tree: FakeTree
) -> None:
    tree.char("cam0", 81, 0, subsystem="video4linux")
    launched = start(launch, config(cam=DeviceBlock(paths=["/dev/cam*"])), tree.env)
    with launched.client.fingerprint() as stream:
        stream.next(15)
        launched.client.reserve(["cam0"])
        tree.remove("cam0")
        wait_for(stream, lambda g: "not present" in _reason(g, "generic/cam/cam"))
        tree.char("cam0", 81, 0, subsystem="video4linux")
        groups = wait_for(stream, lambda g: devices(g, "generic/cam/cam")["cam0"].healthy)
    assert list(devices(groups, "generic/cam/cam")) == ["cam0"]
    assert logged(launched, "device back")


# ---------------------------------------------------------------------------- Reserve


def test_reserve_refusals(launch: Launcher, tree: FakeTree) -> None:
    tree.char("a0", 243, 0)
    tree.char("a1", 243, 1)
    launched = start(
        launch, config(one=DeviceBlock(paths=["/dev/a*"], task_path="/dev/the-one")), tree.env
    )
    with launched.client.fingerprint() as stream:
        stream.next(15)
    for ids, phrase in (
        ([], "no device IDs given"),
        (["a9"], 'unknown device "a9"'),
        (["a0", "x", "y"], 'unknown devices "x", "y"'),
        (["a0", "a1"], 'task_path "/dev/the-one" can hold one device, but 2 were reserved'),
    ):
        with pytest.raises(CallError) as refused:
            launched.client.reserve(ids)
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT, ids
        assert phrase in refused.value.details, refused.value.details
    reservation = launched.client.reserve(["a1"])
    assert reservation.devices == (DeviceSpec("/dev/the-one", str(tree.dev / "a1"), "rw"),)


def test_task_path_directories_env_and_static_attributes(launch: Launcher, tree: FakeTree) -> None:
    tree.char("tpu0", 120, 0, subsystem="apex")
    tree.char("tpu1", 120, 1, subsystem="apex")
    launched = start(
        launch,
        config(
            coral=DeviceBlock(
                vendor="google",
                type="tpu",
                name="coral",
                paths=["/dev/tpu*"],
                task_path="/dev/accel/",
                permissions="rwm",
                env={"CORAL_MODE": "pci"},
                attributes={"tops": "4", "memory": "8 MiB", "edge": "true", "model": "Coral"},
            )
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        (group,) = stream.next(15)
    assert group.key == "google/tpu/coral"
    assert group.attributes["tops"] == Attribute(4)
    assert group.attributes["memory"] == Attribute(8, "MiB")
    assert group.attributes["edge"] == Attribute(True)
    assert group.attributes["model"] == Attribute("Coral")
    assert group.attributes["major"] == Attribute(120)
    assert "minor" not in group.attributes  # the two devices differ
    reservation = launched.client.reserve(["tpu0", "tpu1"])
    assert reservation.devices == (
        DeviceSpec("/dev/accel/tpu0", str(tree.dev / "tpu0"), "rwm"),
        DeviceSpec("/dev/accel/tpu1", str(tree.dev / "tpu1"), "rwm"),
    )
    assert dict(reservation.envs) == {
        "GENERIC_CORAL_IDS": "tpu0,tpu1",
        "GENERIC_CORAL_PATHS": "/dev/accel/tpu0,/dev/accel/tpu1",
        "CORAL_MODE": "pci",
    }


def test_group_per_device_makes_each_device_constrainable(launch: Launcher, tree: FakeTree) -> None:
    tree.usb("1-1", 0x0403, 0x6001, serial="AAA", tty=("ttyUSB0", 0))
    tree.usb("1-2", 0x0403, 0x6001, serial="BBB", tty=("ttyUSB1", 1))
    launched = start(
        launch,
        config(
            ftdi=DeviceBlock(usb=[UsbBlock(vendor_id="0403")], group_per_device=True),
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
    assert sorted(g.key for g in groups) == [
        "generic/ftdi/ftdi/0403:6001:AAA",
        "generic/ftdi/ftdi/0403:6001:BBB",
    ]
    for group in groups:
        assert group.attributes["usb_serial"] == Attribute(group.devices[0].id.rsplit(":", 1)[1])


def test_config_errors_name_the_block_and_field(launch: Launcher, tree: FakeTree) -> None:
    launched = start(launch, GenericConfig(), tree.env)
    bad = GenericConfig(device={"kvm": DeviceBlock(paths=["/dev/kvm"], permissions="rwx")})
    with pytest.raises(CallError) as refused:
        launched.client.set_config(encode_config(bad))
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details == (
        'SetConfig failed: device "kvm": permissions: "rwx" is not a subset of "rwm"'
    )
    bad = GenericConfig(device={"ch340": DeviceBlock(usb=[UsbBlock(vendor_id="zz12")])})
    with pytest.raises(CallError) as refused:
        launched.client.set_config(encode_config(bad))
    assert refused.value.details.startswith(
        'SetConfig failed: device "ch340": usb[0].vendor_id: "zz12" is not a USB ID in hex'
    )


def test_ids_survive_a_plugin_restart(launch: Launcher, tree: FakeTree) -> None:
    tree.usb("1-1.4", 0x10C4, 0xEA60, serial="0001", tty=("ttyUSB0", 0))
    tree.usb("1-1.2", 0x1A86, 0x7523, tty=("ttyUSB1", 1))
    tree.char("ttyACM0", 166, 0, subsystem="tty")
    tree.link("serial/by-id/usb-Arduino_Uno_7573-if00", "../../ttyACM0")
    tree.char("kvm", 10, 232)
    cfg = config(
        usb=DeviceBlock(usb=[UsbBlock(vendor_id="10c4"), UsbBlock(vendor_id="1a86")]),
        byid=DeviceBlock(paths=["/dev/serial/by-id/*"]),
        kvm=DeviceBlock(paths=["/dev/kvm"], share=2),
    )
    seen = []
    for _ in range(2):
        launched = start(launch, cfg, tree.env)
        with launched.client.fingerprint() as stream:
            groups = stream.next(15)
        seen.append({g.key: [d.id for d in g.devices] for g in groups})
        launched.client.kill()
    assert (
        seen[0]
        == seen[1]
        == {
            "generic/byid/byid": ["usb-Arduino_Uno_7573-if00"],
            "generic/kvm/kvm": ["kvm::0", "kvm::1"],
            "generic/usb/usb": ["1a86:7523@1-1.2", "10c4:ea60:0001"],  # natural order
        }
    )


@pytest.mark.parametrize("bus", [True, False], ids=["bus", "no-bus"])
def test_a_usb_block_that_matches_nothing_says_so_once(
    launch: Launcher, tree: FakeTree, bus: bool
) -> None:
    """The fake sysfs stands for a host with a USB bus and none of the device (or, with
    /sys/bus/usb removed, a host without USB at all, as this machine is)."""
    if bus:
        tree.usb("1-1", 0x1A86, 0x7523, tty=("ttyUSB0", 0))  # not the one asked for
    else:
        shutil.rmtree(tree.sys / "bus" / "usb")
    launched = start(
        launch,
        config(
            zigbee=DeviceBlock(usb=[UsbBlock(vendor_id="10c4")]),
            marker=DeviceBlock(paths=["/dev/mark*"]),
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        assert not devices(stream.next(15), "generic/zigbee/zigbee")
        for i in range(3):  # scans after the first one
            tree.char(f"mark{i}", 240, i)
            wait_for(stream, lambda g, n=i: f"mark{n}" in devices(g, "generic/marker/marker"))
    expected = (
        "no USB device matches (yet): no USB device here agrees on any field:"
        " 1a86:7523 at 1-1 (vendor_id is 1a86, not 10c4); its devices appear when one is plugged in"
        if bus
        else f"no USB device matches: this host has no USB bus ({tree.sys}/bus/usb does not exist)"
    )
    assert logged(launched, expected) == [f"{expected} device=zigbee"]


def test_nodes_narrows_what_a_usb_device_brings(launch: Launcher, tree: FakeTree) -> None:
    """``nodes`` (for PCI presets first) works for USB matches the same way."""
    tree.usb("1-1.4", 0x10C4, 0xEA60, serial="0001", tty=("ttyUSB0", 0))
    other = tree.usb("1-1.2", 0x1A86, 0x7523, tty=("ttyUSB1", 1))
    launched = start(
        launch,
        config(
            tty=DeviceBlock(usb=[UsbBlock(vendor_id="10c4")], nodes=["ttyUSB*"]),
            none=DeviceBlock(usb=[UsbBlock(vendor_id="1a86")], nodes=["hidraw*"]),
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
    (none,) = devices(groups, "generic/none/none").values()
    bus = "/dev/" + str(other.nodes[0].relative_to(tree.dev))
    assert none.health_description == (
        f"none of its device nodes ({bus}, /dev/ttyUSB1) is one the block's nodes names"
    )
    (tty,) = devices(groups, "generic/tty/tty").values()
    assert tty.healthy
    assert launched.client.reserve([tty.id]).devices == (
        DeviceSpec("/dev/ttyUSB0", str(tree.dev / "ttyUSB0"), "rw"),
    )
