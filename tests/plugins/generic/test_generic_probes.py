"""Probes that misbehave: too much output, escapes, children that outlive them, the
agent's secrets, arguments exec cannot pass. Each is an attack of docs/security.md
(the probe command is the operator's, but what it runs and prints is not theirs
alone: a device's firmware, a vendor tool, a script that forks a daemon).

The plugin runs as a subprocess over the real wire; what leaks is looked for
where it would be, in /proc.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from support.fake_tree import FakeTree, require_root
from support.generic import Groups, devices, start, wait_for, wait_until
from support.processes import Launched, Launcher

from nomad_device.config import encode_config
from nomad_device.host import CallError
from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig, ProbeBlock

pytestmark = pytest.mark.timeout(180)

HOUR = timedelta(hours=1)
KEY = "generic/dev/dev"


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    require_root()
    tree = FakeTree(tmp_path / "root")
    tree.char("dev0", 240, 0)
    return tree


def probed(probe: ProbeBlock, **block: object) -> GenericConfig:
    device = DeviceBlock(paths=["/dev/dev0"], probe=probe, **block)  # type: ignore[arg-type]
    return GenericConfig(device={"dev": device}, fingerprint_period=HOUR)


def verdict(groups: Groups) -> tuple[bool, str] | None:
    found = devices(groups, KEY).get("dev0")
    return None if found is None else (found.healthy, found.health_description)


def first_verdict(launched: Launched, timeout: float = 60) -> tuple[bool, str]:
    with launched.client.fingerprint() as stream:
        groups = wait_for(
            stream,
            lambda g: verdict(g) not in (None, (False, "waiting for the first health probe")),
            timeout,
        )
    result = verdict(groups)
    assert result is not None
    return result


@pytest.fixture
def token() -> Iterator[str]:
    """A unique ``sleep`` argument: the processes a probe leaves are found by it, and
    whatever a test leaves (on the old code) is killed at the end."""
    value = f"{4000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9:09d}"
    yield value
    for pid in with_token(value):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def with_token(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if token.encode() in argv:
            found.append(int(name))
    return found


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


# ---------------------------------------------------------------------- output


def test_a_flood_of_output_costs_no_memory(launch: Launcher, tree: FakeTree) -> None:
    """A probe printing without end once took the plugin to gigabytes of RSS."""
    flood = "head -c 300000000 /dev/zero | tr '\\0' x; exit 1"
    probe = ProbeBlock(command=["sh", "-c", flood], timeout=timedelta(seconds=90))
    launched = start(launch, probed(probe), tree.env)
    pid = launched.client.process.pid
    before = _peak_rss_kib(pid)
    assert first_verdict(launched, timeout=120) == (False, "x" * 199 + "…")
    grown = _peak_rss_kib(pid) - before
    assert grown < 64 * 1024, f"peak RSS grew by {grown} KiB for 300 MB of output"


def test_control_characters_never_reach_the_reason(launch: Launcher, tree: FakeTree) -> None:
    noisy = "printf '\\n\\033[1;31mtoken\\a\\033]0;title\\007 \\342\\200\\256gone\\033[0m\\r\\n'"
    probe = ProbeBlock(command=["sh", "-c", f"{noisy}; exit 2"])
    launched = start(launch, probed(probe), tree.env)
    assert first_verdict(launched) == (False, "token gone")


# ------------------------------------------------------------- the process tree


def test_what_a_probe_leaves_behind_is_killed_when_it_exits(
    launch: Launcher, tree: FakeTree, token: str
) -> None:
    probe = ProbeBlock(command=["sh", "-c", f"setsid sleep {token} & exit 3"], interval=HOUR)
    launched = start(launch, probed(probe), tree.env)
    assert first_verdict(launched) == (False, "probe exited with status 3")
    wait_until(lambda: not with_token(token), timeout=10)


def test_a_probe_that_times_out_dies_with_all_its_children(
    launch: Launcher, tree: FakeTree, token: str
) -> None:
    """``setsid`` children once escaped the process-group kill and lived on."""
    script = f"setsid sleep {token} & sleep {token} & sleep {token}"
    probe = ProbeBlock(
        command=["sh", "-c", script], timeout=timedelta(milliseconds=700), interval=HOUR
    )
    launched = start(launch, probed(probe), tree.env)
    assert first_verdict(launched) == (False, "probe timed out after 0.7s")
    wait_until(lambda: not with_token(token), timeout=10)


@pytest.mark.parametrize("how", ["Shutdown", "SIGKILL"])
def test_probes_running_when_the_plugin_stops_die_with_it(
    launch: Launcher, tree: FakeTree, token: str, how: str
) -> None:
    """Every probe still running when the plugin stopped once became a child of pid 1."""
    script = f"setsid sleep {token} & sleep {token}"
    probe = ProbeBlock(command=["sh", "-c", script], timeout=timedelta(minutes=5))
    launched = start(launch, probed(probe), tree.env)
    with launched.client.fingerprint() as stream:
        stream.next(15)
        wait_until(lambda: len(with_token(token)) == 2, timeout=30)
    if how == "Shutdown":
        launched.client.kill()  # Nomad's way: Shutdown, then SIGKILL after 2 s
    else:
        os.kill(launched.client.process.pid, signal.SIGKILL)  # no close() at all
    wait_until(lambda: not with_token(token), timeout=10)


def test_probes_belong_to_the_plugin_not_to_a_stream(
    launch: Launcher, tree: FakeTree, tmp_path: Path
) -> None:
    """Probes once lived and died with watch(), so with the Fingerprint streams."""
    runs = tmp_path / "runs"
    probe = ProbeBlock(
        command=["sh", "-c", f"echo run >> {runs}"], interval=timedelta(milliseconds=100)
    )
    launched = start(launch, probed(probe), tree.env)
    assert first_verdict(launched) == (True, "")  # its stream is closed again now
    seen = len(runs.read_text().splitlines())
    wait_until(lambda: len(runs.read_text().splitlines()) >= seen + 3, timeout=15)


# ------------------------------------------------------------------ environment


def _environment_seen(
    launch: Launcher, tree: FakeTree, tmp_path: Path, plugin_env: dict[str, str], **probe: object
) -> tuple[dict[str, str], str]:
    """What a probe's process saw: its environment and working directory."""
    seen = tmp_path / "seen.json"
    dump = f"import json, os; json.dump([dict(os.environ), os.getcwd()], open({str(seen)!r}, 'w'))"
    block = ProbeBlock(command=[sys.executable, "-I", "-c", dump], **probe)  # type: ignore[arg-type]
    launched = start(launch, probed(block), {**tree.env, **plugin_env}, cwd=str(tmp_path))
    assert first_verdict(launched) == (True, "")
    environ, cwd = json.loads(seen.read_text())
    return environ, cwd


#: What Python may add on its own for a C locale (PEP 538).
_PYTHON_OWN = {"LC_CTYPE"}
_DEVICE = {
    "GENERIC_DEVICE_ID",
    "GENERIC_DEVICE_KIND",
    "GENERIC_DEVICE_PATH",
    "GENERIC_DEVICE_PATHS",
}


def test_probes_get_none_of_the_agents_environment_and_run_from_root(
    launch: Launcher, tree: FakeTree, tmp_path: Path
) -> None:
    """Probes once inherited NOMAD_TOKEN, the plugin cookie, PLUGIN_* and the cwd."""
    secrets = {"NOMAD_TOKEN": "nd18-secret", "PLUGIN_EXTRA": "x", "VAULT_TOKEN": "v", "LANG": "C"}
    env, cwd = _environment_seen(launch, tree, tmp_path, secrets)
    assert cwd == "/"
    assert set(env) - _PYTHON_OWN == {"PATH", "LANG", *_DEVICE}
    assert env["GENERIC_DEVICE_ID"] == "dev0"
    assert env["GENERIC_DEVICE_PATH"] == str(tree.dev / "dev0")
    assert all(part.startswith("/") for part in env["PATH"].split(":"))


def test_a_probe_gets_what_the_operator_sets(
    launch: Launcher, tree: FakeTree, tmp_path: Path
) -> None:
    env, _ = _environment_seen(
        launch,
        tree,
        tmp_path,
        {"PATH": "relative:/usr/bin::/bin", "LANG": "C.UTF-8"},
        env={"ZIGBEE": "/dev/zigbee", "LANG": "de_DE.UTF-8"},
    )
    assert set(env) - _PYTHON_OWN == {"PATH", "LANG", "ZIGBEE", *_DEVICE}
    assert (env["ZIGBEE"], env["LANG"]) == ("/dev/zigbee", "de_DE.UTF-8")  # the operator wins
    assert env["PATH"] == "/usr/bin:/bin"  # entries that are not absolute are dropped


# ------------------------------------------------------------- bad commands


def test_a_nul_in_a_probe_argument_is_refused_at_set_config(
    launch: Launcher, tree: FakeTree
) -> None:
    """It once passed SetConfig and then raised inside watch(), ending inotify and
    uevents with it."""
    launched = start(launch, GenericConfig(), tree.env)
    bad = probed(ProbeBlock(command=["sh", "-c", "true\x00false"]))
    with pytest.raises(CallError) as refused:
        launched.client.set_config(encode_config(bad))
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details == (
        'SetConfig failed: device "dev": probe.command[2]: must not contain a NUL character'
    )


def test_a_probe_that_cannot_start_is_a_verdict(launch: Launcher, tree: FakeTree) -> None:
    probe = ProbeBlock(command=["/nonexistent/nd18-probe", "--quiet"])
    launched = start(launch, probed(probe), tree.env)
    assert first_verdict(launched) == (
        False,
        "probe /nonexistent/nd18-probe could not start: no such file or directory",
    )
