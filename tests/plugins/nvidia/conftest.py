"""Fixtures for the nvidia plugin: the fake NVML library, scenarios, the plugin process.

The fake (``fake_nvml.c``) is compiled once per session with the machine's C
compiler (``cc``) into pytest's temporary directory. Without a compiler the
tests that need it are skipped, except in CI (``CI=true``), where that is a
failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from support import SUPPORT
from support.fakenvml import Scenario
from support.nvidia import FAST, PLUGIN, Scenarios, encode

SOURCE = SUPPORT / "fake_nvml.c"


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the fake ``libnvidia-ml.so.1``."""
    return _build(tmp_path_factory, "fake-nvml")


@pytest.fixture(scope="session")
def fake_nvml_pre_r450_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake as a driver before R450: no ``nvmlEventSetWait_v2``."""
    return _build(tmp_path_factory, "fake-nvml-pre-r450", "-DFAKE_NVML_PRE_R450")


def _build(tmp_path_factory: pytest.TempPathFactory, name: str, *defines: str) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no C compiler ('cc') on PATH: CI must build the fake NVML library")
        pytest.skip("no C compiler ('cc') on PATH: the fake NVML library cannot be built")
    lib_dir = tmp_path_factory.mktemp(name)
    result = subprocess.run(
        [
            *(compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-std=c11"),
            *defines,
            *("-o", str(lib_dir / "libnvidia-ml.so.1"), str(SOURCE), "-lpthread"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"building the fake NVML failed:\n{result.stdout}\n{result.stderr}")
    return lib_dir


@pytest.fixture
def scenario(fake_nvml_lib: Path, tmp_path: Path) -> Scenarios:
    """``scenario(data)``: a live scenario file for the fake, in this test's tmp dir."""
    count = 0

    def make(data: Mapping[str, Any], lib_dir: Path | None = None) -> Scenario:
        nonlocal count
        count += 1
        directory = tmp_path / f"scenario{count}"
        directory.mkdir()
        return Scenario(directory, lib_dir or fake_nvml_lib, data)

    return make


@pytest.fixture
def nvidia(launch: Any) -> Callable[..., Any]:
    """``nvidia(env, **settings)``: the plugin launched as Nomad does, configured."""

    def start(env: Mapping[str, str], **settings: Any) -> Any:
        plugin = launch(PLUGIN, env=dict(env))
        plugin.client.set_config(encode({**FAST, **settings}))
        return plugin

    return start
