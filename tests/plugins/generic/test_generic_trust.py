"""The safety rules of plugins/generic/trust.py and the glob rules they rely on, directly.

The attacks themselves, by a real user over the wire, are in test_generic_security.py;
these pin down the walk: links relative and absolute, ``..``, loops, and the roots.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.fake_tree import FakeTree, mkdirs, require_root

from nomad_device.plugins.generic.patterns import fixed_dir, leads_to_match, matches
from nomad_device.plugins.generic.roots import Roots
from nomad_device.plugins.generic.sysfs import SysfsCache
from nomad_device.plugins.generic.trust import PathCheck, untrusted_dir


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("/dev/ttyUSB*", "/dev/ttyUSB0", True),
        ("/dev/ttyUSB*", "/dev/ttyUSB0/x", False),  # * never crosses a /
        ("/dev/*/by-id/*", "/dev/serial/by-id/usb-X", True),
        ("/dev/*", "/dev/.hidden", False),  # as glob: a dot is matched only by a dot
        ("/dev/.*", "/dev/.hidden", True),
        ("/dev/loop[0-9]*", "/dev/loop-control", False),
        ("/dev/kvm", "/dev/kvm", True),
        ("/dev/[*]", "/dev/*", True),
    ],
)
def test_patterns_match_as_glob_does(pattern: str, path: str, expected: bool) -> None:
    assert matches(pattern, path) is expected


def test_which_directories_can_lead_to_a_match() -> None:
    pattern = "/dev/*/by-id/*"
    assert fixed_dir(pattern) == "/dev"
    assert leads_to_match(pattern, "/dev")
    assert leads_to_match(pattern, "/dev/serial")
    assert leads_to_match(pattern, "/dev/serial/by-id")
    assert not leads_to_match(pattern, "/dev/serial/by-id/x")  # matches live here, not below
    assert not leads_to_match(pattern, "/dev/shm/other")
    assert not leads_to_match(pattern, "/dev/.udev")


@pytest.fixture
def check(tmp_path: Path) -> tuple[FakeTree, PathCheck]:
    require_root()
    tree = FakeTree(tmp_path / "root")
    roots = Roots(str(tree.dev), str(tree.sys))
    return tree, PathCheck(roots, SysfsCache(roots))


def test_links_relative_absolute_and_dotdot(check: tuple[FakeTree, PathCheck]) -> None:
    tree, rules = check
    tree.char("ttyUSB0", 188, 0, subsystem="tty")
    tree.link("serial/by-id/a", "../../ttyUSB0")
    tree.link("serial/by-id/b", str(tree.dev / "ttyUSB0"))  # absolute, inside the dev root
    tree.link("serial/by-path", "by-id")  # a directory link on the way
    for name in ("serial/by-id/a", "serial/by-id/b", "serial/by-path/a"):
        checked = rules.check(str(tree.dev / name))
        assert checked.ok, checked.refusal
        assert checked.resolved == str(tree.dev / "ttyUSB0")
        assert checked.via_link
    plain = rules.check(str(tree.dev / "ttyUSB0"))
    assert plain.ok and not plain.via_link


def test_missing_loops_and_leaving_the_root(check: tuple[FakeTree, PathCheck]) -> None:
    tree, rules = check
    tree.link("gone", "nowhere")
    missing = rules.check(str(tree.dev / "gone"))
    assert missing.ok and missing.info is None
    assert missing.resolved == str(tree.dev / "nowhere")
    tree.link("loop-a", "loop-b")
    tree.link("loop-b", "loop-a")
    assert rules.check(str(tree.dev / "loop-a")).refusal == "too many levels of symbolic links"
    # Out of the dev root by "..": walked from / like any other path, so every
    # directory above is judged (tmp_path's own are pytest's; "wide" is anyone's).
    wide = tree.dev.parent.parent / "wide"
    wide.mkdir()
    wide.chmod(0o777)
    (wide / "x").write_text("")
    tree.link("out", "../../wide/x")
    assert "is writable by every user" in rules.check(str(tree.dev / "out")).refusal


def test_directories_are_judged_on_both_paths(check: tuple[FakeTree, PathCheck]) -> None:
    tree, rules = check
    tree.char("kvm", 10, 232)
    open_dir = mkdirs(tree.dev / "open")
    open_dir.chmod(0o775)  # group-writable: a group's members could swap entries
    tree.link("open/kvm", "../kvm")
    refusal = rules.check(str(tree.dev / "open" / "kvm"), fresh=True).refusal
    assert refusal.startswith("/dev/open is writable by group 0 (mode 0775)")
    # The link is fine where it lives, but leads through that directory.
    tree.link("via", "open/kvm")
    assert rules.check(str(tree.dev / "via"), fresh=True).refusal.startswith("/dev/open is")
    assert untrusted_dir(str(open_dir)) == "writable by group 0 (mode 0775)"
    assert untrusted_dir(str(tree.dev)) is None


def test_a_scan_remembers_directories_until_the_next(check: tuple[FakeTree, PathCheck]) -> None:
    tree, rules = check
    tree.char("kvm", 10, 232)
    mkdirs(tree.dev / "d")
    tree.link("d/kvm", "../kvm")
    assert rules.check(str(tree.dev / "d" / "kvm")).ok
    os.chmod(tree.dev / "d", 0o777)
    assert rules.check(str(tree.dev / "d" / "kvm")).ok  # same scan: as it was seen
    assert not rules.check(str(tree.dev / "d" / "kvm"), fresh=True).ok
    rules.new_scan()
    assert not rules.check(str(tree.dev / "d" / "kvm")).ok
