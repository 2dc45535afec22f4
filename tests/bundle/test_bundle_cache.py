"""The bundle's cache: unpacked once, safely placed, never stale, bounded, race-free.

Most cases use a tiny bundle (one script, no SDK) run as a real subprocess
through the real prelude and bootstrap; the concurrent-launch case uses the
example plugin's bundle and a real handshake.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.bundle import node_env, node_python, payload, tiny_bundle, unavailable

from nomad_device.bundle import read_config
from nomad_device.goplugin.hclog import HclogEntry, parse_line
from nomad_device.host import DevicePluginClient

KEEP = 3  # bootstrap.KEEP


def run_tiny(bundle: Path, env: dict[str, str], **kwargs: Any) -> dict[str, Any]:
    done = subprocess.run(
        [str(bundle), "arg1"],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **kwargs,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def versions_in(cache: Path, name: str = "tiny") -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.startswith(f"{name}-"))


def test_runs_from_any_cwd_with_its_own_argv(tmp_path: Path) -> None:
    node_python()
    bundle = tmp_path / "dir" / "tiny"
    config = tiny_bundle(bundle, "1")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    out = run_tiny(bundle, node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(cache)))
    assert out["version"] == "1"
    assert out["argv"] == [str(bundle), "arg1"]
    assert out["cwd"] == "/"
    # Imported through the locked directory's descriptor, which is that directory.
    assert out["file"].startswith("/proc/self/fd/")
    assert out["real"].startswith(str(cache / str(config["key"])))
    assert ".venv" not in out["exe"]
    assert versions_in(cache) == [config["key"]]


def test_new_bundle_in_place_of_old_never_runs_stale_code(tmp_path: Path) -> None:
    node_python()
    bundle = tmp_path / "tiny"
    cache = tmp_path / "cache"
    env = node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(cache))
    keys = []
    for version in ("1", "2", "1"):  # upgrade, then roll back
        keys.append(tiny_bundle(bundle, version)["key"])
        assert run_tiny(bundle, env)["version"] == version
    assert keys[0] == keys[2] != keys[1]  # the key is the content hash
    assert versions_in(cache) == sorted(set(keys))


def test_old_versions_are_bounded_but_one_in_use_is_kept(tmp_path: Path) -> None:
    node_python()
    bundle = tmp_path / "tiny"
    cache = tmp_path / "cache"
    env = node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(cache))
    first = tiny_bundle(bundle, "0")["key"]
    holder = subprocess.Popen(
        [str(bundle)],
        env={**env, "TINY_HOLD": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert json.loads(holder.stdout.readline())["version"] == "0"
        for version in range(1, 7):
            tiny_bundle(bundle, str(version))
            run_tiny(bundle, env)
        kept = versions_in(cache)
        # The newest KEEP versions, plus the one a running process still uses.
        assert len(kept) == KEEP + 1
        assert first in kept
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
    tiny_bundle(bundle, "7")
    run_tiny(bundle, env)
    kept = versions_in(cache)
    assert len(kept) == KEEP
    assert first not in kept
    assert not [p for p in cache.iterdir() if p.name.startswith((".unpack-", ".trash-"))]


def _error_line(stderr: str) -> HclogEntry:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    entry = parse_line(lines[0], strict=True)
    assert entry.level == "error"
    assert entry.module == "nomad-device-bundle"
    return entry


@pytest.mark.parametrize("problem", ["world-writable", "group-readable", "symlink", "file"])
def test_unsafe_cache_dir_is_refused(tmp_path: Path, problem: str) -> None:
    node_python()
    bundle = tmp_path / "tiny"
    tiny_bundle(bundle, "1")
    cache = tmp_path / "cache"
    if problem == "world-writable":
        cache.mkdir()
        cache.chmod(0o777)
    elif problem == "group-readable":
        cache.mkdir()
        cache.chmod(0o750)
    elif problem == "symlink":
        (tmp_path / "real").mkdir(mode=0o700)
        cache.symlink_to(tmp_path / "real")
    else:
        cache.write_text("")
    done = subprocess.run(
        [str(bundle)],
        env=node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(cache)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    entry = _error_line(done.stderr)
    assert "no safe cache directory" in entry.message
    assert str(cache) in entry.message
    if problem == "symlink":
        assert list((tmp_path / "real").iterdir()) == []  # nothing unpacked through it


def test_a_failure_before_the_plugin_serves_is_one_hclog_line(tmp_path: Path) -> None:
    node_python()
    bundle = tmp_path / "tiny"
    tiny_bundle(bundle, "1", body="import no_such_module_here")
    done = subprocess.run(
        [str(bundle)],
        env=node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(tmp_path / "cache")),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    entry = parse_line(lines[-1], strict=True)
    assert entry.level == "error"
    assert entry.message.startswith(
        "plugin bundle failed: ModuleNotFoundError: No module named 'no_such_module_here' "
        f"(cache directory {tmp_path / 'cache'}/tiny-"
    )
    assert "Traceback (most recent call last)" in str(entry.fields["traceback"])
    assert all(line.startswith("{") for line in lines)  # nothing raw


def _as_nobody() -> None:
    os.setgid(65534)
    os.setuid(65534)


@pytest.fixture
def sticky_tmp() -> Iterator[Path]:
    """A world-writable sticky directory like /tmp, private to this test.

    Outside pytest's own temp tree, which other users cannot enter.
    """
    if os.geteuid() != 0:
        reason = "needs root to run the bundle as another user"
        unavailable(reason)
    base = Path(tempfile.mkdtemp(prefix="bundle-test-"))
    base.chmod(0o755)
    sticky = base / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    yield sticky
    shutil.rmtree(base)


def test_non_root_without_home_gets_a_private_dir(sticky_tmp: Path) -> None:
    node_python()
    bundle = sticky_tmp / "tiny"
    config = tiny_bundle(bundle, "1")
    bundle.chmod(0o755)
    # nobody's home (/nonexistent) cannot be created: the fallback is $TMPDIR.
    out = run_tiny(bundle, node_env(TMPDIR=str(sticky_tmp)), preexec_fn=_as_nobody)
    cache = sticky_tmp / "nomad-device-bundle-65534"
    assert out["real"].startswith(str(cache / str(config["key"])))
    st = cache.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (65534, 0o700)


def test_non_root_refuses_a_dir_another_user_made_first(sticky_tmp: Path) -> None:
    node_python()
    bundle = sticky_tmp / "tiny"
    tiny_bundle(bundle, "1")
    bundle.chmod(0o755)
    planted = sticky_tmp / "nomad-device-bundle-65534"
    planted.mkdir()
    planted.chmod(0o777)  # created by root: someone else's, and open to all
    done = subprocess.run(
        [str(bundle)],
        env=node_env(TMPDIR=str(sticky_tmp)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=_as_nobody,
    )
    assert done.returncode == 1
    entry = _error_line(done.stderr)
    assert f"{planted}: owned by uid 0, not 65534" in entry.message
    assert list(planted.iterdir()) == []


@pytest.mark.slow
def test_three_concurrent_first_launches_all_handshake(
    example_bundle: Path, tmp_path: Path
) -> None:
    """A Nomad agent at boot starts plugins at once: none may break another's start."""
    node_python()
    cache = tmp_path / "cache"
    key = str(read_config(example_bundle)["key"])
    env = node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(cache))
    logs: list[HclogEntry] = []
    clients: list[DevicePluginClient] = []
    errors: list[BaseException] = []
    go = threading.Barrier(3)

    def launch() -> None:
        go.wait()
        try:
            client = DevicePluginClient.launch(
                [str(example_bundle)], env=env, cwd="/", on_log=logs.append, start_timeout=120
            )
            clients.append(client)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=launch) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    try:
        assert errors == []
        assert len(clients) == 3
        for client in clients:
            assert client.info().name == "example-fs-device"
            exe = os.readlink(f"/proc/{client.process.pid}/exe")
            assert ".venv" not in exe, exe  # the node's Python, not the test's
    finally:
        for client in clients:
            client.kill()
    # One launch's copy won; the others used it and left nothing behind.
    assert [e.message for e in logs].count("unpacked plugin bundle") == 1
    assert sorted(p.name for p in cache.iterdir()) == [key]
    with payload(example_bundle) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
    assert names and all((cache / key / n).is_file() for n in names)
    shutil.rmtree(cache)
