"""Fixtures for bundle tests: one real bundle per session, a fresh plugin_dir."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.bundle import build

from nomad_device.bundle import read_config


@pytest.fixture(scope="session")
def example_bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``nomad-device-example`` bundled once per session from this environment."""
    out = tmp_path_factory.mktemp("dist") / "nomad-device-example"
    done = build("nomad-device-example", "-o", str(out))
    assert done.returncode == 0, done.stderr
    yield out
    # The default cache (as root: /var/cache/nomad-device-bundle) outlives the
    # session; remove what this session's bundle unpacked there.
    # Only if no process (another session's plugin of identical content) holds it,
    # by the bootstrap's own rule.
    key = read_config(out)["key"]
    for root in ("/var/cache/nomad-device-bundle", "/run/nomad-device-bundle"):
        path = Path(root) / key
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            trash = path.with_name(f".trash-{os.urandom(8).hex()}")
            path.rename(trash)
            shutil.rmtree(trash, ignore_errors=True)
        except OSError:
            pass
        finally:
            os.close(fd)


@pytest.fixture
def plugin_dir(tmp_path: Path, example_bundle: Path) -> Path:
    """A fresh plugin_dir holding a copy of the example bundle and nothing else."""
    directory = tmp_path / "plugins"
    directory.mkdir()
    shutil.copy2(example_bundle, directory / example_bundle.name)
    return directory


@pytest.fixture(scope="session")
def aarch64_dist() -> Iterator[Path]:
    """What ``make dist`` builds for aarch64: every ready-made plugin, each an auto bundle.

    In a directory other users can read (the chroot tests bind it in).
    """
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="nd20-dist-aarch64-"))
    path.chmod(0o755)
    done = build(
        "--ready-made", "--interpreter", "auto", "--machine", "aarch64",
        "--output-dir", str(path), timeout=3000,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    yield path
    shutil.rmtree(path, ignore_errors=True)
