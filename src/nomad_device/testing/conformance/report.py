"""The conformance report: every check's outcome, as text for people or JSON for tools."""

from __future__ import annotations

import json
import shlex
import textwrap
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nomad_device.display import printable
from nomad_device.testing.conformance.checks import CheckResult, Status

__all__ = ["ConformanceError", "ConformanceReport"]

_WIDTH = 100
_LABEL = {Status.PASS: "PASS", Status.FAIL: "FAIL", Status.WARN: "WARN", Status.SKIP: "SKIP"}


class ConformanceError(AssertionError):
    """Raised by :meth:`ConformanceReport.assert_ok`; the message is the report."""


@dataclass(frozen=True)
class ConformanceReport:
    """The outcome of a conformance run against one plugin command."""

    command: tuple[str, ...]
    results: tuple[CheckResult, ...]
    seconds: float
    plugin_name: str | None = None
    plugin_version: str | None = None

    @property
    def ok(self) -> bool:
        """True when no check failed (warnings and skips do not fail a run)."""
        return not self.failures

    @property
    def complete(self) -> bool:
        """True when no check was skipped: every expectation was actually tried."""
        return not self.skipped

    def passes(self, *, strict: bool = False) -> bool:
        """No check failed -- and, when ``strict``, none was skipped either.

        Use ``strict`` in CI: a plugin that needs config nobody gave it, or one that
        stops early, skips the checks it never reached, and a skipped check proves
        nothing.
        """
        return self.ok and (self.complete or not strict)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status is Status.FAIL]

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if r.status is Status.WARN]

    @property
    def skipped(self) -> list[CheckResult]:
        return [r for r in self.results if r.status is Status.SKIP]

    def result(self, check_id: str) -> CheckResult:
        """The result of one check by id (KeyError if unknown)."""
        for result in self.results:
            if result.id == check_id:
                return result
        raise KeyError(check_id)

    def status_of(self, check_id: str) -> Status:
        return self.result(check_id).status

    def counts(self) -> Counter[Status]:
        return Counter(r.status for r in self.results)

    def assert_ok(self, *, allow_warnings: bool = True, strict: bool = False) -> None:
        """Raise :class:`ConformanceError` with the rendered report if a check failed
        (or, with ``allow_warnings=False``, warned; with ``strict``, was skipped)."""
        if not self.passes(strict=strict) or (not allow_warnings and self.warnings):
            raise ConformanceError("\n" + self.render(strict=strict))

    # -- rendering ------------------------------------------------------------------

    def render(self, *, verbose: bool = False, strict: bool = False) -> str:
        """The report as text: one line per check, details for findings.

        Failures and warnings always show their evidence, why the check matters
        to Nomad and how to fix it; ``verbose`` adds evidence for the rest. The
        last line counts the outcomes and gives the verdict, which says how many
        checks were skipped; ``strict`` counts them against the plugin. What is
        not printable (a device's escape sequences) is escaped
        (:func:`~nomad_device.display.printable`); :meth:`to_json` keeps it.
        """
        who = shlex.join(self.command)
        lines = [f"Nomad device plugin conformance: {who}"]
        if self.plugin_name:
            lines.append(f"plugin: {self.plugin_name} {self.plugin_version or ''}".rstrip())
        lines.append("")
        width = max(len(r.id) for r in self.results) if self.results else 0
        for r in self.results:
            lines.append(f"  {_LABEL[r.status]}  {r.id:<{width}}  {r.check.title}")
            lines.extend(_wrap(r.summary, 8))
            finding = r.status in (Status.FAIL, Status.WARN)
            if finding or verbose:
                for item in r.evidence:
                    # A multi-line item (a config file) is shown as it is, to copy.
                    first, *rest = item.split("\n")
                    lines.extend(_wrap(f"- {first}", 8, hanging=2))
                    lines.extend(" " * 10 + line if line else "" for line in rest)
            if finding:
                lines.extend(_wrap(f"why: {r.check.why}", 8, hanging=5))
                lines.extend(_wrap(f"fix: {r.fix}", 8, hanging=5))
        counts = self.counts()
        lines.append("")
        lines.append(
            f"{len(self.results)} checks: {counts[Status.PASS]} passed, "
            f"{counts[Status.FAIL]} failed, {counts[Status.WARN]} warning(s), "
            f"{counts[Status.SKIP]} skipped in {self.seconds:.1f} s -- "
            + self.verdict(strict=strict)
        )
        # Evidence quotes what the plugin sent and logged: shown, never obeyed by a terminal.
        return "\n".join(printable(line, tabs=True) for line in lines)

    def verdict(self, *, strict: bool = False) -> str:
        """``CONFORMS``, or why not quite: failures, or checks that were skipped."""
        if not self.ok:
            return "DOES NOT CONFORM"
        if self.complete:
            return "CONFORMS"
        skipped = f"{len(self.skipped)} of {len(self.results)} checks skipped"
        if strict:
            return f"DOES NOT CONFORM: {skipped} (--strict)"
        return f"CONFORMS ONLY IN PART: {skipped}, which prove nothing"

    def to_dict(self, *, strict: bool = False) -> dict[str, Any]:
        """The report as plain data; ``ok`` is :meth:`passes` under ``strict``."""
        return {
            "command": list(self.command),
            "plugin": {"name": self.plugin_name, "version": self.plugin_version},
            "ok": self.passes(strict=strict),
            "strict": strict,
            "complete": self.complete,
            "verdict": self.verdict(strict=strict),
            "seconds": round(self.seconds, 3),
            "counts": {s.value: self.counts()[s] for s in Status},
            "results": [
                {
                    "id": r.id,
                    "title": r.check.title,
                    "status": r.status.value,
                    "summary": r.summary,
                    "evidence": list(r.evidence),
                    "why": r.check.why,
                    "fix": r.fix,
                    "section": r.check.section,
                }
                for r in self.results
            ],
        }

    def to_json(self, indent: int | None = 2, *, strict: bool = False) -> str:
        return json.dumps(self.to_dict(strict=strict), indent=indent, ensure_ascii=False)


def _wrap(text: str, indent: int, hanging: int = 0) -> Iterable[str]:
    return textwrap.wrap(
        text,
        width=_WIDTH,
        initial_indent=" " * indent,
        subsequent_indent=" " * (indent + hanging),
        break_long_words=False,
        break_on_hyphens=False,
    ) or [" " * indent]
