"""Why a usb or pci block matches nothing, and IDs validated as the message says.

Issue 26: ``no PCI function matches (yet)`` and its USB twin said nothing
about why, and ``0x1af4`` and ``1af`` were accepted while the error text asked
for four hex digits. The warning now names what came closest and what
differs; an ID is four hex digits and nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import ROOT
from support.fake_tree import FakeTree, require_root
from support.generic import logged, start
from support.processes import Launcher

from nomad_device.errors import InvalidArgument
from nomad_device.host import CallError
from nomad_device.plugins.generic.config import (
    DeviceBlock,
    GenericConfig,
    PciBlock,
    PciMatcher,
    UsbBlock,
    UsbMatcher,
    settings_from,
)
from nomad_device.plugins.generic.nearmiss import MAX_SHOWN, pci_nearest, usb_nearest
from nomad_device.plugins.generic.pci import PciIdentity
from nomad_device.plugins.generic.sysfs import UsbDevice

pytestmark = pytest.mark.timeout(180)

DOC = ROOT / "docs" / "plugins" / "generic.md"


def usb(port: str, vendor: int, product: int, name: str = "", serial: str = "") -> UsbDevice:
    return UsbDevice(port, f"/sys/x/{port}", vendor, product, serial, "", name, 1, 2, 12.0, True)


def usb_matcher(vendor: int | None = None, product: int | None = None, **text: str) -> UsbMatcher:
    return UsbMatcher(
        vendor, product, text.get("serial"), text.get("manufacturer"), text.get("product")
    )


def function(address: str, vendor: int, device: int, class_code: int = 0x010000) -> PciIdentity:
    return PciIdentity(address, f"/sys/bus/pci/devices/{address}", vendor, device, class_code,
                       vendor, device, "virtio-pci")  # fmt: skip


# ------------------------------------------------------------------- what came closest


def test_the_nearest_usb_device_and_what_differs() -> None:
    here = [usb("1-1", 0x1A86, 0x7523), usb("1-2", 0x10C4, 0xEA60, "CP2102 USB to UART")]
    assert usb_nearest([usb_matcher(0x10C4, 0xEA61)], here) == (
        'nearest: 10c4:ea60 "CP2102 USB to UART" at 1-2'
        " (vendor_id matches; product_id is ea60, not ea61),"
        " 1a86:7523 at 1-1 (vendor_id is 1a86, not 10c4; product_id is 7523, not ea61)"
    )
    assert usb_nearest([usb_matcher(0x0403)], here[:1]) == (
        "no USB device here agrees on any field: 1a86:7523 at 1-1 (vendor_id is 1a86, not 0403)"
    )
    assert usb_nearest([usb_matcher(0x0403)], []) == "there is no USB device here"
    # Several matchers: each device is shown against the one it comes closest to.
    two = [usb_matcher(0x0403), usb_matcher(0x1A86, serial="A1")]
    assert usb_nearest(two, here[:1]) == (
        'nearest: usb[1] 1a86:7523 at 1-1 (vendor_id matches; serial is none, not "A1")'
    )


def test_the_nearest_pci_function_and_what_differs() -> None:
    here = [function("0000:00:02.0", 0x1AF4, 0x1001), function("0000:00:03.0", 0x8086, 0x100E)]
    matcher = PciMatcher(vendor_id=0x1AF4, device_id=0x1000, class_value=0x01, class_mask=0xFF)
    assert pci_nearest([matcher], here) == (
        "nearest: 0000:00:02.0 [1af4:1001] class 010000"
        " (vendor_id matches; device_id is 1001, not 1000; class is 010000, not 000001/0000ff),"
        " 0000:00:03.0 [8086:100e] class 010000 (vendor_id is 8086, not 1af4;"
        " device_id is 100e, not 1000; class is 010000, not 000001/0000ff)"
    )
    bound = PciMatcher(vendor_id=0x1AF4, address="0000:00:0[2-9].*", driver="vfio-pci")
    assert pci_nearest([bound], here[:1]) == (
        "nearest: 0000:00:02.0 [1af4:1001] class 010000 (vendor_id, address match;"
        ' driver is "virtio-pci", not "vfio-pci")'
    )


def test_what_the_warning_says_is_bounded() -> None:
    many = [usb(f"1-{i}", 0x10C4, 0x1000 + i, "x" * 500 + "\x1b[2J") for i in range(20)]
    text = usb_nearest([usb_matcher(0x10C4, 0xEA60)], many)
    assert text.count(" at 1-") == MAX_SHOWN
    assert text.endswith(f"(and {20 - MAX_SHOWN} more USB devices)")
    assert "\x1b" not in text and len(text) < 600
    assert '"' + "x" * 39 + '…"' in text


# --------------------------------------------------------------------------- IDs


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("0x1af4", 'four hex digits: "1af4"'),
        ("0X1AF4", 'four hex digits: "1af4"'),
        ("1af", 'four hex digits: "01af"'),
        ("01af4", 'four hex digits, e.g. "1002"'),
        ("zz12", 'four hex digits, e.g. "1002"'),
        (" 1af4", 'four hex digits, e.g. "1002"'),
    ],
)
def test_a_pci_id_is_four_hex_digits_and_nothing_else(given: str, problem: str) -> None:
    config = GenericConfig(device={"disk": DeviceBlock(pci=[PciBlock(vendor_id=given)])})
    with pytest.raises(InvalidArgument) as caught:
        settings_from(config)
    assert str(caught.value) == (
        f'device "disk": pci[0].vendor_id: "{given}" is not a PCI ID in hex'
        f" as lspci -nn prints it ({problem})"
    )


def test_four_hex_digits_in_either_case_are_taken() -> None:
    config = GenericConfig(
        device={"s": DeviceBlock(usb=[UsbBlock(vendor_id="1A86", product_id="7523")])}
    )
    (kind,) = settings_from(config).kinds
    assert (kind.usb[0].vendor_id, kind.usb[0].product_id) == (0x1A86, 0x7523)
    with pytest.raises(InvalidArgument, match=r'usb\[0\].product_id: "0x7523" .* "7523"\)'):
        settings_from(GenericConfig(device={"s": DeviceBlock(usb=[UsbBlock(product_id="0x7523")])}))


# -------------------------------------------------------------------- over the wire


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    require_root()
    return FakeTree(tmp_path / "root")


def test_the_plugin_says_what_came_closest(launch: Launcher, tree: FakeTree) -> None:
    tree.usb("1-1.4", 0x10C4, 0xEA60, product="CP2102 USB to UART", tty=("ttyUSB0", 0))
    tree.pci("0000:00:02.0", 0x1AF4, 0x1001, 0x010000, driver="virtio-pci")
    launched = start(
        launch,
        GenericConfig(
            device={
                "zigbee": DeviceBlock(usb=[UsbBlock(vendor_id="10c4", product_id="ea61")]),
                "disk": DeviceBlock(pci=[PciBlock(vendor_id="1af4", device_id="1000")]),
            }
        ),
        tree.env,
    )
    with launched.client.fingerprint() as stream:
        assert stream.next(15) == []
    # The page quotes these two lines: they are the plugin's own.
    quoted = re.search(r"```log\n(.*?)```", DOC.read_text(), re.S)
    assert quoted is not None
    usb_line, pci_line = quoted.group(1).strip().splitlines()
    assert logged(launched, "no USB device matches") == [usb_line]
    assert usb_line == (
        'no USB device matches (yet): nearest: 10c4:ea60 "CP2102 USB to UART" at 1-1.4'
        " (vendor_id matches; product_id is ea60, not ea61);"
        " its devices appear when one is plugged in device=zigbee"
    )
    assert logged(launched, "no PCI function matches") == [pci_line]


def test_set_config_refuses_an_id_that_is_not_four_hex_digits(launch: Launcher) -> None:
    config = GenericConfig(device={"disk": DeviceBlock(pci=[PciBlock(vendor_id="0x1af4")])})
    with pytest.raises(CallError) as caught:
        start(launch, config)
    assert caught.value.code.name == "INVALID_ARGUMENT"
    assert caught.value.details == (
        'SetConfig failed: device "disk": pci[0].vendor_id: "0x1af4" is not a PCI ID in hex as'
        " lspci -nn prints it"
        ' (four hex digits: "1af4")'
    )
