"""One version run by two Pythons (issue 26): each part unpacked once, none evicted, and a
plugin already running never loses a file while another launch unpacks or heals.

On main, a version held what one Python needed; a launch on the other Python
found it lacking, moved it aside and unpacked again, on every alternate launch.
Here a tiny bundle carries code for two node Pythons (``site`` shared,
``site-cpXY`` each); the real ``auto`` bundle (its own interpreter against a
node's) is in test_bundle_interpreters.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.bundle import node_env, two_python_bundle

from nomad_device.bundle.collect import find_python
from nomad_device.goplugin.hclog import HclogEntry, parse_line

PYTHONS = [(3, 11), (3, 12)]


@pytest.fixture(scope="module")
def pythons() -> dict[tuple[int, int], str]:
    return {version: str(find_python(version)) for version in PYTHONS}


def _launch(
    bundle: Path, python: str, cache: Path, stdin: str = "stop\n"
) -> tuple[dict[str, Any], list[HclogEntry]]:
    done = subprocess.run(
        [str(bundle)],
        env=node_env(NOMAD_DEVICE_PYTHON=python, NOMAD_DEVICE_BUNDLE_CACHE=str(cache)),
        input=stdin,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    logs = [parse_line(line, strict=True) for line in done.stderr.splitlines() if line.strip()]
    ready: dict[str, Any] = json.loads(done.stdout.splitlines()[0])
    return ready, logs


def _unpacked(logs: list[HclogEntry]) -> list[str]:
    found = [e for e in logs if e.message == "unpacked plugin bundle"]
    return list(found[0].fields.get("parts", ["(not said)"])) if found else []


def test_alternating_pythons_unpack_each_part_once(
    tmp_path: Path, pythons: dict[tuple[int, int], str]
) -> None:
    bundle = tmp_path / "tiny2"
    key = two_python_bundle(bundle, PYTHONS)
    cache = tmp_path / "cache"
    first, second = (pythons[v] for v in PYTHONS)
    inodes, parts, said = set(), [], []
    for python in [first, second] * 3:
        ready, logs = _launch(bundle, python, cache)
        assert ready["native"] == f"cp3{11 if python == first else 12}"
        parts.append(_unpacked(logs))
        said += [e.message for e in logs if e.level in ("info", "warn", "error")]
        inodes.add(os.stat(cache / key).st_ino)
    # Each part unpacked by the first launch that needed it, and never again.
    assert [len(p) > 0 for p in parts] == [True, True, False, False, False, False], said
    assert parts[:2] == [["site-cp311", "site"], ["site-cp312"]]
    assert said == ["unpacked plugin bundle"] * 2
    assert len(inodes) == 1  # the same version directory throughout, never moved aside
    assert sorted(os.listdir(cache / key)) == ["site", "site-cp311", "site-cp312"]


class _Running:
    """The lazy importer, running on one Python, asked over its stdin."""

    def __init__(self, bundle: Path, python: str, cache: Path) -> None:
        self.process = subprocess.Popen(
            [str(bundle)],
            env=node_env(NOMAD_DEVICE_PYTHON=python, NOMAD_DEVICE_BUNDLE_CACHE=str(cache)),
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ready = self._line()

    def _line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the running plugin ended"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, word: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(word + "\n")
        self.process.stdin.flush()
        return self._line()

    def imports_beyond(self, count: int, timeout: float = 120) -> dict[str, Any]:
        """Wait (by asking) until it has imported more than ``count`` modules."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self.ask("count")
            if answer["count"] > count or time.monotonic() > deadline:
                return answer


def test_a_running_plugin_keeps_every_file_while_another_python_unpacks_and_heals(
    tmp_path: Path, pythons: dict[tuple[int, int], str]
) -> None:
    modules = 50
    bundle = tmp_path / "tiny2"
    key = two_python_bundle(bundle, PYTHONS, modules)
    cache = tmp_path / "cache"
    version = cache / key
    first, second = (pythons[v] for v in PYTHONS)
    running = _Running(bundle, first, cache)
    try:
        assert running.ready["native"] == "cp311"
        assert running.ask("go")["errors"] == []
        # Another Python's first launch unpacks its own part meanwhile...
        _, logs = _launch(bundle, second, cache)
        assert _unpacked(logs) == ["site-cp312"]
        # ... heals its own part, then the part both share, while this one imports from it.
        (version / "site-cp312" / "tinynative.py").unlink()
        _, logs = _launch(bundle, second, cache)
        assert [e.fields["cache"] for e in logs if e.level == "warn"] == [
            str(version / "site-cp312")
        ]
        (version / "site" / "tinypkg" / "unused.py").unlink()
        _, logs = _launch(bundle, second, cache)
        assert [e.fields["cache"] for e in logs if e.level == "warn"] == [str(version / "site")]
        # The running plugin's copy of the shared part was moved aside, not removed: it
        # holds it. It goes on importing every module, from that copy, after the heal.
        held = [p.name for p in version.iterdir() if p.name.startswith(".trash-")]
        assert len(held) == 1
        assert (version / held[0] / "tinypkg" / "m0.py").is_file()
        after_heal = running.ask("count")["count"]
        answer = running.imports_beyond(after_heal + 2 * modules)
        assert answer["count"] > after_heal + 2 * modules, answer
        assert answer["errors"] == []
        assert running.ask("stop")["errors"] == []
    finally:
        running.process.kill()
        running.process.wait(30)
    # Once nothing holds it, the next unpack or heal removes it.
    (version / "site-cp312" / "tinynative.py").unlink()
    _launch(bundle, second, cache)
    assert sorted(os.listdir(version)) == ["site", "site-cp311", "site-cp312"]
    ready, logs = _launch(bundle, first, cache)
    assert ready["native"] == "cp311" and _unpacked(logs) == []
