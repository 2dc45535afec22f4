"""Start-up side by side: installed script, bundles (first and later launches), Go plugin.

A Nomad agent starts every plugin three times at boot and again after every
crash, so what counts is the time from ``exec`` to the handshake line (when a
go-plugin host can connect) and the memory the plugin holds once started. All
four are launched as Nomad launches them (cookie, ``PLUGIN_PROTOCOL_VERSIONS``,
a PATH without virtualenv or pyenv shims), interleaved launch by launch so that
drift of a shared machine hits all alike; the medians are printed with their
ratio to the Go plugin, and the CPU time each used up to its handshake (what
the plugin itself costs, less disturbed by other load on a shared host) and
once it has answered one Fingerprint and one Stats (SetConfig included).
Two references show what is not the SDK's: the floor (python, grpc.aio and a
server) and the floor plus protobuf's runtime, grpc_health and the SDK's
generated modules, which any plugin with Nomad's services loads.
"anon" is the resident memory that is the process's own (RssAnon); the rest is
file pages (interpreter, grpcio's library, OpenSSL) shared with every other
process that maps them. How much of grpcio's 17 MB library a launch maps
depends on how its pages sit in the page cache (in a virtualenv installed
minutes before, 3.7 MiB more than later), so after the warm-up this drops the
cached pages of every grpcio library the subjects load, and all of them start
from the same state. Run:

    .venv/bin/python scripts/bench_startup.py [--launches 20] [--first-launches 5]

The Go plugin is interop/bin/goplugin (``bash interop/build.sh``). The bundle is
built from this environment unless ``--bundle`` names one; it runs on the same
interpreter as the installed script unless ``--bundle-python`` says otherwise.
The bundle that brings its interpreter (``--interpreter auto``, built unless
``--own-bundle`` names one; ``--no-own`` skips it) is timed both ways: on the
node's CPython (the installed script's, found on PATH) and on its own, each
with a cache of its own and then both from one cache, launched in turn (the
"alternating" rows: what an agent and an operator's shell with different
PATHs cost each other).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.client import PluginProcess, ReattachConfig
from nomad_device.host import DevicePluginClient

ROOT = Path(__file__).resolve().parent.parent
GO_PLUGIN = ROOT / "interop" / "bin" / "goplugin"
SCRIPT = Path(sys.executable).parent / "nomad-device-example"
BUNDLER = Path(sys.executable).parent / "nomad-device-bundle"


def cpu_ms(pid: int) -> float:
    """CPU time the process has used, all its threads: steadier than wall time on a busy host.

    ``schedstat`` (nanoseconds) covers live threads only; ``stat`` (clock ticks)
    also counts threads that have exited, such as a bundle's unpack workers.
    """
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return max(total / 1e6, ticks * 1000 / os.sysconf("SC_CLK_TCK"))


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory; ``RssAnon`` is the part not shared with other processes' files."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field}")


@dataclass
class Subject:
    label: str
    command: list[str]
    env: dict[str, str]
    before: Callable[[], None] = lambda: None  # run before each launch, not timed
    device_plugin: bool = True  # False: handshake only (the floor has no services)
    handshake_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    rss_start: list[float] = field(default_factory=list)
    anon_start: list[float] = field(default_factory=list)
    rss_used: list[float] = field(default_factory=list)
    cpu_used: list[float] = field(default_factory=list)


def launch(subject: Subject, cwd: str) -> None:
    subject.before()
    env = dict(subject.env)
    env[NOMAD_HANDSHAKE.magic_cookie_key] = NOMAD_HANDSHAKE.magic_cookie_value
    env["PLUGIN_PROTOCOL_VERSIONS"] = "2"
    start = time.perf_counter()
    proc = subprocess.Popen(
        subject.command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    elapsed = (time.perf_counter() - start) * 1000
    parts = line.strip().split("|")
    if len(parts) < 4:
        proc.kill()
        raise RuntimeError(f"{subject.label}: no handshake ({line!r})")
    rss_start = rss_mib(proc.pid)
    anon_start = rss_mib(proc.pid, "RssAnon")
    cpu = cpu_ms(proc.pid)
    rss_used = cpu_used = float("nan")
    if subject.device_plugin:
        client = DevicePluginClient(
            PluginProcess.reattach(ReattachConfig(parts[2], parts[3], proc.pid, 2))
        )
        with client.fingerprint() as stream:
            stream.next(30)
        with client.stats(0.05) as stats:
            stats.next(30)
        rss_used = rss_mib(proc.pid)
        cpu_used = cpu_ms(proc.pid)
        client.kill()
    else:
        proc.kill()
    proc.wait(10)
    subject.handshake_ms.append(elapsed)
    subject.cpu_ms.append(cpu)
    subject.rss_start.append(rss_start)
    subject.anon_start.append(anon_start)
    subject.rss_used.append(rss_used)
    subject.cpu_used.append(cpu_used)


#: The least any Python gRPC plugin does before its handshake: import grpc.aio,
#: start a server on a unix socket in a fresh 0700 directory, print the line.
#: No SDK, no services. (Not tempfile for the directory: it costs 0.8 MiB and a
#: few ms that a plugin need not pay, and the SDK does not.)
FLOOR = """
import asyncio, os, sys, grpc
{imports}
async def main():
    server = grpc.aio.server()
    directory = os.path.join(os.environ["TMPDIR"], "floor" + os.urandom(6).hex())
    os.mkdir(directory, 0o700)
    path = os.path.join(directory, "plugin.sock")
    server.add_insecure_port("unix:" + path)
    await server.start()
    sys.stdout.write("1|2|unix|" + path + "|grpc|\\n")
    sys.stdout.flush()
    await asyncio.sleep(3600)
asyncio.run(main())
"""

#: What the floor adds to be a Nomad device plugin before any SDK code runs:
#: protobuf's runtime, grpc_health and the generated modules of the services.
PROTOS = """
from google.protobuf import empty_pb2
from grpc_health.v1 import _async, health_pb2, health_pb2_grpc
from nomad_device.proto import (
    base_pb2, base_pb2_grpc, device_pb2, device_pb2_grpc, hclspec_pb2,
    goplugin_broker_pb2_grpc, goplugin_controller_pb2_grpc, goplugin_stdio_pb2_grpc,
)
"""


def drop_cached_pages(roots: list[Path]) -> None:
    """Evict grpcio's native library from the page cache (see the module docstring)."""
    for root in roots:
        for path in root.rglob("cygrpc*.so"):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def build_bundle(into: Path, *extra: str) -> Path:
    out = into / ("nomad-device-example" + ("-own" if extra else ""))
    command = [str(BUNDLER), "nomad-device-example", "-o", str(out), *extra]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=20, help="launches of each (default 20)")
    parser.add_argument(
        "--first-launches", type=int, default=5, help="bundle launches with an empty cache"
    )
    parser.add_argument("--bundle", type=Path, help="a bundle of nomad-device-example")
    parser.add_argument(
        "--shiv",
        type=Path,
        help="also time a shiv zipapp of the example (later launches), for comparison",
    )
    parser.add_argument(
        "--own-bundle", type=Path, help="a bundle of the example with its interpreter (auto)"
    )
    parser.add_argument("--no-own", action="store_true", help="skip the bundle with an interpreter")
    parser.add_argument(
        "--bundle-python",
        default=getattr(sys, "_base_executable", sys.executable),
        help="NOMAD_DEVICE_PYTHON for the bundle (default: the installed script's interpreter)",
    )
    args = parser.parse_args()
    if not GO_PLUGIN.exists():
        sys.exit(f"{GO_PLUGIN} is missing: run bash interop/build.sh")

    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        devices = work / "devices"
        devices.mkdir()
        for name in ("device01", "device02", "device03"):
            (devices / name).write_text(name)
        bundle = args.bundle or build_bundle(work)
        # What a systemd unit gives Nomad: no virtualenv, no pyenv shims on PATH.
        node = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        warm_cache = work / "cache-warm"
        fresh: list[Path] = []

        def empty_cache() -> None:
            for old in fresh:
                shutil.rmtree(old, ignore_errors=True)
            fresh.clear()
            fresh.append(Path(tempfile.mkdtemp(dir=work, prefix="cache-")))
            cold.env["NOMAD_DEVICE_BUNDLE_CACHE"] = str(fresh[0])

        bundle_env = {**node, "NOMAD_DEVICE_PYTHON": args.bundle_python}
        go = Subject("Go plugin (interop/bin/goplugin)", [str(GO_PLUGIN)], dict(node))
        script = Subject("installed console script", [str(SCRIPT)], dict(node))
        later = Subject(
            "bundle, later launches",
            [str(bundle)],
            {**bundle_env, "NOMAD_DEVICE_BUNDLE_CACHE": str(warm_cache)},
        )
        cold = Subject("bundle, first launch", [str(bundle)], dict(bundle_env), empty_cache)
        floor = Subject(
            "floor: python + grpc.aio server",
            [sys.executable, "-c", FLOOR.format(imports="")],
            {**node, "TMPDIR": str(work)},  # its sockets go with the work directory
            device_plugin=False,
        )
        protos = Subject(
            "floor + protobuf, SDK's protos",
            [sys.executable, "-c", FLOOR.format(imports=PROTOS)],
            {**node, "TMPDIR": str(work)},
            device_plugin=False,
        )
        warm = [go, floor, protos, script, later]
        firsts = [cold]
        if not args.no_own:
            own = args.own_bundle or build_bundle(work, "--interpreter", "auto")
            node_dir = str(Path(args.bundle_python).parent)
            # The node's CPython first on PATH (the installed script's), as on a node that has it.
            on_node = {**node, "PATH": f"{node_dir}:{node['PATH']}"}
            warm.append(
                Subject(
                    "bundle+interp., node's Python, later",
                    [str(own)],
                    {**on_node, "NOMAD_DEVICE_BUNDLE_CACHE": str(work / "cache-own-node")},
                )
            )
            bundled_env = {**node, "NOMAD_DEVICE_PYTHON": "bundled"}
            warm.append(
                Subject(
                    "bundle+interp., its own, later",
                    [str(own)],
                    {**bundled_env, "NOMAD_DEVICE_BUNDLE_CACHE": str(work / "cache-own")},
                )
            )
            # The same bundle, one cache, the node's Python and its own in turn (an agent's
            # PATH and an operator's shell): each launch follows one of the other kind.
            shared_cache = str(work / "cache-own-alternating")
            warm.append(
                Subject(
                    "  alternating: node's Python",
                    [str(own)],
                    {**on_node, "NOMAD_DEVICE_BUNDLE_CACHE": shared_cache},
                )
            )
            warm.append(
                Subject(
                    "  alternating: its own",
                    [str(own)],
                    {**bundled_env, "NOMAD_DEVICE_BUNDLE_CACHE": shared_cache},
                )
            )
            own_cold = Subject("bundle+interp., its own, first", [str(own)], dict(bundled_env))

            def empty_own_cache() -> None:
                directory = work / "cache-own-cold"
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir(mode=0o700)
                own_cold.env["NOMAD_DEVICE_BUNDLE_CACHE"] = str(directory)

            own_cold.before = empty_own_cache
            firsts.append(own_cold)
        if args.shiv:
            shiv_root = work / "shiv-root"
            shiv_env = {**node, "SHIV_ROOT": str(shiv_root)}
            warm.append(Subject("shiv zipapp, later launches", [str(args.shiv)], shiv_env))
        cwd = str(devices)
        # Warm-up: page cache, bytecode, the warm bundle cache.
        for subject in warm:
            launch(subject, cwd)
            subject.handshake_ms.clear()
            subject.cpu_ms.clear()
            subject.rss_start.clear()
            subject.anon_start.clear()
            subject.rss_used.clear()
            subject.cpu_used.clear()
        drop_cached_pages([Path(grpc.__file__).parent, *work.glob("cache-*")])
        for i in range(args.launches):
            for subject in warm:
                launch(subject, cwd)
            if i < args.first_launches:
                for first in firsts:
                    launch(first, cwd)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"Python {sys.version.split()[0]} ({args.bundle_python} for the bundle), "
        f"{os.cpu_count()} CPUs; {args.launches} launches each, "
        f"{args.first_launches} first launches; medians (min-max)"
    )
    header = (
        f"{'':38} {'handshake ms':>18} {'x Go':>6} {'CPU ms':>7} {'RSS start MiB':>14}"
        f" {'x Go':>6} {'anon MiB':>9} {'RSS fp+stats':>13} {'CPU fp+stats':>13}"
    )
    print(header)
    go_ms = statistics.median(go.handshake_ms)
    go_rss = statistics.median(go.rss_start)
    for subject in (go, floor, protos, script, *firsts, *warm[4:]):
        ms = subject.handshake_ms
        med = statistics.median(ms)
        rss = statistics.median(subject.rss_start)
        span = f"{med:.0f} ({min(ms):.0f}-{max(ms):.0f})"
        print(
            f"{subject.label:38} {span:>18} {med / go_ms:>6.1f} "
            f"{statistics.median(subject.cpu_ms):>7.0f} {rss:>14.1f} "
            f"{rss / go_rss:>6.1f} {statistics.median(subject.anon_start):>9.1f}"
            f" {statistics.median(subject.rss_used):>13.1f}"
            f" {statistics.median(subject.cpu_used):>13.0f}"
        )
    over = statistics.median(script.handshake_ms) - statistics.median(floor.handshake_ms)
    cpu_over = statistics.median(script.cpu_ms) - statistics.median(floor.cpu_ms)
    print(f"installed script minus the floor: {over:+.0f} ms ({cpu_over:+.0f} ms CPU)")
    sdk = statistics.median(script.handshake_ms) - statistics.median(protos.handshake_ms)
    sdk_cpu = statistics.median(script.cpu_ms) - statistics.median(protos.cpu_ms)
    sdk_rss = statistics.median(script.rss_start) - statistics.median(protos.rss_start)
    print(
        f"installed script minus floor + protobuf: {sdk:+.0f} ms ({sdk_cpu:+.0f} ms CPU),"
        f" {sdk_rss:+.1f} MiB RSS: the SDK's own share"
    )
    gap = statistics.median(later.handshake_ms) - statistics.median(script.handshake_ms)
    cpu_gap = statistics.median(later.cpu_ms) - statistics.median(script.cpu_ms)
    print(f"bundle later launches minus installed script: {gap:+.0f} ms ({cpu_gap:+.0f} ms CPU)")
    for subject in warm[5:]:
        gap = statistics.median(subject.handshake_ms) - statistics.median(script.handshake_ms)
        cpu_gap = statistics.median(subject.cpu_ms) - statistics.median(script.cpu_ms)
        rss_gap = statistics.median(subject.rss_start) - statistics.median(script.rss_start)
        print(
            f"{subject.label} minus installed script: {gap:+.0f} ms ({cpu_gap:+.0f} ms CPU), "
            f"{rss_gap:+.1f} MiB RSS"
        )


if __name__ == "__main__":
    main()
