"""pytest plugin for device-plugin authors (fixtures and the conformance suite).

Registered by the SDK and loaded by pytest automatically; pytest itself comes
with the ``test`` extra (``pip install 'nomad-device-sdk[test]'``). Until a
fixture or the option is used it imports nothing of the testing machinery:
everything beyond pytest itself is imported inside the fixtures and hooks.

Fixtures:

- ``device_plugin_conformance(command, **options)`` runs the conformance suite
  and returns the :class:`~nomad_device.testing.conformance.ConformanceReport`;
  call ``report.assert_ok()`` to fail the test with the full report.
- ``device_plugin_harness(plugin)`` serves a plugin object in-process
  (:class:`~nomad_device.testing.InProcessHarness`) and closes it after the test.

Command line: ``pytest --nomad-device-conformance="./my-plugin --flag"`` adds one
test item per conformance check of that command (repeat the option for more
plugins; ``--nomad-device-config agent.hcl`` or ``--nomad-device-config-json``
supplies the config block). Disable the plugin entirely with ``-p no:nomad_device``.

In CI, make skipped checks count: ``--nomad-device-strict`` turns every skipped
check item into a failure, and ``report.assert_ok(strict=True)`` does the same
for the fixture (a plugin that needs config nobody gave it skips half the suite).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

try:
    import pytest
except ImportError as exc:  # only when imported by hand: pytest loads it with pytest present
    raise ImportError(
        "nomad_device.testing.pytest_plugin needs pytest, which comes with the SDK's "
        "test extra: pip install 'nomad-device-sdk[test]'"
    ) from exc

if TYPE_CHECKING:
    from nomad_device.plugin.base import DevicePlugin
    from nomad_device.testing.conformance import CheckResult, ConformanceReport
    from nomad_device.testing.harness import InProcessHarness

OPTION = "--nomad-device-conformance"
CONFIG_OPTION = "--nomad-device-config-json"
CONFIG_FILE_OPTION = "--nomad-device-config"
STRICT_OPTION = "--nomad-device-strict"


class ConformanceWarning(UserWarning):
    """A conformance check found something worth a look, but not a failure."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nomad-device", "Nomad device plugin conformance")
    group.addoption(
        OPTION,
        action="append",
        default=[],
        metavar="CMD",
        help="run the conformance suite against this plugin command (shell-quoted); "
        "one test item per check. May be repeated.",
    )
    group.addoption(
        CONFIG_OPTION,
        default=None,
        metavar="JSON",
        help="the plugin's config block as JSON, for --nomad-device-conformance",
    )
    group.addoption(
        CONFIG_FILE_OPTION,
        default=None,
        metavar="FILE",
        help="an agent's HCL file with the plugin's block, for --nomad-device-conformance "
        "(read as nomad-device-conformance --config reads it)",
    )
    group.addoption(
        STRICT_OPTION,
        action="store_true",
        default=False,
        help="a skipped conformance check fails its item (use it in CI)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    commands: list[str] = config.getoption(OPTION) or []
    if not commands:
        return
    import shlex

    for text in commands:
        argv = shlex.split(text)
        if not argv:
            raise pytest.UsageError(f"{OPTION} needs a command")
        collector = ConformanceCollector.from_parent(
            session, name=f"nomad-device-conformance[{text}]", argv=argv
        )
        checks = collector.collect()
        # Let the terminal reporter count them like collected tests.
        config.hook.pytest_collectreport(
            report=pytest.CollectReport(collector.nodeid, "passed", None, [*checks])
        )
        items.extend(checks)


class ConformanceCollector(pytest.Collector):
    """The checks of one plugin command; the suite runs once, on the first item."""

    def __init__(self, *, argv: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.argv = list(argv)
        self._report: ConformanceReport | None = None

    def collect(self) -> list[pytest.Item]:
        from nomad_device.testing.conformance.checks import CHECKS

        return [ConformanceItem.from_parent(self, name=c.id) for c in CHECKS]

    def report(self) -> ConformanceReport:
        if self._report is None:
            from nomad_device.testing.conformance import SuiteOptions, run_conformance

            options = SuiteOptions(
                config_json=self.config.getoption(CONFIG_OPTION),
                config_file=self.config.getoption(CONFIG_FILE_OPTION),
            )
            self._report = run_conformance(self.argv, options)
        return self._report


class ConformanceCheckFailed(Exception):
    """One conformance check failed (shown without a Python traceback)."""


class ConformanceItem(pytest.Item):
    """One conformance check of one plugin command."""

    parent: ConformanceCollector

    def runtest(self) -> None:
        from nomad_device.testing.conformance import Status

        result = self.parent.report().result(self.name)
        if result.status is Status.FAIL:
            raise ConformanceCheckFailed(_describe(result))
        if result.status is Status.SKIP:
            if self.config.getoption(STRICT_OPTION):
                raise ConformanceCheckFailed(f"{_describe(result)}\n  ({STRICT_OPTION}: skipped)")
            pytest.skip(result.summary)
        if result.status is Status.WARN:
            warnings.warn(ConformanceWarning(f"{result.id}: {result.summary}"), stacklevel=1)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ConformanceCheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"{self.parent.name}::{self.name}"


def _describe(result: CheckResult) -> str:
    lines = [f"{result.id}: {result.check.title}", f"  {result.summary}"]
    lines.extend(f"  - {item}" for item in result.evidence)
    lines.append(f"  why: {result.check.why}")
    lines.append(f"  fix: {result.check.fix}")
    return "\n".join(lines)


@pytest.fixture
def device_plugin_conformance() -> Callable[..., ConformanceReport]:
    """Run the conformance suite: ``device_plugin_conformance(command, **options)``.

    Options are those of :class:`~nomad_device.testing.conformance.SuiteOptions`:
    the plugin's config as ``config_file=`` (an agent's HCL file or a directory), ``config_json=``
    (a mapping or JSON text) or ``config=`` (raw msgpack bytes), and ``timeout``,
    ``start_timeout``, ``open_window``, ``env``, ``cwd``, ``plugin_name``.
    In CI, check with ``report.assert_ok(strict=True)`` so that skips fail too.
    """

    def run(command: Sequence[str], **options: Any) -> ConformanceReport:
        from nomad_device.testing.conformance import SuiteOptions, run_conformance

        return run_conformance(list(command), SuiteOptions(**options))

    return run


@pytest.fixture
def device_plugin_harness() -> Iterator[Callable[..., InProcessHarness]]:
    """Serve plugin objects in-process: ``device_plugin_harness(MyPlugin())``.

    Every harness made through the fixture is closed when the test ends.
    """
    made: list[InProcessHarness] = []

    def make(
        plugin: DevicePlugin[Any] | type[DevicePlugin[Any]], **options: Any
    ) -> InProcessHarness:
        from nomad_device.testing.harness import InProcessHarness

        harness = InProcessHarness(plugin, **options)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()
