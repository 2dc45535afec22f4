"""go-plugin transport over the real wire against real plugin subprocesses."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from support import SDK_PLUGIN
from support.processes import Launched, Launcher, OwnTime

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin import socketdirs
from nomad_device.goplugin.client import PluginProcess, ReattachConfig
from nomad_device.goplugin.hclog import HclogEntry, parse_line
from nomad_device.host import DevicePluginClient


@pytest.fixture(autouse=True)
def private_tmpdir(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """Each test gets its own TMPDIR (plugins inherit it); it must be empty afterwards.

    Short, under /tmp: a unix socket path must fit in 108 bytes.
    """
    tmp_path_factory.getbasetemp()  # pytest's own tmp_path stays where it was
    path = Path(tempfile.mkdtemp(prefix="tt", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(path))
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    yield path
    left = sorted(p.name for p in path.iterdir())
    shutil.rmtree(path, ignore_errors=True)
    assert left == [], f"left behind in TMPDIR: {left}"


def _plugin_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env[NOMAD_HANDSHAKE.magic_cookie_key] = NOMAD_HANDSHAKE.magic_cookie_value
    env["PLUGIN_PROTOCOL_VERSIONS"] = "2"
    env.update(extra)
    return env


def _wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def test_without_cookie_explains_and_exits_1() -> None:
    env = {k: v for k, v in os.environ.items() if k != NOMAD_HANDSHAKE.magic_cookie_key}
    done = subprocess.run(
        [sys.executable, str(SDK_PLUGIN)], env=env, capture_output=True, timeout=30
    )
    assert done.returncode == 1
    assert done.stdout == b""
    assert b"is a plugin" in done.stderr


@pytest.mark.parametrize("network", ["unix", "tcp"])
def test_handshake_line_and_health(network: str, launch: Launcher) -> None:
    env = _plugin_env(GOPLUGIN_PY_NETWORK=network)
    plugin = launch(env=env, auto_mtls=network == "tcp")  # TCP only with AutoMTLS
    config = plugin.client.reattach_config
    assert config.network == network
    assert config.protocol_version == 2
    if network == "unix":
        mode = os.stat(config.address).st_mode & 0o777
        assert mode == 0o600
        assert os.stat(os.path.dirname(config.address)).st_mode & 0o077 == 0
    else:
        host, port = config.address.rsplit(":", 1)
        assert host == "127.0.0.1" and 10000 <= int(port) <= 25000
    assert plugin.client.health() == "SERVING"
    assert plugin.client.info().name == "sdk-test"


def test_handshake_is_the_only_stdout_and_unix_socket_is_removed(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(SDK_PLUGIN)],
        env=_plugin_env(PLUGIN_UNIX_SOCKET_DIR=str(tmp_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        parts = line.rstrip("\n").split("|")
        assert parts[:3] == ["1", "2", "unix"] and parts[4:] == ["grpc", ""], line
        assert os.path.dirname(parts[3]) == str(tmp_path)
        process = PluginProcess.reattach(ReattachConfig("unix", parts[3], proc.pid, 2))
        client = DevicePluginClient(process)
        client.reserve(["!print"])  # prints to stdout; must not reach our stdout pipe
        result = client.kill()
        assert result.outcome == "graceful"
        rest, _ = proc.communicate(timeout=10)
        assert rest == b""
        assert not os.path.exists(parts[3])
    finally:
        proc.kill()


def test_shutdown_exits_promptly(launch: Launcher) -> None:
    plugin = launch()
    stream = plugin.client.fingerprint()
    stream.next(10)  # a long-lived stream is open while we shut down
    # Nomad's 2 s grace on the wall clock would force a plugin that a busy machine starves;
    # "promptly" is in the plugin's own time, with a grace that only a hang runs out.
    with OwnTime(plugin.client.process.pid) as own:
        result = plugin.client.process.kill(grace=30)
    assert result.outcome == "graceful"
    assert result.returncode == 0
    assert own.seconds < 1.5, (result, own.seconds)


def test_sigint_is_ignored_and_sigterm_stops(launch: Launcher) -> None:
    plugin = launch()
    pid = plugin.client.process.pid
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGINT)
    assert plugin.wait_for_log(lambda e: "interrupt" in e.message)  # it has had one
    assert plugin.client.health() == "SERVING"
    os.kill(pid, signal.SIGTERM)
    proc = plugin.client.process.process
    assert proc is not None
    assert _wait_exit(proc, 5) == 0
    trace = [e for e in plugin.logs if "interrupt" in e.message]
    assert trace and all(e.level == "trace" for e in trace)


HOST_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from nomad_device.host import DevicePluginClient
    client = DevicePluginClient.launch([sys.executable, sys.argv[1]])
    client.info()
    c = client.reattach_config
    print(json.dumps([c.network, c.address, c.pid, c.protocol_version]), flush=True)
    sys.stdin.read()  # wait to be killed
    """
)


def test_host_killed_then_second_client_reattaches(tmp_path: Path) -> None:
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_SCRIPT, str(SDK_PLUGIN)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert host.stdout is not None
    network, address, pid, version = json.loads(host.stdout.readline())
    try:
        host.kill()  # the plugin's stdout/stderr pipes break
        host.wait(10)
        time.sleep(0.2)
        client = DevicePluginClient.reattach(ReattachConfig(network, address, pid, version))
        # Logging into the broken stderr pipe must not hurt the plugin.
        client.reserve(["!print"])
        assert client.info().name == "sdk-test"
        with client.fingerprint() as stream:
            assert stream.next(10)[0].devices
        result = client.kill()
        assert result.outcome == "graceful"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_every_stderr_line_is_hclog_json(launch: Launcher) -> None:
    plugin = launch()
    client = plugin.client
    client.reserve(["!print"])
    client.reserve(["!thread"])
    with pytest.raises(Exception, match="deliberate failure"):
        client.reserve(["!raise"])
    proc = client.process.process
    assert proc is not None and proc.stderr is not None
    client.kill()
    entries = plugin.logs
    assert entries, "no log lines at all"
    raw = [e for e in entries if e.raw]
    assert raw == []
    # Parse each line strictly, as a Go host would need it.
    by_message = {e.message: e for e in entries}
    assert by_message["printed to stdout"].level == "debug"
    assert by_message["printed to stderr"].level == "warn"
    assert by_message["raw bytes on fd 2"].level == "warn"
    assert by_message["author log"].level == "info"
    assert by_message["author log"].fields["answer"] == 42
    warning = [e for e in entries if "a deliberate warning" in e.message]
    assert warning and warning[0].level == "warn"
    thread = [e for e in entries if "uncaught exception in thread doomed" in e.message]
    assert thread and thread[0].level == "error"
    assert "ZeroDivisionError" in str(thread[0].fields["traceback"])
    reserve = [e for e in entries if e.message.startswith("Reserve failed")]
    assert reserve and reserve[0].level == "error"
    assert "RuntimeError: deliberate failure" in str(reserve[0].fields["traceback"])


def test_grpc_and_asyncio_internals_stay_out_of_the_log(launch: Launcher) -> None:
    # gRPC's "[_cygrpc] Loaded running loop" came some twenty times a launch, at
    # debug, which an agent at log_level = "debug" and the launcher's -v show.
    plugin = launch()
    client = plugin.client
    with client.fingerprint() as stream:
        stream.next(10)
    with client.stats(0.1) as stats:
        stats.next(10)
    client.reserve(["!print"])
    client.kill()  # returns once every stderr line has been relayed
    noise = [
        (e.module, e.message)
        for e in plugin.logs
        if (e.module or "").split(".")[0] in ("grpc", "asyncio") and e.level in ("trace", "debug")
    ]
    assert noise == []
    # The plugin's own debug lines still arrive.
    assert any(e.level == "debug" and e.message == "printed to stdout" for e in plugin.logs)


def test_kill_returns_after_the_last_stderr_line() -> None:
    # As go-plugin's Kill: what the plugin wrote before exiting has been relayed
    # by then, even to a consumer that is slower than the plugin's exit.
    seen: list[HclogEntry] = []

    def slow_consumer(entry: HclogEntry) -> None:
        time.sleep(0.02)
        seen.append(entry)

    client = DevicePluginClient.launch(
        [sys.executable, str(SDK_PLUGIN)], on_log=slow_consumer, start_timeout=30
    )
    try:
        client.reserve(["!print"])
    finally:
        client.kill()
    messages = [e.message for e in seen]
    assert "printed to stdout" in messages
    assert any("stopping plugin server" in m for m in messages)


def test_stderr_lines_parse_strictly(tmp_path: Path) -> None:
    """Read stderr ourselves (not via the host relay) and parse every line strictly."""
    proc = subprocess.Popen(
        [sys.executable, str(SDK_PLUGIN)],
        env=_plugin_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    parts = proc.stdout.readline().decode().strip().split("|")
    client = DevicePluginClient(
        PluginProcess.reattach(ReattachConfig(parts[2], parts[3], proc.pid, 2))
    )
    client.reserve(["!print"])
    client.reserve(["!thread"])
    with pytest.raises(Exception, match="deliberate"):
        client.reserve(["!raise"])
    assert client.kill().outcome == "graceful"
    _, err = proc.communicate(timeout=10)
    lines = err.decode().splitlines()
    assert len(lines) >= 8
    for line in lines:
        parse_line(line, strict=True)


def test_grpc_error_codes_reach_the_host(launch: Launcher) -> None:
    client = launch().client
    with pytest.raises(Exception) as info:
        client.reserve([])
    assert getattr(info.value, "code", None) == grpc.StatusCode.INVALID_ARGUMENT
    assert "no device ids given" in str(info.value)


def test_stdio_forwarded_to_host(launch: Launcher) -> None:
    client = launch().client
    client.reserve(["!print"])

    def channel(number: int) -> bytes:
        return b"".join(data for ch, data in list(client.process.stdio) if ch == number)

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if b"printed to stdout\n" in channel(1) and b"raw bytes on fd 2\n" in channel(2):
            break
        time.sleep(0.02)
    assert b"printed to stdout\n" in channel(1)
    assert b"raw bytes on fd 2\n" in channel(2)


def test_unix_socket_group(launch: Launcher) -> None:
    gid = os.getgid()
    plugin = launch(env=_plugin_env(PLUGIN_UNIX_SOCKET_GROUP=str(gid)))
    st = os.stat(plugin.client.reattach_config.address)
    assert st.st_mode & 0o777 == 0o660
    assert st.st_gid == gid
    # The group must be able to reach it: the private directory lets it through, only.
    parent = os.stat(os.path.dirname(plugin.client.reattach_config.address))
    assert (parent.st_mode & 0o777, parent.st_gid) == (0o710, gid)


def test_tcp_without_auto_mtls_is_refused(private_tmpdir: Path) -> None:
    """Any local user can reach 127.0.0.1; a plugin (root) must not listen there in clear."""
    from nomad_device.goplugin.client import PluginError

    lines: list[str] = []
    try:
        client = DevicePluginClient.launch(
            [sys.executable, str(SDK_PLUGIN)],
            env=_plugin_env(GOPLUGIN_PY_NETWORK="tcp"),
            on_log=lambda entry: lines.append(entry.message),
            start_timeout=30,
        )
    except PluginError:
        pass
    else:
        client.kill()  # never left listening, even where the refusal is missing
        pytest.fail(f"the plugin listened on {client.reattach_config.address} in clear text")
    assert any("tcp needs AutoMTLS" in line for line in lines), lines


def test_socket_group_change_never_follows_a_planted_link(tmp_path: Path) -> None:
    """A user who can write PLUGIN_UNIX_SOCKET_DIR swaps the fresh socket for a symlink
    between bind and chown (the race, won here every time): nothing outside changes."""
    import asyncio
    import socket

    from nomad_device.goplugin import server as goserver

    victim = tmp_path / "victim"
    victim.write_text("root's file")
    victim.chmod(0o600)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    gid = next(g for g in (1, 2, 3, 4, 5) if g != os.getgid())  # daemon, bin, sys ...
    before = victim.stat()

    class RacedServer:
        """Binds like gRPC does, then lets the attacker in before the plugin's chown."""

        def __init__(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX)

        def add_insecure_port(self, address: str) -> int:
            self.sock.bind(address.removeprefix("unix:"))
            return 1

        async def start(self) -> None:
            (planted,) = list(shared.iterdir())
            planted.unlink()
            planted.symlink_to(victim)

    server = RacedServer()
    env = {"PLUGIN_UNIX_SOCKET_DIR": str(shared), "PLUGIN_UNIX_SOCKET_GROUP": str(gid)}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        listener = asyncio.run(goserver._listen_unix(server, None))  # type: ignore[arg-type]
    try:
        after = victim.stat()
        assert (after.st_gid, after.st_mode) == (before.st_gid, before.st_mode)
    finally:
        listener.cleanup()
        server.sock.close()


def test_tcp_port_range_gives_distinct_ports(launch: Launcher) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        low = probe.getsockname()[1]
    env = _plugin_env(GOPLUGIN_PY_NETWORK="tcp")
    first = launch(env=env, min_port=low, max_port=low + 5, auto_mtls=True).client
    second = launch(env=env, min_port=low, max_port=low + 5, auto_mtls=True).client
    a, b = first.reattach_config.address, second.reattach_config.address
    assert a != b
    for address in (a, b):
        assert low <= int(address.rsplit(":", 1)[1]) <= low + 5
    assert first.health() == second.health() == "SERVING"


def test_auto_mtls_with_python_host(launch: Launcher) -> None:
    plugin = launch(auto_mtls=True)
    assert plugin.client.reattach_config.server_cert_pem is not None
    assert plugin.client.info().name == "sdk-test"
    with plugin.client.fingerprint() as stream:
        assert stream.next(10)[0].devices


def test_no_thread_per_stream(launch: Launcher) -> None:
    client = launch().client
    pid = client.process.pid

    def threads() -> int:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        raise AssertionError("no Threads line")

    with client.fingerprint() as one, client.stats(0.05) as s:
        one.next(10)
        s.next(10)
        before = threads()
        streams = [client.fingerprint() for _ in range(20)] + [
            client.stats(0.05) for _ in range(20)
        ]
        for stream in streams:
            stream.next(10)
        after = threads()
        for stream in streams:
            stream.cancel()
    assert after <= before + 2, (before, after)


def test_host_relays_plugin_logs_with_levels(
    launch: Launcher, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    plugin = launch()
    plugin.client.reserve(["!print"])
    plugin.wait_for_log(lambda e: e.message == "author log")
    wanted = {"author log", "printed to stderr", "printed to stdout"}
    deadline = time.monotonic() + 10
    while True:  # stdout and stderr are read by two threads: either line may come last
        records = {r.getMessage(): r for r in caplog.records if r.name.startswith("plugin.")}
        if wanted <= records.keys() or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert records["author log"].levelno == logging.INFO
    assert records["printed to stderr"].levelno == logging.WARNING
    assert records["printed to stdout"].levelno == logging.DEBUG


def test_start_timeout_kills_the_plugin(tmp_path: Path) -> None:
    from nomad_device.goplugin.client import PluginError

    pid_file = tmp_path / "pid"
    script = SDK_PLUGIN.parent / "never_handshakes.py"
    with pytest.raises(PluginError, match="timeout"):  # it sleeps 600 s: the timer ended it
        DevicePluginClient.launch([sys.executable, str(script), str(pid_file)], start_timeout=1.5)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_plugin_crashing_before_handshake_is_reported() -> None:
    from nomad_device.goplugin.client import PluginError

    with pytest.raises(PluginError, match="exit status 3") as info:
        DevicePluginClient.launch(
            [sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
        )
    assert "boom" in str(info.value)


def test_kill_forces_a_plugin_that_lingers_after_shutdown(launch: Launcher) -> None:
    plugin = launch([sys.executable, str(SDK_PLUGIN.parent / "slow_shutdown.py")])
    with OwnTime(plugin.client.process.pid) as own:
        result = plugin.client.kill()
    assert result.outcome == "forced"
    # The 2 s grace, and then no waiting for the plugin's 30 s (its own time: a busy
    # machine that slows its answer to Shutdown does not count).
    assert result.seconds > 1.9 and own.seconds < 4, (result, own.seconds)
    assert result.returncode == -signal.SIGKILL


def test_crash_while_loading_the_author_module_is_hclog() -> None:
    proc = subprocess.run(
        [sys.executable, str(SDK_PLUGIN.parent / "crash_on_import.py")],
        env=_plugin_env(),
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert proc.stdout == b""
    lines = proc.stderr.decode().splitlines()
    assert lines
    entries = [parse_line(line, strict=True) for line in lines]
    assert entries[-1].level == "error"
    assert "config file missing" in entries[-1].message
    assert "RuntimeError" in str(entries[-1].fields["traceback"])


def test_private_socket_dir_is_removed_on_exit(launch: Launcher) -> None:
    plugin = launch()
    socket_path = plugin.client.reattach_config.address
    private_dir = os.path.dirname(socket_path)
    assert os.path.isdir(private_dir)
    assert plugin.client.kill().outcome == "graceful"
    assert not os.path.exists(socket_path)
    assert not os.path.exists(private_dir)


def test_bad_socket_group_fails_cleanly(private_tmpdir: Path) -> None:
    """A group that does not exist is refused before the socket dir is made."""
    from nomad_device.goplugin.client import PluginError

    with pytest.raises(PluginError, match="failed to find gid from 'no-such-group-xyz'"):
        DevicePluginClient.launch(
            [sys.executable, str(SDK_PLUGIN)],
            env=_plugin_env(PLUGIN_UNIX_SOCKET_GROUP="no-such-group-xyz"),
            start_timeout=30,
        )
    assert list(private_tmpdir.iterdir()) == []


def test_slow_stop_hook_runs_after_the_socket_dir_is_gone(
    launch: Launcher, private_tmpdir: Path
) -> None:
    """The host SIGKILLs a plugin that lingers: its private dir must already be removed."""
    plugin = launch([sys.executable, str(SDK_PLUGIN.parent / "slow_shutdown.py")])
    private_dir = Path(plugin.client.reattach_config.address).parent
    assert private_dir.parent == private_tmpdir
    assert plugin.client.kill().outcome == "forced"
    assert not private_dir.exists()


# -- socket directories left by SIGKILLed plugins ---------------------------------------


def _socket_dirs(base: Path) -> set[str]:
    """The plugins' socket directories (not the host's own TLS bridge's)."""
    return {
        p.name
        for p in base.iterdir()
        if p.name.startswith("plugin")
        and not p.name.startswith("plugin-bridge")
        and p.name != socketdirs.state_name()
    }


def _backdate(*paths: Path) -> None:
    old = time.time() - 2 * socketdirs.MIN_AGE_SECONDS
    for path in paths:
        os.utime(path, (old, old))


def _sigkill(plugin: Launched) -> None:
    process = plugin.client.process.process
    assert process is not None
    process.kill()
    process.wait(10)


@pytest.mark.parametrize("auto_mtls", [False, True], ids=["unix", "auto-mtls"])
def test_the_next_plugin_removes_what_a_sigkilled_one_left(
    private_tmpdir: Path, launch: Launcher, auto_mtls: bool
) -> None:
    killed = launch(auto_mtls=auto_mtls)
    left = _socket_dirs(private_tmpdir)
    assert len(left) == (2 if auto_mtls else 1), left  # the socket's, and TLS's backend
    _sigkill(killed)
    assert _socket_dirs(private_tmpdir) == left  # a killed process removes nothing
    _backdate(*(private_tmpdir / name for name in left))

    young = launch(auto_mtls=auto_mtls)  # killed a moment ago: maybe still starting
    young_left = _socket_dirs(private_tmpdir) - left
    _sigkill(young)
    live = launch(auto_mtls=auto_mtls)  # old, but alive
    live_dirs = _socket_dirs(private_tmpdir) - left - young_left
    _backdate(*(private_tmpdir / name for name in live_dirs))
    foreign = private_tmpdir / ("plugin" + "ab" * 6)  # our name, but not only sockets
    foreign.mkdir(mode=0o700)
    (foreign / "notes.txt").write_text("")
    _backdate(foreign)

    nxt = launch(auto_mtls=auto_mtls)
    deadline = time.monotonic() + 10
    while _socket_dirs(private_tmpdir) & left and time.monotonic() < deadline:
        time.sleep(0.02)
    remaining = _socket_dirs(private_tmpdir)
    assert not remaining & left, remaining
    assert young_left | live_dirs | {foreign.name} <= remaining
    assert live.client.info().name == "sdk-test"  # its socket untouched
    assert nxt.client.info().name == "sdk-test"
    for name in young_left | {foreign.name}:
        shutil.rmtree(private_tmpdir / name)


def _dead_socket_dir(prefix: str = "plugin") -> Path:
    path = Path(socketdirs.private_dir(prefix))
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path / "grpc.sock"))
    _backdate(path)
    return path


def test_sweep_takes_only_unheld_old_private_dirs_of_sockets(private_tmpdir: Path) -> None:
    dead = _dead_socket_dir()
    held = _dead_socket_dir("plugin-tls")
    fd = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    try:
        socketdirs.hold(fd)
        young = Path(socketdirs.private_dir("plugin"))
        wide = _dead_socket_dir()
        wide.chmod(0o755)
        _backdate(wide)
        other_name = private_tmpdir / "plugin-other"
        other_name.mkdir(mode=0o700)
        _backdate(other_name)
        # A link with our name, to a directory the sweep would take: never followed.
        elsewhere = private_tmpdir / "elsewhere"
        elsewhere.mkdir()
        target = _dead_socket_dir()
        target = target.rename(elsewhere / target.name)
        link = private_tmpdir / ("plugin" + "cd" * 6)
        link.symlink_to(target)
        assert socketdirs.sweep().removed == (str(dead),)
        assert {p.name for p in private_tmpdir.iterdir()} == {
            held.name,
            young.name,
            wide.name,
            other_name.name,
            elsewhere.name,
            link.name,
        }
        assert (target / "grpc.sock").is_socket()
    finally:
        os.close(fd)
    assert socketdirs.sweep().removed == (str(held),)  # released: its plugin is gone
    link.unlink()
    for path in (young, wide, other_name, elsewhere):
        shutil.rmtree(path)


def test_sweep_leaves_another_users_directory(private_tmpdir: Path) -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root")
        pytest.skip("needs root, to give a directory to another user")
    theirs = _dead_socket_dir()
    os.chown(theirs, 65534, 65534)
    _backdate(theirs)
    assert socketdirs.sweep().removed == ()
    os.chown(theirs, 0, 0)
    _backdate(theirs)
    assert socketdirs.sweep().removed == (str(theirs),)


def test_sweep_reads_at_most_its_bound_and_the_next_goes_on_where_it_stopped(
    private_tmpdir: Path,
) -> None:
    others = [private_tmpdir / f"plugin{i:012x}" for i in range(1000)]
    for path in others:
        path.touch()
    dead = {str(_dead_socket_dir()) for _ in range(3)}
    state = private_tmpdir / socketdirs.state_name()
    passes = [socketdirs.sweep(max_entries=100)]
    assert state.is_file() and state.stat().st_mode & 0o777 == 0o600
    while passes[-1].stop is not None:
        assert len(passes) < 20
        passes.append(socketdirs.sweep(max_entries=100))
    # Every entry once: the names, the leftovers and the state file itself.
    assert [p.examined for p in passes[:-1]] == [100] * 10
    assert sum(p.examined for p in passes) == len(others) + len(dead) + 1
    for before, after in itertools.pairwise(passes):
        assert after.start == before.stop
    assert {path for p in passes for path in p.removed} == dead
    assert not state.exists()  # the walk reached the end: nothing kept
    # The time bound: one entry at least, so that every start makes progress.
    assert socketdirs.sweep(max_seconds=0).examined == 1
    rest = socketdirs.sweep()
    assert rest.start != (0, 0) and rest.stop is None and not state.exists()
    for path in others:
        path.unlink()


def test_a_sweep_state_that_is_not_a_private_file_of_ours_is_never_used(
    private_tmpdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another user may take the name; the sweep then starts at the top each time,
    never writes to what it found, never follows it, never waits on it."""
    state = private_tmpdir / socketdirs.state_name()
    target = private_tmpdir / "elsewhere"
    target.write_text("keep\n")
    dead = _dead_socket_dir()
    squatters = {
        "a link": lambda: state.symlink_to(target),
        "a fifo": lambda: os.mkfifo(state, 0o600),
        "readable by others": lambda: (state.write_text("1 2 3 4\n"), state.chmod(0o644)),
        "a second link": lambda: os.link(target, state),
    }
    if os.geteuid() == 0:
        squatters["another user's"] = lambda: (
            state.write_text("x\n"),
            os.chown(state, 65534, 65534),
        )
    removed: list[str] = []
    for what, make in squatters.items():
        make()
        before = os.lstat(state)
        caplog.clear()
        with caplog.at_level("WARNING", logger="goplugin.socketdirs"):
            done = socketdirs.sweep(max_entries=1)
        removed.extend(done.removed)
        assert done.start == (0, 0), what
        after = os.lstat(state)
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
            before.st_ino,
            before.st_size,
            before.st_mtime_ns,
        ), what
        assert "every sweep starts at the top" in caplog.text, what
        state.unlink()
    assert target.read_text() == "keep\n"
    removed.extend(socketdirs.sweep().removed)
    assert removed == [str(dead)]  # the sweeps went on, each from the top
    target.unlink()
