"""Why a ``usb`` or ``pci`` block matches nothing: what on the host came closest.

``no PCI function matches (yet)`` alone sent the operator to ``lspci -nn`` to
compare by hand; one wrong digit in a ``device_id`` looks exactly like a card
that is not there. The warning now names the devices that agree with the
block's matchers on the most fields, and for each what differs
(``vendor_id matches; device_id is 1001, not 1000``), or says that none
agrees on any. Bounded: at most :data:`MAX_SHOWN` devices, their strings cut
to :data:`MAX_TEXT` characters and escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, TypeVar

from nomad_device.display import printable
from nomad_device.plugins.generic.config import PciMatcher, UsbMatcher
from nomad_device.plugins.generic.pci import PciIdentity
from nomad_device.plugins.generic.sysfs import UsbDevice

__all__ = ["MAX_SHOWN", "MAX_TEXT", "pci_nearest", "usb_nearest"]

#: The most devices one warning names.
MAX_SHOWN: Final = 3
#: The most characters of a device's string (a USB product name) shown.
MAX_TEXT: Final = 40

#: One field a matcher sets: its name, the value wanted, the device's, and whether they agree.
_Field = tuple[str, str, str, bool]
M = TypeVar("M")
D = TypeVar("D")


def usb_nearest(matchers: Sequence[UsbMatcher], devices: Sequence[UsbDevice]) -> str:
    """The clause after ``no USB device matches (yet)``."""
    return _nearest("USB device", "usb", matchers, devices, _usb_fields, _usb_name)


def pci_nearest(matchers: Sequence[PciMatcher], functions: Sequence[PciIdentity]) -> str:
    """The clause after ``no PCI function matches (yet)``."""
    return _nearest("PCI function", "pci", matchers, functions, _pci_fields, _pci_name)


def _nearest(
    what: str,
    block: str,
    matchers: Sequence[M],
    devices: Sequence[D],
    fields: Callable[[M, D], list[_Field]],
    name: Callable[[D], str],
) -> str:
    if not devices:
        return f"there is no {what} here"
    scored = []
    for d, device in enumerate(devices):
        best = None
        for m, matcher in enumerate(matchers):
            checked = fields(matcher, device)
            agree = sum(1 for f in checked if f[3])
            if best is None or agree > best[0]:
                best = (agree, m, checked)
        assert best is not None
        scored.append((-best[0], d, best[1], device, best[2]))
    scored.sort(key=lambda s: s[:2])
    shown = []
    for _, _, m, device, checked in scored[:MAX_SHOWN]:
        prefix = f"{block}[{m}] " if len(matchers) > 1 else ""
        same = [f[0] for f in checked if f[3]]
        why = [f"{f[0]} is {f[2]}, not {f[1]}" for f in checked if not f[3]]
        if same:
            why.insert(0, f"{', '.join(same)} {'match' if len(same) > 1 else 'matches'}")
        shown.append(f"{prefix}{name(device)} ({'; '.join(why)})")
    more = len(scored) - MAX_SHOWN
    tail = f" (and {more} more {what}s)" if more > 0 else ""
    head = "nearest" if scored[0][0] < 0 else f"no {what} here agrees on any field"
    return f"{head}: {', '.join(shown)}{tail}"


def _text(value: str | None) -> str:
    if value is None:
        return "none"
    cut = value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 1] + "…"
    return '"' + printable(cut).replace('"', '\\"') + '"'


def _hex(value: int | None) -> str:
    return "none" if value is None else f"{value:04x}"


def _usb_fields(matcher: UsbMatcher, device: UsbDevice) -> list[_Field]:
    checked: list[_Field] = []
    for field, wanted, have in (
        ("vendor_id", matcher.vendor_id, device.vendor_id),
        ("product_id", matcher.product_id, device.product_id),
    ):
        if wanted is not None:
            checked.append((field, _hex(wanted), _hex(have), wanted == have))
    for field, text, actual in (
        ("serial", matcher.serial, device.serial),
        ("manufacturer", matcher.manufacturer, device.manufacturer),
        ("product", matcher.product, device.product),
    ):
        if text is not None:
            checked.append((field, _text(text), _text(actual or None), text == actual))
    return checked


def _usb_name(device: UsbDevice) -> str:
    named = f" {_text(device.product)}" if device.product else ""
    return f"{device.vendor_id:04x}:{device.product_id:04x}{named} at {device.sysname}"


def _pci_fields(matcher: PciMatcher, ident: PciIdentity) -> list[_Field]:
    checked: list[_Field] = []
    for field, wanted, have in (
        ("vendor_id", matcher.vendor_id, ident.vendor_id),
        ("device_id", matcher.device_id, ident.device_id),
        ("subsystem_vendor_id", matcher.subsystem_vendor_id, ident.subsystem_vendor_id),
        ("subsystem_device_id", matcher.subsystem_device_id, ident.subsystem_device_id),
    ):
        if wanted is not None:
            checked.append((field, _hex(wanted), _hex(have), wanted == have))
    if matcher.class_mask:
        wanted_class = f"{matcher.class_value:06x}/{matcher.class_mask:06x}"
        agree = ident.class_code & matcher.class_mask == matcher.class_value
        checked.append(("class", wanted_class, f"{ident.class_code:06x}", agree))
    if matcher.address is not None:
        # A glob, matched as the block matches it: a matcher of the address alone.
        alone = PciMatcher(address=matcher.address)
        agree = alone.identity_matches(ident.address, (0, 0, None, None), 0)
        checked.append(("address", _text(matcher.address), ident.address, agree))
    if matcher.driver is not None:
        agree = matcher.driver_matches(ident.driver)
        checked.append(("driver", _text(matcher.driver), _text(ident.driver), agree))
    return checked


def _pci_name(ident: PciIdentity) -> str:
    return (
        f"{ident.address} [{ident.vendor_id:04x}:{ident.device_id:04x}]"
        f" class {ident.class_code:06x}"
    )
