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
from typing import Any

import pytest

from nomad_device.config import encode_config
from nomad_device.goplugin.hclog import parse_line
from nomad_device.plugins.example import ExampleConfig

from .bundle_support import build, node_env, node_python, read_only

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(600)]

CONFORMANCE = Path(sys.executable).parent / "nomad-device-conformance"
ROOT_CACHES = ("/var/cache/nomad-device-bundle", "/run/nomad-device-bundle")


def _devices(tmp_path: Path) -> Path:
    devices = tmp_path / "devices"
    devices.mkdir()
    for name, mode in (("device01", 0o777), ("device02", 0o644), ("device03", 0o644)):
        (devices / name).write_text(name)
        (devices / name).chmod(mode)
    return devices


def _ok(result: dict[str, Any], what: str) -> Any:
    assert result["ok"], f"{what}: {result.get('error')}"
    return result.get("value")


def test_go_host_drives_bundle_from_read_only_plugin_dir(
    interop_bin: Path, plugin_dir: Path, tmp_path: Path
) -> None:
    node_python()
    devices = _devices(tmp_path)
    bundle = plugin_dir / "nomad-device-example"
    config = encode_config(ExampleConfig(dir=str(devices), list_period="1s"))
    argv = [
        str(interop_bin / "gohost"),
        "-quiet",
        "-config-hex",
        config.hex(),
        "-reserve",
        "device02",
        "-stats-interval",
        "100ms",
        "--",
        str(bundle),
    ]
    env = node_env()
    assert "HOME" not in env and ".venv" not in env["PATH"]
    done = subprocess.run(
        read_only(plugin_dir, argv),
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 99, "plugin_dir was still writable"
    report = json.loads(done.stdout)
    assert report.get("error") is None, done.stderr[-4000:]

    assert _ok(report["plugin_info"], "PluginInfo")["name"] == "example-fs-device"
    _ok(report["set_config"], "SetConfig")
    (group,) = _ok(report["fingerprint"], "Fingerprint")["groups"]
    assert (group["vendor"], group["type"], group["name"]) == ("nomad", "file", "mock")
    health = {d["id"]: d["healthy"] for d in group["devices"]}
    assert health == {"device01": False, "device02": True, "device03": True}
    (reserved,) = report["reserve"]
    mounts = _ok(reserved, "Reserve device02")["mounts"]
    assert mounts[0]["host_path"] == str(devices / "device02")
    (stats_group,) = _ok(report["stats"], "Stats")["groups"]
    assert sorted(stats_group["instance_stats"]) == ["device01", "device02", "device03"]
    assert report["kill"]["outcome"] == "graceful", report["kill"]
    assert report["kill"]["process_gone"]

    for record in report["logs"]:
        assert not record["message"].startswith("{"), record  # every line was hclog
    unpacked = [r for r in report["logs"] if r["message"] == "unpacked plugin bundle"]
    if unpacked:  # the session's first launch of this bundle on this machine
        cache = Path(unpacked[0]["fields"]["cache"])
        if os.geteuid() == 0:
            assert str(cache.parent) in ROOT_CACHES
            assert (cache.parent.stat().st_mode & 0o777) == 0o700
            assert cache.parent.stat().st_uid == 0


def test_conformance_suite_passes_on_bundle(plugin_dir: Path, tmp_path: Path) -> None:
    devices = _devices(tmp_path)
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
    devices = _devices(tmp_path)
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
