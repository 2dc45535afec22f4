"""A local user filling the temp dir cannot keep the generic plugin from starting.

Issue 26: an unprivileged user made 1.2 million empty files named
``/tmp/plugin<12 hex>``. Every Python plugin then walked all of them on its
event loop right after the handshake (the sweep of dead plugins' socket
directories), 16-35 s in which ``PluginInfo`` and ``SetConfig`` missed the
agent's deadlines, and a real agent refused to start. Here a real local user
plants over a million names (and directories of its own with the SDK's names)
in the temp dir the plugin is given; the plugin must answer while its sweep
has not even begun, the sweep must stop at its bound, and the next start must
go on where it stopped, so that real leftovers among the names still go.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fake_tree import require_root
from support.generic import COMMAND
from support.local_user import local_user
from support.processes import Launched, Launcher

from nomad_device.config import encode_config
from nomad_device.goplugin import socketdirs
from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.plugins.generic.config import GenericConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

#: Names the attacker plants: hard links to a few empty files (ext4 allows
#: 65,000 links to one inode), so that planting takes seconds, not minutes.
FLOOD = 1_050_000
LINKS_PER_FILE = 50_000
#: Directories of the attacker's own, named as the SDK names its own and as old
#: as can be: each costs the sweep an lstat, and none may be touched.
OWN_DIRS = 5_000

PLANT = r"""
my ($dir, $n, $per, $dirs) = @ARGV;
for my $i (0 .. $n - 1) {
    my $seed = sprintf("%s/empty%d", $dir, int($i / $per));
    if ($i % $per == 0) { open(my $f, ">", $seed) or die "$seed: $!"; close($f); }
    link($seed, sprintf("%s/plugin%012x", $dir, $i)) or die "link $i: $!";
}
for my $i ($n .. $n + $dirs - 1) {
    my $path = sprintf("%s/plugin%012x", $dir, $i);
    mkdir($path, 0700) or die "mkdir $path: $!";
    utime(1, 1, $path) or die "utime $path: $!";
}
"""


@pytest.fixture(scope="module")
def flooded() -> Iterator[Path]:
    """A temp dir like /tmp (sticky, 1777) holding over a million names a local user made."""
    require_root("a real local user plants the names")
    perl = shutil.which("perl")
    if perl is None:
        pytest.fail("perl (Debian's essential perl-base) plants the names")
    base = Path(tempfile.mkdtemp(prefix="ndf", dir="/tmp"))  # short: socket paths fit
    base.chmod(0o1777)
    try:
        with local_user("flood") as attacker:
            attacker.run(perl, "-e", PLANT, base, str(FLOOD), str(LINKS_PER_FILE), str(OWN_DIRS))
            yield base
    finally:
        # Faster than rmtree for a million names, and never follows a link.
        subprocess.run(["rm", "-rf", "--one-file-system", str(base)], check=False)


def _names(base: Path) -> int:
    with os.scandir(base) as entries:
        return sum(1 for _ in entries)


def _dead_socket_dir(base: Path) -> Path:
    """What a SIGKILLed plugin leaves: its own 0700 directory with a dead socket, old."""
    path = base / ("plugin" + os.urandom(6).hex())
    path.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path / "plugin.sock"))
    old = time.time() - 2 * socketdirs.MIN_AGE_SECONDS
    os.utime(path, (old, old))
    return path


def _swept(entry: HclogEntry) -> bool:
    return entry.message == "swept socket directories of dead plugins"


def _start(launch: Launcher, base: Path) -> Launched:
    return launch(COMMAND, env={**os.environ, "TMPDIR": str(base)})


def test_the_plugin_answers_while_its_sweep_waits_and_the_sweep_keeps_its_bound(
    launch: Launcher, flooded: Path
) -> None:
    # Hold the sweep's turn: a plugin's sweep waits for the one before it. Had
    # the sweep run on the event loop, no call below could be answered.
    state = flooded / socketdirs.state_name()
    turn = os.open(state, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(turn, fcntl.LOCK_EX)
        plugin = _start(launch, flooded)
        assert plugin.client.info().name == "generic-device"
        plugin.client.set_config(encode_config(GenericConfig(device={})))
        with plugin.client.fingerprint() as stream:
            assert stream.next(30) == []
        assert not [e for e in plugin.logs if _swept(e)], "the sweep ran before its turn"
    finally:
        os.close(turn)
    (first,) = plugin.wait_for_log(_swept, timeout=120)
    assert 0 < int(first.fields["examined"]) <= socketdirs.MAX_ENTRIES
    assert (first.fields["complete"], first.fields["resumed"]) == (False, False)
    assert len(state.read_text().split()) == 4  # where the next start goes on

    second = _start(launch, flooded)
    (again,) = second.wait_for_log(_swept, timeout=120)
    assert 0 < int(again.fields["examined"]) <= socketdirs.MAX_ENTRIES
    assert again.fields["resumed"] is True
    assert second.client.info().name == "generic-device"


def test_leftovers_among_a_million_names_go_over_starts(
    flooded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each start's sweep (the plugin's own code, called as each start calls it)."""
    monkeypatch.setenv("TMPDIR", str(flooded))
    state = flooded / socketdirs.state_name()
    with contextlib.suppress(FileNotFoundError):
        state.unlink()  # from the top: every leftover is met in the first round
    leftovers = [_dead_socket_dir(flooded) for _ in range(3)]
    total = _names(flooded)
    assert total > FLOOD
    rounds = total // socketdirs.MAX_ENTRIES + 2
    passes: list[socketdirs.Pass] = []
    while len(passes) < 3 * rounds:  # a file system that moves offsets may need a second round
        passes.append(socketdirs.sweep())
        assert 0 < passes[-1].examined <= socketdirs.MAX_ENTRIES
        if passes[-1].stop is None and not any(p.exists() for p in leftovers):
            break
    else:
        pytest.fail(f"leftovers still there after {len(passes)} starts: {leftovers}")
    assert len(passes) > total // socketdirs.MAX_ENTRIES  # the bound cut every start
    for before, after in itertools.pairwise(passes):
        assert after.start == (before.stop or (0, 0))  # each went on from the last
    removed = {path for p in passes for path in p.removed}
    assert removed == {str(p) for p in leftovers}
    assert _names(flooded) == total - len(leftovers)  # nothing of the attacker's touched
    assert not state.exists()  # a walk that reached the end keeps no state
