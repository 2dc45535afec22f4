"""docs/reference/ is what scripts/gen_reference.py makes of today's docstrings, and complete."""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import pytest
from support import ROOT


def _generator() -> ModuleType:
    path = ROOT / "scripts" / "gen_reference.py"
    spec = importlib.util.spec_from_file_location("gen_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


GEN = _generator()


@pytest.fixture(scope="module")
def built() -> tuple[dict[str, str], list[str]]:
    """Every page's text, and the public names without documentation."""
    files, undocumented = GEN.build()
    return files, undocumented


def test_the_reference_is_not_stale(built: tuple[dict[str, str], list[str]]) -> None:
    stale = list(GEN._stale(built[0]))
    assert stale == [], "run: .venv/bin/python scripts/gen_reference.py (make reference)"


def test_every_public_name_is_documented(built: tuple[dict[str, str], list[str]]) -> None:
    assert built[1] == []


def test_every_package_with_an_all_has_a_page() -> None:
    src = ROOT / "src"
    packages = {
        ".".join(init.parent.relative_to(src).parts)
        for init in (src / "nomad_device").rglob("__init__.py")
        if re.search(r"^__all__\b", init.read_text(), re.MULTILINE)
    }
    assert packages <= set(GEN.MODULES), packages - set(GEN.MODULES)


def test_the_tutorial_links_to_the_reference() -> None:
    tutorial = (ROOT / "docs" / "tutorial.md").read_text()
    assert "](reference/README.md)" in tutorial
