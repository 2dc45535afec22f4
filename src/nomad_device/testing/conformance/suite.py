"""What one conformance run holds: its options, the plugin's launches, and the results so far.

Every family of checks (:mod:`.transport`, :mod:`.baseplugin`, :mod:`.fingerprint`,
:mod:`.stats`, :mod:`.reserve`, :mod:`.lifecycle`) records its outcomes through
:meth:`Suite.put`; the first outcome recorded for a check is the one reported,
so a family can state the most specific finding first and a fallback after it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nomad_device.testing.conformance.checks import CheckResult, Status, check

if TYPE_CHECKING:
    from nomad_device.agentconfig.agentfile import PluginBlock
    from nomad_device.testing.conformance.launch import Launch

__all__ = ["Suite", "SuiteOptions", "excerpt", "seconds", "waited_for_cpu"]


@dataclass(frozen=True)
class SuiteOptions:
    """How to run the suite.

    The plugin's config, instead of the defaults-only config Nomad sends without
    a ``config`` block, is one of: ``config`` (raw msgpack, sent as it is),
    ``config_json`` (a config body as a mapping or JSON text), or
    ``config_file`` (an agent's HCL or JSON file, a directory of them, or
    several paths merged in order, read as the launcher reads them: the
    ``plugin`` block named after the plugin's file, or ``plugin_name``'s, or
    a bare ``config { }``; its ``args`` are added when the command has none).
    ``timeout`` bounds the first fingerprint and every call; ``open_window`` is
    how long the streams are watched.
    """

    config: bytes | None = None
    config_json: Mapping[str, object] | str | None = None
    timeout: float = 5.0
    start_timeout: float = 20.0
    open_window: float = 3.0
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    config_file: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None
    plugin_name: str | None = None


class Suite:
    """The state of one run, shared by the families of checks."""

    def __init__(
        self,
        command: list[str],
        options: SuiteOptions,
        config_block: PluginBlock | None = None,
    ) -> None:
        self.command = command
        self.options = options
        #: The agent file's block for the plugin (``config_file``), read before any launch.
        self.config_block = config_block
        self.results: dict[str, CheckResult] = {}
        self.launches: list[Launch] = []
        self._lock = threading.Lock()
        self.plugin_name: str | None = None
        self.plugin_version: str | None = None

    def put(
        self,
        check_id: str,
        status: Status,
        summary: str,
        evidence: Iterable[str] = (),
        *,
        advice: str = "",
    ) -> None:
        """Record an outcome unless the check already has one (thread-safe).

        ``advice`` replaces the check's general fix where the finding calls for
        another (a plugin that crashed needs other advice than one that printed).
        """
        with self._lock:
            self.results.setdefault(
                check_id,
                CheckResult(check(check_id), status, summary, tuple(evidence), advice),
            )

    def skip(self, ids: Iterable[str], reason: str) -> None:
        for check_id in ids:
            self.put(check_id, Status.SKIP, reason)


def excerpt(data: bytes | str, limit: int = 160) -> str:
    """A short, quoted sample of some output, for evidence lines."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def seconds(value: float) -> str:
    return f"{value:.2f} s"


def waited_for_cpu(value: float) -> str:
    """Evidence for the part of a wall time the plugin spent waiting for a CPU (:mod:`.clock`)."""
    return f"{seconds(value)} of it waiting for a CPU the host gave to other work (not counted)"
