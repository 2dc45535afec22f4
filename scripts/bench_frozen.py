"""What a value class costs to define and to construct: @frozen against @dataclass(frozen=True).

A plugin defines its value classes at every launch (the SDK's model, wire and
transport classes are on the path to the handshake), and builds them on every
scan. Timed here in CPU time of this thread, in rounds that take each case in
turn (so that a busy shared machine's drift hits all alike); the figures are
medians over the rounds, and the difference to the first case is the median
of the per-round differences:

- defining a class of four fields: ``@frozen`` with a written ``__init__``,
  ``@frozen`` with the ``__init__`` it makes from the fields, and
  ``@dataclass(frozen=True)``, whose generated source is ``exec``-ed;
- constructing an instance of each (three arguments given, one defaulted).

Run (about half a minute):

    .venv/bin/python scripts/bench_frozen.py [--old PATH] [--rounds 300]

``--old`` names another version of ``frozen.py`` (``git show
REV:src/nomad_device/frozen.py > /tmp/frozen_old.py``) to time first, with a
written ``__init__``.

``--launches N`` times what it saves where it counts instead: the installed
console script (``nomad-device-example``), launched as Nomad launches it, to
its handshake line, N times each way in turn: as installed, and with
``@frozen`` replaced by ``@dataclass(frozen=True)`` before the script's
imports. It prints the median CPU time and wall time to the handshake, and
the median of the per-pair differences.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nomad_device import frozen as current

set_field = object.__setattr__


def written() -> type:
    class Device:
        """A device, with the __init__ written out."""

        id: str
        healthy: bool = True
        health_description: str = ""
        pci_bus_id: str | None = None

        def __init__(
            self,
            id: str,
            healthy: bool = True,
            health_description: str = "",
            pci_bus_id: str | None = None,
        ) -> None:
            set_field(self, "id", id)
            set_field(self, "healthy", healthy)
            set_field(self, "health_description", health_description)
            set_field(self, "pci_bus_id", pci_bus_id)

    return Device


def bare() -> type:
    class Device:
        """A device: fields only."""

        id: str
        healthy: bool = True
        health_description: str = ""
        pci_bus_id: str | None = None

    return Device


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    start = time.thread_time_ns()
    for _ in range(calls):
        fn()
    return (time.thread_time_ns() - start) / calls / 1000


def measure(
    cases: dict[str, Callable[[], object]], rounds: int, calls: int, unit: str = "us"
) -> None:
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            samples[name].append(per_call_us(fn, calls))
    first = next(iter(samples.values()))
    for name, values in samples.items():
        delta = statistics.median(a - b for a, b in zip(values, first, strict=True))
        scale = 1.0 if unit == "us" else 1000.0
        print(
            f"  {name:34} {statistics.median(values) * scale:7.1f} {unit}"
            f"   ({delta * scale:+.1f} {unit} against the first)"
        )


#: Run before the console script: every ``@frozen`` class becomes a plain frozen dataclass.
_PLAIN = (
    "import dataclasses, runpy, sys, nomad_device.frozen as f;"
    "f.frozen = lambda cls: dataclasses.dataclass(frozen=True)(cls);"
    "sys.argv = [sys.argv[1]]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def _to_handshake(command: list[str]) -> tuple[float, float]:
    """CPU and wall milliseconds from exec to the handshake line."""
    from nomad_device.constants import NOMAD_HANDSHAKE

    env = {**os.environ, NOMAD_HANDSHAKE.magic_cookie_key: NOMAD_HANDSHAKE.magic_cookie_value}
    env["PLUGIN_PROTOCOL_VERSIONS"] = "2"
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    wall = (time.perf_counter() - start) * 1000
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
    proc.kill()
    proc.wait(10)
    if line.count(b"|") < 4:
        raise RuntimeError(f"{command}: no handshake ({line!r})")
    return cpu, wall


def launches(count: int) -> None:
    script = shutil.which("nomad-device-example", path=os.path.dirname(sys.executable))
    assert script is not None, "nomad-device-example is not installed beside this python"
    subjects = {
        "installed script (@frozen)": [sys.executable, script],
        "same, @dataclass(frozen=True)": [sys.executable, "-c", _PLAIN, script],
    }
    cpu: dict[str, list[float]] = {name: [] for name in subjects}
    wall: dict[str, list[float]] = {name: [] for name in subjects}
    for _ in range(count + 1):  # the first round warms the page cache and is dropped
        for name, command in subjects.items():
            c, w = _to_handshake(command)
            cpu[name].append(c)
            wall[name].append(w)
    print(f"python {platform.python_version()}, {script}, {count} launches each, in turn")
    first = next(iter(subjects))
    for name in subjects:
        dcpu = statistics.median(a - b for a, b in zip(cpu[name][1:], cpu[first][1:], strict=True))
        dwall = statistics.median(
            a - b for a, b in zip(wall[name][1:], wall[first][1:], strict=True)
        )
        print(
            f"  {name:30} CPU {statistics.median(cpu[name][1:]):6.1f} ms ({dcpu:+.1f}),"
            f" wall {statistics.median(wall[name][1:]):6.1f} ms ({dwall:+.1f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, help="another frozen.py to time beside this one")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--launches", type=int, help="time the installed script instead")
    args = parser.parse_args()
    if args.launches:
        launches(args.launches)
        return
    makers: dict[str, Callable[[], type]] = {
        "@frozen, written __init__": lambda: current.frozen(written()),
        "@frozen, made __init__": lambda: current.frozen(bare()),
        "@dataclass(frozen=True)": lambda: dataclasses.dataclass(frozen=True)(bare()),
    }
    if args.old is not None:
        spec = importlib.util.spec_from_file_location("frozen_old", args.old)
        assert spec is not None and spec.loader is not None
        old: Any = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        makers = {"--old @frozen, written __init__": lambda: old.frozen(written()), **makers}
    print(f"python {platform.python_version()}, CPU time of one thread, {args.rounds} rounds")
    print("define a class of four fields (a class statement alone included):")
    measure(dict(makers), args.rounds, 10)
    print("construct one:")
    built = {name: make() for name, make in makers.items()}
    measure(
        {name: (lambda cls=cls: cls("d1", False, "x")) for name, cls in built.items()},
        args.rounds // 3,
        2000,
        "ns",
    )


if __name__ == "__main__":
    sys.exit(main())
