"""Fixtures for the release tests: a fake Nomad agent, and the test plugin around it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.processes import Launcher
from support.release import Setup

from nomad_device.testing.nomadagent import FakeNomadAgent


@pytest.fixture
def agent() -> Iterator[FakeNomadAgent]:
    fake = FakeNomadAgent(heartbeat=0.2)
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def setup(launch: Launcher, tmp_path: Path, agent: FakeNomadAgent) -> Setup:
    return Setup(launch, tmp_path, agent)
