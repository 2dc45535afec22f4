"""CDI specs read as the reference library reads them: checked against Go.

``interop/bin/cdicheck`` loads spec directories with
``tags.cncf.io/container-device-interface`` v1.1.2 and prints what its cache
makes of them; :func:`support.cdi.python_answer` does the same with the
plugin's reader. Both must load and refuse the same files, report the same
conflicts, resolve every device to the same edits and inject devices, alone
and together, alike: on a corpus (vendors' generators, the CDI repository's
example shapes, every spec version, JSON and YAML in several styles,
overriding directories, broken files) and on generated specs. YAML outside
what the plugin reads is declined, never misread: the declined corpus is
valid YAML go-yaml reads, and no generated file the plugin declines was
written in a style it reads.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from support.cdi import Layout, combos_for, disagreement, layouts, python_answer, write_layout
from support.cdi_corpus import Case, corpus, write_case

pytestmark = [pytest.mark.interop, pytest.mark.slow]

Ask = Callable[[list[str], list[list[str]]], dict[str, Any]]

#: Generated layouts (one to three directories of one to four files).
EXAMPLES = 600

COUNTS: dict[str, int] = {}


def _count(key: str, n: int = 1) -> None:
    COUNTS[key] = COUNTS.get(key, 0) + n


@pytest.fixture(scope="module")
def cdicheck(interop_bin: Path) -> Iterator[Ask]:
    proc = subprocess.Popen(
        [str(interop_bin / "cdicheck")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None

    def ask(dirs: list[str], combos: list[list[str]]) -> dict[str, Any]:
        proc.stdin.write(json.dumps({"id": "1", "dirs": dirs, "combos": combos}) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line, "cdicheck exited"
        answer: dict[str, Any] = json.loads(line)
        return answer

    yield ask
    proc.stdin.close()
    proc.wait(10)


CORPUS = corpus()


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_the_corpus_reads_as_in_go(case: Case, cdicheck: Ask, tmp_path: Path) -> None:
    dirs = write_case(tmp_path, case)
    py = python_answer(dirs, case.combos)
    go = cdicheck(dirs, case.combos)
    _count("corpus cases")
    _count("devices", len(go["devices"]))
    if case.declined:
        # Valid YAML the plugin does not read: go-yaml reads it, the plugin says why not.
        assert go["loaded"], f"go-yaml refused it too: {go['errors']}"
        assert py["declined"], py["errors"]
        assert "outside the YAML this plugin reads" in str(py["errors"])
        return
    # A file declined here must be one go-yaml refuses too (disagreement() compares them).
    problem = disagreement(py, go)
    assert problem is None, problem


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(layout=layouts())
def test_generated_specs_read_as_in_go(
    layout: Layout, cdicheck: Ask, tmp_path_factory: Any
) -> None:
    base = tmp_path_factory.mktemp("layout")
    dirs = write_layout(base, layout)
    first = python_answer(dirs)
    combos = combos_for(first, __import__("random").Random(len(layout.files)))
    py = python_answer(dirs, combos)
    go = cdicheck(dirs, combos)
    _count("generated layouts")
    _count("devices", len(go["devices"]))
    damaged = {str(Path(dirs[i]) / name) for i, name, _, hurt in layout.files if hurt}
    undamaged_declines = [p for p in py["declined"] if p not in damaged]
    assert not undamaged_declines, f"declined a file written in a style it reads: {py['errors']}"
    if py["declined"]:
        _count("declined (damaged)")
        return
    problem = disagreement(py, go)
    assert problem is None, f"{layout}\n{problem}"


def test_the_generated_specs_were_worth_comparing() -> None:
    """The comparison above means little if generated specs rarely load or are mostly
    declined (it runs after that test, in this module's order, and counts).

    Run with ``-s`` for the counts the docs quote.
    """
    print(f"\nCDI cross-check: {COUNTS}")
    if not COUNTS.get("generated layouts"):
        pytest.skip("the generated cross-check did not run in this session")
    assert COUNTS.get("devices", 0) > COUNTS["generated layouts"] / 2, COUNTS
    assert COUNTS.get("declined (damaged)", 0) < COUNTS["generated layouts"] * 0.1, COUNTS
