"""Bundles on nodes unlike the build machine (issue 20), driven over the real wire.

- every Python on the machine hidden (a mount namespace covers them), the bundle
  alone in a read-only plugin_dir, no HOME, systemd's PATH: the Go host drives
  it through fingerprint, stats, reserve and kill, and the conformance suite,
  itself a bundle with its own interpreter, passes;
- the same bundle on the node's CPython 3.11, 3.12 and 3.13 when one is there;
- chroots of Debian bullseye (glibc 2.31, Python 3.9: too old, so the bundle's
  own interpreter runs) and trixie (Python 3.13: the node's runs), driven from
  outside over the plugin's socket;
- a C library older than the bundle needs: one hclog line saying both;
- an aarch64 bundle built here, run under qemu-user through binfmt_misc in an
  arm64 Debian tree, driven by the (x86_64) Go host.

The bundles with an interpreter need the runtime build (``runtime.py``), cached
after the first run; these tests are slow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.bundle import (
    build,
    check_report,
    devices_in,
    gohost_argv,
    node_env,
    private_mounts,
    read_only,
    run_gohost,
)
from support.nodes import binfmt_aarch64, debian_root, glibc_of, in_root

from nomad_device.bundle import read_config, write_bundle
from nomad_device.bundle.build import SCRIPT_MODULE
from nomad_device.bundle.runtime import build_runtime

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(3000)]

CONFORMANCE = "nomad-device-conformance"


@pytest.fixture(scope="module")
def dist() -> Iterator[Path]:
    """Bundles built once for this module, in a directory other users can read."""
    path = Path(tempfile.mkdtemp(prefix="nd20-dist-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _build(dist: Path, name: str, *args: str, target: str = "nomad-device-example") -> Path:
    out = dist / name
    if not out.exists():
        done = build(target, "-o", str(out), *args, timeout=3000)
        assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def auto_bundle(dist: Path) -> Path:
    """The example with its own interpreter, using the node's CPython 3.11 to 3.13 when present."""
    return _build(dist, "nomad-device-example", "--interpreter", "auto")


#: Every Python this machine has, covered: a char device in place of each
#: interpreter file (so neither `[ -f ]` nor exec finds one) and empty tmpfs
#: over pyenv's and the distribution's libraries.
_HIDE = """
set -e
for f in /usr/bin/python* /usr/local/bin/python* /bin/python*; do
  [ -e "$f" ] && [ ! -L "$f" ] && mount --bind /dev/null "$f"
done
for d in /root/.pyenv /usr/lib/python3 /usr/lib/python3.*; do
  [ -d "$d" ] && mount -t tmpfs -o size=1m,mode=0755 tmpfs "$d"
done
if command -v python3 >/dev/null 2>&1 && python3 -c pass 2>/dev/null; then exit 97; fi
exec "$@"
"""


def _hidden(argv: list[str]) -> list[str]:
    return private_mounts(_HIDE, "hide", *argv)


@pytest.fixture(scope="module")
def bundled_suite(dist: Path) -> Path:
    """The conformance suite as a bundle with its own interpreter: it runs where no Python is."""
    return _build(dist, CONFORMANCE, "--interpreter", "bundled", target="nomad-device-conformance")


def test_no_python_on_the_node_go_host_and_conformance(
    interop_bin: Path, auto_bundle: Path, bundled_suite: Path, tmp_path: Path
) -> None:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    bundle = plugin_dir / auto_bundle.name
    shutil.copy2(auto_bundle, bundle)
    devices = devices_in(tmp_path)
    env = node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(tmp_path / "cache"))
    assert "HOME" not in env and ".venv" not in env["PATH"]
    argv = read_only(plugin_dir, gohost_argv(interop_bin, devices, [str(bundle)]))
    report = run_gohost(_hidden(argv), env)
    start = check_report(report, devices)
    assert start["interpreter"] == "bundled"
    assert start["version"] == "3.13.5"

    suite = [
        str(bundled_suite),
        "--json",
        "--config-json",
        json.dumps({"dir": str(devices)}),
        "--",
        str(bundle),
    ]
    done = subprocess.run(
        _hidden(read_only(plugin_dir, suite)),
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode not in (97, 99), done.stderr
    result = json.loads(done.stdout)
    failed = [r for r in result["results"] if r["status"] == "fail"]
    assert result["ok"], failed
    assert done.returncode == 0


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_auto_bundle_runs_on_each_node_python(
    interop_bin: Path, auto_bundle: Path, tmp_path: Path, version: str
) -> None:
    """Where the node has a CPython the bundle carries code for, that one runs it."""
    from nomad_device.bundle.collect import find_python

    python = find_python(tuple(int(p) for p in version.split(".")))  # type: ignore[arg-type]
    devices = devices_in(tmp_path)
    env = node_env(
        PATH=f"{python.parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        NOMAD_DEVICE_BUNDLE_CACHE=str(tmp_path / "cache"),
    )
    report = run_gohost(gohost_argv(interop_bin, devices, [str(auto_bundle)]), env)
    start = check_report(report, devices)
    assert start["interpreter"] == "node"
    assert os.path.realpath(start["python"]) == os.path.realpath(python)
    assert start["version"].startswith(version + ".")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory seen at the same path inside a chroot and out: bundle, socket, devices."""
    path = Path(tempfile.mkdtemp(prefix="nd20-node-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize(
    ("suite", "interpreter", "glibc"),
    [("bullseye", "bundled", (2, 31)), ("trixie", "node", (2, 41))],
)
def test_debian_chroot_driven_from_outside(
    interop_bin: Path,
    auto_bundle: Path,
    shared: Path,
    suite: str,
    interpreter: str,
    glibc: tuple[int, int],
) -> None:
    root = debian_root(suite)
    assert glibc_of(root) == glibc
    bundle = shared / auto_bundle.name
    shutil.copy2(auto_bundle, bundle)
    devices = devices_in(shared)
    plugin = in_root(root, [str(bundle)], shared)
    env = node_env(PLUGIN_UNIX_SOCKET_DIR=str(shared / "sock"))
    (shared / "sock").mkdir(mode=0o700)
    report = run_gohost(gohost_argv(interop_bin, devices, plugin), env)
    start = check_report(report, devices)
    assert start["interpreter"] == interpreter
    if interpreter == "node":
        assert start["python"] == "/usr/bin/python3.13"
    # Root's default cache, inside the chroot.
    assert start["cache"].startswith("/var/cache/nomad-device-bundle/")


def test_a_c_library_too_old_is_one_hclog_line(interop_bin: Path, shared: Path) -> None:
    """A bundle whose native code needs glibc 2.34, on bullseye's 2.31, through the Go host."""
    runtime = build_runtime(os.uname().machine)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        (site / f"{SCRIPT_MODULE}.py").write_text("print('never')\n")
        bundle = shared / "needs-new-glibc"
        write_bundle(
            site,
            bundle,
            name="needs-new-glibc",
            version="1",
            kind="script",
            entry=SCRIPT_MODULE,
            glibc=(2, 34),
            runtime=runtime,
        )
    root = debian_root("bullseye")
    report = run_gohost(
        [
            str(interop_bin / "gohost"),
            "-quiet",
            "-start-timeout",
            "60s",
            "--",
            *in_root(root, [str(bundle)], shared),
        ],
        node_env(),
    )
    assert report.get("error"), report
    lines = [r for r in report["logs"] if r["module"] != "plugin" or r["message"]]
    reasons = [r for r in lines if "cannot start plugin bundle" in r["message"]]
    assert len(reasons) == 1, report["logs"]
    assert reasons[0]["level"] == "error"
    assert reasons[0]["message"] == (
        f"cannot start plugin bundle {bundle}: it needs Linux {os.uname().machine} with "
        "glibc 2.34 or newer, but this node is glibc 2.31"
    )


def test_aarch64_bundle_under_qemu_driven_by_the_go_host(
    interop_bin: Path, aarch64_dist: Path, shared: Path
) -> None:
    """``make dist``'s aarch64 example in an arm64 Debian tree, through binfmt_misc and qemu."""
    binfmt_aarch64()
    aarch64_bundle = aarch64_dist / "nomad-device-example"
    config = read_config(aarch64_bundle)
    assert (config["machine"], config["glibc"]) == ("aarch64", [2, 17])
    with open(aarch64_bundle, "rb") as fh:
        assert fh.read(20)[18] == 183  # e_machine EM_AARCH64
    root = debian_root("bookworm", arch="arm64", include=())
    bundle = shared / "nomad-device-example"
    shutil.copy2(aarch64_bundle, bundle)
    devices = devices_in(shared)
    (shared / "sock").mkdir(mode=0o700)
    report = run_gohost(
        gohost_argv(interop_bin, devices, in_root(root, [str(bundle)], shared)),
        node_env(PLUGIN_UNIX_SOCKET_DIR=str(shared / "sock")),
        timeout=1200,
    )
    start = check_report(report, devices)
    assert start["interpreter"] == "bundled"


def _starts(bundle: Path, env: dict[str, str]) -> tuple[dict[str, Any] | None, list[Any]]:
    """Run a bundle by hand (no cookie: the plugin refuses after starting); its start line."""
    from nomad_device.goplugin.hclog import parse_line

    done = subprocess.run(
        [str(bundle)], env=env, cwd="/", capture_output=True, text=True, timeout=300, check=False
    )
    entries = [parse_line(line) for line in done.stderr.splitlines() if line.startswith("{")]
    starts = [e.fields for e in entries if e.message == "plugin bundle starts"]
    return (starts[0] if starts else None), entries


def test_python_override_of_an_auto_bundle(auto_bundle: Path, tmp_path: Path) -> None:
    """``NOMAD_DEVICE_PYTHON``: a fitting CPython is used, ``bundled`` forces the bundle's own,
    and one that does not fit is one clear error (not a traceback from an import)."""
    from nomad_device.bundle.collect import find_python

    cache = str(tmp_path / "cache")
    python312 = find_python((3, 12))
    start, _ = _starts(
        auto_bundle, node_env(NOMAD_DEVICE_PYTHON=str(python312), NOMAD_DEVICE_BUNDLE_CACHE=cache)
    )
    assert start is not None and start["interpreter"] == "node"
    assert os.path.realpath(start["python"]) == os.path.realpath(python312)
    start, _ = _starts(
        auto_bundle, node_env(NOMAD_DEVICE_PYTHON="bundled", NOMAD_DEVICE_BUNDLE_CACHE=cache)
    )
    assert start is not None and start["interpreter"] == "bundled"
    old = find_python((3, 10))
    start, entries = _starts(
        auto_bundle, node_env(NOMAD_DEVICE_PYTHON=str(old), NOMAD_DEVICE_BUNDLE_CACHE=cache)
    )
    assert start is None
    (entry,) = entries
    assert entry.level == "error"
    assert entry.message == (
        f"cannot start plugin bundle: NOMAD_DEVICE_PYTHON={old} is CPython 3.10; this bundle "
        "runs on CPython 3.11, 3.12 or 3.13, or on its own interpreter with "
        "NOMAD_DEVICE_PYTHON=bundled"
    )
