"""Helpers for bundle tests: a node-like environment, the real builder, read-only dirs,
the Go host driving a bundle as Nomad does.

"Node-like" means what a Nomad agent under systemd gives its plugins: systemd's
default PATH (no virtualenv on it), no HOME, no PYTHON* variables, and a
working directory that has nothing to do with the plugin.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from nomad_device.config import encode_config
from nomad_device.plugins.example import ExampleConfig

#: systemd's default PATH for services.
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUNDLE_TOOL = Path(sys.executable).parent / "nomad-device-bundle"
IN_CI = os.environ.get("CI") == "true"


def unavailable(reason: str) -> None:
    """A test's tool or privilege is missing: a failure in CI (nothing skips there), else a skip."""
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def node_env(**extra: str) -> dict[str, str]:
    """A plugin's environment on a node; ``extra`` adds to it."""
    env = {"PATH": NODE_PATH, "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def node_python() -> str:
    """The python3.11 a node-like PATH finds (the bundle's own search finds the same)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    found = shutil.which(version, path=NODE_PATH)
    if found is None:
        reason = f"no {version} on {NODE_PATH}: a bundle needs the node's own Python"
        unavailable(reason)
    return found


def build(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real ``nomad-device-bundle`` console script."""
    return subprocess.run(
        [str(BUNDLE_TOOL), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def private_mounts(script: str, *args: str) -> list[str]:
    """``sh -c script args...`` in a mount namespace of its own: its mounts end with it."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for a private mount namespace")
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, *args]


def read_only(directory: Path, argv: list[str]) -> list[str]:
    """``argv`` run with ``directory`` read-only (a private ro bind mount as root).

    chmod does not stop root, so as root the directory is bind-mounted read-only
    in a private mount namespace that only the command sees; the wrapper
    proves the mount took (exit 99 if a file can still be created there).
    """
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return argv
    script = (
        'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" || exit 98; '
        'if touch "$0/.probe" 2>/dev/null; then exit 99; fi; exec "$@"'
    )
    return private_mounts(script, str(directory), *argv)


def other_python() -> str:
    """A CPython of another minor version than the bundle's (a wrong node Python)."""
    import glob

    want = sys.version_info[:2]
    patterns = [
        "/root/.pyenv/versions/*/bin/python3.*",
        "/usr/bin/python3.*",
        "/usr/local/bin/python3.*",
        str(Path.home() / ".pyenv/versions/*/bin/python3.*"),
    ]
    for path in sorted({p for pattern in patterns for p in glob.glob(pattern)}):
        if not path[-1].isdigit() or not os.access(path, os.X_OK):
            continue
        done = subprocess.run(
            [path, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        parts = done.stdout.split()
        if done.returncode == 0 and len(parts) == 2 and tuple(map(int, parts)) != want:
            return path
    reason = f"no CPython other than {want[0]}.{want[1]} on this machine to play a wrong one"
    unavailable(reason)


def tiny_bundle(
    output: Path, version: str, *, name: str = "tiny", body: str = ""
) -> dict[str, object]:
    """A bundle of one small script (no SDK): fast to build, for the cache's rules.

    Run, it prints one JSON line (its version, file as imported and resolved,
    argv, sys.path, interpreter) and then waits for stdin to close, holding its
    cache version as a plugin would.
    """
    from nomad_device.bundle import write_bundle
    from nomad_device.bundle.build import SCRIPT_MODULE

    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        if "tinypkg" in body:
            (site / "tinypkg" / "sub").mkdir(parents=True)
            (site / "tinypkg" / "__init__.py").write_text("")
            (site / "tinypkg" / "sub" / "__init__.py").write_text("")
        (site / f"{SCRIPT_MODULE}.py").write_text(
            "import json, os, sys\n"
            f"VERSION = {version!r}\n"
            f"{body}\n"
            "if __name__ == '__main__':\n"
            "    print(json.dumps({'version': VERSION, 'file': __file__, 'argv': sys.argv,\n"
            "                      'real': os.path.realpath(__file__), 'path': sys.path,\n"
            "                      'exe': sys.executable, 'cwd': os.getcwd()}), flush=True)\n"
            "    if os.environ.get('TINY_HOLD'):\n"
            "        sys.stdin.read()\n"
        )
        return write_bundle(
            site, output, name=name, version=version, kind="script", entry=SCRIPT_MODULE, glibc=None
        )


def payload(bundle: Path) -> zipfile.ZipFile:
    """The zip archive in the middle of a bundle (what the bootstrap unpacks)."""
    from nomad_device.bundle import read_config

    spec = read_config(bundle)["payload"]
    with open(bundle, "rb") as fh:
        fh.seek(spec["offset"])
        return zipfile.ZipFile(io.BytesIO(fh.read(spec["size"])))


def devices_in(base: Path) -> Path:
    devices = base / "devices"
    devices.mkdir(exist_ok=True)
    for name, mode in (("device01", 0o777), ("device02", 0o644), ("device03", 0o644)):
        (devices / name).write_text(name)
        (devices / name).chmod(mode)
    return devices


def gohost_argv(interop_bin: Path, devices: Path, plugin: list[str]) -> list[str]:
    config = encode_config(ExampleConfig(dir=str(devices), list_period="1s"))
    return [
        str(interop_bin / "gohost"),
        "-quiet",
        "-start-timeout",
        "120s",
        "-config-hex",
        config.hex(),
        "-reserve",
        "device02",
        "-stats-interval",
        "100ms",
        "--",
        *plugin,
    ]


def ok(result: dict[str, Any], what: str) -> Any:
    assert result["ok"], f"{what}: {result.get('error')}"
    return result.get("value")


def check_report(report: dict[str, Any], devices: Path) -> dict[str, Any]:
    """Nomad's whole conversation went as it must; the bundle's start line."""
    assert report.get("error") is None, report
    assert ok(report["plugin_info"], "PluginInfo")["name"] == "example-fs-device"
    ok(report["set_config"], "SetConfig")
    (group,) = ok(report["fingerprint"], "Fingerprint")["groups"]
    health = {d["id"]: d["healthy"] for d in group["devices"]}
    assert health == {"device01": False, "device02": True, "device03": True}
    (reserved,) = report["reserve"]
    assert ok(reserved, "Reserve")["mounts"][0]["host_path"] == str(devices / "device02")
    (stats,) = ok(report["stats"], "Stats")["groups"]
    assert sorted(stats["instance_stats"]) == ["device01", "device02", "device03"]
    assert report["kill"]["outcome"] == "graceful", report["kill"]
    assert report["kill"]["process_gone"]
    for record in report["logs"]:
        assert not record["message"].startswith("{"), record  # every line was hclog
    (start,) = [r for r in report["logs"] if r["message"] == "plugin bundle starts"]
    fields: dict[str, Any] = start["fields"]
    return fields


def run_gohost(argv: list[str], env: dict[str, str], timeout: float = 600) -> dict[str, Any]:
    done = subprocess.run(
        argv, env=env, cwd="/", capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode != 99, "plugin_dir was still writable"
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"no report from the Go host: {done.stdout[-2000:]}{done.stderr[-3000:]}")
    return report


#: A plugin that imports lazily while another launch works on the cache: on "go"
#: a thread imports ``tinypkg.mN`` again and again (each time from the file, its
#: module dropped from sys.modules); "count" answers how many imports and which
#: failed so far; "stop" ends it with the same answer.
LAZY_IMPORTER = """
import importlib, json, os, sys, threading
stop = threading.Event()
done, errors = [0], []

def importer():
    while not stop.is_set():
        for i in range(MODULES):
            name = "tinypkg.m%d" % i
            try:
                assert importlib.import_module(name).VALUE == i
            except BaseException as exc:
                errors.append("%s: %r" % (name, exc))
            sys.modules.pop(name, None)
            done[0] += 1

print(json.dumps({"python": "%d.%d" % sys.version_info[:2],
                  "native": __import__("tinynative").WHO}), flush=True)
worker = threading.Thread(target=importer)
for line in sys.stdin:
    if line.strip() == "go":
        worker.start()
    print(json.dumps({"count": done[0], "errors": errors[:5]}), flush=True)
    if line.strip() == "stop":
        stop.set()
        if worker.is_alive():
            worker.join()
        break
"""


def two_python_bundle(output: Path, pythons: list[tuple[int, int]], modules: int = 50) -> str:
    """A tiny bundle for two node Pythons (its key): ``site`` shared, ``site-cpXY`` each.

    ``tinynative`` lives in each Python's own part (as a native wheel's code
    would), ``tinypkg`` with ``modules`` modules in the shared one; it runs
    :data:`LAZY_IMPORTER`.
    """
    from nomad_device.bundle import write_bundle
    from nomad_device.bundle.build import SCRIPT_MODULE

    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        (site / "tinypkg").mkdir(parents=True)
        (site / "tinypkg" / "__init__.py").write_text("")
        (site / "tinypkg" / "unused.py").write_text("")
        for i in range(modules):
            (site / "tinypkg" / f"m{i}.py").write_text(f"VALUE = {i}\n")
        (site / f"{SCRIPT_MODULE}.py").write_text(LAZY_IMPORTER.replace("MODULES", str(modules)))
        abi_sites = {}
        for version in pythons:
            tree = Path(tmp) / f"site-cp{version[0]}{version[1]}"
            tree.mkdir()
            (tree / "tinynative.py").write_text(f"WHO = 'cp{version[0]}{version[1]}'\n")
            abi_sites[version] = tree
        config = write_bundle(
            site,
            output,
            name="tiny2",
            version="1",
            kind="script",
            entry=SCRIPT_MODULE,
            glibc=None,
            pythons=pythons,
            abi_sites=abi_sites,
        )
    return str(config["key"])
