"""The ``auto`` bundle ``make dist`` ships, and the interpreters around it (issue 26).

- a node Python is chosen only once it has proven itself: a pyenv-like shim
  that exits 127, a ``python3.13`` that is really another version and one that
  cannot load the bundle's native modules are each passed over for the next
  candidate, or the bundle's own interpreter, in one line that names them;
  the verdict is kept per path and file, so a later launch runs none of them;
- behind a shim, the file the shim picked runs, so a later change behind it
  (another version made global) cannot stop the plugin;
- the node's Python and the bundle's own run alternately from one cache
  without unpacking again;
- probes (the generic plugin's reaper starts this interpreter again) work on
  both, over the real wire;
- AutoMTLS on the bundled interpreter, which has no ``ssl``: one clear line.

All through the real handshake (the SDK's host client, as Nomad launches a plugin).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.bundle import build, node_env

from nomad_device.bundle.collect import find_python
from nomad_device.config import encode_config
from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.hclog import HclogEntry, parse_line
from nomad_device.host import DevicePluginClient
from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig, ProbeBlock

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]

NAME = "nomad-device-generic"
#: A node's own CPython that the auto bundle carries code for (Debian 12's).
NODE_PYTHON = "/usr/bin/python3.11"


@pytest.fixture(scope="module")
def auto_bundle() -> Iterator[Path]:
    """``make dist``'s x86_64 bundle of the generic plugin, in a directory others can read."""
    if not os.access(NODE_PYTHON, os.X_OK):
        pytest.fail(f"{NODE_PYTHON} (the build machine's Debian Python) is needed")
    directory = Path(tempfile.mkdtemp(prefix="nd26-dist-"))
    directory.chmod(0o755)
    out = directory / NAME
    done = build(NAME, "--interpreter", "auto", "--machine", "x86_64", "-o", str(out), timeout=3000)
    assert done.returncode == 0, done.stderr
    yield out
    shutil.rmtree(directory, ignore_errors=True)


def _launch(
    bundle: Path, env: dict[str, str]
) -> tuple[DevicePluginClient | None, list[HclogEntry], str]:
    logs: list[HclogEntry] = []
    try:
        client = DevicePluginClient.launch(
            [str(bundle)], env=env, cwd="/", on_log=logs.append, start_timeout=300
        )
    except Exception as exc:  # the launch failed: the logs say why
        return None, logs, str(exc)
    return client, logs, ""


def _started(bundle: Path, env: dict[str, str]) -> tuple[dict[str, Any], list[HclogEntry]]:
    """Handshake, PluginInfo, kill: the bundle's start line and every line it logged."""
    client, logs, error = _launch(bundle, env)
    assert client is not None, (error, [(e.level, e.message) for e in logs])
    try:
        assert client.info().name == "generic-device"
    finally:
        client.kill()
    (start,) = [e.fields for e in logs if e.message == "plugin bundle starts"]
    return start, logs


# -- fake interpreters ---------------------------------------------------------------


def _fake(directory: Path, kind: str, count: Path) -> Path:
    """A ``python3.13`` that is not what it claims; each run is counted in ``count``."""
    path = directory / "python3.13"
    tally = f"echo {kind} >> {count}\n"
    if kind == "shim":  # pyenv's shim for a version that is not active
        body = (
            "#!/bin/sh\n"
            + tally
            + "echo 'pyenv: python3.13: command not found' >&2\n"
            + 'echo "The \\`python3.13\' command exists in these Python versions:" >&2\n'
            + "exit 127\n"
        )
    elif kind == "liar":  # another version under this name
        body = f'#!/bin/sh\n{tally}exec {find_python((3, 12))} "$@"\n'
    else:  # a real 3.13 that cannot load extension modules (another ABI, a broken build)
        real = find_python((3, 13))
        body = f'#!/bin/sh\n{tally}exec {real} -I -S -c "$NO_EXTENSIONS" "$@"\n'
        # Refuse every extension module from the path, then run what it was asked to.
        wrapper = textwrap.dedent(
            """
            import importlib.machinery as m, sys
            class Refuse:
                def find_spec(self, name, path=None, target=None):
                    spec = m.PathFinder.find_spec(name, path)
                    if (
                        spec is not None
                        and isinstance(spec.loader, m.ExtensionFileLoader)
                        and not spec.origin.startswith(sys.base_prefix)  # its own: zlib...
                    ):
                        raise ImportError("extension modules cannot be loaded here: " + name)
                    return None
            sys.meta_path.insert(0, Refuse())
            args = sys.argv[1:]
            while args and args[0] in ("-I", "-S"):
                args.pop(0)
            assert args[0] == "-c", args
            sys.argv = ["-c", *args[2:]]
            exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
            """
        )
        body = body.replace('"$NO_EXTENSIONS"', "'" + wrapper.replace("'", "'\"'\"'") + "'")
    path.write_text(body)
    path.chmod(0o755)
    return path


REASONS = {
    "shim": "exited with status 127: pyenv: python3.13: command not found",
    "liar": "is CPython 3.12, not 3.13 as its name says",
    # The first of the native modules carried for 3.13, in name order.
    "no-wheels": "cannot import _cffi_backend (ImportError: extension modules cannot be "
    "loaded here: _cffi_backend)",
}


@pytest.mark.parametrize("kind", ["shim", "liar", "no-wheels"])
@pytest.mark.parametrize("then", ["next candidate", "its own"])
def test_a_python_that_cannot_run_the_bundle_is_passed_over(
    auto_bundle: Path, tmp_path: Path, kind: str, then: str
) -> None:
    fakes = tmp_path / "bin"
    fakes.mkdir()
    count = tmp_path / "count"
    fake = _fake(fakes, kind, count)
    # The fake first on PATH; then the node's own 3.11, or nothing the bundle could use.
    path = f"{fakes}:/usr/bin" if then == "next candidate" else f"{fakes}:{tmp_path / 'none'}"
    env = node_env(PATH=path, NOMAD_DEVICE_BUNDLE_CACHE=str(tmp_path / "cache"))
    start, logs = _started(auto_bundle, env)
    if then == "next candidate":
        assert (start["interpreter"], start["python"]) == ("node", NODE_PYTHON)
    else:
        assert (start["interpreter"], start["version"]) == ("bundled", "3.13.5")
    (passed,) = [e for e in logs if e.message.startswith("plugin bundle passes over")]
    assert passed.level == "warn"
    assert passed.fields["tried"] == [f"{fake} ({REASONS[kind]})"], passed.fields
    assert not [e for e in logs if e.level == "error"], logs
    runs = count.read_text().split()
    # The verdict is kept: the next launch runs none of the fakes, and says so at info.
    start, logs = _started(auto_bundle, env)
    assert count.read_text().split() == runs
    (passed,) = [e for e in logs if e.message.startswith("plugin bundle passes over")]
    assert passed.level == "info"
    # A new file at that path (an upgrade, a touch) is proven again.
    os.utime(fake, ns=(1, 1))
    _started(auto_bundle, env)
    assert len(count.read_text().split()) > len(runs)


def test_a_change_behind_a_shim_cannot_stop_the_plugin(auto_bundle: Path, tmp_path: Path) -> None:
    """A pyenv-like shim picks its Python on every run, from a file that no verdict can
    see: the bundle runs the file the shim picked (proven on its own), so that making
    another version global later (here one not installed) leaves the plugin starting."""
    shims = tmp_path / "shims"
    shims.mkdir()
    chosen = tmp_path / "version"  # pyenv's global version file
    chosen.write_text(NODE_PYTHON)
    shim = shims / "python3.11"
    shim.write_text(
        "#!/bin/sh\n"
        f"read -r python < {chosen}\n"
        '[ -x "$python" ] || { echo "pyenv: $python is not installed" >&2; exit 127; }\n'
        'exec "$python" "$@"\n'
    )
    shim.chmod(0o755)
    cache = str(tmp_path / "cache")
    env = node_env(PATH=f"{shims}:{tmp_path / 'none'}", NOMAD_DEVICE_BUNDLE_CACHE=cache)
    start, logs = _started(auto_bundle, env)
    assert (start["interpreter"], start["python"]) == ("node", NODE_PYTHON)
    chosen.write_text("/opt/pyenv/versions/3.11.9/bin/python3.11")
    start, logs = _started(auto_bundle, env)
    assert (start["interpreter"], start["python"]) == ("node", NODE_PYTHON)
    assert not [e for e in logs if e.level in ("warn", "error")], logs


def test_an_explicit_python_that_cannot_run_it_is_one_error_line(
    auto_bundle: Path, tmp_path: Path
) -> None:
    """``NOMAD_DEVICE_PYTHON`` is the operator's choice: the bundle refuses rather than
    quietly running elsewhere, in one hclog line (what Nomad shows before it stops)."""
    fakes = tmp_path / "bin"
    fakes.mkdir()
    fake = _fake(fakes, "shim", tmp_path / "count")
    env = node_env(
        NOMAD_DEVICE_PYTHON=str(fake),
        NOMAD_DEVICE_BUNDLE_CACHE=str(tmp_path / "cache"),
        **{NOMAD_HANDSHAKE.magic_cookie_key: NOMAD_HANDSHAKE.magic_cookie_value},
        PLUGIN_PROTOCOL_VERSIONS="2",
    )
    done = subprocess.run(
        [str(auto_bundle)], env=env, cwd="/", capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1
    assert done.stdout == ""
    lines = [parse_line(line, strict=True) for line in done.stderr.splitlines() if line.strip()]
    assert [e.level for e in lines] == ["error"], done.stderr
    assert lines[0].message == (
        f"cannot start plugin bundle: NOMAD_DEVICE_PYTHON={fake} cannot run it: "
        f"{REASONS['shim']}; this bundle runs on CPython 3.11, 3.12 or 3.13, or on its own "
        "interpreter with NOMAD_DEVICE_PYTHON=bundled"
    )


def _unpacks(logs: list[HclogEntry]) -> list[Any]:
    return [e.fields.get("parts") for e in logs if e.message == "unpacked plugin bundle"]


def test_node_python_and_its_own_alternate_without_unpacking_again(
    auto_bundle: Path, tmp_path: Path
) -> None:
    """An agent's PATH and an operator's shell (or NOMAD_DEVICE_PYTHON) differ: on main each
    launch moved the other's tree aside and unpacked its own (1.3-1.7 s instead of 0.15 s)."""
    cache = str(tmp_path / "cache")
    on_node = node_env(PATH="/usr/bin:/bin", NOMAD_DEVICE_BUNDLE_CACHE=cache)
    own = node_env(NOMAD_DEVICE_PYTHON="bundled", NOMAD_DEVICE_BUNDLE_CACHE=cache)
    seen = []
    for env in [on_node, own] * 3:
        start, logs = _started(auto_bundle, env)
        seen.append((start["interpreter"], _unpacks(logs)))
        assert not [e for e in logs if e.level in ("warn", "error")], logs
    assert [s[0] for s in seen] == ["node", "bundled"] * 3
    assert [bool(s[1]) for s in seen] == [True, True, False, False, False, False], seen
    # The second tree needed only what the first had not: the interpreter's library and
    # its own native code (3.13's).
    assert seen[1][1] == [["stdlib", "site-cp313"]]


def _probed() -> bytes:
    def device(path: str, command: str) -> DeviceBlock:
        probe = ProbeBlock(command=["/bin/sh", "-c", command], interval=timedelta(hours=1))
        return DeviceBlock(paths=[path], probe=probe)

    config = GenericConfig(
        device={
            "good": device("/dev/null", "exit 0"),
            "bad": device("/dev/zero", "echo token not inserted; exit 3"),
        },
        fingerprint_period=timedelta(hours=1),
    )
    return encode_config(config)


@pytest.mark.parametrize("interpreter", ["node", "bundled"])
def test_probes_run_in_the_bundle_on_either_interpreter(
    auto_bundle: Path, tmp_path: Path, interpreter: str
) -> None:
    """On main, the reaper ran as ``sys.executable -I -S -c``: in a bundle on its own
    interpreter that started the plugin again, and every probed device stayed unhealthy
    ("could not be run")."""
    extra = (
        {"PATH": "/usr/bin:/bin"} if interpreter == "node" else {"NOMAD_DEVICE_PYTHON": "bundled"}
    )
    env = node_env(NOMAD_DEVICE_BUNDLE_CACHE=str(tmp_path / "cache"), **extra)
    client, logs, error = _launch(auto_bundle, env)
    assert client is not None, (error, logs)
    try:
        client.set_config(_probed())
        with client.fingerprint() as stream:
            for _ in range(60):
                groups = stream.next(60)
                found = {
                    g.name: [(d.healthy, d.health_description) for d in g.devices] for g in groups
                }
                if (
                    all(
                        h and h[0][1] != "waiting for the first health probe"
                        for h in found.values()
                    )
                    and len(found) == 2
                ):
                    break
    finally:
        client.kill()
    (start,) = [e.fields for e in logs if e.message == "plugin bundle starts"]
    assert start["interpreter"] == interpreter
    assert found == {"good": [(True, "")], "bad": [(False, "token not inserted")]}, found


def test_automtls_on_the_bundled_interpreter_is_one_clear_line(
    auto_bundle: Path, tmp_path: Path
) -> None:
    """Its CPython has no ssl (no OpenSSL is built in): a host asking for AutoMTLS got a
    traceback ending in ``No module named '_ssl'`` on main."""
    from nomad_device.goplugin.tls import generate_keypair

    env = node_env(
        NOMAD_DEVICE_PYTHON="bundled",
        NOMAD_DEVICE_BUNDLE_CACHE=str(tmp_path / "cache"),
        PLUGIN_CLIENT_CERT=generate_keypair().cert_pem.decode(),
        **{NOMAD_HANDSHAKE.magic_cookie_key: NOMAD_HANDSHAKE.magic_cookie_value},
        PLUGIN_PROTOCOL_VERSIONS="2",
    )
    done = subprocess.run(
        [str(auto_bundle)], env=env, cwd="/", capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1
    assert done.stdout == ""  # no handshake
    lines = [parse_line(line, strict=True) for line in done.stderr.splitlines() if line.strip()]
    errors = [e for e in lines if e.level == "error"]
    assert len(errors) == 1, done.stderr
    assert "traceback" not in errors[0].fields
    assert "Traceback" not in done.stderr
    assert errors[0].message == (
        f"cannot start plugin bundle {auto_bundle}: the host asked for go-plugin's AutoMTLS "
        "(PLUGIN_CLIENT_CERT is set), which needs Python's ssl module, and the bundle's own "
        "CPython 3.13.5 is built without it; set NOMAD_DEVICE_PYTHON to a node's CPython "
        "3.11, 3.12 or 3.13 that has ssl (an auto bundle also takes one from PATH when it "
        "proves itself), or run it under a host that does not ask for AutoMTLS (a Nomad "
        "agent never does)"
    )


def test_the_bundle_runs_as_a_plain_python(auto_bundle: Path, tmp_path: Path) -> None:
    """The way the SDK starts helper processes from a bundle with its own interpreter."""
    python = [str(auto_bundle), "--nomad-device-bundle-python", "--cache", str(tmp_path / "cache")]
    code = "import json, sys; print(json.dumps([sys.argv, sys.version_info[:3]]))"
    done = subprocess.run(
        [*python, "-I", "-S", "-c", code, "a", "b"],
        env=node_env(),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [["-c", "a", "b"], [3, 13, 5]]
    failed = subprocess.run(
        [*python, "-c", "raise SystemExit(7)"],
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert failed.returncode == 7
    raised = subprocess.run(
        [*python, "-c", "1/0"],
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert raised.returncode == 1
    assert raised.stderr.splitlines()[-1] == "ZeroDivisionError: division by zero"
    assert "_nomad_bundle_boot" not in raised.stderr  # the program's traceback, not ours
