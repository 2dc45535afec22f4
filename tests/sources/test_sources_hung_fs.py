"""A watched directory whose filesystem hangs stalls nothing but its watcher.

``hangfs`` is a FUSE filesystem the test mounts and holds: from then on
every ``stat``, ``inotify_add_watch`` or listing under it waits in the
kernel, as on a dead NFS server. Over the real wire, Reserve and Stats must
answer while a plugin's watcher (and, for the example, its ``detect``) is
stuck there, and everything must recover once the filesystem answers again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from support import PLUGINS
from support.hangfs import hangfs, usable
from support.processes import Launcher

from nomad_device.config import encode_config
from nomad_device.host import CallError
from nomad_device.model import DeviceGroup
from nomad_device.plugins.example.plugin import ExampleConfig

pytestmark = pytest.mark.skipif(not usable(), reason="needs root and /dev/fuse (CI has both)")

PLUGIN = PLUGINS / "hung_watch_plugin.py"
sys.path.insert(0, str(PLUGIN.parent))
from hung_watch_plugin import Config  # noqa: E402


def ids(message: Sequence[DeviceGroup]) -> list[str]:
    return [d.id for g in message for d in g.devices]


def test_reserve_and_stats_answer_while_the_watched_directory_hangs(
    launch: Launcher, tmp_path: Path
) -> None:
    with hangfs(tmp_path / "mnt", ["watched/"]) as fs:
        fs.hold()
        plugin = launch([sys.executable, str(PLUGIN)])
        plugin.client.set_config(encode_config(Config(dir=str(fs.mountpoint / "watched"))))
        with plugin.client.fingerprint() as stream:
            assert ids(stream.next(10)) == ["dev-0"]
            assert fs.stuck.wait(20), "the watcher never reached the filesystem"
            reservation = plugin.client.reserve(["dev-0"], timeout=10)
            assert reservation.envs == {"RESERVED": "dev-0"}
            with plugin.client.stats(interval=0.1) as stats:
                (group,) = stats.next(10)
                assert list(group.instance_stats) == ["dev-0"]
            fs.release()
            deadline = time.monotonic() + 20
            while ids(stream.next(20)) != ["dev-0", "watching"]:
                assert time.monotonic() < deadline, "the watch never came into place"
        assert plugin.client.reserve(["dev-0"], timeout=10).envs == {"RESERVED": "dev-0"}
    assert plugin.client.kill().outcome == "graceful"


def test_the_example_answers_reserve_while_its_new_directory_hangs(
    launch: Launcher, tmp_path: Path
) -> None:
    with hangfs(tmp_path / "mnt", ["one/", "one/a", "two/", "two/b"]) as fs:
        plugin = launch([sys.executable, "-m", "nomad_device.plugins.example"])
        client = plugin.client
        client.set_config(encode_config(ExampleConfig(dir=str(fs.mountpoint / "one"))))
        with client.fingerprint() as stream:
            assert ids(stream.next(10)) == ["a"]
            fs.hold()
            # The example watches the new directory and lists it: both get stuck there.
            client.set_config(encode_config(ExampleConfig(dir=str(fs.mountpoint / "two"))))
            assert fs.stuck.wait(20), "the plugin never reached the new directory"
            with pytest.raises(CallError) as refused:
                client.reserve(["a"], timeout=10)  # answered from what Nomad was told
            assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
            fs.release()
            deadline = time.monotonic() + 20
            while ids(stream.next(20)) != ["b"]:
                assert time.monotonic() < deadline, "the new directory's device never came"
        assert client.reserve(["b"], timeout=10).mounts[0].host_path.endswith("/two/b")
    assert client.kill().outcome == "graceful"
