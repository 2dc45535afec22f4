"""The inotify source: real kernel events where possible, a synthetic buffer where not.

Every wait has a generous timeout and nothing depends on speed: a burst is
either queued before the source reads it (so its batching is deterministic)
or checked for its end state, with a bound on batches far from any timing.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.sources import PipeSyscalls, next_within, pack

from nomad_device.sources import (
    CHANGES,
    DISABLE_ENV,
    LISTING,
    FileEvent,
    FileEvents,
    Inotify,
    flag_names,
    inotify,
)
from nomad_device.sources import _inotify as ino

LOGGER = "nomad_device.sources.inotify"


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= 30]


def until(source: Inotify, wanted: str, flag: str, timeout: float = 10.0) -> list[FileEvents]:
    """Batches read until one has an event on ``wanted`` carrying ``flag``."""
    seen: list[FileEvents] = []
    while True:
        batch = next_within(source, timeout)
        seen.append(batch)
        if any(e.path == wanted and flag in e.flags for e in batch.events):
            return seen


@pytest.fixture
def pipe_syscalls(monkeypatch: pytest.MonkeyPatch) -> Iterator[PipeSyscalls]:
    """inotify whose events the test writes itself (see PipeSyscalls)."""
    fake = PipeSyscalls()
    monkeypatch.setattr(ino, "SYSCALLS", fake)
    yield fake
    fake.close()


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, Inotify]]:
    root = tmp_path / "watched"
    root.mkdir()
    with inotify(root) as source:
        yield root, source


# ------------------------------------------------------------------ parsing


def test_parse_a_synthetic_buffer() -> None:
    buffer = (
        pack(1, ino.IN_CREATE, b"new-file")
        + pack(1, ino.IN_CREATE | ino.IN_ISDIR, b"a-directory-name-over-16")
        + pack(2, ino.IN_DELETE_SELF)
        + pack(-1, ino.IN_Q_OVERFLOW)
        + pack(1, ino.IN_MOVED_FROM, b"x", cookie=7)
    )
    assert list(ino.parse(buffer)) == [
        (1, ino.IN_CREATE, 0, b"new-file"),
        (1, ino.IN_CREATE | ino.IN_ISDIR, 0, b"a-directory-name-over-16"),
        (2, ino.IN_DELETE_SELF, 0, b""),
        (-1, ino.IN_Q_OVERFLOW, 0, b""),
        (1, ino.IN_MOVED_FROM, 7, b"x"),
    ]
    # A truncated tail (never produced by the kernel) is ignored, not misread.
    assert list(ino.parse(buffer[:5])) == []


def test_flag_names() -> None:
    assert flag_names(ino.IN_CREATE | ino.IN_ISDIR) == ("IN_CREATE", "IN_ISDIR")
    assert flag_names(ino.IN_Q_OVERFLOW) == ("IN_Q_OVERFLOW",)
    assert FileEvent("/x", ino.IN_ATTRIB, "/").flags == ("IN_ATTRIB",)
    assert LISTING == CHANGES & ~ino.IN_CLOSE_WRITE


def test_synthetic_overflow_is_a_rescan_batch(
    pipe_syscalls: PipeSyscalls, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with inotify(tmp_path) as source:
        wd = pipe_syscalls.wds[str(tmp_path)]
        pipe_syscalls.feed(pack(wd, ino.IN_CREATE, b"a"), pack(-1, ino.IN_Q_OVERFLOW))
        batch = next_within(source)
    assert batch.overflow
    assert [(e.path, e.flags) for e in batch.events] == [(str(tmp_path / "a"), ("IN_CREATE",))]
    [warning] = warnings(caplog)
    assert "queue overflowed" in warning and "max_queued_events" in warning


def test_synthetic_events_for_unknown_watches_are_dropped(
    pipe_syscalls: PipeSyscalls, tmp_path: Path
) -> None:
    with inotify(tmp_path) as source:
        wd = pipe_syscalls.wds[str(tmp_path)]
        pipe_syscalls.feed(pack(wd + 99, ino.IN_CREATE, b"stale"), pack(wd, ino.IN_ATTRIB, b"b"))
        batch = next_within(source)
    assert batch == FileEvents((FileEvent(str(tmp_path / "b"), ino.IN_ATTRIB, str(tmp_path)),))


# ------------------------------------------------------------------ real events


def test_each_kind_of_change_is_reported(watched: tuple[Path, Inotify]) -> None:
    root, source = watched
    (root / "f").write_text("x")
    until(source, str(root / "f"), "IN_CLOSE_WRITE")
    os.chmod(root / "f", 0o600)
    until(source, str(root / "f"), "IN_ATTRIB")
    (root / "f").rename(root / "g")
    [*_, last] = until(source, str(root / "g"), "IN_MOVED_TO")
    moved = {e.path: e.cookie for e in last.events if e.cookie}
    assert moved[str(root / "f")] == moved[str(root / "g")] != 0
    (root / "g").unlink()
    until(source, str(root / "g"), "IN_DELETE")


def test_a_file_can_be_watched_itself(tmp_path: Path) -> None:
    target = tmp_path / "inventory.json"
    target.write_text("[]")
    with inotify(target) as source:
        os.chmod(target, 0o600)
        batch = next_within(source)
    assert [(e.path, e.root, e.flags) for e in batch.events] == [
        (str(target), str(target), ("IN_ATTRIB",))
    ]


def test_listing_wakes_nobody(tmp_path: Path) -> None:
    # A poll lists the directory: with LISTING (opens and reads not asked
    # for) that makes no event, so polling and watching together cost an
    # idle plugin nothing more than polling.
    for i in range(10):
        (tmp_path / f"f{i}").touch()
    with inotify(tmp_path, mask=LISTING) as source:
        for _ in range(3):
            with os.scandir(tmp_path) as entries:
                for entry in entries:
                    entry.stat(follow_symlinks=False)
            (tmp_path / "f0").read_bytes()
        (tmp_path / "marker").touch()
        batch = next_within(source)
    assert [(e.path, e.flags) for e in batch.events] == [(str(tmp_path / "marker"), ("IN_CREATE",))]


def test_burst_queued_before_reading_is_one_batch(watched: tuple[Path, Inotify]) -> None:
    # 4,000 files created and deleted: 12,000 events, under the kernel's default
    # queue of 16,384, all waiting before the source reads: it drains them in
    # one go, then 2 ms of quiet end the batch. No timing decides the count.
    root, source = watched
    source._max_events = 100_000
    for i in range(4000):
        (root / f"f{i}").touch()
    for i in range(4000):
        (root / f"f{i}").unlink()
    batch = next_within(source)
    assert not batch.overflow
    assert len(batch.events) == 12_000
    assert {e.path for e in batch.events if "IN_DELETE" in e.flags} == {
        str(root / f"f{i}") for i in range(4000)
    }


def test_live_burst_is_coalesced(watched: tuple[Path, Inotify]) -> None:
    # While 10,000 files are created and deleted, batches come at most one per
    # max_delay (250 ms), whatever the pauses of the writer: that is the
    # contract, and load can only lengthen the burst, never break it.
    root, source = watched
    source._max_events = 10**6
    started = time.monotonic()

    def burst() -> None:
        for i in range(10_000):
            (root / f"f{i}").touch()
        for i in range(10_000):
            (root / f"f{i}").unlink()
        (root / "last").touch()

    writer = threading.Thread(target=burst)
    writer.start()
    batches = until(source, str(root / "last"), "IN_CREATE", timeout=120)
    elapsed = time.monotonic() - started
    writer.join()
    assert len(batches) <= 1 + elapsed / ino.MAX_DELAY
    assert len(batches) < 1000  # against 30,000 events
    lost = any(b.overflow for b in batches)
    deleted = {e.path for b in batches for e in b.events if "IN_DELETE" in e.flags}
    assert lost or len(deleted) == 10_000


def test_real_queue_overflow(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # More events than fs.inotify.max_queued_events while nobody reads: the
    # kernel's own IN_Q_OVERFLOW, no sysctl touched.
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        reason = f"max_queued_events is {limit}: too many files to overflow it"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must provoke a real IN_Q_OVERFLOW")
        pytest.skip(reason)
    with inotify(tmp_path, mask=ino.IN_CREATE | ino.IN_DELETE, max_events=10**7) as source:
        for i in range(limit // 2 + 100):
            (tmp_path / f"f{i}").touch()
            (tmp_path / f"f{i}").unlink()
        # The queue is full: even this is lost, but it is there for the rescan.
        (tmp_path / "after").touch()
        batches = [next_within(source, 60)]
        while not batches[-1].overflow and len(batches) < 100:
            batches.append(next_within(source, 60))
        assert batches[-1].overflow
        # The source reads on afterwards.
        (tmp_path / "later").touch()
        until(source, str(tmp_path / "later"), "IN_CREATE")
    [warning] = warnings(caplog)
    assert "queue overflowed" in warning and f"max_queued_events = {limit}" in warning


def test_batch_beyond_max_events_says_overflow(tmp_path: Path) -> None:
    with inotify(tmp_path, max_events=10) as source:
        for i in range(50):
            (tmp_path / f"f{i}").touch()
        batch = next_within(source)
    assert batch.overflow
    assert len(batch.events) == 10


# ------------------------------------------------------------------ removal and re-creation


def test_removed_and_recreated_directory_is_watched_again(watched: tuple[Path, Inotify]) -> None:
    root, source = watched
    shutil.rmtree(root)
    until(source, str(root), "IN_DELETE_SELF")
    root.mkdir()
    until(source, str(root), "IN_CREATE")
    (root / "after").touch()
    until(source, str(root / "after"), "IN_CREATE")


def test_directory_renamed_away_and_another_put_in_its_place(
    watched: tuple[Path, Inotify],
) -> None:
    root, source = watched
    root.rename(root.with_name("old"))
    until(source, str(root), "IN_MOVE_SELF")
    # Events in the renamed directory are no longer about ``root``.
    (root.with_name("old") / "ignored").touch()
    fresh = root.with_name("fresh")
    fresh.mkdir()
    fresh.rename(root)
    batches = until(source, str(root), "IN_CREATE")
    assert not any("ignored" in e.path for b in batches for e in b.events)
    (root / "inside").touch()
    until(source, str(root / "inside"), "IN_CREATE")


def test_replaced_by_rename_over_it(watched: tuple[Path, Inotify]) -> None:
    root, source = watched
    other = root.with_name("other")
    other.mkdir()
    os.rename(other, root)  # the old directory is gone; the path is the other one
    until(source, str(root), "IN_CREATE")
    (root / "x").touch()
    until(source, str(root / "x"), "IN_CREATE")


def test_path_missing_at_start_several_levels_deep(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    with inotify(target) as source:
        (tmp_path / "a").mkdir()
        (tmp_path / "a" / "unrelated").mkdir()
        (tmp_path / "a" / "b").mkdir()
        target.mkdir()
        batch = next_within(source)
        assert [(e.path, e.flags) for e in batch.events] == [
            (str(target), ("IN_CREATE", "IN_ISDIR"))
        ]
        (target / "f").touch()
        until(source, str(target / "f"), "IN_CREATE")
        # And again, from further up: the whole chain goes and comes back.
        shutil.rmtree(tmp_path / "a")
        until(source, str(target), "IN_DELETE_SELF")
        target.mkdir(parents=True)
        until(source, str(target), "IN_CREATE")


def test_replaced_by_a_file_and_back(watched: tuple[Path, Inotify]) -> None:
    root, source = watched
    root.rmdir()
    root.write_text("now a file")
    until(source, str(root), "IN_CREATE")  # the path exists again, as a file
    root.unlink()
    root.mkdir()
    until(source, str(root), "IN_ISDIR")
    (root / "f").touch()
    until(source, str(root / "f"), "IN_CREATE")


def test_guard_ignores_siblings(pipe_syscalls: PipeSyscalls, tmp_path: Path) -> None:
    # While ``missing`` is awaited, the parent's other entries make no batch.
    target = tmp_path / "missing"
    with inotify(target) as source:
        guard = pipe_syscalls.wds[str(tmp_path)]
        pipe_syscalls.feed(pack(guard, ino.IN_CREATE, b"sibling"))
        target.mkdir()
        pipe_syscalls.feed(pack(guard, ino.IN_CREATE | ino.IN_ISDIR, b"missing"))
        batch = next_within(source)
        assert [e.path for e in batch.events] == [str(target)]
        assert pipe_syscalls.wds[str(target)] in source._watches


def test_overflow_rechecks_the_watches(pipe_syscalls: PipeSyscalls, tmp_path: Path) -> None:
    # The IN_DELETE_SELF was among the lost events: the overflow finds the
    # directory replaced anyway and watches the new one.
    root = tmp_path / "root"
    root.mkdir()
    with inotify(root) as source:
        root.rmdir()
        root.mkdir()
        pipe_syscalls.wds.pop(str(root))  # the new directory gets a new descriptor
        pipe_syscalls.feed(pack(-1, ino.IN_Q_OVERFLOW))
        batch = next_within(source)
    assert batch.overflow
    assert [(e.path, e.flags) for e in batch.events] == [(str(root), ("IN_CREATE", "IN_ISDIR"))]


# ------------------------------------------------------------------ recursive


def test_recursive_follows_new_and_moved_subdirectories(tmp_path: Path) -> None:
    (tmp_path / "old" / "deep").mkdir(parents=True)
    with inotify(tmp_path, recursive=True) as source:
        (tmp_path / "old" / "deep" / "f").touch()
        until(source, str(tmp_path / "old" / "deep" / "f"), "IN_CREATE")
        # A new subtree: its contents are reported even if they beat the watch.
        (tmp_path / "new" / "inner").mkdir(parents=True)
        (tmp_path / "new" / "inner" / "g").touch()
        until(source, str(tmp_path / "new" / "inner" / "g"), "IN_CREATE")
        (tmp_path / "new" / "inner" / "h").touch()
        until(source, str(tmp_path / "new" / "inner" / "h"), "IN_CREATE")
        # Moved out of the tree: no longer watched. Moved back in: watched again.
        outside = tmp_path.with_name(tmp_path.name + "-outside")
        (tmp_path / "old").rename(outside)
        until(source, str(tmp_path / "old"), "IN_MOVED_FROM")
        (outside / "deep" / "unseen").touch()
        (tmp_path / "marker").touch()
        batches = until(source, str(tmp_path / "marker"), "IN_CREATE")
        assert not any("unseen" in e.path for b in batches for e in b.events)
        outside.rename(tmp_path / "back")
        until(source, str(tmp_path / "back"), "IN_MOVED_TO")
        (tmp_path / "back" / "deep" / "seen").touch()
        until(source, str(tmp_path / "back" / "deep" / "seen"), "IN_CREATE")
        assert len(source._roots[0].subs) == 4  # new, new/inner, back, back/deep


def test_not_recursive_by_default(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    with inotify(tmp_path) as source:
        (tmp_path / "sub" / "unseen").touch()
        (tmp_path / "marker").touch()
        batches = until(source, str(tmp_path / "marker"), "IN_CREATE")
    assert not any("unseen" in e.path for b in batches for e in b.events)


# ------------------------------------------------------------------ fallback


def _blocks_until_closed(source: Inotify) -> None:
    """Iteration neither yields nor ends until close(), which ends it at once."""
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(list(source)), daemon=True)
    reader.start()
    reader.join(0.3)  # not a timing assertion: it must not have returned at all
    assert reader.is_alive() and not result
    source.close()
    reader.join(10)
    assert result == [[]]


def test_disabled_by_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(DISABLE_ENV, "uevent, inotify")
    source = inotify(tmp_path)
    assert not source.available
    (tmp_path / "ignored").touch()
    _blocks_until_closed(source)
    [warning] = warnings(caplog)
    assert warning == (
        f"inotify disabled by {DISABLE_ENV}; change detection under {tmp_path}"
        " falls back to the poll period"
    )


class _Unavailable(ino.Syscalls):
    def __init__(self, code: int) -> None:
        super().__init__()
        self.code = code

    def init(self) -> int:
        raise OSError(self.code, os.strerror(self.code))


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EMFILE])
def test_unavailable_inotify_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    monkeypatch.setattr(ino, "SYSCALLS", _Unavailable(code))
    _blocks_until_closed(inotify(tmp_path))
    [warning] = warnings(caplog)
    assert warning.startswith(f"inotify unavailable ({os.strerror(code).lower()}")
    assert warning.endswith(f"change detection under {tmp_path} falls back to the poll period")
    if code == errno.EMFILE:
        assert "fs.inotify.max_user_instances" in warning


def test_watch_limit_at_start(
    pipe_syscalls: PipeSyscalls, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pipe_syscalls.fail_add = lambda path: errno.ENOSPC
    with inotify(tmp_path, recursive=True) as source:
        assert not source.available
        _blocks_until_closed(source)
    [warning] = warnings(caplog)
    assert warning.startswith("inotify watch limit reached (fs.inotify.max_user_watches")
    assert "falls back to the poll period" in warning


def test_watch_limit_reached_later(
    pipe_syscalls: PipeSyscalls, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A recursive watch meets the limit on a new subdirectory: one last batch
    # (rescan everything), one warning, then the fallback.
    with inotify(tmp_path, recursive=True) as source:
        pipe_syscalls.fail_add = lambda path: errno.ENOSPC if path.endswith("new") else None
        (tmp_path / "new").mkdir()
        wd = pipe_syscalls.wds[str(tmp_path)]
        pipe_syscalls.feed(pack(wd, ino.IN_CREATE | ino.IN_ISDIR, b"new"))
        batch = next_within(source)
        assert batch.overflow
        assert not source.available
        _blocks_until_closed(source)
    [warning] = warnings(caplog)
    assert warning.startswith("inotify watch limit reached")


def test_unwatchable_path_is_logged_once_and_others_still_work(
    pipe_syscalls: PipeSyscalls, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "no").mkdir()
    (tmp_path / "yes").mkdir()
    pipe_syscalls.fail_add = lambda path: errno.EACCES if path.endswith("no") else None
    with inotify(tmp_path / "no", tmp_path / "yes") as source:
        assert source.available
        yes = pipe_syscalls.wds[str(tmp_path / "yes")]
        pipe_syscalls.feed(pack(yes, ino.IN_CREATE, b"f"))
        assert next_within(source).paths == {str(tmp_path / "yes" / "f")}
    [warning] = warnings(caplog)
    assert warning == (
        f"cannot watch {tmp_path / 'no'} (permission denied);"
        " changes there are seen at the poll period only"
    )


# ------------------------------------------------------------------ the three forms


def test_async_iteration_and_cancellation(tmp_path: Path) -> None:
    async def main() -> list[str]:
        source = inotify(tmp_path)
        # Cancelled while waiting: the source stays usable.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(source.__anext__(), 0.1)
        (tmp_path / "f").touch()
        seen: list[str] = []
        async with source:
            async for batch in source:
                seen += [e.path for e in batch.events]
                if str(tmp_path / "f") in seen:
                    break
        assert source.closed
        return seen

    assert str(tmp_path / "f") in asyncio.run(asyncio.wait_for(main(), 30))


def test_close_from_another_thread_ends_async_iteration(tmp_path: Path) -> None:
    async def main() -> list[FileEvents]:
        source = inotify(tmp_path)
        threading.Timer(0.2, source.close).start()
        return [batch async for batch in source]

    assert asyncio.run(asyncio.wait_for(main(), 30)) == []


def test_close_releases_the_descriptor(tmp_path: Path) -> None:
    before = set(os.listdir("/proc/self/fd"))
    with inotify(tmp_path) as source:
        assert len(set(os.listdir("/proc/self/fd")) - before) == 2  # inotify + eventfd
    assert source.closed
    assert set(os.listdir("/proc/self/fd")) <= before
    assert list(source) == []


def test_close_while_a_thread_is_blocked_in_next(tmp_path: Path) -> None:
    _blocks_until_closed(inotify(tmp_path))


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one path"):
        inotify()
    with pytest.raises(ValueError, match="negative"):
        inotify(tmp_path, settle=-1)


# ------------------------------------------------------------------ failed construction


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


class _FailsAfterInit(ino.Syscalls):
    """Real inotify_init1, then an add_watch that fails with something unexpected."""

    def add_watch(self, fd: int, path: str, mask: int) -> int:
        raise RuntimeError("injected after inotify_init1")


def test_opening_that_raises_after_init_leaves_no_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _fds()
    for _ in range(50):  # a NUL in a path is refused before any descriptor exists
        with pytest.raises(ValueError, match="NUL"):
            inotify(tmp_path, f"{tmp_path}/a\0b")
    monkeypatch.setattr(ino, "SYSCALLS", _FailsAfterInit())
    for _ in range(50):
        with pytest.raises(RuntimeError, match="injected"), inotify(tmp_path):
            pass
    assert _fds() <= before


def test_making_a_source_touches_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ino, "SYSCALLS", _FailsAfterInit())
    before = _fds()
    source = inotify(tmp_path)  # no descriptor, no watch: that waits for the first reader
    assert _fds() == before and not source.available
    source.close()


# ------------------------------------------------------------------ trees others can grow


def _watched_dirs(source: Inotify) -> set[str]:
    return {path for roles in source._watches.values() for path in roles.values()}


def test_max_watches_caps_a_recursive_tree(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(40):
        (tmp_path / f"d{i:02}" / "inner").mkdir(parents=True)
    with inotify(tmp_path, recursive=True, max_watches=10) as source:
        assert len(source._watches) == 10  # the root and nine subdirectories
        [warning] = warnings(caplog)
        assert warning.startswith(f"inotify watch cap reached (max_watches = 10) under {tmp_path}")
        assert warning.endswith("changes there are seen at the poll period only")
        # The cap's batch says: rescan, some changes go unseen.
        assert next_within(source).overflow
        # New directories beyond the cap are not watched either, and not logged again.
        (tmp_path / "late").mkdir()
        batches = until(source, str(tmp_path / "late"), "IN_CREATE")
        assert batches[-1].overflow
        assert len(source._watches) == 10
    assert len(warnings(caplog)) == 1


def test_descend_skips_directories_and_everything_below(tmp_path: Path) -> None:
    for name in ("by-id/deep", "shm/a/b", "by-path"):
        (tmp_path / name).mkdir(parents=True)

    def wanted(path: str) -> bool:
        return os.path.relpath(path, tmp_path).split(os.sep)[0] in ("by-id", "new")

    with inotify(tmp_path, recursive=True, descend=wanted) as source:
        assert _watched_dirs(source) == {str(tmp_path), str(tmp_path / "by-id"),
                                         str(tmp_path / "by-id" / "deep")}  # fmt: skip
        (tmp_path / "shm" / "a" / "unseen").touch()
        (tmp_path / "new" / "x").mkdir(parents=True)
        until(source, str(tmp_path / "new"), "IN_CREATE")
        assert str(tmp_path / "new" / "x") in _watched_dirs(source)
        (tmp_path / "marker").touch()
        batches = until(source, str(tmp_path / "marker"), "IN_CREATE")
    assert not any("unseen" in e.path for b in batches for e in b.events)


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs mounted inside ``tmp_path`` (root; in CI it must work)."""
    target = tmp_path / "mnt"
    target.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "nd18-test", str(target)], capture_output=True, text=True
    )
    if result.returncode != 0:
        reason = f"cannot mount a tmpfs here: {result.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def test_one_filesystem_stays_off_other_mounts(tmp_path: Path, mounted: Path) -> None:
    (mounted / "inside" / "deeper").mkdir(parents=True)
    (tmp_path / "plain").mkdir()
    with inotify(tmp_path, recursive=True) as crossing:
        assert str(mounted / "inside") in _watched_dirs(crossing)
    with inotify(tmp_path, recursive=True, one_filesystem=True) as source:
        assert _watched_dirs(source) == {str(tmp_path), str(tmp_path / "plain")}
        (mounted / "inside" / "unseen").touch()
        (tmp_path / "plain" / "seen").touch()
        batches = until(source, str(tmp_path / "plain" / "seen"), "IN_CREATE")
    assert not any("unseen" in e.path for b in batches for e in b.events)


def test_bad_watch_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_watches must be at least 1"):
        inotify(tmp_path, max_watches=0)
