"""nomad-device-generic's pure logic: validation messages, attribute parsing, naming."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nomad_device.errors import InvalidArgument
from nomad_device.model import Attribute
from nomad_device.plugins.generic.config import (
    DeviceBlock,
    GenericConfig,
    ProbeBlock,
    UsbBlock,
    env_prefix,
    format_config_path,
    parse_attribute,
    settings_from,
)
from nomad_device.plugins.generic.discovery import _path_id, id_base, natural_key, size_attribute
from nomad_device.plugins.generic.plugin import GenericDevicePlugin
from nomad_device.plugins.generic.reservation import rfc3339
from nomad_device.plugins.generic.roots import Roots


def refused(**blocks: DeviceBlock) -> str:
    with pytest.raises(InvalidArgument) as caught:
        settings_from(GenericConfig(device=blocks))
    return caught.value.message


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            DeviceBlock(paths=["/dev/kvm"], permissions="rwx"),
            'device "x": permissions: "rwx" is not a subset of "rwm"',
        ),
        (
            DeviceBlock(paths=["/dev/kvm"], permissions=""),
            'device "x": permissions: "" grants nothing; use letters of "rwm", e.g. "rw"',
        ),
        (
            DeviceBlock(),
            'device "x": give paths, usb or pci blocks (or several), or a cdi block: this block'
            " matches nothing",
        ),
        (
            DeviceBlock(paths=["dev/kvm"]),
            'device "x": paths[0]: "dev/kvm" is not an absolute path',
        ),
        (
            DeviceBlock(usb=[UsbBlock(vendor_id="1a86", product_id="75230")]),
            'device "x": usb[0].product_id: "75230" is not a USB ID in hex as lsusb prints it'
            ' (four hex digits, e.g. "1a86")',
        ),
        (
            DeviceBlock(usb=[UsbBlock()]),
            'device "x": usb[0]: set at least one of vendor_id, product_id, serial,'
            " manufacturer, product",
        ),
        (DeviceBlock(paths=["/dev/kvm"], share=0), 'device "x": share: must be at least 1, got 0'),
        (
            DeviceBlock(paths=["/dev/kvm"], share=10_001),
            'device "x": share: must be at most 10000, got 10001',
        ),
        (
            DeviceBlock(paths=["/dev/kvm"], task_path="kvm"),
            'device "x": task_path: "kvm" is not an absolute path',
        ),
        (
            DeviceBlock(paths=["/dev/kvm"], env={"1BAD": "x"}),
            'device "x": env: "1BAD" is not a valid environment variable name',
        ),
        (DeviceBlock(paths=["/dev/kvm"], vendor=""), 'device "x": vendor: must not be empty'),
        (
            DeviceBlock(paths=["/dev/kvm"], vendor="a/b"),
            'device "x": vendor: "a/b" must not contain /',
        ),
        (
            DeviceBlock(paths=["/dev/kvm"], probe=ProbeBlock(command=[])),
            'device "x": probe.command: must name a program to run',
        ),
        (
            DeviceBlock(
                paths=["/dev/kvm"], probe=ProbeBlock(command=["true"], timeout=timedelta(0))
            ),
            'device "x": probe.timeout: must be greater than zero',
        ),
    ],
)
def test_each_problem_names_the_block_and_field(block: DeviceBlock, message: str) -> None:
    assert refused(x=block) == message


def test_a_label_with_a_slash_needs_its_own_type() -> None:
    assert refused(**{"a/b": DeviceBlock(paths=["/dev/x"])}) == (
        'device "a/b": type: "a/b" must not contain / (taken from the block\'s label; set type)'
    )
    (kind,) = settings_from(
        GenericConfig(device={"a/b": DeviceBlock(paths=["/dev/x"], type="ab")})
    ).kinds
    assert kind.key == "generic/ab/a/b"


def test_every_problem_is_reported_at_once() -> None:
    message = refused(
        a=DeviceBlock(paths=["/dev/a"], share=0), b=DeviceBlock(paths=["/dev/b"], permissions="x")
    )
    assert message == (
        'device "a": share: must be at least 1, got 0; '
        'device "b": permissions: "x" is not a subset of "rwm"'
    )


def test_clashing_groups_and_environment_prefixes() -> None:
    message = refused(
        a=DeviceBlock(paths=["/dev/a"], type="t", name="n"),
        b=DeviceBlock(paths=["/dev/b"], type="t", name="n"),
    )
    assert message == (
        'device "b": its group "generic/t/n" is already the group of device "a";'
        " set type or name to tell them apart"
    )
    message = refused(
        **{"usb-serial": DeviceBlock(paths=["/a"]), "usb_serial": DeviceBlock(paths=["/b"])}
    )
    assert "GENERIC_USB_SERIAL_*" in message and 'device "usb_serial"' in message


def test_top_level_settings() -> None:
    with pytest.raises(InvalidArgument, match="fingerprint_period: must be greater than zero"):
        settings_from(GenericConfig(fingerprint_period=timedelta(0)))
    settings = settings_from(GenericConfig(device={"k": DeviceBlock(paths=["/dev/k"])}))
    assert (settings.period, settings.vanished_grace) == (30.0, 300.0)
    (kind,) = settings.kinds
    assert (kind.vendor, kind.type, kind.name, kind.permissions, kind.share) == (
        "generic",
        "k",
        "k",
        "rw",
        1,
    )


def test_permissions_are_put_in_cgroup_order_and_usb_ids_read_as_hex() -> None:
    (kind,) = settings_from(
        GenericConfig(
            device={
                "s": DeviceBlock(
                    permissions="mwr", usb=[UsbBlock(vendor_id="1A86", product_id="7523")]
                )
            }
        )
    ).kinds
    assert kind.permissions == "rwm"
    (matcher,) = kind.usb
    assert (matcher.vendor_id, matcher.product_id, matcher.serial) == (0x1A86, 0x7523, None)
    assert matcher.matches(0x1A86, 0x7523, "anything", "", "")
    assert not matcher.matches(0x1A86, 0x7524, "", "", "")


def test_decode_errors_are_worded_like_validation_errors() -> None:
    import msgpack

    plugin = GenericDevicePlugin(Roots())
    data = msgpack.packb(
        {
            "device": {"kvm": {"share": "many"}},
            "fingerprint_period": "30s",
            "vanished_grace": "5m",
        }
    )
    with pytest.raises(InvalidArgument) as caught:
        plugin.decode_config(data)
    assert caught.value.message.startswith('device "kvm": share: ')


@pytest.mark.parametrize(
    ("text", "attribute"),
    [
        ("4", Attribute(4)),
        ("-3", Attribute(-3)),
        ("1.5", Attribute(1.5)),
        ("8 GiB", Attribute(8, "GiB")),
        ("8GiB", Attribute(8, "GiB")),
        ("2.5 MHz", Attribute(2.5, "MHz")),
        ("100 MB/s", Attribute(100, "MB/s")),
        ("true", Attribute(True)),
        ("False", Attribute(False)),
        ("1", Attribute(1)),  # an integer before a bool, as in Nomad
        ("coral", Attribute("coral")),
        ("4 apples", Attribute("4 apples")),
        ("1_000", Attribute("1_000")),
        ("inf", Attribute("inf")),
        ("", Attribute("")),
        ("99999999999999999999", Attribute(1e20)),  # too big for int64: a float, as in Go
    ],
)
def test_static_attributes_read_as_nomad_reads_them(text: str, attribute: Attribute) -> None:
    assert parse_attribute(text) == attribute
    assert type(parse_attribute(text).value) is type(attribute.value)


@pytest.mark.parametrize(
    ("size", "attribute"),
    [
        (256 << 30, Attribute(256, "GiB")),
        (1 << 40, Attribute(1, "TiB")),
        (3 << 20, Attribute(3, "MiB")),
        (7 * 1024, Attribute(7, "KiB")),
        (1536, Attribute(1.5, "KiB")),
        (0, Attribute(0, "KiB")),
    ],
)
def test_sizes_use_the_largest_exact_binary_unit(size: int, attribute: Attribute) -> None:
    assert size_attribute(size) == attribute
    assert not attribute.validate()


@pytest.mark.parametrize(
    ("pattern", "path", "device_id"),
    [
        ("/dev/kvm", "/dev/kvm", "kvm"),
        ("/dev/net/tun", "/dev/net/tun", "tun"),
        ("/dev/loop*", "/dev/loop7", "loop7"),
        ("/dev/serial/by-id/*", "/dev/serial/by-id/usb-FTDI_X-if00", "usb-FTDI_X-if00"),
        ("/dev/bus/usb/*/*", "/dev/bus/usb/001/004", "001/004"),
        ("/dev/snd/pcmC[0-9]D0c", "/dev/snd/pcmC1D0c", "pcmC1D0c"),
    ],
)
def test_path_ids_are_the_path_below_the_fixed_directory(
    pattern: str, path: str, device_id: str
) -> None:
    assert _path_id(pattern, path) == device_id


def test_helpers() -> None:
    assert id_base("/dev/kvm") is None
    assert id_base("/dev/*") == "/dev"
    assert sorted(["loop10", "loop2", "loop1"], key=natural_key) == ["loop1", "loop2", "loop10"]
    assert env_prefix("usb-serial") == "GENERIC_USB_SERIAL_"
    assert env_prefix("Zigbee.Stick") == "GENERIC_ZIGBEE_STICK_"
    assert format_config_path(("device", "kvm", "usb", 0, "vendor_id")) == (
        'device "kvm": usb[0].vendor_id'
    )
    assert format_config_path(("vanished_grace",)) == "vanished_grace"
    assert rfc3339(0) == "1970-01-01T00:00:00Z"


def test_roots_map_dev_paths_both_ways() -> None:
    roots = Roots.from_env(
        {
            "NOMAD_DEVICE_GENERIC_DEV_ROOT": "/tmp/t/dev",
            "NOMAD_DEVICE_GENERIC_SYS_ROOT": "/tmp/t/sys",
        }
    )
    assert (roots.dev, roots.sys) == ("/tmp/t/dev", "/tmp/t/sys")
    assert roots.real("/dev/kvm") == "/tmp/t/dev/kvm"
    assert roots.real("/devices") == "/devices"
    assert roots.real("/run/x.sock") == "/run/x.sock"
    assert roots.canonical("/tmp/t/dev/net/tun") == "/dev/net/tun"
    assert Roots.from_env({}) == Roots("/dev", "/sys")
    assert Roots().real("/dev/kvm") == "/dev/kvm"
