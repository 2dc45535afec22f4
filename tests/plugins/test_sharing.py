"""Instance IDs of shared devices: one form for every ready-made plugin."""

from __future__ import annotations

import pytest

from nomad_device.plugins.sharing import instance_ids, physical_ids, split_instance


def test_unshared_device_keeps_its_id() -> None:
    assert instance_ids("GPU-1c3b", 1) == ("GPU-1c3b",)


def test_shared_device_gets_numbered_slots() -> None:
    assert instance_ids("kvm", 3) == ("kvm::0", "kvm::1", "kvm::2")


def test_share_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        instance_ids("kvm", 0)


@pytest.mark.parametrize(
    ("instance", "expected"),
    [
        ("kvm::2", ("kvm", 2)),
        ("kvm", ("kvm", None)),
        ("a::b::10", ("a::b", 10)),
        ("::3", ("::3", None)),
        ("kvm::", ("kvm::", None)),
        ("kvm::01", ("kvm::01", None)),
        ("kvm::x", ("kvm::x", None)),
    ],
)
def test_split_instance(instance: str, expected: tuple[str, int | None]) -> None:
    assert split_instance(instance) == expected


def test_split_inverts_instance_ids() -> None:
    for share in (1, 2, 5):
        for slot, instance in enumerate(instance_ids("tty-usb-FT1", share)):
            assert split_instance(instance) == ("tty-usb-FT1", slot if share > 1 else None)


def test_physical_ids_name_each_device_once_in_order() -> None:
    assert physical_ids(["g2::1", "g1::0", "g2::0", "g3"]) == ["g2", "g1", "g3"]
