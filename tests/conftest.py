"""Shared fixtures: launch real plugin subprocesses and always clean them up."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import INTEROP, SDK_PLUGIN, TESTS
from support.processes import Launched, Launcher

from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.host import DevicePluginClient

#: Directories whose every test carries the marker of their name.
_MARKED_DIRS = ("bundle", "kernel")
#: Helpers that make Debian chroots or emulated CPUs (tests/support/nodes.py).
_NODE_HELPERS = ("debian_root", "binfmt_aarch64", "in_root")
#: Helpers that run a whole program: the conformance suite (three launches and seconds of
#: watching) and the launcher (a second of CPU to start).
_PROGRAMS = frozenset({"run_conformance", "run_cli", "launcher_command"})
#: Console scripts and ``python -m`` modules that are whole programs too.
_SCRIPTS = ("nomad-device-", "nomad_device.plugins.", "pytest")


def _is_command(value: object) -> bool:
    """A command that starts a program of ``_SCRIPTS`` (``python -m pytest``, a ready-made
    plugin's module, a console script), or a path to one of ``scripts/``."""
    if isinstance(value, Path):
        return value.parent.name == "scripts" and value.suffix == ".py"
    if not isinstance(value, (list, tuple)):
        return False
    words = [v for v in value if isinstance(v, str)]
    if "-m" in words:
        return any(w.startswith(_SCRIPTS) for w in words[words.index("-m") + 1 :])
    return bool(words) and Path(words[0]).name.startswith(_SCRIPTS)


def _starts_a_program(item: pytest.Item) -> bool:
    """Whether the test, or a fixture or helper of the tests' own that it uses, starts a
    whole program: calls a helper of ``_PROGRAMS``, uses a command of ``_SCRIPTS`` or the
    ``device_plugin_conformance`` fixture."""
    fixtures = getattr(item, "fixturenames", ())
    if "device_plugin_conformance" in fixtures:
        return True
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    used = [getattr(item, "function", None), *(d.func for n in fixtures for d in defs.get(n, ()))]
    return any(_reaches_a_program(found) for found in used)


_REACHES: dict[types.CodeType, bool] = {}


def _reaches_a_program(start: object) -> bool:
    """Whether a function of the tests (or what of the tests' it uses) starts a program."""
    root = getattr(getattr(start, "__wrapped__", start), "__code__", None)
    if isinstance(root, types.CodeType) and root in _REACHES:
        return _REACHES[root]
    todo, found_one = [start], False
    seen: set[object] = set()
    while todo and not found_one:
        found = todo.pop()
        if isinstance(found, type):  # a helper class: its methods
            if found not in seen:
                seen.add(found)
                todo.extend(vars(found).values())
            continue
        found = getattr(found, "__wrapped__", found)  # a fixture's own function
        code = getattr(found, "__code__", None)
        if not isinstance(code, types.CodeType) or code in seen:
            continue
        if not Path(code.co_filename).is_relative_to(TESTS):
            continue  # the SDK's own code is not followed
        seen.add(code)
        names, consts = _contents(code)
        scope: dict[str, object] = getattr(found, "__globals__", {})
        values = [scope.get(name) for name in names]
        values += getattr(found, "__defaults__", None) or ()
        found_one = bool(names & _PROGRAMS) or _is_command(consts)
        found_one = found_one or any(map(_is_command, values))
        todo.extend(values)
    if isinstance(root, types.CodeType):
        _REACHES[root] = found_one
    return found_one


def _contents(code: types.CodeType) -> tuple[set[str], list[object]]:
    """The global and attribute names and the constants of a function's code (nested
    functions too)."""
    names, consts = set(code.co_names), list(code.co_consts)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner_names, inner_consts = _contents(const)
            names |= inner_names
            consts += inner_consts
    return names, consts


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by what it needs, so that a new test is classified without a marker.

    ``interop``: it builds the Go programs (its fixtures reach ``interop_bin``);
    ``bundle``/``kernel``: it lives under ``tests/bundle/`` or ``tests/kernel/``;
    ``node``: its module uses the Debian-node helpers; ``slow``: it starts a whole program
    (``_starts_a_program``), or its module says so where the code cannot tell. ``make
    quick`` runs the rest (docs/testing.md); ``make test`` runs everything.
    """
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "interop_bin" in names:
            item.add_marker(pytest.mark.interop)
        path = Path(str(item.path))
        parts = path.relative_to(TESTS).parts if path.is_relative_to(TESTS) else ()
        if parts and parts[0] in _MARKED_DIRS:
            item.add_marker(parts[0])
        module = getattr(item, "module", None)
        if module is not None and any(hasattr(module, name) for name in _NODE_HELPERS):
            item.add_marker(pytest.mark.node)
        if _starts_a_program(item):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def launch() -> Iterator[Launcher]:
    started: list[DevicePluginClient] = []

    def _launch(command: list[str] | None = None, **options: Any) -> Launched:
        logs: list[HclogEntry] = []
        client = DevicePluginClient.launch(
            command or [sys.executable, str(SDK_PLUGIN)],
            on_log=logs.append,
            start_timeout=30,
            **options,
        )
        started.append(client)
        return Launched(client, logs)

    yield _launch
    for client in started:
        client.kill()


@pytest.fixture(scope="session")
def interop_bin() -> Path:
    """Build the Go host and Go plugin once per session; the directory holding them.

    Without Go the interop tests are skipped, except in CI (``CI=true``), where a
    missing Go is a failure.
    """
    if shutil.which("go") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("'go' is not on PATH: CI must run the interop tests (install Go 1.26+)")
        pytest.skip("'go' is not on PATH: the interop tests need Go 1.26+ to build interop/")
    result = subprocess.run(
        ["bash", str(INTEROP / "build.sh")],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"interop/build.sh failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return INTEROP / "bin"
