"""nomad-device-example over the wire: where it deliberately does better than Go's example.

Each test names the Go behaviour it improves on. None of these situations may
end a Fingerprint or Stats stream: Nomad would drop the plugin's devices until
the agent restarts.
"""

from __future__ import annotations

import os
import queue
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from support.processes import Launched, Launcher

from nomad_device import Attribute, Device, DeviceGroup, DeviceGroupStats
from nomad_device.config import encode_config
from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.host import CallError, Stream
from nomad_device.plugins.example.plugin import ExampleConfig
from nomad_device.sources import DISABLE_ENV

COMMAND = [sys.executable, "-m", "nomad_device.plugins.example"]
BAD_PERMS = 'Device has bad permissions "-rwxrwxrwx"'
GROUP_ATTRS = {"cool-attribute": Attribute("attribute-wearing-sunglasses")}

Start = Callable[..., Launched]


@pytest.fixture
def example(launch: Launcher) -> Start:
    """Launch the example plugin and configure it for ``directory``."""

    def start(
        directory: Path | str, *, env: dict[str, str] | None = None, **options: str
    ) -> Launched:
        launched = launch(COMMAND, env=None if env is None else {**os.environ, **env})
        options.setdefault("list_period", "100ms")
        config = ExampleConfig(dir=str(directory), **options)
        launched.client.set_config(encode_config(config))
        return launched

    return start


def group(*devices: Device) -> list[DeviceGroup]:
    return [DeviceGroup("nomad", "file", "mock", devices, GROUP_ATTRS)]


def touch(path: Path, mode: int = 0o644, content: bytes = b"") -> None:
    path.write_bytes(content)
    os.chmod(path, mode)


def wait_for(
    stream: Stream[list[DeviceGroup]], want: list[DeviceGroup], timeout: float = 10.0
) -> list[list[DeviceGroup]]:
    """Read messages until one equals ``want``; return everything read."""
    seen: list[list[DeviceGroup]] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"never saw {want!r}; saw {seen!r}")
        message = stream.next(left)
        seen.append(message)
        if message == want:
            return seen


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def logged(launched: Launched, text: str) -> list[HclogEntry]:
    """The log entries containing ``text``, once there is at least one.

    The plugin's stderr is read concurrently with its gRPC answers, so a line
    written before a message was sent may be parsed after it arrived.
    """
    wait_until(lambda: any(text in entry.message for entry in launched.logs))
    return [entry for entry in launched.logs if text in entry.message]


# ---------------------------------------------------------------- first message at once


@pytest.mark.parametrize("contents", ["empty", "missing", "one-file"])
def test_first_fingerprint_goes_out_at_once(example: Start, tmp_path: Path, contents: str) -> None:
    # Go sends nothing until it has a device, and Nomad waits up to 50 s for it.
    root = tmp_path / "devices"
    if contents != "missing":
        root.mkdir()
    if contents == "one-file":
        touch(root / "dev")
    launched = example(root, list_period="1h")
    with launched.client.fingerprint() as stream:
        first = stream.next(30)  # the period is an hour: only the first scan explains this
    assert first == (group(Device("dev")) if contents == "one-file" else [])


def test_removing_the_last_device_is_reported(example: Start, tmp_path: Path) -> None:
    # Go computes an empty change and then skips sending it: Nomad keeps the device.
    touch(tmp_path / "only")
    launched = example(tmp_path)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == group(Device("only"))
        (tmp_path / "only").unlink()
        wait_for(stream, [])
        touch(tmp_path / "again")
        wait_for(stream, group(Device("again")))


# ---------------------------------------------------------------- missing directory


def test_directory_removed_and_recreated_under_a_live_stream(
    example: Start, tmp_path: Path
) -> None:
    # Go's ReadDir error ends the stream, and Nomad drops the plugin for good.
    root = tmp_path / "devices"
    root.mkdir()
    touch(root / "a")
    touch(root / "b", 0o777)
    launched = example(root)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == group(Device("a"), Device("b", False, BAD_PERMS))
        shutil.rmtree(root)
        wait_for(stream, [])
        # Several periods while it is gone: the stream stays open and quiet.
        with pytest.raises(TimeoutError):
            stream.next(1.0)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == []
        root.mkdir()
        touch(root / "c")
        wait_for(stream, group(Device("c")))
    # One warning for the whole outage, one note when it ended.
    [warning] = logged(launched, "device directory not found")
    assert len(logged(launched, "device directory readable again")) == 1
    assert warning.level == "warn"
    assert warning.fields["dir"] == str(root)
    assert warning.fields["error"] == "no such file or directory"


def test_directory_replaced_by_a_file(example: Start, tmp_path: Path) -> None:
    root = tmp_path / "devices"
    root.mkdir()
    touch(root / "a")
    launched = example(root)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == group(Device("a"))
        shutil.rmtree(root)
        touch(root)
        wait_for(stream, [])
        root.unlink()
        root.mkdir()
        touch(root / "a")
        wait_for(stream, group(Device("a")))
    # Once per state: a scan may also have seen the moment between rmtree and touch.
    warnings = logged(launched, "device directory not found")
    assert 1 <= len(warnings) <= 2, warnings
    errors = [w.fields["error"] for w in warnings]
    assert set(errors) <= {"not a directory", "no such file or directory"}
    assert len(set(errors)) == len(errors)


def test_reserve_while_the_directory_is_missing(example: Start, tmp_path: Path) -> None:
    root = tmp_path / "devices"
    root.mkdir()
    touch(root / "a")
    launched = example(root)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == group(Device("a"))
        shutil.rmtree(root)
        wait_for(stream, [])
    # Nomad was told the device is gone, so Reserve agrees.
    with pytest.raises(CallError) as caught:
        launched.client.reserve(["a"])
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details == 'unknown device "a"'


# ---------------------------------------------------------------- unreadable directory


def repoint(link: Path, target: Path) -> None:
    """Point ``link`` at ``target`` in one step: a new link renamed over the old one.

    An unlink followed by a new symlink leaves a moment in which the directory
    is missing. A scan that lands there (inotify wakes one at once; the more
    likely the busier the machine) rightly reports no devices, and they are
    then no longer known when the directory turns unreadable: the test waited
    for unhealthy devices that could never come.
    """
    fresh = link.with_name(link.name + ".new")
    fresh.symlink_to(target)
    os.replace(fresh, link)


def test_unreadable_directory_keeps_devices_unhealthy(example: Start, tmp_path: Path) -> None:
    # A symlink loop makes the directory unreadable even for root (ELOOP).
    real = tmp_path / "real"
    real.mkdir()
    touch(real / "a")
    touch(real / "b", 0o777)
    link = tmp_path / "devices"
    link.symlink_to(real)
    launched = example(link)
    why = "Device directory unreadable: too many levels of symbolic links"
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == group(Device("a"), Device("b", False, BAD_PERMS))
        repoint(link, link)
        wait_for(stream, group(Device("a", False, why), Device("b", False, why)))
        with pytest.raises(TimeoutError):
            stream.next(1.0)
    # The devices are still known: Nomad was not told they went away.
    assert [m.task_path for m in launched.client.reserve(["a"]).mounts] == ["/tmp/task-mounts/a"]
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == group(Device("a", False, why), Device("b", False, why))
        repoint(link, real)
        wait_for(stream, group(Device("a"), Device("b", False, BAD_PERMS)))
    [error] = logged(launched, "cannot list the device directory")
    assert error.level == "error"
    assert error.fields["devices"] == 2
    assert len(logged(launched, "device directory readable again")) == 1
    assert not [e for e in launched.logs if "device directory not found" in e.message]


# ---------------------------------------------------------------- entries Go mishandles


def test_file_replaced_by_a_directory_is_no_longer_a_device(example: Start, tmp_path: Path) -> None:
    # Go keeps such a name as a device (it is still listed), with its old health.
    touch(tmp_path / "a")
    touch(tmp_path / "b")
    launched = example(tmp_path)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == group(Device("a"), Device("b"))
        (tmp_path / "b").unlink()
        (tmp_path / "b").mkdir()
        wait_for(stream, group(Device("a")))


def test_name_that_is_not_utf8_is_skipped_and_logged(example: Start, tmp_path: Path) -> None:
    # Protobuf strings must be UTF-8: in Go, such a name makes the send fail and
    # ends the stream.
    touch(tmp_path / "good")
    os.close(os.open(os.fsencode(tmp_path) + b"/bad\xff", os.O_CREAT | os.O_WRONLY, 0o644))
    launched = example(tmp_path)
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == group(Device("good"))
        with pytest.raises(TimeoutError):
            stream.next(0.5)
    assert len(logged(launched, 'skipped "bad\\xff": its name is not valid UTF-8')) == 1


def test_devices_are_sorted_by_name(example: Start, tmp_path: Path) -> None:
    # Go builds each message from a map, so its order changes from one message to the next.
    names = [f"dev{i:03d}" for i in range(50)]
    for name in random.Random(7).sample(names, len(names)):
        touch(tmp_path / name)
    launched = example(tmp_path)
    with launched.client.fingerprint() as stream:
        [first] = stream.next(10)
        assert [d.id for d in first.devices] == names
        os.chmod(tmp_path / "dev025", 0o777)
        [second] = stream.next(10)
        assert [d.id for d in second.devices] == names


# ---------------------------------------------------------------- config Go accepts but mishandles


@pytest.mark.parametrize("period", ["0", "0s", "-0s", "-1s", "-1h", "0.0000000001s"])
def test_list_period_must_be_positive(launch: Launcher, tmp_path: Path, period: str) -> None:
    # Go accepts these and then rescans in a busy loop.
    client = launch(COMMAND).client
    with pytest.raises(CallError) as caught:
        client.set_config(encode_config(ExampleConfig(dir=str(tmp_path), list_period=period)))
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    must = f'list period "{period}" must be greater than zero'
    assert caught.value.details == f"SetConfig failed: {must}"


def test_empty_dir_is_refused_by_set_config(launch: Launcher) -> None:
    # Go accepts it and fails the Fingerprint call instead, which drops the plugin.
    client = launch(COMMAND).client
    with pytest.raises(CallError) as caught:
        client.set_config(encode_config(ExampleConfig(dir="")))
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details == "SetConfig failed: device directory not set in config"


def test_unhealthy_perm_that_can_never_match_is_warned_about(
    example: Start, tmp_path: Path
) -> None:
    touch(tmp_path / "a", 0o777)
    launched = example(tmp_path, unhealthy_perm="rwxrwxrwx")
    with launched.client.fingerprint() as stream:
        assert stream.next(10) == group(Device("a"))
    [warning] = logged(launched, "unhealthy_perm can never match")
    assert warning.level == "warn"
    assert warning.fields["unhealthy_perm"] == "rwxrwxrwx"


# ---------------------------------------------------------------- stats never end


def _instances(message: list[DeviceGroupStats]) -> set[str]:
    return {name for g in message for name in g.instance_stats}


def test_file_deleted_during_stats(example: Start, tmp_path: Path) -> None:
    # Go's os.Stat error ends the Stats stream; Nomad then retries with back-off.
    touch(tmp_path / "a", content=b"aa")
    touch(tmp_path / "b", content=b"bbb")
    # A period far longer than the test, and no inotify: only the stats-triggered
    # rescan can notice.
    launched = example(tmp_path, list_period="1h", env={DISABLE_ENV: "inotify"})
    client = launched.client
    with client.fingerprint() as stream, client.stats(0.1) as stats:
        assert stream.next(10) == group(Device("a"), Device("b"))
        assert _instances(stats.next(10)) == {"a", "b"}
        (tmp_path / "b").unlink()
        wait_for(stream, group(Device("a")), timeout=30)
        deadline = time.monotonic() + 30
        while _instances(stats.next(10)) != {"a"}:
            assert time.monotonic() < deadline
        # Still flowing afterwards.
        assert _instances(stats.next(10)) == {"a"}
    [warning] = logged(launched, "left out of stats")
    assert warning.level == "warn"
    assert "no such file or directory" in warning.message


def test_dangling_symlink_is_left_out_of_stats(example: Start, tmp_path: Path) -> None:
    touch(tmp_path / "a")
    (tmp_path / "broken").symlink_to("nowhere")
    launched = example(tmp_path)
    client = launched.client
    with client.fingerprint() as stream:
        assert stream.next(10) == group(Device("a"), Device("broken", False, BAD_PERMS))
    with client.stats(0.1) as stats:
        for _ in range(5):
            assert _instances(stats.next(10)) == {"a"}
    # Logged once, not once per interval.
    assert len(logged(launched, "left out of stats")) == 1


class Collector:
    """Reads a stream in a thread, so a test can watch it without cancelling it."""

    def __init__(self, stream: Stream[list[DeviceGroupStats]]) -> None:
        self.stream = stream
        self.messages: queue.Queue[list[DeviceGroupStats]] = queue.Queue()
        self.ended: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for message in self.stream:
                self.messages.put(message)
            self.ended = StopIteration()
        except BaseException as exc:
            self.ended = exc

    def drain(self) -> None:
        while not self.messages.empty():
            self.messages.get_nowait()

    def close(self) -> None:
        self.stream.cancel()
        self._thread.join(10)


def test_stats_survive_the_whole_directory_vanishing(example: Start, tmp_path: Path) -> None:
    root = tmp_path / "devices"
    root.mkdir()
    touch(root / "a")
    launched = example(root)
    client = launched.client
    stats = Collector(client.stats(0.05))
    try:
        with client.fingerprint() as stream:
            assert stream.next(10) == group(Device("a"))
            assert _instances(stats.messages.get(timeout=10)) == {"a"}
            shutil.rmtree(root)
            wait_for(stream, [])
            stats.drain()
            # Twenty intervals with nothing to report: no message, and no error either.
            with pytest.raises(queue.Empty):
                stats.messages.get(timeout=1.0)
            assert stats.ended is None
            root.mkdir()
            touch(root / "a")
            wait_for(stream, group(Device("a")))
        # The very same Stats stream carries on.
        assert _instances(stats.messages.get(timeout=10)) == {"a"}
        assert stats.ended is None
    finally:
        stats.close()


# ---------------------------------------------------------------- concurrent streams


def test_every_new_stream_gets_the_current_state_at_once(example: Start, tmp_path: Path) -> None:
    # Go's second stream waits for the next change before it hears anything.
    touch(tmp_path / "a")
    launched = example(tmp_path, list_period="1h")
    client = launched.client
    first = client.fingerprint()
    second = client.fingerprint()
    try:
        assert first.next(10) == group(Device("a"))
        assert second.next(10) == group(Device("a"))
        with client.fingerprint() as third:
            assert third.next(10) == group(Device("a"))
        # All streams share one detection loop and see the same changes.
        client.set_config(encode_config(ExampleConfig(dir=str(tmp_path), list_period="100ms")))
        touch(tmp_path / "b", 0o777)
        want = group(Device("a"), Device("b", False, BAD_PERMS))
        wait_for(first, want)
        wait_for(second, want)
        # Closing one stream leaves the others running.
        first.cancel()
        (tmp_path / "a").unlink()
        wait_for(second, group(Device("b", False, BAD_PERMS)))
        with client.fingerprint() as fourth:
            assert fourth.next(10) == group(Device("b", False, BAD_PERMS))
    finally:
        first.cancel()
        second.cancel()


def test_concurrent_streams_each_see_every_change(example: Start, tmp_path: Path) -> None:
    touch(tmp_path / "base")
    launched = example(tmp_path)
    client = launched.client
    streams = [client.fingerprint() for _ in range(4)]
    try:
        for stream in streams:
            assert stream.next(10) == group(Device("base"))
        touch(tmp_path / "extra")
        results: list[object] = [None] * len(streams)

        def read(i: int) -> None:
            try:
                wait_for(streams[i], group(Device("base"), Device("extra")))
                results[i] = True
            except Exception as exc:
                results[i] = exc

        threads = [threading.Thread(target=read, args=(i,)) for i in range(len(streams))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        assert results == [True] * len(streams)
    finally:
        for stream in streams:
            stream.cancel()


# ---------------------------------------------------------------- Reserve during rescans


def test_concurrent_reserve_during_rescans(example: Start, tmp_path: Path) -> None:
    # Go's Reserve reads the device map without its lock while rescans rewrite it.
    stable = [f"stable{i:02d}" for i in range(20)]
    churn = [f"churn{i:02d}" for i in range(20)]
    for name in stable:
        touch(tmp_path / name)
    launched = example(tmp_path, list_period="10ms")
    client = launched.client
    with client.fingerprint() as stream:
        stream.next(10)
        stop = threading.Event()
        failures: list[str] = []
        calls = [0]

        def churner() -> None:
            rng = random.Random(1)
            while not stop.is_set():
                path = tmp_path / rng.choice(churn)
                if path.exists():
                    path.unlink()
                else:
                    touch(path, rng.choice([0o644, 0o777]))

        def reserver(seed: int) -> None:
            rng = random.Random(seed)
            while not stop.is_set():
                ids = [*rng.sample(stable, 3), rng.choice(churn)]
                try:
                    reservation = client.reserve(ids)
                except CallError as exc:
                    unknown = f'unknown device "{ids[-1]}"'
                    if exc.code != grpc.StatusCode.INVALID_ARGUMENT or exc.details != unknown:
                        failures.append(f"{ids}: {exc}")
                else:
                    paths = [(m.task_path, m.host_path, m.read_only) for m in reservation.mounts]
                    want = [(f"/tmp/task-mounts/{i}", f"{tmp_path}/{i}", False) for i in ids]
                    if paths != want or reservation.envs or reservation.devices:
                        failures.append(f"{ids}: {reservation}")
                calls[0] += 1

        workers = [threading.Thread(target=churner)] + [
            threading.Thread(target=reserver, args=(seed,)) for seed in range(4)
        ]
        for worker in workers:
            worker.start()
        time.sleep(3)  # a load test: the work happens in the threads meanwhile
        deadline = time.monotonic() + 60  # and at least 100 reserves, however busy the machine
        while calls[0] <= 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        for worker in workers:
            worker.join(20)
    assert not failures, failures[:5]
    assert calls[0] > 100
    # The plugin is still healthy and consistent afterwards.
    for name in churn:
        (tmp_path / name).unlink(missing_ok=True)
    with client.fingerprint() as stream:
        wait_for(stream, group(*(Device(n) for n in stable)))
    assert len(client.reserve(stable).mounts) == len(stable)
