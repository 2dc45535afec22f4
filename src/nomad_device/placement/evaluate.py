"""A job against a set of nodes: which nodes Nomad would consider, and each verdict.

Nomad considers only nodes that are ready, not draining and eligible, in one of
the job's datacenters (glob patterns with ``*``) and in its node pool
(``readyNodesInDCsAndPool`` in ``scheduler/util.go``). The device check's
result is cached per computed node class (``FeasibilityWrapper``), so one node
of a class can decide for another; where that matters it is said.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace

from nomad_device.placement.model import Allocation, Job, Node, TaskGroup
from nomad_device.placement.scheduler import (
    Judgements,
    NodeVerdict,
    check_node,
    first_success,
    requests_of,
)

__all__ = [
    "GroupReport",
    "NodeEntry",
    "Report",
    "class_candidates",
    "evaluate_job",
    "node_skip_reason",
]


def _glob(pattern: str, text: str) -> bool:
    """ryanuber/go-glob: ``*`` matches any run of characters; nothing else is special."""
    return _compiled(pattern).fullmatch(text) is not None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def node_skip_reason(node: Node, job: Job, *, filters: bool) -> str:
    """Why Nomad would not consider this node for the job ('' when it would)."""
    if not filters:
        return ""
    if node.status != "ready":
        return f"not ready (status {node.status})"
    if node.draining:
        return "draining"
    if node.eligibility != "eligible":
        return f"not eligible for scheduling ({node.eligibility})"
    if job.node_pool not in ("all", "") and node.node_pool != job.node_pool:
        return f"in node pool {node.node_pool!r}, the job runs in {job.node_pool!r}"
    if not any(_glob(dc, node.datacenter) for dc in job.datacenters):
        dcs = ", ".join(job.datacenters)
        return f"in datacenter {node.datacenter!r}, not one of the job's ({dcs})"
    return ""


@dataclass
class NodeEntry:
    node: Node
    skipped: str = ""
    verdict: NodeVerdict | None = None
    #: For a group with count > 1: how many of its allocations fit here at once.
    capacity: int | None = None

    @property
    def outcome(self) -> str:
        if self.skipped:
            return "skipped"
        assert self.verdict is not None
        return self.verdict.outcome


@dataclass
class GroupReport:
    group: TaskGroup
    entries: list[NodeEntry] = field(default_factory=list)

    @property
    def asks(self) -> bool:
        return bool(requests_of(self.group))

    @property
    def places(self) -> bool:
        return not self.asks or any(e.outcome == "places" for e in self.entries)

    @property
    def may_place(self) -> bool:
        return any(e.outcome == "may" for e in self.entries)


@dataclass
class Report:
    job: Job
    source: str
    groups: list[GroupReport]

    @property
    def all_place(self) -> bool:
        return all(g.places for g in self.groups)


def evaluate_job(
    job: Job,
    nodes: list[Node],
    source: str,
    *,
    filters: bool = True,
    enterprise: bool = False,
    judge: Judgements | None = None,
) -> Report:
    """Judge every task group of the job on every node (``enterprise``: Nomad
    Enterprise's NUMA rules; Nomad CE refuses a job that asks for NUMA)."""
    judge = judge or Judgements()
    groups = []
    for group in job.groups:
        report = GroupReport(group)
        for node in nodes:
            skip = node_skip_reason(node, job, filters=filters)
            entry = NodeEntry(node, skip)
            if not skip and report.asks:
                entry.verdict = check_node(group, node, enterprise=enterprise, judge=judge)
                if group.count > 1 and entry.verdict.successes:
                    entry.capacity = capacity(group, node, enterprise=enterprise, judge=judge)
            report.entries.append(entry)
        _class_cache(report)
        groups.append(report)
    return Report(job, source, groups)


def capacity(
    group: TaskGroup,
    node: Node,
    limit: int | None = None,
    *,
    enterprise: bool = False,
    judge: Judgements | None = None,
) -> int:
    """How many allocations of the group fit on the node together.

    Nomad places a group's allocations one after another, each seeing the
    earlier ones of the same plan as holding their devices; this follows the
    first outcome each time (reported order, the first of equal groups).
    """
    wanted = group.count if limit is None else limit
    held: list[Allocation] = []
    placed = 0
    while placed < wanted:
        trial = replace(node, allocations=[*node.allocations, *held])
        leaf = first_success(group, trial, enterprise=enterprise, judge=judge)
        if leaf is None:
            break
        devices: dict[tuple[str, str, str], tuple[str, ...]] = {}
        for p in leaf.picks:
            devices[p.device.key] = devices.get(p.device.key, ()) + p.ids
        held.append(
            Allocation(
                f"planned-{placed}",
                f"{group.name}[{placed}]",
                client_status="pending",
                devices=devices,
            )
        )
        placed += 1
    return placed


def _class_cache(report: GroupReport) -> None:
    """A node whose class-mate can fail the device check may be filtered with it."""
    by_class: dict[str, list[NodeEntry]] = {}
    for e in report.entries:
        if e.verdict is not None and e.node.computed_class:
            by_class.setdefault(e.node.computed_class, []).append(e)
    for mates in by_class.values():
        failing = [e for e in mates if e.verdict is not None and False in e.verdict.checker]
        for e in mates:
            others = [m for m in failing if m is not e]
            if not others or e.verdict is None or e.verdict.outcome not in ("places", "may"):
                continue
            names = ", ".join(m.node.name or m.node.short for m in others)
            e.verdict.notes.append(
                f"shares computed class {e.node.computed_class} with {names}, which can fail "
                "Nomad's device check; Nomad caches that check per class, so when it looks at "
                f'{names} first it skips this node too ("computed class ineligible")'
            )
            e.verdict.outcome = "may"


def _class_signature(node: Node) -> tuple[object, ...]:
    """What of ``Node.ComputeClass``'s input a node list shows (its attributes and meta
    are not shown): nodes that differ here never share a computed class."""
    devices = tuple(
        (
            d.vendor,
            d.type,
            d.name,
            tuple(sorted((k, a) for k, a in d.attributes.items() if not k.startswith("unique."))),
        )
        for d in node.devices
    )
    return (node.datacenter, node.node_class, node.node_pool, devices)


def class_candidates(
    job: Job, nodes: list[Node], *, filters: bool = True, judge: Judgements | None = None
) -> list[str]:
    """The nodes whose ``ComputedClass`` can change a verdict: each considered node that
    Nomad's device check can filter, and the considered nodes that may share its class."""
    judge = judge or Judgements()
    considered = [n for n in nodes if not node_skip_reason(n, job, filters=filters)]
    groups = [g for g in job.groups if any(t.devices for t in g.tasks)]
    failing = [n for n in considered if any(False in judge.feasible(g, n) for g in groups)]
    if not failing:
        return []  # no node can be filtered: no class can carry a failure to another
    buckets: dict[tuple[object, ...], list[Node]] = {}
    for n in considered:
        buckets.setdefault(_class_signature(n), []).append(n)
    wanted: dict[str, None] = {}
    for n in failing:
        mates = buckets[_class_signature(n)]
        if len(mates) > 1:
            wanted.update(dict.fromkeys(m.id for m in mates))
    return list(wanted)
