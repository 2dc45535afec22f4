"""Where a task group's devices come from on one node, decided as Nomad decides it.

Two stages of Nomad's scheduler look at devices, and both are reproduced:

1. the *feasibility* check (``DeviceChecker.hasDevices`` in
   ``scheduler/feasible/feasible.go``): healthy instances only, allocations
   ignored; it walks the node's groups in Go map order (random) and may take a
   request's count from several groups. A node that fails here is filtered
   ("missing devices");
2. the *allocation* (``BinPackIterator`` in ``rank.go`` with the device
   allocator of ``device.go`` over ``structs.DeviceAccounter``): the tasks in
   order, each task's requests in order, each from one group's free healthy
   instances (those no non-terminal allocation holds, and none an earlier
   request of this group took), honouring ``${device.ids}`` constraints per
   instance. Among the groups that can serve a request the best affinity score
   wins; among equals Go's map order decides, so every tied group is a possible
   pick. A node that fails here is exhausted ("devices: no devices match
   request").

Where Nomad's choice is random this explores every choice and reports each
outcome. Instances within a group are taken in the order the node reports them
(what Nomad was measured to do; its map order gives no guarantee).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from nomad_device.placement.attribute import Attribute
from nomad_device.placement.model import (
    Allocation,
    Constraint,
    DeviceRequest,
    Node,
    NodeDevices,
    TaskGroup,
)
from nomad_device.placement.operators import Target, evaluate, resolve
from nomad_device.golang import quote

__all__ = [
    "TERMINAL_CLIENT_STATUSES",
    "GroupEval",
    "Leaf",
    "NodeVerdict",
    "Pick",
    "check_node",
]

#: ``Allocation.ClientTerminalStatus``: allocations in these states hold nothing.
TERMINAL_CLIENT_STATUSES: Final = frozenset({"complete", "failed", "lost"})
#: How many distinct outcomes to explore before giving up on listing them all.
MAX_LEAVES: Final = 512
MAX_CHECKER_STEPS: Final = 200_000

Key = tuple[str, str, str]


@dataclass(frozen=True)
class Holder:
    """Why an instance is not free: an allocation, or an earlier request of this group."""

    allocation: Allocation | None = None
    task: str = ""
    request: str = ""

    def text(self) -> str:
        if self.allocation is not None:
            a = self.allocation
            return (
                f"held by allocation {a.short} ({a.name})"
                if a.name
                else (f"held by allocation {a.short}")
            )
        return f'taken by task "{self.task}" (device "{self.request}")'


@dataclass
class Accounter:
    """``DeviceAccounter``: healthy instances per group and who uses them."""

    groups: dict[Key, NodeDevices]
    usage: dict[Key, dict[str, list[Holder]]]

    @staticmethod
    def for_node(node: Node) -> Accounter:
        groups: dict[Key, NodeDevices] = {}
        usage: dict[Key, dict[str, list[Holder]]] = {}
        for dev in node.devices:
            groups[dev.key] = dev
            usage[dev.key] = {i.id: [] for i in dev.instances if i.healthy}
        acc = Accounter(groups, usage)
        for alloc in node.allocations:
            if alloc.client_status in TERMINAL_CLIENT_STATUSES:
                continue
            for key, ids in alloc.devices.items():
                slots = acc.usage.get(key)
                if slots is None:
                    continue
                for instance in ids:
                    if instance in slots:
                        slots[instance].append(Holder(allocation=alloc))
        return acc

    def copy(self) -> Accounter:
        return Accounter(
            self.groups, {k: {i: list(h) for i, h in v.items()} for k, v in self.usage.items()}
        )


@dataclass
class GroupEval:
    """One device group judged for one request (the explanation's unit)."""

    device: NodeDevices
    name_ok: bool
    constraint: Constraint | None = None
    why: str = ""
    #: Free, ``${device.ids}``-matching instances in reported order.
    usable: list[str] = field(default_factory=list)
    #: Instance -> why it cannot be used (unhealthy, held, excluded).
    blocked: list[tuple[str, str]] = field(default_factory=list)
    healthy: int = 0
    score: float = 0.0
    matched: float = 0.0
    wanted: int = 1

    @property
    def feasible(self) -> bool:
        return self.name_ok and self.constraint is None and len(self.usable) >= self.wanted

    def reason(self) -> str:
        """The first reason this group cannot serve the request."""
        if not self.name_ok:
            return "not the device asked for"
        if self.constraint is not None:
            return f"constraint {self.constraint} is false: {self.why}"
        free = len(self.usable)
        head = f"{free} of {self.healthy} healthy instance{'s' if self.healthy != 1 else ''} free"
        details = ", ".join(f"{i} {why}" for i, why in self.blocked)
        need = f"; count = {self.wanted}"
        if self.wanted == 0:
            return "count = 0: Nomad refuses a request of zero devices"
        return f"{head}: {details}{need}" if details else f"{head}{need}"


def _ids_ok(instance: str, constraints: tuple[Constraint, ...], dev: NodeDevices) -> str:
    """``deviceIDMatchesConstraint``: '' when the instance passes, else the constraint."""
    this = Target(instance, Attribute(string_value=instance), True, "id")
    for c in constraints:
        if c.ltarget == "${device.ids}":
            target = resolve(c.rtarget, dev)
        elif c.rtarget == "${device.ids}":
            target = resolve(c.ltarget, dev)
        else:
            continue
        # Nomad passes the *other* side first and the instance ID second.
        ok, _ = evaluate(c.operand, target, this)
        if not ok:
            return str(c)
    return ""


def device_matches(dev: NodeDevices, req: DeviceRequest) -> tuple[bool, Constraint | None, str]:
    """``nodeDeviceMatches``: name, then every constraint in order."""
    if not dev.matches(req.name):
        return False, None, ""
    for c in req.constraints:
        ok, why = evaluate(c.operand, resolve(c.ltarget, dev), resolve(c.rtarget, dev))
        if not ok:
            return True, c, why
    return True, None, ""


def _serves(dev: NodeDevices, req: DeviceRequest) -> bool:
    name_ok, failed, _ = device_matches(dev, req)
    return name_ok and failed is None


def score_group(dev: NodeDevices, req: DeviceRequest) -> tuple[float, float]:
    """``createOffer``'s score: matched weights over absolute weights, and the matched sum."""
    if not req.affinities:
        return 0.0, 0.0
    total = 0.0
    choice = 0.0
    matched = 0.0
    for a in req.affinities:
        total += math.fabs(float(a.weight))
        ok, _ = evaluate(a.operand, resolve(a.ltarget, dev), resolve(a.rtarget, dev))
        if ok:
            choice += float(a.weight)
            matched += float(a.weight)
    return choice / total, matched


def evaluate_group(acc: Accounter, dev: NodeDevices, req: DeviceRequest) -> GroupEval:
    name_ok, failed, why = device_matches(dev, req)
    ev = GroupEval(dev, name_ok, failed, why, wanted=req.count)
    if not name_ok or failed is not None:
        return ev
    slots = acc.usage.get(dev.key, {})
    ev.healthy = len(slots)
    for inst in dev.instances:
        if not inst.healthy:
            desc = f" ({quote(inst.health_description)})" if inst.health_description else ""
            ev.blocked.append((inst.id, "unhealthy" + desc))
            continue
        holders = slots.get(inst.id)
        if holders is None:
            continue  # a duplicate ID: Nomad's map keeps one entry
        if holders:
            ev.blocked.append((inst.id, "; ".join(h.text() for h in holders)))
            continue
        excluded = _ids_ok(inst.id, req.constraints, dev)
        if excluded:
            ev.blocked.append((inst.id, f"excluded by constraint {excluded}"))
            continue
        if inst.id not in ev.usable:
            ev.usable.append(inst.id)
    ev.score, ev.matched = score_group(dev, req)
    return ev


@dataclass(frozen=True)
class Pick:
    task: str
    request: DeviceRequest
    device: NodeDevices
    ids: tuple[str, ...]
    score: float
    #: Other groups that scored the same (Nomad may pick any of them).
    tied: tuple[str, ...]
    #: True when the group had more usable instances than asked for.
    instance_choice: bool


@dataclass
class Leaf:
    """One way the allocation stage can end."""

    picks: list[Pick]
    #: None on success; else the request that failed and every group's reason.
    failed_task: str | None = None
    failed_request: DeviceRequest | None = None
    evals: list[GroupEval] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.failed_request is None

    def node_score(self) -> float | None:
        """The node's "devices" score: matched weights over all absolute weights."""
        total = sum(math.fabs(float(a.weight)) for p in self.picks for a in p.request.affinities)
        if total == 0:
            return None
        matched = 0.0
        for p in self.picks:
            if p.request.affinities:
                matched += _matched(p)
        return matched / total


def _matched(p: Pick) -> float:
    return score_group(p.device, p.request)[1]


@dataclass
class NodeVerdict:
    node: Node
    group: TaskGroup
    #: "places", "may", "fails", or "none" (the group asks for no devices).
    outcome: str
    checker: frozenset[bool]
    leaves: list[Leaf]
    truncated: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def successes(self) -> list[Leaf]:
        return [leaf for leaf in self.leaves if leaf.ok]

    @property
    def failures(self) -> list[Leaf]:
        return [leaf for leaf in self.leaves if not leaf.ok]


def requests_of(group: TaskGroup) -> list[tuple[str, DeviceRequest]]:
    return [(t.name, r) for t in group.tasks for r in t.devices]


def feasibility(group: TaskGroup, node: Node) -> frozenset[bool]:
    """``DeviceChecker.hasDevices`` over every order Go's map might give."""
    reqs = [r for _, r in requests_of(group)]
    if not reqs:
        return frozenset({True})
    if not node.devices:
        return frozenset({False})
    groups = [d for d in node.devices if any(i.healthy for i in d.instances)]
    start = tuple(sum(1 for i in d.instances if i.healthy) for d in groups)
    matches = [[_serves(d, r) for d in groups] for r in reqs]
    memo: dict[tuple[int, tuple[int, ...], int], frozenset[bool]] = {}
    steps = 0

    def run(i: int, avail: tuple[int, ...]) -> frozenset[bool]:
        if i == len(reqs):
            return frozenset({True})
        return consume(i, avail, reqs[i].count)

    def consume(i: int, avail: tuple[int, ...], desired: int) -> frozenset[bool]:
        # A visited group is either what finished the request or now empty, so the
        # groups still to visit are exactly the matching ones with instances left.
        nonlocal steps
        key = (i, avail, desired)
        if key in memo:
            return memo[key]
        steps += 1
        if steps > MAX_CHECKER_STEPS:
            raise _TooMany
        options = [j for j in range(len(groups)) if avail[j] > 0 and matches[i][j]]
        out: set[bool] = set()
        if not options:
            out.add(False)
        for j in options:
            take = min(avail[j], desired)
            after = (*avail[:j], avail[j] - take, *avail[j + 1 :])
            if desired - take == 0:
                out |= run(i + 1, after)
            else:
                out |= consume(i, after, desired - take)
            if len(out) == 2:
                break
        memo[key] = frozenset(out)
        return memo[key]

    try:
        return run(0, start)
    except _TooMany:
        return frozenset({True, False})


class _TooMany(Exception):
    pass


def allocate(group: TaskGroup, node: Node) -> tuple[list[Leaf], bool]:
    """Every outcome of the allocation stage (and whether the list was cut short)."""
    reqs = requests_of(group)
    leaves: list[Leaf] = []
    truncated = False

    def step(i: int, acc: Accounter, picks: list[Pick]) -> None:
        nonlocal truncated
        if len(leaves) >= MAX_LEAVES:
            truncated = True
            return
        if i == len(reqs):
            leaves.append(Leaf(list(picks)))
            return
        task, req = reqs[i]
        evals = [evaluate_group(acc, dev, req) for dev in acc.groups.values()]
        if not acc.groups:
            leaves.append(Leaf(list(picks), task, req, evals, "no devices available"))
            return
        if req.count == 0:
            leaves.append(Leaf(list(picks), task, req, evals, "invalid request of zero devices"))
            return
        fit = [e for e in evals if e.feasible]
        if not fit:
            leaves.append(Leaf(list(picks), task, req, evals, "no devices match request"))
            return
        best = max(e.score for e in fit)
        tied = [e for e in fit if e.score == best]
        names = tuple(e.device.label for e in tied)
        for e in tied:
            ids = tuple(e.usable[: req.count])
            after = acc.copy()
            for instance in ids:
                after.usage[e.device.key][instance].append(Holder(task=task, request=req.name))
            pick = Pick(
                task,
                req,
                e.device,
                ids,
                e.score,
                tuple(n for n in names if n != e.device.label),
                len(e.usable) > req.count,
            )
            step(i + 1, after, [*picks, pick])

    if reqs:
        step(0, Accounter.for_node(node), [])
    return leaves, truncated


def allocation_outcomes(group: TaskGroup, node: Node) -> frozenset[bool]:
    """Whether the allocation stage can succeed and whether it can fail, over every
    choice among equals (memoized on what is taken, so symmetric choices cost once)."""
    reqs = requests_of(group)
    if not reqs:
        return frozenset({True})
    memo: dict[tuple[int, tuple[tuple[Key, tuple[str, ...]], ...]], frozenset[bool]] = {}
    steps = 0
    base = Accounter.for_node(node)

    def state(acc: Accounter) -> tuple[tuple[Key, tuple[str, ...]], ...]:
        return tuple(
            (key, tuple(i for i, h in slots.items() if any(x.allocation is None for x in h)))
            for key, slots in acc.usage.items()
        )

    def step(i: int, acc: Accounter) -> frozenset[bool]:
        nonlocal steps
        if i == len(reqs):
            return frozenset({True})
        key = (i, state(acc))
        if key in memo:
            return memo[key]
        steps += 1
        if steps > MAX_CHECKER_STEPS:
            raise _TooMany
        task, req = reqs[i]
        fit = [e for e in (evaluate_group(acc, d, req) for d in acc.groups.values()) if e.feasible]
        out: set[bool] = set()
        if not acc.groups or req.count == 0 or not fit:
            out.add(False)
        else:
            best = max(e.score for e in fit)
            for e in (e for e in fit if e.score == best):
                after = acc.copy()
                for instance in e.usable[: req.count]:
                    after.usage[e.device.key][instance].append(Holder(task=task, request=req.name))
                out |= step(i + 1, after)
                if len(out) == 2:
                    break
        memo[key] = frozenset(out)
        return memo[key]

    try:
        return step(0, base)
    except _TooMany:
        return frozenset({True, False})


def check_node(group: TaskGroup, node: Node) -> NodeVerdict:
    """The verdict for one task group on one node."""
    if not requests_of(group):
        return NodeVerdict(node, group, "none", frozenset({True}), [])
    checker = feasibility(group, node)
    leaves, truncated = allocate(group, node)
    possible = allocation_outcomes(group, node) if truncated else None
    any_ok = any(leaf.ok for leaf in leaves) or (possible is not None and True in possible)
    all_ok = bool(leaves) and all(leaf.ok for leaf in leaves)
    if possible is not None:
        all_ok = all_ok and False not in possible
    if True not in checker or not any_ok:
        outcome = "fails"
    elif checker == frozenset({True}) and all_ok:
        outcome = "places"
    else:
        outcome = "may"
    verdict = NodeVerdict(node, group, outcome, checker, leaves, truncated)
    if False in checker and any_ok:
        verdict.notes.append(
            "Nomad's feasibility check walks the node's device groups in random order and "
            "can use up instances a later request needs: on some evaluations it filters "
            'this node ("missing devices")'
        )
    if truncated:
        verdict.notes.append(
            f"more than {MAX_LEAVES} outcomes: the first are listed, the verdict covers all"
        )
    return verdict
