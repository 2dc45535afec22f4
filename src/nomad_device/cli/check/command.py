"""``nomad-device-launcher check JOB``: gather the devices from one source and judge the job."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from nomad_device.cli import nomadjson
from nomad_device.cli.check.explain import render_json, render_text
from nomad_device.placement.evaluate import class_candidates, evaluate_job, node_skip_reason
from nomad_device.placement.jobspec import JobError, load_job
from nomad_device.placement.model import Job, Node
from nomad_device.placement.nodes import NodeError, load_nodes, node_from_groups
from nomad_device.placement.scheduler import Judgements

if TYPE_CHECKING:
    from nomad_device.cli.commands import App

__all__ = ["run_check"]


def run_check(app: App) -> int:
    # A cluster's nodes and allocations are hundreds of thousands of objects, none of
    # them in a reference cycle: the cyclic collector would walk them all again and again
    # while they are built (a third of the reading time at 10,000 nodes).
    from nomad_device.cli.commands import Failure

    gc.disable()
    try:
        return _check(app)
    except Failure as exc:
        exc.code = max(exc.code, 2)  # an error, never a verdict: 1 means "does not place"
        raise
    finally:
        gc.enable()


def _check(app: App) -> int:
    from nomad_device.cli.commands import Failure

    opts = app.opts
    if not opts.job:
        raise Failure("check needs a job file: check JOB [--node FILE | --nomad | PLUGIN]", 2)
    chosen = [
        s
        for s, on in (
            ("a plugin", bool(opts.plugin)),
            ("--node", opts.node_file is not None),
            ("--nomad", opts.nomad),
        )
        if on
    ]
    if len(chosen) != 1:
        what = " and ".join(chosen) if chosen else "none"
        raise Failure(
            "check takes exactly one source of devices: a PLUGIN, --node FILE or --nomad "
            f"(given: {what})",
            2,
        )
    if opts.job == "-" and opts.node_file == "-":
        raise Failure("the job and --node cannot both come from stdin", 2)
    try:
        job = load_job(opts.job, opts.variables, opts.var_files, enterprise=opts.enterprise)
    except JobError as exc:
        raise Failure(str(exc), 2) from None
    filters = True
    judge = Judgements()
    if opts.plugin:
        nodes, source = _from_plugin(app), "the first fingerprint of the plugin"
        filters = False
    elif opts.node_file is not None:
        try:
            nodes = load_nodes(opts.node_file)
        except NodeError as exc:
            raise Failure(str(exc), 2) from None
        source = f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} from {opts.node_file}"
    else:
        nodes, source = _from_cluster(job, judge)
    report = evaluate_job(
        job, nodes, source, filters=filters, enterprise=opts.enterprise, judge=judge
    )
    if opts.json:
        app.console.print(nomadjson.dumps_prepared(render_json(report)), raw=True)
    else:
        app.console.print(render_text(report, app.style))
    return 0 if report.all_place else 1


def _from_plugin(app: App) -> list[Node]:
    opened = app.open()
    pump, groups = app.first_fingerprint(opened)
    pump.cancel()
    from nomad_device.placement.hosttopology import host_topology

    return [node_from_groups(groups, opened.info.name or "plugin", host_topology())]


def _from_cluster(job: Job, judge: Judgements) -> tuple[list[Node], str]:
    from nomad_device.cli.commands import Failure
    from nomad_device.placement.cluster import ApiConfig, ApiError, read_cluster

    cfg = ApiConfig.from_env()
    try:
        return read_cluster(
            cfg,
            lambda node: not node_skip_reason(node, job, filters=True),
            lambda nodes: class_candidates(job, nodes, judge=judge),
        )
    except ApiError as exc:
        raise Failure(str(exc), 2) from None
    except NodeError as exc:
        raise Failure(f"unexpected answer from Nomad: {exc}", 2) from None
