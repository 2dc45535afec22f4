"""Imports only point down the layers described in docs/architecture.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support import CONFORMANCE_PLUGINS, PLUGINS, ROOT, SDK_PLUGIN

SRC = ROOT / "src" / "nomad_device"

# What each top-level unit of the package may import (besides itself).
BASE = {"model", "errors", "golang", "proto", "frozen", "display"}
ALLOWED: dict[str, set[str]] = {
    "proto": set(),
    # Cheap frozen value classes (no generated code): under every unit that has values.
    "frozen": set(),
    "model": {"frozen"},
    "errors": set(),
    "golang": set(),
    # How to start this Python again (the bundle's own offers its way): a leaf.
    "interpreter": set(),
    # Text from devices made safe for a terminal (every human-readable output uses it).
    "display": set(),
    "goplugin": {"proto", "frozen"},
    # Event sources (inotify, kernel uevents) know nothing of Nomad, like goplugin/.
    "sources": set(),
    # HCL 2's expression syntax, read by spec literals, templates and job files alike.
    "hclexpr": set(),
    "wire": {"model", "proto", "golang", "frozen", "hclexpr"},
    # How an agent builds SetConfig from an agent file (HCL 1, hcldec, templates): above
    # the wire formats it produces, and never imported by them or by a serving plugin.
    "agentconfig": {"wire", "hclexpr", "model", "proto", "golang", "frozen"},
    "config": {"wire", "golang", "frozen"},
    "constants": {"goplugin"},
    "host": BASE | {"goplugin", "wire", "config", "constants"},
    "plugin": BASE | {"goplugin", "wire", "config", "constants", "sources"},
    "testing": BASE
    | {"goplugin", "wire", "agentconfig", "config", "constants", "host", "plugin", "placement"},
    "plugins": BASE | {"wire", "config", "constants", "plugin", "sources", "interpreter"},
    # The placement model (Nomad's scheduler rules for devices, jobs, nodes and the
    # cluster's API): values only; job files are read with python-hcl2 and HCL 2's
    # escapes, never with the wire formats or the agent emulator.
    "placement": BASE | {"hclexpr"},
    # The launcher is the top: it drives plugins through the host client and its
    # demo uses the example plugin's bundled directory.
    "cli": BASE
    | {
        "goplugin",
        "wire",
        "agentconfig",
        "config",
        "constants",
        "host",
        "plugin",
        "testing",
        "plugins",
        "sources",
        "placement",
        "interpreter",
    },
    # The bundle builder sits beside the launcher. It imports the plugin API only
    # to check at build time that an entry point is a DevicePlugin; what runs on
    # nodes (bundle/bootstrap.py) imports nothing of ours (test_bundle_build.py).
    "bundle": {"plugin", "interpreter"},
    "nomad_device": {"errors", "model", "plugin"},
}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "nomad_device"


def _imports() -> dict[str, set[tuple[str, str]]]:
    found: dict[str, set[tuple[str, str]]] = {}
    for path in SRC.rglob("*.py"):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        unit = _unit(module.removesuffix(".__init__"))
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.startswith("nomad_device") and _unit(name) != unit:
                    found.setdefault(unit, set()).add((_unit(name), str(path.relative_to(SRC))))
    return found


def test_every_unit_is_known() -> None:
    units = {p.stem if p.is_file() else p.name for p in SRC.iterdir() if p.name != "py.typed"}
    units.discard("__init__")
    units.discard("__pycache__")
    assert units <= set(ALLOWED), units - set(ALLOWED)


def test_imports_point_down() -> None:
    wrong = [
        f"{where} ({unit}) imports {target}"
        for unit, edges in _imports().items()
        for target, where in sorted(edges)
        if target not in ALLOWED[unit]
    ]
    assert wrong == []


def test_transport_knows_no_nomad() -> None:
    """goplugin/ is reusable for any go-plugin host: no Nomad cookie, env or services."""
    for path in (SRC / "goplugin").glob("*.py"):
        text = path.read_text()
        for word in ("NOMAD_", "hashicorp.nomad", "DevicePlugin", "BasePlugin", "e4327c2e"):
            assert word not in text, f"{path.name} mentions {word}"


def test_nothing_imports_an_entry_point() -> None:
    """A ``__main__`` module is the top of its unit: importing one closes a circle
    (the REPL once took ``parse_interval`` from ``cli/__main__.py``)."""
    wrong = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            wrong.extend(
                f"{path.relative_to(SRC)} imports {name}"
                for name in names
                if name.endswith("__main__")
            )
    assert wrong == []


def test_sources_know_no_nomad() -> None:
    """sources/ is reusable by any program: stdlib only, and no Nomad word but the package's."""
    import sys

    for path in (SRC / "sources").glob("*.py"):
        text = path.read_text()
        own = text.replace("nomad_device.sources", "").replace("NOMAD_DEVICE_SOURCES_", "")
        assert "nomad" not in own.lower(), f"{path.name} mentions Nomad"
        for word in ("hashicorp", "DevicePlugin", "fingerprint", "go-plugin"):
            assert word.lower() not in own.lower(), f"{path.name} mentions {word}"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or name.startswith("nomad_device.sources"), (
                    f"{path.name} imports {name}"
                )


def test_a_serving_plugin_never_loads_the_agent_emulator() -> None:
    """The ready-made plugins, their serving path and a SetConfig decoded: no module of
    agentconfig/ (nor testing/, nor msgpack, which only encoders need) is loaded."""
    import subprocess
    import sys

    from nomad_device.agentconfig import setconfig
    from nomad_device.plugins.generic.plugin import GenericDevicePlugin

    body = {"device": {"kvm": [{"paths": ["/dev/kvm"], "share": 4}]}}
    data = setconfig.config_from_json(GenericDevicePlugin().config_schema(), body)
    code = f"""
import sys
import nomad_device.plugin.serve, nomad_device.plugin.servicer
from nomad_device.plugins.example.plugin import FsDevicePlugin
from nomad_device.plugins.generic.plugin import GenericDevicePlugin
from nomad_device.plugins.nvidia.plugin import NvidiaPlugin
for plugin in (FsDevicePlugin(), NvidiaPlugin()):
    plugin.config_schema()
GenericDevicePlugin().decode_config(bytes.fromhex({data.hex()!r}))
print(sorted(m for m in sys.modules if m.startswith(
    ("nomad_device.agentconfig", "nomad_device.testing", "nomad_device.placement", "msgpack")
)))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


# The tests mirror src/: a test of nomad_device/a/b sits in tests/a/b/ (of a module
# nomad_device/m.py: tests/test_m*.py), helpers live in tests/support/, and a few
# directories hold tests that no one layer owns.
TESTS = ROOT / "tests"
#: Directories of tests/ that are not a layer of src/, and why.
TIERS = {
    "support": "helpers the tests share; no test lives here",
    "docs": "the documentation's pages: links, topics, the commands they show",
    "kernel": "the real-kernel tier: nomad-device-generic in a Debian kernel under QEMU",
}
#: Top-level test files about the whole project rather than one layer.
PROJECT_WIDE = {"test_layers.py", "test_reference.py"}
#: Tests of a layer that reach it only through a whole plugin the SDK serves, and why.
THROUGH_THE_SDK = {
    "goplugin/test_interop_gohost.py": "go-plugin's own client against the transport's"
    " server side, which every SDK plugin runs (tests/support/plugins/sdk_plugin.py)",
}
#: Files a test directory may hold besides its tests.
TEST_DIR_FILES = {"__init__.py", "conftest.py"}


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _scripts() -> dict[str, str]:
    """Console scripts by the module they start (``pyproject.toml``)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {name: target.split(":")[0] for name, target in project["scripts"].items()}


def _reexports() -> dict[str, str]:
    """The names ``nomad_device`` itself offers, by the module they come from."""
    found = {}
    for node in ast.walk(ast.parse((SRC / "__init__.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.update({alias.name: node.module for alias in node.names})
    return found


def _what_it_reads(path: Path) -> str:
    """A test module's text and that of every support module it imports and every fixture
    plugin it starts, transitively."""
    texts, todo, seen, reexports = [], [path], set(), _reexports()
    while todo:
        found = todo.pop()
        if found in seen or not found.is_file():
            continue
        seen.add(found)
        text = found.read_text()
        texts.append(text)
        for node in ast.walk(ast.parse(text)):
            names = []
            if isinstance(node, ast.Constant) and re.fullmatch(r"\w+\.py", str(node.value)):
                todo += [PLUGINS / str(node.value), CONFORMANCE_PLUGINS / str(node.value)]
            elif isinstance(node, ast.Name) and node.id == "SDK_PLUGIN":
                todo.append(SDK_PLUGIN)
            if isinstance(node, ast.ImportFrom) and node.module == "nomad_device":
                # ``from nomad_device import serve`` names the module that offers it
                texts += [reexports.get(alias.name, "") for alias in node.names]
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name == "support" or name.startswith("support."):
                    base = TESTS.joinpath(*name.split("."))
                    todo += [base.with_suffix(".py"), base / "__init__.py"]
    return "\n".join(texts)


def test_helpers_live_in_support_and_tests_beside_their_layer() -> None:
    """Every file outside ``tests/support`` is a test, a conftest or a package marker, in
    a directory that mirrors a package of ``src/nomad_device`` or is a named tier; every
    top-level test file is named for a module of ``src/nomad_device``; ``tests/support``
    holds no test."""
    modules = {p.stem for p in SRC.glob("*.py")}
    wrong = []
    for path in _test_files():
        relative = path.relative_to(TESTS)
        parts = relative.parts
        if parts[0] == "support":
            if path.name.startswith("test_") and path.suffix == ".py":
                wrong.append(f"{relative}: a test among the helpers")
            continue
        if len(parts) == 1:
            stem = path.stem.removeprefix("test_").split("_")
            named = any("_".join(stem[:n]) in modules for n in range(1, len(stem) + 1))
            if path.name not in {"conftest.py", *PROJECT_WIDE} and not (
                path.name.startswith("test_") and named
            ):
                wrong.append(f"{relative}: not named for a module of src/nomad_device")
            continue
        if path.name not in TEST_DIR_FILES and not (
            path.name.startswith("test_") and path.suffix == ".py"
        ):
            wrong.append(f"{relative}: a helper outside tests/support")
        if parts[0] not in TIERS and not SRC.joinpath(*parts[:-1], "__init__.py").exists():
            wrong.append(f"{relative}: src/nomad_device/{'/'.join(parts[:-1])} is no package")
    assert wrong == []


def test_each_test_tests_the_layer_it_sits_under() -> None:
    """A test under ``tests/a/b/`` names ``nomad_device.a.b`` (an import, a ``python -m``,
    a console script of that package), itself or through the support modules it uses:
    a test filed under a layer it does not touch fails here."""
    scripts = _scripts()
    wrong = []
    for path in _test_files():
        parts = path.relative_to(TESTS).parts
        if len(parts) == 1 or parts[0] in TIERS or not path.name.startswith("test_"):
            continue
        if "/".join(parts) in THROUGH_THE_SDK:
            continue
        package = ".".join(("nomad_device", *parts[:-1]))
        names = [package] + [s for s, m in scripts.items() if f"{m}.".startswith(f"{package}.")]
        text = _what_it_reads(path)
        if not any(re.search(rf"{re.escape(name)}(?![\w-])", text) for name in names):
            wrong.append(f"{path.relative_to(TESTS)} names none of {names}")
    assert wrong == []
