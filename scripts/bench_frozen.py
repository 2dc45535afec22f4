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
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import platform
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, help="another frozen.py to time beside this one")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
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
