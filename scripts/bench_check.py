"""Benchmark ``nomad-device-launcher check --nomad`` against a fleet-sized cluster.

A fake Nomad HTTP API (``tests/support/fake_nomad.py``, in a process of its own,
5 ms added to every answer as a network's round trip) serves ``--nodes``
client nodes (default 10,000), each with eight GPUs (UUIDs, bus IDs, the
attributes the nvidia plugin reports), a 64-core two-node NUMA topology, five
drivers and a network, as ``/v1/nodes?resources=true`` carries them (about
12 KB of JSON a node), and ``--allocations`` allocations (default 50,000; a
fifth of them terminal), each holding a GPU, with resources and task states
as ``/v1/allocations`` carries them. The launcher then checks a GPU job
(``count = 2`` with a memory constraint and an affinity) against the cluster,
with ``--json``, as an operator would run it.

Printed: the wall time of the whole command (start-up, every request, reading,
judging 10,000 nodes, writing the JSON), its CPU time, its peak resident
memory (``ru_maxrss``), the requests it made, and the cost per node. The goal
(issue 22): 10,000 nodes and 50,000 allocations in at most 3 s and 400 MB.

    .venv/bin/python scripts/bench_check.py [--nodes 10000] [--allocations 50000]

Figures vary on a shared machine; compare runs on the same host only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

JOB = """\
job "train" {
  datacenters = ["dc1"]
  group "trainer" {
    task "main" {
      resources {
        device "nvidia/gpu" {
          count = 2
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "40 GiB"
          }
          affinity {
            attribute = "${device.model}"
            value     = "NVIDIA A100-SXM4-80GB"
            weight    = 50
          }
        }
      }
    }
  }
}
"""

GPU_ATTRIBUTES = {
    "memory": {"Int": 81920, "Unit": "MiB"},
    "power": {"Int": 400, "Unit": "W"},
    "bar1": {"Int": 131072, "Unit": "MiB"},
    "driver_version": {"String": "550.54.15", "Unit": ""},
    "cores_clock": {"Int": 1410, "Unit": "MHz"},
    "memory_clock": {"Int": 1593, "Unit": "MHz"},
    "pci_bandwidth": {"Int": 15760, "Unit": "MB/s"},
    "display_state": {"String": "Disabled", "Unit": ""},
    "persistence_mode": {"String": "Enabled", "Unit": ""},
}


def _uuid(rnd: random.Random) -> str:
    h = f"{rnd.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def make_cluster(nodes: int, allocations: int, seed: int = 22) -> tuple[list[Any], dict[str, Any]]:
    from support.fake_nomad import allocation, node

    rnd = random.Random(seed)
    out = []
    gpus_of: list[tuple[str, list[str]]] = []
    for i in range(nodes):
        node_id = _uuid(rnd)
        gpus = [f"GPU-{_uuid(rnd)}" for _ in range(8)]
        group = {
            "Vendor": "nvidia",
            "Type": "gpu",
            "Name": "NVIDIA A100-SXM4-80GB",
            "Instances": [
                {
                    "ID": g,
                    "Healthy": True,
                    "HealthDescription": "",
                    "Locality": {"PciBusID": f"00000000:{0x1B + 0x10 * n:02x}:00.0"},
                }
                for n, g in enumerate(gpus)
            ],
            "Attributes": GPU_ATTRIBUTES,
        }
        full = node(node_id, f"gpu-{i:05d}", [group], computed_class="v1:4242")
        full["NodeResources"]["Processors"] = {
            "Topology": {
                "Nodes": [0, 1],
                "Distances": ["ChU=", "FQo="],
                "Cores": [
                    {
                        "SocketID": c // 32,
                        "NodeID": c // 32,
                        "ID": c,
                        "Grade": True,
                        "Disable": False,
                        "BaseSpeed": 2100,
                        "MaxSpeed": 3500,
                        "GuessSpeed": 0,
                    }
                    for c in range(64)
                ],
                "OverrideTotalCompute": 0,
                "OverrideWitholdCompute": 0,
            }
        }
        full["NodeResources"]["NodeNetworks"] = [
            {
                "Mode": "host",
                "Device": "eth0",
                "MacAddress": "02:00:00:00:00:01",
                "Speed": 10000,
                "Addresses": [{"Family": "ipv4", "Alias": "default", "Address": "10.0.0.1"}],
            }
        ]
        full["Drivers"] = {
            d: {
                "Attributes": {f"driver.{d}": "true", f"driver.{d}.version": "1.2.3"},
                "Detected": True,
                "Healthy": True,
                "HealthDescription": "Healthy",
                "UpdateTime": "2026-01-01T00:00:00Z",
            }
            for d in ("docker", "exec", "raw_exec", "java", "qemu")
        }
        out.append(full)
        gpus_of.append((node_id, gpus))
    allocs: dict[str, Any] = {}
    for a in range(allocations):
        node_id, gpus = gpus_of[a % nodes]
        held = [gpus[(a // nodes) % len(gpus)]]
        alloc = allocation(
            _uuid(rnd),
            f"svc-{a % 97}.main[{a // 97}]",
            node_id,
            {"main": [("nvidia", "gpu", "NVIDIA A100-SXM4-80GB", held)]},
            client_status="complete" if a % 5 == 0 else "running",
        )
        alloc["CreateIndex"] = 100 + a
        allocs.setdefault(node_id, []).append(alloc)
    return out, allocs


def serve(nodes: int, allocations: int, delay: float) -> None:
    """The fake API, until stdin closes; prints its address, then its request count."""
    from support.fake_nomad import FakeNomad

    cluster, allocs = make_cluster(nodes, allocations)
    fake = FakeNomad(nodes=cluster, allocations=allocs, delay=delay)
    address = fake.start()
    print(address, flush=True)
    sys.stdin.read()
    print(json.dumps(fake.asked()), flush=True)
    fake.stop()


def _endpoint(path: str) -> str:
    if path.startswith("/v1/node/"):
        return "/v1/node/<id>/allocations" if path.endswith("/allocations") else "/v1/node/<id>"
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--allocations", type=int, default=50_000)
    p.add_argument("--delay", type=float, default=0.005, help="added to every answer (s)")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.nodes, args.allocations, args.delay)
        return
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            f"--nodes={args.nodes}",
            f"--allocations={args.allocations}",
            f"--delay={args.delay}",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdin is not None
    address = server.stdout.readline().strip()
    launcher = Path(sys.executable).with_name("nomad-device-launcher")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOMAD_")}
    env.update(NOMAD_ADDR=address, NO_COLOR="1")
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.hcl"
        job.write_text(JOB)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            [str(launcher), "check", "--json", str(job), "--nomad"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    server.stdin.close()
    asked = json.loads(server.stdout.readline())
    server.wait(30)
    if done.returncode not in (0, 1):
        sys.exit(f"check failed ({done.returncode}): {done.stderr}")
    report = json.loads(done.stdout)
    judged = report["TaskGroups"][0]["Nodes"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rss = after.ru_maxrss / 1024
    size = f"{args.nodes} nodes, {args.allocations} allocations"
    print(f"cluster: {size}, {args.delay * 1000:g} ms added to every answer")
    print(f"judged: {len(judged)} nodes, {sum(e['Outcome'] == 'places' for e in judged)} place")
    kinds = [_endpoint(p) for p in asked]
    counted = ", ".join(f"{kinds.count(k)} {k}" for k in sorted(set(kinds)))
    print(f"requests: {len(asked)} ({counted})")
    print(f"wall: {wall:.2f} s   cpu: {cpu:.2f} s   peak RSS: {rss:.0f} MiB")
    print(f"per node: {wall / args.nodes * 1e6:.0f} us wall, {cpu / args.nodes * 1e6:.0f} us cpu")


if __name__ == "__main__":
    main()
