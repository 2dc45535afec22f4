"""The builder: targets, dependency closure, native-code requirements, file format."""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata as md
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support import ROOT, SDK_PLUGIN
from support.bundle import build, node_env, node_python, payload, tiny_bundle, unavailable

from nomad_device.bundle import BundleError, Root, read_config, resolve_target
from nomad_device.bundle.archive import contents
from nomad_device.bundle.build import SCRIPT_MODULE, ready_made_plugins
from nomad_device.bundle.collect import (
    collect_pip,
    glibc_needed,
    requirement_roots,
    resolve,
)
from nomad_device.host import DevicePluginClient

BOOTSTRAP = ROOT / "src" / "nomad_device" / "bundle" / "bootstrap.py"


def test_ready_made_plugins_are_the_plugin_scripts_only() -> None:
    names = ready_made_plugins()
    assert "nomad-device-example" in names
    for tool in ("nomad-device-launcher", "nomad-device-conformance", "nomad-device-bundle"):
        assert tool not in names


def test_a_ready_made_plugin_brings_the_extra_named_after_it() -> None:
    """The nvidia bundle must carry NVIDIA's binding, or it finds no GPU on any node."""
    nvidia = resolve_target("nomad-device-nvidia")
    assert Root("nomad-device-sdk", frozenset({"nvidia"})) in nvidia.roots
    names = {d.name.lower().replace("_", "-") for d in resolve(list(nvidia.roots))}
    assert "nvidia-ml-py" in names
    # The others have no extra of their own, and bring only the runtime.
    for plugin in ("nomad-device-example", "nomad-device-generic"):
        target = resolve_target(plugin)
        assert all(not root.extras for root in target.roots), plugin


def test_closure_is_the_runtime_not_the_tools() -> None:
    names = {d.name.lower().replace("_", "-") for d in resolve([Root("nomad-device-sdk")])}
    for runtime in ("nomad-device-sdk", "grpcio", "grpcio-health-checking", "protobuf", "msgpack"):
        assert runtime in names
    assert {"cryptography", "cffi", "pycparser"} <= names  # AutoMTLS
    for tool in ("pytest", "python-hcl2", "mypy", "ruff", "packaging", "grpcio-tools"):
        assert tool not in names


def test_extras_are_followed() -> None:
    names = {d.name.lower() for d in resolve([Root.parse("nomad-device-sdk[cli]")])}
    assert {"python-hcl2", "lark"} <= names


def test_missing_requirement_names_who_needs_it() -> None:
    with pytest.raises(BundleError, match=r"no-such-dist-xyz \(needed by the plugin\) is not"):
        resolve([Root("no-such-dist-xyz")])


def _wheel(site: Path, name: str, *tags: str, pure: bool = False) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = ["Wheel-Version: 1.0", f"Root-Is-Purelib: {'true' if pure else 'false'}"]
    (info / "WHEEL").write_text("\n".join(lines + [f"Tag: {t}" for t in tags]) + "\n")


def test_glibc_needed_is_the_newest_wheels_oldest_tag(tmp_path: Path) -> None:
    _wheel(tmp_path, "pure", "py3-none-any", pure=True)
    assert glibc_needed(tmp_path) is None
    _wheel(
        tmp_path, "grpcio", "cp311-cp311-manylinux_2_17_x86_64", "cp311-cp311-manylinux2014_x86_64"
    )
    assert glibc_needed(tmp_path) == (2, 17)
    _wheel(
        tmp_path, "crypto", "cp311-abi3-manylinux_2_34_x86_64", "cp311-abi3-manylinux_2_28_x86_64"
    )
    assert glibc_needed(tmp_path) == (2, 28)
    _wheel(tmp_path, "alpine", "cp311-cp311-musllinux_1_2_x86_64")
    with pytest.raises(BundleError, match="musllinux"):
        glibc_needed(tmp_path)


def test_requirements_file(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("# tools\nmsgpack>=1.0  # inline\n\nprotobuf; python_version < '3'\n")
    assert requirement_roots(req) == [Root("msgpack")]
    req.write_text("-e ./local\n")
    with pytest.raises(BundleError, match="need --pip"):
        requirement_roots(req)


def test_targets() -> None:
    script = resolve_target("nomad-device-example")
    assert (script.kind, script.entry) == ("call", "nomad_device.plugins.example.__main__:main")
    assert Root("nomad-device-sdk") in script.roots
    cls = resolve_target("nomad_device.plugins.example.plugin:FsDevicePlugin")
    assert cls.name == "fsdeviceplugin"
    assert cls.loose_modules == ()
    file = resolve_target(str(SDK_PLUGIN))
    assert (file.kind, file.entry, file.name) == ("script", SCRIPT_MODULE, "sdk-plugin")
    with pytest.raises(BundleError, match="not a DevicePlugin"):
        resolve_target("nomad_device.model:Device")
    with pytest.raises(BundleError, match="cannot load"):
        resolve_target("nomad_device.plugins.example.plugin:Nope")
    with pytest.raises(BundleError, match="not a plugin file"):
        resolve_target("no-such-console-script")


def test_cli_reports_errors_in_one_line(tmp_path: Path) -> None:
    done = build("no-such-console-script", "-o", str(tmp_path / "x"))
    assert done.returncode == 1
    assert done.stderr.startswith("nomad-device-bundle: ")
    assert not (tmp_path / "x").exists()


def test_file_format_and_inspect(tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    config = tiny_bundle(out, "1")
    data = out.read_bytes()
    assert data.startswith(b"#!/bin/sh\n")
    assert os.stat(out).st_mode & 0o111 == 0o111
    assert read_config(out) == config
    assert config["pythons"] == [list(sys.version_info[:2])]
    assert config["runtime"] is None
    # Equal inputs, equal key: a rebuild of the same code reuses a node's cache.
    again = tiny_bundle(tmp_path / "again", "1")
    assert again["key"] == config["key"]
    # The key names the payload's hash, which the bundle carries in full.
    spec = config["payload"]
    digest = hashlib.sha256(b"nomad-device-bundle 3\n" + data[spec["offset"] :][: spec["size"]])
    assert spec["sha256"] == digest.hexdigest()
    assert config["key"] == f"tiny-{digest.hexdigest()[:16]}"


def test_inspect_prints_what_the_bundle_carries(example_bundle: Path) -> None:
    """docs/deploy.md promises what the bundle carries, not only its metadata (issue 22)."""
    done = build("--inspect", str(example_bundle))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    config = read_config(example_bundle)
    assert report["config"] == config
    assert report["size"] == example_bundle.stat().st_size
    site = report["carries"]["site"]
    carried = {name.lower().replace("_", "-"): v for name, v in site["distributions"].items()}
    for dist in ("nomad-device-sdk", "grpcio", "protobuf", "msgpack", "cryptography"):
        assert carried[dist] == md.version(dist), dist
    assert "pytest" not in carried  # tools stay out
    with payload(example_bundle) as archive:
        assert site["files"] == len([n for n in archive.namelist() if n.startswith("site/")])
    needs = report["needs"]
    assert needs["python"] == ["{}.{}".format(*sys.version_info[:2])]
    assert needs["glibc"] == config["glibc"] and needs["machine"] == os.uname().machine


def test_bootstrap_stays_small_and_stdlib_only() -> None:
    tree = ast.parse(BOOTSTRAP.read_text())
    top = {
        alias.name
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert top == {"os", "sys"}  # what every launch imports before the plugin
    used = {
        (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert used <= sys.stdlib_module_names, used - sys.stdlib_module_names
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)]  # no f-strings


def test_pip_source_installs_into_the_staging_tree(tmp_path: Path) -> None:
    """``--pip`` hands the roots to ``pip install --target`` (offline here: a local project)."""
    project = tmp_path / "proj"
    (project / "tinypkg").mkdir(parents=True)
    (project / "tinypkg" / "__init__.py").write_text("VALUE = 1\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tinypkg"\nversion = "1.0"\n'
    )
    site = tmp_path / "site"
    collect_pip(
        [Root(str(project))], site, pip_args=["--no-index", "--no-build-isolation", "--no-deps"]
    )
    assert (site / "tinypkg" / "__init__.py").read_text() == "VALUE = 1\n"
    assert list(site.glob("tinypkg-1.0.dist-info"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("tests/support/plugins/sdk_plugin.py", "sdk-test"),
        ("nomad_device.plugins.example.plugin:FsDevicePlugin", "example-fs-device"),
    ],
    ids=["plugin-file", "module-class"],
)
def test_other_target_kinds_serve(tmp_path: Path, target: str, name: str) -> None:
    node_python()
    out = tmp_path / "plugin"
    done = build(str(ROOT / target) if target.endswith(".py") else target, "-o", str(out))
    assert done.returncode == 0, done.stderr
    cache = tmp_path / "cache"
    client = DevicePluginClient.launch(
        [str(out)], env=node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(cache)), cwd="/", start_timeout=120
    )
    try:
        assert client.info().name == name
        with client.fingerprint() as stream:
            stream.next(30)
    finally:
        client.kill()


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_make_dist_builds_every_ready_made_plugin(aarch64_dist: Path) -> None:
    """What ``make dist`` runs for aarch64: one file per ready-made plugin, each an aarch64 ELF."""
    built = sorted(p.name for p in aarch64_dist.iterdir() if not p.name.startswith("."))
    assert built == ready_made_plugins()
    for path in aarch64_dist.iterdir():
        config = read_config(path)
        assert config["name"] == path.name
        assert (config["machine"], config["glibc"]) == ("aarch64", [2, 17])
        assert config["pythons"] == [[3, 11], [3, 12], [3, 13]]
        assert path.read_bytes()[:20][18] == 183  # EM_AARCH64
        with zipfile.ZipFile(path) as boot:  # the zip at the end: what starts before unpacking
            names = set(boot.namelist())
        assert {"encodings/__init__.pyc", "zipfile/__init__.pyc", "_nomad_bundle_boot.pyc"} <= names
        assert {f"_nomad_bundle_boot_3{minor}.pyc" for minor in (11, 12, 13)} <= names
    nvidia = contents(aarch64_dist / "nomad-device-nvidia")["carries"]["site"]["distributions"]
    assert "nvidia-ml-py" in nvidia


def test_make_dist_target_exists() -> None:
    done = subprocess.run(
        ["make", "-n", "dist"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    for machine in ("x86_64", "aarch64"):
        assert (
            f"nomad-device-bundle --ready-made --interpreter auto --machine {machine} "
            f"--output-dir dist/{machine}"
        ) in done.stdout


def test_glibc_floor_is_what_the_elf_files_reference() -> None:
    """The floor is read from symbol versions, as ``objdump -T`` shows them."""
    import re as regex
    import shutil as sh

    import grpc

    from nomad_device.bundle.elf import glibc_floor, read_elf

    objdump = sh.which("objdump")
    if objdump is None:
        unavailable("objdump (binutils) is needed to cross-check")
    libraries = sorted(Path(grpc.__file__).parent.rglob("*.so"))
    assert libraries
    for library in libraries:
        info = read_elf(library)
        assert info is not None and info.machine == 62 and "libc.so.6" in info.needed
        listed = subprocess.run([objdump, "-T", str(library)], capture_output=True, text=True)
        versions = {
            (int(m[1]), int(m[2] or 0))
            for m in regex.finditer(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", listed.stdout)
        }
        assert info.glibc == max(versions)
    floor, infos = glibc_floor(libraries)
    assert floor == max(i.glibc for i in infos.values() if i.glibc)
