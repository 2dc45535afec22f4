"""A bundle dropped alone into a read-only plugin_dir, driven as Nomad drives it.

The Go host (go-plugin's client configured as Nomad's loader) launches the
bundle with no virtualenv on PATH, HOME unset, a working directory elsewhere
and the plugin_dir mounted read-only; the conformance suite then checks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.bundle import (
    build,
    check_report,
    devices_in,
    gohost_argv,
    node_env,
    node_python,
    read_only,
    run_gohost,
)

from nomad_device.goplugin.hclog import parse_line

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(600)]

CONFORMANCE = Path(sys.executable).parent / "nomad-device-conformance"
ROOT_CACHES = ("/var/cache/nomad-device-bundle", "/run/nomad-device-bundle")


def test_go_host_drives_bundle_from_read_only_plugin_dir(
    interop_bin: Path, plugin_dir: Path, tmp_path: Path
) -> None:
    node_python()
    devices = devices_in(tmp_path)
    bundle = plugin_dir / "nomad-device-example"
    env = node_env()
    assert "HOME" not in env and ".venv" not in env["PATH"]
    argv = read_only(plugin_dir, gohost_argv(interop_bin, devices, [str(bundle)]))
    report = run_gohost(argv, env)
    start = check_report(report, devices)
    assert start["interpreter"] == "node"
    unpacked = [r for r in report["logs"] if r["message"] == "unpacked plugin bundle"]
    if unpacked:  # the session's first launch of this bundle on this machine
        cache = Path(unpacked[0]["fields"]["cache"])
        if os.geteuid() == 0:
            assert str(cache.parent) in ROOT_CACHES
            assert (cache.parent.stat().st_mode & 0o777) == 0o700
            assert cache.parent.stat().st_uid == 0


def test_conformance_suite_passes_on_bundle(plugin_dir: Path, tmp_path: Path) -> None:
    devices = devices_in(tmp_path)
    argv = [
        str(CONFORMANCE),
        "--json",
        "--config-json",
        json.dumps({"dir": str(devices)}),
        "--",
        str(plugin_dir / "nomad-device-example"),
    ]
    # The suite itself runs from the virtualenv (by path); the plugin it starts
    # inherits the node environment below.
    done = subprocess.run(
        read_only(plugin_dir, argv),
        env=node_env(),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 99, "plugin_dir was still writable"
    report = json.loads(done.stdout)
    failed = [r for r in report["results"] if r["status"] == "fail"]
    assert report["ok"], failed
    assert done.returncode == 0


def test_bundle_refuses_to_run_without_nomad(plugin_dir: Path) -> None:
    """Run by hand it explains itself, like every plugin, instead of serving."""
    node_python()
    done = subprocess.run(
        [str(plugin_dir / "nomad-device-example")],
        env=node_env(),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "This program is a plugin" in done.stderr
    for line in done.stderr.splitlines():
        if line.startswith("{"):
            parse_line(line, strict=True)


def test_bundled_conformance_suite_checks_a_node(plugin_dir: Path, tmp_path: Path) -> None:
    """The suite bundled too: a node without the SDK can check its plugins (docs/deploy.md)."""
    node_python()
    suite = tmp_path / "nomad-device-conformance"
    done = build("nomad-device-conformance", "-o", str(suite))
    assert done.returncode == 0, done.stderr
    devices = devices_in(tmp_path)
    argv = [
        str(suite),
        "--config-json",
        json.dumps({"dir": str(devices)}),
        "--",
        str(plugin_dir / "nomad-device-example"),
    ]
    done = subprocess.run(
        read_only(plugin_dir, argv),
        env=node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(tmp_path / "cache")),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("CONFORMS")
