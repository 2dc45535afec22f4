"""Fixtures for the event-source tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from source_helpers import PipeSyscalls


@pytest.fixture
def pipe_syscalls(monkeypatch: pytest.MonkeyPatch) -> Iterator[PipeSyscalls]:
    from nomad_device.sources import _inotify

    fake = PipeSyscalls()
    monkeypatch.setattr(_inotify, "SYSCALLS", fake)
    yield fake
    fake.close()
