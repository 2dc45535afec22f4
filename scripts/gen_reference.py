#!/usr/bin/env python3
"""Write the API reference, ``docs/reference/*.md``, from the docstrings.

Usage::

    python scripts/gen_reference.py          # rewrite the pages in place
    python scripts/gen_reference.py --check  # exit 1 if they are out of date

One page per public module (:data:`MODULES`: every package with an
``__all__``, and the modules the tutorial imports from), one section per name
in its ``__all__``: the signature, the docstring, and for a class its public
methods, properties and the attributes documented with ``#:`` comments.
Constants are documented by the ``#:`` comment above their assignment. A name
that an earlier page already documents (``nomad_device.plugin.DevicePlugin``
is ``nomad_device.DevicePlugin``) links there. ``tests/test_reference.py``
runs ``--check`` and fails when a public name has no documentation at all.

Our own script rather than Sphinx, pdoc or mkdocstrings: the docs are plain
Markdown read in the repository, so the reference is too, checked in beside
them and reviewed in diffs like any page, and checked in CI without building
a site or adding a dependency.
"""

from __future__ import annotations

import argparse
import ast
import enum
import importlib
import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Generic

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
OUT = ROOT / "docs" / "reference"

#: The pages, in order: a name is documented in full on the first page that has it.
MODULES = (
    "nomad_device",
    "nomad_device.model",
    "nomad_device.errors",
    "nomad_device.plugin",
    "nomad_device.config",
    "nomad_device.host",
    "nomad_device.wire.hclspec",
    "nomad_device.sources",
    "nomad_device.golang",
    "nomad_device.testing",
    "nomad_device.testing.conformance",
    "nomad_device.placement",
    "nomad_device.goplugin",
    "nomad_device.bundle",
    "nomad_device.plugins.example",
    "nomad_device.plugins.generic",
    "nomad_device.plugins.nvidia",
)
#: Longest signature kept on one line.
WIDTH = 88


# -- docstrings and comments --------------------------------------------------------


def markdown(doc: str) -> str:
    """A docstring (reStructuredText roles and literals) as Markdown."""
    doc = re.sub(r":(?:class|func|meth|attr|mod|data|exc|obj):`~?([^`]+)`", r"`\1`", doc)
    doc = re.sub(r"``([^`]+)``", r"`\1`", doc)
    lines: list[str] = []
    literal = False
    for line in doc.splitlines():
        if literal and line.strip() and not line.startswith(" "):
            literal = False
        if line.rstrip().endswith("::") and not literal:
            line = line.rstrip()[:-1]
            literal = True
            lines.append(line)
            continue
        lines.append("    " + line if literal and line.strip() else line)
    return "\n".join(lines).strip()


def _comment_above(lines: list[str], lineno: int) -> str:
    """The ``#:`` comment block right above line ``lineno`` (1-based)."""
    found: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#:"):
        found.append(lines[i].strip()[2:].strip())
        i -= 1
    return textwrap.fill(" ".join(reversed(found)), width=79, break_on_hyphens=False)


def _assigned(node: ast.stmt) -> str | None:
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    ):
        return node.targets[0].id
    return None


def attribute_comments(body: list[ast.stmt], lines: list[str]) -> dict[str, str]:
    """``name -> comment`` for the assignments in ``body`` that have a ``#:`` comment."""
    found = {}
    for node in body:
        name = _assigned(node)
        if name is not None:
            comment = _comment_above(lines, node.lineno)
            if comment:
                found[name] = comment
    return found


def _module_comments() -> dict[str, dict[str, str]]:
    """Every module's documented module-level assignments, by module name."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted((SRC / "nomad_device").rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        text = path.read_text()
        comments = attribute_comments(ast.parse(text).body, text.splitlines())
        if comments:
            found[module] = comments
    return found


def class_comments(cls: type) -> dict[str, str]:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    lines = inspect.cleandoc("\n" + source).splitlines() if source[:1].isspace() else None
    text = "\n".join(lines) if lines is not None else source
    tree = ast.parse(text)
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef)
    return attribute_comments(node.body, text.splitlines())


# -- signatures -----------------------------------------------------------------------


def _annotation(value: object) -> str:
    if value is inspect.Parameter.empty:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, type):
        return value.__qualname__
    return re.sub(r"\b(typing|collections\.abc)\.", "", repr(value))


def _default(value: object) -> str:
    text = repr(value)
    if " at 0x" in text or len(text) > 60:
        return "..."
    return text


def _constant(name: str, value: object) -> str:
    """``NAME = value``; sets sorted (their order is not stable), long values wrapped."""
    if isinstance(value, frozenset | set) and all(isinstance(v, str) for v in value):
        text = f"{type(value).__name__}({{{', '.join(repr(v) for v in sorted(value))}}})"
    else:
        text = repr(value)
    if " at 0x" in text:
        text = "..."
    elif len(text) > 400:  # a table (the conformance checks): the docs say what it holds
        count = f", {len(value)} items" if isinstance(value, tuple | list | dict) else ""
        text = f"...  # {type(value).__name__}{count}"
    line = f"{name} = {text}"
    if len(line) <= WIDTH:
        return line
    return textwrap.fill(line, width=WIDTH, subsequent_indent="    ", break_on_hyphens=False)


def _parameter(p: inspect.Parameter) -> str:
    text = p.name
    if p.kind is p.VAR_POSITIONAL:
        text = "*" + text
    elif p.kind is p.VAR_KEYWORD:
        text = "**" + text
    annotation = _annotation(p.annotation)
    if annotation:
        text += f": {annotation}"
    if p.default is not p.empty:
        text += f" = {_default(p.default)}" if annotation else f"={_default(p.default)}"
    return text


def signature(obj: Callable[..., Any], *, drop_first: bool = False) -> tuple[list[str], str]:
    """The parameters as text (``/`` and ``*`` markers included) and the return annotation."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ["..."], ""
    params = list(sig.parameters.values())
    if drop_first and params:
        params = params[1:]
    out: list[str] = []
    star = False
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        if p.kind is p.VAR_POSITIONAL:
            star = True
        out.append(_parameter(p))
        following = params[i + 1] if i + 1 < len(params) else None
        if p.kind is p.POSITIONAL_ONLY and (following is None or following.kind is not p.kind):
            out.append("/")
    return out, _annotation(sig.return_annotation)


def render_call(prefix: str, name: str, params: list[str], returns: str) -> str:
    tail = f" -> {returns}" if returns else ""
    one = f"{prefix}{name}({', '.join(params)}){tail}"
    if len(one) <= WIDTH or not params:
        return one
    inner = "".join(f"    {p},\n" for p in params)
    return f"{prefix}{name}(\n{inner}){tail}"


def code(text: str) -> str:
    return f"```python\n{text}\n```"


# -- pages ------------------------------------------------------------------------------


@dataclass
class Page:
    module: str
    names: list[str]
    #: Public names without any documentation (the test fails on them).
    undocumented: list[str] = field(default_factory=list)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def page_file(module: str) -> str:
    return f"{module}.md"


class Reference:
    """Renders every page, remembering where each object was documented first."""

    def __init__(self) -> None:
        self.home: dict[int, tuple[str, str]] = {}  # id(object) -> (page, heading)
        self.comments = _module_comments()
        self.undocumented: list[str] = []

    def constant_comment(self, module: ModuleType, name: str, value: object) -> str:
        """The ``#:`` comment of the module that defines ``name`` as ``value``."""
        own = self.comments.get(module.__name__, {})
        if name in own:
            return own[name]
        for where, comments in self.comments.items():
            if name in comments and where.startswith("nomad_device"):
                other = importlib.import_module(where)
                if getattr(other, name, None) is value:
                    return comments[name]
        return ""

    def render(self, module_name: str) -> str:
        module = importlib.import_module(module_name)
        names = list(getattr(module, "__all__", []))
        out = [f"# `{module_name}`", ""]
        doc = inspect.getdoc(module)
        if doc:
            out += [markdown(doc), ""]
        out += [
            "*Generated from the docstrings by `scripts/gen_reference.py`; do not edit.*",
            "",
        ]
        if names:
            out += ["| name | |", "| --- | --- |"]
            for name in names:
                summary = self.summary(module, name)
                out.append(f"| [`{name}`](#{anchor(name)}) | {summary} |")
            out.append("")
        for name in names:
            out += self.section(module, name)
        return "\n".join(out).rstrip() + "\n"

    def summary(self, module: ModuleType, name: str) -> str:
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isroutine(value):
            doc = inspect.getdoc(value) or ""
        else:
            doc = self.constant_comment(module, name, value)
        first = markdown(doc).split("\n\n", 1)[0].replace("\n", " ")
        return first.replace("|", "\\|")

    def section(self, module: ModuleType, name: str) -> list[str]:
        value = getattr(module, name)
        where = f"{module.__name__}.{name}"
        out = [f"## `{name}`", ""]
        key = id(value)
        if (inspect.isclass(value) or inspect.isroutine(value)) and key in self.home:
            page, heading = self.home[key]
            out += [f"The same as [`{heading}`]({page}#{anchor(heading.split('.')[-1])}).", ""]
            return out
        if inspect.isclass(value):
            self.home[key] = (page_file(module.__name__), f"{module.__name__}.{name}")
            out += self.class_section(value, where)
        elif inspect.isroutine(value):
            self.home[key] = (page_file(module.__name__), f"{module.__name__}.{name}")
            params, returns = signature(value)
            prefix = "async def " if inspect.iscoroutinefunction(value) else "def "
            out += [code(render_call(prefix, name, params, returns)), ""]
            out += self.doc(inspect.getdoc(value), where)
        else:
            comment = self.constant_comment(module, name, value)
            out += [code(_constant(name, value)), ""]
            out += self.doc(comment, where)
        return out

    def doc(self, text: str | None, where: str) -> list[str]:
        if not text:
            self.undocumented.append(where)
            return ["*(not documented)*", ""]
        return [markdown(text), ""]

    def class_section(self, cls: type, where: str) -> list[str]:
        out: list[str] = []
        if issubclass(cls, enum.Enum):
            members = "\n".join(f"    {m.name} = {m.value!r}" for m in cls)
            out += [code(f"class {cls.__name__}(enum.Enum):\n{members}"), ""]
        else:
            params, _ = signature(cls)
            out += [code(render_call("class ", cls.__name__, params, "")), ""]
            bases = [b for b in cls.__bases__ if b not in (object, Generic)]
            if bases:
                out += ["Bases: " + ", ".join(f"`{b.__qualname__}`" for b in bases), ""]
        doc = cls.__dict__.get("__doc__")
        out += self.doc(inspect.cleandoc(doc) if isinstance(doc, str) else None, where)
        comments = class_comments(cls)
        for name, member in cls.__dict__.items():
            if name.startswith("_") or (issubclass(cls, enum.Enum) and name in cls.__members__):
                continue
            out += self.member(cls, name, member, comments)
        return out

    def member(self, cls: type, name: str, member: object, comments: dict[str, str]) -> list[str]:
        heading = f"### `{cls.__name__}.{name}`"
        if isinstance(member, property):
            doc = inspect.getdoc(member)
            returns = _annotation(inspect.signature(member.fget).return_annotation)
            text = f"{name}: {returns}" if returns and member.fget else name
            return [heading, "", code(f"@property\n{text}"), "", *self._member_doc(doc)]
        function = member
        decorator = ""
        if isinstance(member, staticmethod | classmethod):
            decorator = f"@{type(member).__name__}\n"
            function = member.__func__
        if inspect.isfunction(function):
            params, returns = signature(function, drop_first=not isinstance(member, staticmethod))
            prefix = "async def " if inspect.iscoroutinefunction(function) else "def "
            text = decorator + render_call(prefix, name, params, returns)
            return [heading, "", code(text), "", *self._member_doc(inspect.getdoc(function))]
        if name in comments:
            annotation = _annotation(inspect.get_annotations(cls).get(name, ""))
            declared = f"{name}: {annotation}" if annotation else name
            if not callable(member):
                declared += f" = {_default(member)}"
            return [heading, "", code(declared), "", markdown(comments[name]), ""]
        return []

    @staticmethod
    def _member_doc(doc: str | None) -> list[str]:
        return [markdown(doc), ""] if doc else []


def index(pages: dict[str, str]) -> str:
    out = [
        "# API reference",
        "",
        "Generated from the docstrings by `scripts/gen_reference.py` (`make reference`);",
        "`tests/test_reference.py` fails when these pages are stale or a public name",
        "has no documentation. Start with the [tutorial](../tutorial.md).",
        "",
        "A page per package with an `__all__`, and per module the tutorial imports",
        "from; a name is described on the first page that exports it and linked from",
        "the others. The generator is a small script over `inspect`, not Sphinx,",
        "pdoc or mkdocstrings: the docs are Markdown read in the repository, so the",
        "reference is too, reviewed in diffs like any page and checked without",
        "building a site or adding a dependency.",
        "",
        "| module | |",
        "| --- | --- |",
    ]
    for module in pages:
        doc = inspect.getdoc(importlib.import_module(module)) or ""
        first = markdown(doc).split("\n\n", 1)[0].replace("\n", " ")
        out.append(f"| [`{module}`]({page_file(module)}) | {first} |")
    return "\n".join(out) + "\n"


def build() -> tuple[dict[str, str], list[str]]:
    """Every page's text by file name, and the public names without documentation."""
    reference = Reference()
    pages = {module: reference.render(module) for module in MODULES}
    files = {page_file(module): text for module, text in pages.items()}
    files["README.md"] = index(pages)
    return files, reference.undocumented


def _stale(files: dict[str, str]) -> Iterator[str]:
    for name, text in files.items():
        path = OUT / name
        if not path.exists() or path.read_text() != text:
            yield name
    for path in sorted(OUT.glob("*.md")):
        if path.name not in files:
            yield f"{path.name} (no longer generated)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/reference/ from the docstrings.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the pages are stale")
    args = parser.parse_args(argv)
    files, undocumented = build()
    for where in undocumented:
        print(f"warning: {where} has no documentation", file=sys.stderr)
    stale = list(_stale(files))
    if args.check:
        if stale:
            print("stale: " + ", ".join(stale) + " (run scripts/gen_reference.py)")
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (OUT / name).write_text(text)
    for path in OUT.glob("*.md"):
        if path.name not in files:
            path.unlink()
    changed = f"{len(stale)} changed" if stale else "none changed"
    print(f"wrote {len(files)} pages to {OUT.relative_to(ROOT)} ({changed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
