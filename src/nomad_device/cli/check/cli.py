"""The ``check`` command's own options (the common ones come from the launcher)."""

from __future__ import annotations

import argparse

__all__ = ["add_arguments"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "args",
        nargs="*",
        metavar="JOB [PLUGIN [ARGS]]",
        help="the job (HCL2 jobspec or API JSON, - for stdin), then a plugin to take devices from",
    )
    source = p.add_argument_group("where the devices come from (one)")
    source.add_argument(
        "--node",
        metavar="FILE",
        help="node JSON: `nomad node status -json <id>` or /v1/node/<id> (one node or a list; "
        "- for stdin)",
    )
    source.add_argument(
        "--nomad",
        action="store_true",
        help="every ready, eligible node of the cluster at NOMAD_ADDR (NOMAD_TOKEN, "
        "NOMAD_CACERT, ... as the nomad CLI reads them), less what allocations hold",
    )
    p.add_argument(
        "--enterprise",
        action="store_true",
        help="judge as Nomad Enterprise does: NUMA (numa { affinity devices }) is scheduled, "
        "where Nomad CE refuses the job",
    )
    job = p.add_argument_group("job variables (refused: render the job first)")
    job.add_argument("-var", "--var", action="append", metavar="K=V", help=argparse.SUPPRESS)
    job.add_argument(
        "-var-file", "--var-file", action="append", metavar="FILE", help=argparse.SUPPRESS
    )
