"""nomad-device-generic cleans a device after the allocation holding it ended.

The plugin runs as a subprocess over the real wire, on a fake /dev tree,
against a fake agent's HTTP API (``nomad_device.testing.FakeNomadAgent``).
The ``release`` command is the operator's (a scrub: ``blkdiscard``,
``nvme format``, a firmware reset); here a shell script that writes down what
it was told. What an operator relies on: the device is unhealthy while it is
cleaned, so that nothing is placed on it (asked of ``nomad-device-launcher
check --node`` with the node as Nomad would then see it), healthy again only
when the command succeeded; a stuck command is killed at its timeout and
said; the command never sees the agent's token.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from support.fake_tree import FakeTree, require_root
from support.generic import COMMAND, devices, wait_until
from support.processes import Launcher

from nomad_device.config import encode_config
from nomad_device.errors import InvalidArgument
from nomad_device.plugin.nomadapi import NomadConfig
from nomad_device.plugins.generic.config import (
    DeviceBlock,
    GenericConfig,
    ReleaseBlock,
    settings_from,
)
from nomad_device.testing.nomadagent import FakeNomadAgent

pytestmark = pytest.mark.timeout(180)

HOUR = timedelta(hours=1)
KEY = "generic/dev/dev"
GROUP = ("generic", "dev", "dev")
TOKEN = "agent-token-never-seen-by-commands"


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    require_root()
    tree = FakeTree(tmp_path / "root")
    tree.char("dev0", 240, 0)
    tree.char("dev1", 240, 1)
    return tree


@pytest.fixture
def agent() -> Iterator[FakeNomadAgent]:
    fake = FakeNomadAgent(heartbeat=0.2, token=TOKEN)
    fake.start()
    yield fake
    fake.stop()


def config(tmp_path: Path, agent: FakeNomadAgent, release: ReleaseBlock) -> GenericConfig:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    nomad = NomadConfig(
        address=agent.address, token_file=str(token), state_dir=str(tmp_path / "state")
    )
    device = DeviceBlock(paths=["/dev/dev*"], release=release)
    return GenericConfig(device={"dev": device}, fingerprint_period=HOUR, nomad=nomad)


def script(tmp_path: Path, body: str) -> list[str]:
    """A release command: ``body`` in sh, after writing down what it was given."""
    journal = tmp_path / "journal"
    record = f'printf "%s %s\\n" "$GENERIC_DEVICE_ID" "$GENERIC_DEVICE_ALLOC_ID" >> {journal}; '
    env_dump = f'env > {tmp_path}/env-"$GENERIC_DEVICE_ID"; '
    return ["/bin/sh", "-c", record + env_dump + body]


def journal(tmp_path: Path) -> list[str]:
    path = tmp_path / "journal"
    return path.read_text().splitlines() if path.exists() else []


class Watch:
    """The plugin's Fingerprint messages, read in a thread, to wait on."""

    def __init__(self, launched: object) -> None:
        import threading

        self.messages: list[dict[str, tuple[bool, str]]] = []
        self._stream = launched.client.fingerprint()  # type: ignore[attr-defined]
        self.groups: list[object] = []

        def read() -> None:
            with contextlib.suppress(Exception):
                for groups in self._stream:
                    self.groups.append(groups)
                    self.messages.append(
                        {
                            i: (d.healthy, d.health_description)
                            for i, d in devices(groups, KEY).items()
                        }
                    )

        threading.Thread(target=read, daemon=True).start()

    def wait(self, condition: object, timeout: float = 60, after: int = 0) -> int:
        """The index of the first message from ``after`` on that satisfies ``condition``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, message in enumerate(self.messages[after:], after):
                if condition(message):  # type: ignore[operator]
                    return i
            time.sleep(0.02)
        raise AssertionError(f"never met; last: {self.messages[-3:]}")


def start(launch: Launcher, tree: FakeTree, cfg: GenericConfig) -> tuple[object, Watch]:
    env = {**os.environ, **tree.env, "NOMAD_TOKEN": TOKEN}  # as if the agent had one
    launched = launch(COMMAND, env=env)
    launched.client.set_config(encode_config(cfg))
    watch = Watch(launched)
    watch.wait(lambda m: set(m) == {"dev0", "dev1"})
    return launched, watch


def node_json(path: Path, groups: list[object]) -> Path:
    """The node as Nomad would see it with these devices (for ``check --node``)."""
    from nomad_device.cli.nomadjson import devices_json

    node = {
        "ID": "node-1",
        "Name": "node-1",
        "Datacenter": "dc1",
        "NodePool": "default",
        "NodeClass": "",
        "ComputedClass": "",
        "Attributes": {"kernel.name": "linux"},
        "NodeResources": {"Devices": devices_json(groups)},  # type: ignore[arg-type]
        "Drain": False,
        "SchedulingEligibility": "eligible",
        "Status": "ready",
    }
    path.write_text(json.dumps(node))
    return path


def check(tmp_path: Path, groups: list[object]) -> tuple[int, str]:
    job = tmp_path / "job.hcl"
    job.write_text(
        'job "scrubbed" {\n  datacenters = ["dc1"]\n  group "g" {\n    task "t" {\n'
        '      driver = "exec"\n      resources {\n'
        '        device "generic/dev/dev" { count = 2 }\n      }\n    }\n  }\n}\n'
    )
    script_ = Path(sys.executable).with_name("nomad-device-launcher")
    command = [str(script_)] if script_.is_file() else [sys.executable, "-m", "nomad_device.cli"]
    node = node_json(tmp_path / "node.json", groups)
    done = subprocess.run(
        [*command, "check", str(job), "--node", str(node)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, done.stdout


def test_a_released_device_is_cleaned_once_and_nothing_is_placed_on_it_meanwhile(
    launch: Launcher, tree: FakeTree, agent: FakeNomadAgent, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    wait_for_go = f"while [ ! -e {go} ]; do sleep 0.05; done"
    cfg = config(tmp_path, agent, ReleaseBlock(command=script(tmp_path, wait_for_go)))
    launched, watch = start(launch, tree, cfg)
    agent.place("a1", [(*GROUP, ["dev0"])], status="running")
    wait_until(lambda: "held_by" in _held_stats(launched))
    before = check(tmp_path, watch.groups[-1])
    assert before[0] == 0, before[1]  # two healthy devices: the job places

    agent.set_status("a1", "complete")
    cleaning = watch.wait(lambda m: m["dev0"] == (False, "being cleaned after a1"))
    assert watch.messages[cleaning]["dev1"] == (True, "")
    code, report = check(tmp_path, watch.groups[cleaning])
    assert code == 1, report  # one healthy device left: nothing is placed
    assert 'dev0 unhealthy ("being cleaned after a1")' in report
    # Stats say so too (their summary is what `nomad node status -verbose` shows).
    wait_until(lambda: _state(launched, "dev0") == (False, "being cleaned after a1"))
    assert _state(launched, "dev1") == (True, "healthy")

    go.touch()
    clean = watch.wait(lambda m: m["dev0"] == (True, ""), after=cleaning)
    wait_until(lambda: _state(launched, "dev0") == (True, "healthy"))
    assert check(tmp_path, watch.groups[clean])[0] == 0
    assert journal(tmp_path) == ["dev0 a1"]
    env = (tmp_path / "env-dev0").read_text()
    assert TOKEN not in env and "NOMAD_TOKEN" not in env  # neither the file's nor the env's
    assert "GENERIC_DEVICE_PATH=" in env and "PLUGIN_" not in env

    # The next holder of dev1 fails: cleaned after it, once.
    agent.place("b1", [(*GROUP, ["dev1"])], status="running")
    agent.set_status("b1", "failed")
    wait_until(lambda: len(journal(tmp_path)) == 2)
    assert journal(tmp_path)[1] == "dev1 b1"
    watch.wait(lambda m: m == {"dev0": (True, ""), "dev1": (True, "")}, after=clean)
    for entry in launched.logs:  # type: ignore[attr-defined]
        assert TOKEN not in entry.message + repr(dict(entry.fields))


def _state(launched: object, device_id: str) -> tuple[bool, str]:
    """What the plugin's stats say of a device: its ``healthy`` stat and its summary."""
    with launched.client.stats(0.1) as stats:  # type: ignore[attr-defined]
        for group in stats.next(10):
            found = group.instance_stats.get(device_id)
            if found is not None:
                healthy = found.stats.attributes["healthy"].bool_value
                return bool(healthy), str(found.summary.string_value)
    raise AssertionError(f"no stats for {device_id}")


def _held_stats(launched: object) -> str:
    with launched.client.stats(0.1) as stats:  # type: ignore[attr-defined]
        return repr(stats.next(10))


def test_a_stuck_release_command_is_killed_at_its_timeout_and_said(
    launch: Launcher, tree: FakeTree, agent: FakeNomadAgent, tmp_path: Path
) -> None:
    marker = f"{5000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9:09d}"
    stuck = f"sleep {marker} & sleep {marker}"  # and a child that outlives the shell
    release = ReleaseBlock(command=script(tmp_path, stuck), timeout=timedelta(seconds=1))
    launched, watch = start(launch, tree, config(tmp_path, agent, release))
    try:
        agent.place("a1", [(*GROUP, ["dev1"])], status="running")
        agent.set_status("a1", "lost")
        reason = "cleaning after a1 failed: release command timed out after 1s"
        watch.wait(lambda m: m["dev1"] == (False, reason))
        assert not _with_argument(marker)  # the whole tree is gone
        warned = launched.wait_for_log(  # type: ignore[attr-defined]
            lambda e: "release command timed out" in e.message
        )
        assert warned[0].level.lower().startswith("warn")
        assert warned[0].fields.get("alloc_id") == "a1"
    finally:
        for pid in _with_argument(marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_failing_release_command_gives_its_reason_and_is_tried_again(
    launch: Launcher, tree: FakeTree, agent: FakeNomadAgent, tmp_path: Path
) -> None:
    fixed = tmp_path / "fixed"
    body = f'[ -e {fixed} ] && exit 0; echo "dev is busy: $GENERIC_DEVICE_PATH"; exit 3'
    launched, watch = start(
        launch, tree, config(tmp_path, agent, ReleaseBlock(script(tmp_path, body)))
    )
    agent.place("a1", [(*GROUP, ["dev0", "dev1"])], status="running")
    agent.set_status("a1", "complete")
    busy = watch.wait(lambda m: m["dev0"][1].startswith("cleaning after a1 failed: dev is busy: /"))
    assert watch.messages[busy]["dev0"][0] is False
    wait_until(lambda: _state(launched, "dev0")[1].startswith("cleaning after a1 failed: dev is"))
    assert _state(launched, "dev0")[0] is False
    fixed.touch()
    watch.wait(lambda m: m == {"dev0": (True, ""), "dev1": (True, "")}, after=busy)
    wait_until(lambda: _state(launched, "dev0") == (True, "healthy"))
    lines = journal(tmp_path)
    assert lines.count("dev0 a1") >= 2 and lines.count("dev1 a1") >= 2
    # Released once, cleaned more than once: the log says the release once.
    said = [e for e in launched.logs if e.message == "devices released"]  # type: ignore[attr-defined]
    assert len(said) == 1, [(e.level, e.message) for e in launched.logs]  # type: ignore[attr-defined]


def _with_argument(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                continue
    return found


def test_a_release_block_needs_the_nomad_block_and_a_device_of_its_own() -> None:
    release = ReleaseBlock(command=["/bin/true"])
    with pytest.raises(InvalidArgument, match=r'device "d": release: needs the nomad block'):
        settings_from(GenericConfig(device={"d": DeviceBlock(paths=["/dev/x"], release=release)}))
    shared = DeviceBlock(paths=["/dev/x"], release=release, share=4)
    with pytest.raises(InvalidArgument, match=r"cannot clean a shared device"):
        settings_from(GenericConfig(device={"d": shared}, nomad=NomadConfig()))
    empty = DeviceBlock(paths=["/dev/x"], release=ReleaseBlock(command=[], timeout=timedelta()))
    with pytest.raises(InvalidArgument) as caught:
        settings_from(GenericConfig(device={"d": empty}, nomad=NomadConfig()))
    assert "release.command: must name a program" in str(caught.value)
    assert "release.timeout: must be greater than zero" in str(caught.value)
