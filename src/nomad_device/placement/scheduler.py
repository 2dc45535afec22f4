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
   request of this group took), honouring ``${device.ids}`` constraints and
   the NUMA matcher per instance. A node that fails here is exhausted
   ("devices: no devices match request").

Nomad's choices are random where it ranges over Go maps: among the groups
that score best, any may win; within a group, any of the usable instances may
be taken. One walk (:class:`_Walk`) explores them all, with memoisation on
what is taken so that symmetric choices cost once, and lists the distinct
outcomes. Instances that no later request tells apart (no ``${device.ids}``
constraint, no NUMA binding) are interchangeable, so one choice stands for all
of them: the first ones in the order the node reports them, which is what
Nomad was measured to take most of the time.

Nomad stops at the first request it cannot meet. To explain a job in one run,
the walk goes on after that request (taking the first choice everywhere, and
nothing for the request that failed) and reports every request that fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Final, NamedTuple

from nomad_device.golang import quote
from nomad_device.placement.attribute import Attribute
from nomad_device.placement.model import (
    Allocation,
    Constraint,
    DeviceRequest,
    Node,
    NodeDevices,
    Task,
    TaskGroup,
)
from nomad_device.placement.operators import Target, evaluate, resolve

__all__ = [
    "ANY_MEMORY_NODE",
    "MAX_LEAVES",
    "TERMINAL_CLIENT_STATUSES",
    "Failure",
    "GroupEval",
    "Judgements",
    "Leaf",
    "NodeVerdict",
    "Pick",
    "check_node",
    "feasibility",
    "first_success",
    "requests_of",
]

#: ``Allocation.ClientTerminalStatus``: allocations in these states hold nothing.
TERMINAL_CLIENT_STATUSES: Final = frozenset({"complete", "failed", "lost"})
#: How many distinct outcomes to list before only deciding what is possible.
MAX_LEAVES: Final = 512
#: How many states to visit before giving up on deciding (the verdict is then "may").
MAX_STEPS: Final = 200_000
#: ``memoryNodeMatcher.memoryNode`` when the task does not care (Nomad CE, always).
ANY_MEMORY_NODE: Final = -1

Key = tuple[str, str, str]


class Holder(NamedTuple):
    """Why an instance is not free: an allocation, or an earlier request of this group."""

    allocation: Allocation | None = None
    task: str = ""
    request: str = ""
    #: Taken by a NUMA attempt that failed and was not undone (see :meth:`_Walk.attempts`).
    stale: bool = False

    def text(self) -> str:
        if self.allocation is not None:
            a = self.allocation
            return (
                f"held by allocation {a.short} ({a.name})"
                if a.name
                else (f"held by allocation {a.short}")
            )
        left = " by an earlier NUMA attempt" if self.stale else ""
        return f'taken{left} by task "{self.task}" (device "{self.request}")'


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
        if self.wanted == 0:
            return "count = 0: Nomad refuses a request of zero devices"
        free = len(self.usable)
        head = f"{free} of {self.healthy} healthy instance{'s' if self.healthy != 1 else ''} free"
        details = ", ".join(f"{i} {why}" for i, why in self.blocked)
        need = f"; count = {self.wanted}"
        return f"{head}: {details}{need}" if details else f"{head}{need}"


def device_matches(dev: NodeDevices, req: DeviceRequest) -> tuple[bool, Constraint | None, str]:
    """``nodeDeviceMatches``: name, then every constraint in order."""
    if not dev.matches(req.name):
        return False, None, ""
    for c in req.constraints:
        ok, why = evaluate(c.operand, resolve(c.ltarget, dev), resolve(c.rtarget, dev))
        if not ok:
            return True, c, why
    return True, None, ""


def score_group(dev: NodeDevices, req: DeviceRequest) -> tuple[float, float]:
    """``createOffer``'s score: matched weights over absolute weights, and the matched sum."""
    if not req.affinities:
        return 0.0, 0.0
    total = 0.0
    matched = 0.0
    for a in req.affinities:
        total += math.fabs(float(a.weight))
        ok, _ = evaluate(a.operand, resolve(a.ltarget, dev), resolve(a.rtarget, dev))
        if ok:
            matched += float(a.weight)
    return matched / total, matched


def _ids_constraint(instance: str, constraints: tuple[Constraint, ...], dev: NodeDevices) -> str:
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


def _filters_instances(req: DeviceRequest) -> bool:
    return any("${device.ids}" in (c.ltarget, c.rtarget) for c in req.constraints)


class Pick(NamedTuple):
    """What one request took: a group and instance IDs."""

    task: str
    request: DeviceRequest
    device: NodeDevices
    ids: tuple[str, ...]
    score: float
    #: Other groups that scored the same (Nomad may pick any of them).
    tied: tuple[str, ...]
    #: True when the group had more usable instances than asked for.
    instance_choice: bool
    #: The NUMA node the task's devices were bound to (-1: none).
    memory_node: int = ANY_MEMORY_NODE
    #: The sum of the weights of the affinities the group matched.
    matched: float = 0.0


@dataclass(frozen=True)
class Failure:
    """A request that could not be met, with every group's reason."""

    task: str
    request: DeviceRequest
    evals: tuple[GroupEval, ...]
    error: str
    memory_node: int = ANY_MEMORY_NODE


@dataclass
class Leaf:
    """One way the allocation stage can end."""

    picks: list[Pick]
    #: Empty on success; else the request Nomad stopped at, then every later one that
    #: fails too (judged after the first with the first choice everywhere).
    failures: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def evals(self) -> list[GroupEval]:
        return list(self.failures[0].evals) if self.failures else []

    @property
    def error(self) -> str:
        return self.failures[0].error if self.failures else ""

    def node_score(self) -> float | None:
        """The node's "devices" score: matched weights over all absolute weights."""
        total = sum(math.fabs(float(a.weight)) for p in self.picks for a in p.request.affinities)
        if total == 0:
            return None
        matched = sum(p.matched for p in self.picks)
        return matched / total


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


# ---------------------------------------------------------------- feasibility


class _TooMany(Exception):
    pass


def _serves(answer: tuple[bool, Constraint | None, str]) -> bool:
    return answer[0] and answer[1] is None


class Judgements:
    """What a device group answers to a request (name and constraints, affinity score),
    kept across nodes: groups that look alike (vendor, type, name, attributes, and the
    instance IDs where a request reads ``${device.ids}``) answer alike, and a fleet's
    nodes mostly look alike. Also each node's feasibility outcomes, asked twice (for the
    computed classes that matter, then for the verdict). One per job."""

    def __init__(self) -> None:
        self._looks: dict[tuple[object, ...], int] = {}
        self._of: dict[int, tuple[object, int]] = {}
        self._kept: dict[int, object] = {}
        self._matches: dict[tuple[object, ...], tuple[bool, Constraint | None, str]] = {}
        self._scores: dict[tuple[object, ...], tuple[float, float]] = {}
        self._feasible: dict[tuple[int, int], frozenset[bool]] = {}
        self._reads: dict[int, bool] = {}

    def _look(self, dev: NodeDevices) -> int:
        known = self._of.get(id(dev))
        if known is None or known[0] is not dev:
            attrs = self._of.get(id(dev.attributes))
            if attrs is None or attrs[0] is not dev.attributes:
                look = tuple(dev.attributes.items())
                attrs = self._of[id(dev.attributes)] = (
                    dev.attributes,
                    self._looks.setdefault(look, len(self._looks)),
                )
            full = (dev.vendor, dev.type, dev.name, attrs[1])
            known = self._of[id(dev)] = (dev, self._looks.setdefault(full, len(self._looks)))
        return known[1]

    def _key(self, dev: NodeDevices, req: DeviceRequest) -> tuple[object, ...]:
        reads = self._reads.get(id(req))
        if reads is None:
            self._kept[id(req)] = req  # the ID stays this request's
            reads = self._reads[id(req)] = _reads_ids(req)
        if reads:
            return (self._look(dev), id(req), tuple(i.id for i in dev.instances))
        return (self._look(dev), id(req))

    def match(self, dev: NodeDevices, req: DeviceRequest) -> tuple[bool, Constraint | None, str]:
        key = self._key(dev, req)
        got = self._matches.get(key)
        if got is None:
            got = self._matches[key] = device_matches(dev, req)
        return got

    def score(self, dev: NodeDevices, req: DeviceRequest) -> tuple[float, float]:
        """The group's affinity score for the request, and the weights it matched."""
        key = self._key(dev, req)
        got = self._scores.get(key)
        if got is None:
            got = self._scores[key] = score_group(dev, req)
        return got

    def feasible(self, group: TaskGroup, node: Node) -> frozenset[bool]:
        key = (id(group), id(node))
        got = self._feasible.get(key)
        if got is None:
            self._kept.setdefault(id(group), group)
            self._kept.setdefault(id(node), node)
            got = self._feasible[key] = feasibility(group, node, self)
        return got


def _reads_ids(req: DeviceRequest) -> bool:
    targets = [t for c in req.constraints for t in (c.ltarget, c.rtarget)]
    targets += [t for a in req.affinities for t in (a.ltarget, a.rtarget)]
    return "${device.ids}" in targets


def feasibility(group: TaskGroup, node: Node, judge: Judgements | None = None) -> frozenset[bool]:
    """``DeviceChecker.hasDevices`` over every order Go's map might give."""
    reqs = [r for _, r in requests_of(group)]
    if not reqs:
        return frozenset({True})
    if not node.devices:
        return frozenset({False})
    groups = [d for d in node.devices if any(i.healthy for i in d.instances)]
    start = tuple(sum(1 for i in d.instances if i.healthy) for d in groups)
    judge = judge or Judgements()
    matches = [[_serves(judge.match(d, r)) for d in groups] for r in reqs]
    if len(reqs) == 1:
        # One request takes from the matching groups until it has its count, in whatever
        # order: the order cannot change the sum.
        return frozenset(
            {sum(n for n, ok in zip(start, matches[0], strict=True) if ok) >= reqs[0].count}
        )
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
        if steps > MAX_STEPS:
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


# ----------------------------------------------------------------- allocation

#: What this walk's requests took: per group (in the accounter's order), instance -> holder.
#: Never changed in place: a step that takes copies the one group's map.
Taken = tuple[dict[str, Holder], ...]


class _Offer(NamedTuple):
    group: int
    usable: tuple[str, ...]
    score: float
    matched: float


class _TaskPlan(NamedTuple):
    #: Its place among the tasks that ask for devices (the others are skipped).
    pos: int
    #: Where its requests start in the walk's flat list of requests.
    first: int
    task: Task
    #: Which NUMA nodes to try the task's devices on, in an order Nomad does not say.
    memory_nodes: tuple[int, ...]
    #: Labels of the groups whose instances must sit on the chosen NUMA node.
    bound: frozenset[str]


class _Walk:
    """Every way the allocation stage can go for one task group on one node."""

    def __init__(
        self, group: TaskGroup, node: Node, judge: Judgements, *, enterprise: bool = False
    ) -> None:
        self.node = node
        self.judge = judge
        by_key: dict[Key, NodeDevices] = {}
        for dev in node.devices:
            by_key[dev.key] = dev  # Nomad's accounter is a map: the last group of a key wins
        self.groups = list(by_key.values())
        self.index = {dev.key: gi for gi, dev in enumerate(self.groups)}
        #: Healthy instances per group, in reported order, each once.
        self.healthy: list[dict[str, None]] = [
            dict.fromkeys(i.id for i in dev.instances if i.healthy) for dev in self.groups
        ]
        #: Per group: instance -> the non-terminal allocations that hold it.
        self.held: list[dict[str, list[Allocation]]] = [{} for _ in self.groups]
        for alloc in node.allocations:
            if alloc.client_status in TERMINAL_CLIENT_STATUSES:
                continue
            for key, ids in alloc.devices.items():
                gi = self.index.get(key)
                if gi is None:
                    continue
                for instance in ids:
                    if instance in self.healthy[gi]:
                        self.held[gi].setdefault(instance, []).append(alloc)
        self.plans: list[_TaskPlan] = []
        first = 0
        for t in group.tasks:
            if t.devices:
                self.plans.append(self._plan(len(self.plans), first, t, enterprise))
                first += len(t.devices)
        self.unknown_locality = False
        self.instance_branches = False
        self.leaves: list[Leaf] = []
        self.truncated = False
        self._listing = True
        self._steps = 0
        self._memo: dict[tuple[object, ...], frozenset[bool]] = {}
        self._id_ok: dict[tuple[int, int, str], str] = {}
        self._requests = [r for p in self.plans for r in p.task.devices]

    def _plan(self, index: int, first: int, task: Task, enterprise: bool) -> _TaskPlan:
        numa = task.numa
        if not enterprise or numa is None or numa.affinity != "require":
            return _TaskPlan(index, first, task, (ANY_MEMORY_NODE,), frozenset())
        bound = frozenset(numa.devices) & {dev.label for dev in self.groups}
        if not bound:
            # Nomad CE asks for any memory node; without bound devices every node is alike.
            return _TaskPlan(index, first, task, (ANY_MEMORY_NODE,), frozenset())
        topo = self.node.topology
        if topo is None or not topo.nodes:
            self.unknown_locality = True
            return _TaskPlan(index, first, task, (ANY_MEMORY_NODE,), frozenset())
        return _TaskPlan(index, first, task, tuple(topo.nodes), bound)

    # -- per-instance and per-group judgements, cached ------------------------------

    def _match(self, gi: int, ri: int) -> tuple[bool, Constraint | None, str]:
        return self.judge.match(self.groups[gi], self._requests[ri])

    def _score(self, gi: int, ri: int) -> tuple[float, float]:
        return self.judge.score(self.groups[gi], self._requests[ri])

    def _excluded(self, gi: int, ri: int, instance: str) -> str:
        req = self._requests[ri]
        if not _filters_instances(req):
            return ""
        key = (gi, ri, instance)
        got = self._id_ok.get(key)
        if got is None:
            got = self._id_ok[key] = _ids_constraint(instance, req.constraints, self.groups[gi])
        return got

    def _local(self, plan: _TaskPlan, memory: int, gi: int, instance: str) -> bool:
        """``memoryNodeMatcher.Matches``."""
        if memory == ANY_MEMORY_NODE:
            return True
        dev = self.groups[gi]
        if dev.label not in plan.bound:
            return True
        topo = self.node.topology
        assert topo is not None
        for inst in dev.instances:
            if inst.id != instance or inst.pci_bus_id is None:
                continue
            if topo.bus is None:
                self.unknown_locality = True
                return True
            node = topo.numa_node_of(inst.pci_bus_id)
            if node is not None:
                return node == memory
        return False

    # -- createOffer ------------------------------------------------------------------

    def _offers(self, plan: _TaskPlan, memory: int, ri: int, taken: Taken) -> list[_Offer]:
        req = self._requests[ri]
        out = []
        for gi in range(len(self.groups)):
            name_ok, failed, _ = self._match(gi, ri)
            if not name_ok or failed is not None:
                continue
            mine, held = taken[gi], self.held[gi]
            usable = tuple(i for i in self.healthy[gi] if i not in mine and i not in held)
            if memory != ANY_MEMORY_NODE:
                usable = tuple(i for i in usable if self._local(plan, memory, gi, i))
            if _filters_instances(req):
                usable = tuple(i for i in usable if not self._excluded(gi, ri, i))
            if len(usable) >= req.count:
                score, matched = self._score(gi, ri)
                out.append(_Offer(gi, usable, score, matched))
        return out

    def _evals(self, plan: _TaskPlan, memory: int, ri: int, taken: Taken) -> tuple[GroupEval, ...]:
        """Every group judged for the request, with the reasons, for the explanation."""
        req = self._requests[ri]
        out = []
        for gi, dev in enumerate(self.groups):
            name_ok, failed, why = self._match(gi, ri)
            ev = GroupEval(dev, name_ok, failed, why, wanted=req.count)
            out.append(ev)
            if not name_ok or failed is not None:
                continue
            ev.healthy = len(self.healthy[gi])
            mine = taken[gi]
            seen: set[str] = set()
            for inst in dev.instances:
                if inst.id in seen:
                    continue  # a duplicate ID: Nomad's map keeps one entry
                seen.add(inst.id)
                if not inst.healthy:
                    desc = f" ({quote(inst.health_description)})" if inst.health_description else ""
                    ev.blocked.append((inst.id, "unhealthy" + desc))
                    continue
                holders = [Holder(allocation=a) for a in self.held[gi].get(inst.id, ())]
                if inst.id in mine:
                    holders.append(mine[inst.id])
                if holders:
                    ev.blocked.append((inst.id, "; ".join(h.text() for h in holders)))
                    continue
                if not self._local(plan, memory, gi, inst.id):
                    ev.blocked.append((inst.id, f"not on NUMA node {memory}"))
                    continue
                excluded = self._excluded(gi, ri, inst.id)
                if excluded:
                    ev.blocked.append((inst.id, f"excluded by constraint {excluded}"))
                    continue
                ev.usable.append(inst.id)
            ev.score, ev.matched = score_group(dev, req)
        return tuple(out)

    def _error(self, plan: _TaskPlan, memory: int, ri: int, taken: Taken) -> str:
        if not self.groups:
            return "no devices available"
        if self._requests[ri].count == 0:
            return "invalid request of zero devices"
        return "no devices match request"

    def _choices(self, plan: _TaskPlan, ri: int, offer: _Offer) -> Iterator[tuple[str, ...]]:
        """The instance sets Nomad may take: one per way to take them from the classes of
        instances that later requests tell apart, the reported order's first."""
        want = self._requests[ri].count
        usable = offer.usable
        if len(usable) == want:
            yield usable
            return
        later = self._later(plan, ri)
        if not later:
            yield usable[:want]
            return
        classes: dict[tuple[object, ...], list[str]] = {}
        for i in usable:
            classes.setdefault(tuple(f(offer.group, i) for f in later), []).append(i)
        members = list(classes.values())
        if len(members) == 1:
            yield usable[:want]
            return
        first = usable[:want]
        counts0 = tuple(sum(1 for i in first if i in m) for m in members)
        order = {i: n for n, i in enumerate(usable)}
        for counts in [counts0, *(c for c in _compositions(want, members) if c != counts0)]:
            if counts != counts0:
                self.instance_branches = True
            picked = [i for m, n in zip(members, counts, strict=True) for i in m[:n]]
            yield tuple(sorted(picked, key=order.__getitem__))

    def _later(self, plan: _TaskPlan, ri: int) -> list[Callable[[int, str], bool]]:
        """Per-instance tests of the requests still to come (this task's too: a NUMA
        attempt that fails runs them again)."""
        tests: list[Callable[[int, str], bool]] = [
            partial(self._passes, rj)
            for rj in range(plan.first, len(self._requests))
            if rj != ri and _filters_instances(self._requests[rj])
        ]
        for p in self.plans:
            if p.pos >= plan.pos and p.bound:
                tests.extend(partial(self._local, p, m) for m in p.memory_nodes)
        return tests

    def _passes(self, ri: int, gi: int, instance: str) -> bool:
        return self._excluded(gi, ri, instance) == ""

    # -- the walk ---------------------------------------------------------------------

    def run(self) -> frozenset[bool]:
        empty: Taken = tuple({} for _ in self.groups)
        try:
            return self._tasks(0, empty, ())
        except _TooMany:
            self.truncated = True
            return frozenset({True, False})

    def _tick(self) -> None:
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise _TooMany
        if self._listing and len(self.leaves) >= MAX_LEAVES:
            self._listing = False
            self.truncated = True

    def _tasks(self, ti: int, taken: Taken, picks: tuple[Pick, ...]) -> frozenset[bool]:
        if ti == len(self.plans):
            if self._listing:
                self.leaves.append(Leaf(list(picks)))
            return frozenset({True})
        plan = self.plans[ti]
        return self._attempts(plan, 0, plan.memory_nodes, taken, taken, picks)

    def _attempts(
        self,
        plan: _TaskPlan,
        k: int,
        remaining: tuple[int, ...],
        base: Taken,
        start: Taken,
        picks: tuple[Pick, ...],
    ) -> frozenset[bool]:
        """The task's devices on each candidate NUMA node in turn, until one serves all.

        Nomad snapshots the allocator before the first attempt and restores it after
        each failure, but then keeps using the restored object: what the second and
        later attempts took before failing stays taken for the next one (rank.go,
        ``SELECT_BY_NUMA_WITHOUT_EVICT``). So attempt 0 and 1 start from ``base`` and
        attempt k >= 2 from where attempt k-1 stopped.
        """
        out: set[bool] = set()
        orders = dict.fromkeys(remaining) if len(remaining) > 1 else remaining
        for memory in orders:
            rest = tuple(m for m in remaining if m != memory)
            out |= self._requests_from(plan, k, memory, rest, 0, base, start, picks)
            if len(out) == 2 and not self._listing:
                break
        return frozenset(out)

    def _requests_from(
        self,
        plan: _TaskPlan,
        k: int,
        memory: int,
        rest: tuple[int, ...],
        step: int,
        base: Taken,
        taken: Taken,
        picks: tuple[Pick, ...],
    ) -> frozenset[bool]:
        self._tick()
        # While outcomes are listed every path is walked; the memo serves the rest.
        key = None
        if not self._listing:
            key = (plan.pos, k, memory, rest, step, _state(base), _state(taken))
            hit = self._memo.get(key)
            if hit is not None:
                return hit
        task = plan.task
        if step == len(task.devices):
            result = self._tasks(plan.pos + 1, taken, picks)
            self._remember(key, result)
            return result
        ri = plan.first + step
        req = self._requests[ri]
        offers = self._offers(plan, memory, ri, taken) if req.count else []
        if not self.groups or not offers:
            if rest:
                # Nomad undoes this attempt (from the second on, not quite) and tries the
                # next NUMA node.
                after = base if k == 0 else _stale(taken)
                kept = picks[: len(picks) - step]
                result = self._attempts(plan, k + 1, rest, base, after, kept)
            else:
                if self._listing:
                    self.leaves.append(self._failed(plan, memory, ri, taken, picks))
                result = frozenset({False})
            self._remember(key, result)
            return result
        best = max(o.score for o in offers)
        tied = [o for o in offers if o.score == best]
        names = tuple(self.groups[o.group].label for o in tied)
        out: set[bool] = set()
        for o in tied:
            dev = self.groups[o.group]
            for ids in self._choices(plan, ri, o):
                holder = Holder(task=task.name, request=req.name)
                after = _take(taken, o.group, ids, holder)
                pick = Pick(
                    task.name,
                    req,
                    dev,
                    ids,
                    o.score,
                    tuple(n for n in names if n != dev.label),
                    len(o.usable) > req.count,
                    memory,
                    o.matched,
                )
                out |= self._requests_from(
                    plan, k, memory, rest, step + 1, base, after, (*picks, pick)
                )
                if len(out) == 2 and not self._listing:
                    break
            if len(out) == 2 and not self._listing:
                break
        result = frozenset(out)
        self._remember(key, result)
        return result

    def _remember(self, key: tuple[object, ...] | None, result: frozenset[bool]) -> None:
        if key is not None:
            self._memo[key] = result

    def _failed(
        self, plan: _TaskPlan, memory: int, ri: int, taken: Taken, picks: tuple[Pick, ...]
    ) -> Leaf:
        """The leaf Nomad stops at, with every later request judged too."""
        failures = [
            Failure(
                plan.task.name,
                self._requests[ri],
                self._evals(plan, memory, ri, taken),
                self._error(plan, memory, ri, taken),
                memory,
            )
        ]
        state = taken
        for p in self.plans:
            if p.pos < plan.pos:
                continue
            m = memory if p is plan else p.memory_nodes[0]
            for rj in range(p.first, p.first + len(p.task.devices)):
                if rj <= ri:
                    continue
                req = self._requests[rj]
                offers = self._offers(p, m, rj, state) if req.count else []
                if not offers:
                    failures.append(
                        Failure(
                            p.task.name,
                            req,
                            self._evals(p, m, rj, state),
                            self._error(p, m, rj, state),
                            m,
                        )
                    )
                    continue
                best = max(o.score for o in offers)
                o = next(o for o in offers if o.score == best)
                ids = next(self._choices(p, rj, o))
                state = _take(state, o.group, ids, Holder(task=p.task.name, request=req.name))
        return Leaf(list(picks), failures)


def _state(taken: Taken) -> tuple[frozenset[str], ...]:
    return tuple(frozenset(g) for g in taken)


def _take(taken: Taken, gi: int, ids: Sequence[str], holder: Holder) -> Taken:
    return (*taken[:gi], {**taken[gi], **dict.fromkeys(ids, holder)}, *taken[gi + 1 :])


def _stale(taken: Taken) -> Taken:
    return tuple(
        {i: Holder(h.allocation, h.task, h.request, stale=True) for i, h in g.items()}
        for g in taken
    )


def _compositions(want: int, members: list[list[str]]) -> Iterator[tuple[int, ...]]:
    """Ways to take ``want`` instances from classes of the given sizes."""

    def rec(i: int, left: int) -> Iterator[tuple[int, ...]]:
        if i == len(members):
            if left == 0:
                yield ()
            return
        for n in range(min(left, len(members[i])), -1, -1):
            for tail in rec(i + 1, left - n):
                yield (n, *tail)

    yield from rec(0, want)


def check_node(
    group: TaskGroup,
    node: Node,
    *,
    enterprise: bool = False,
    judge: Judgements | None = None,
    checker: frozenset[bool] | None = None,
) -> NodeVerdict:
    """The verdict for one task group on one node (``judge``: answers shared across nodes;
    ``checker``: the feasibility outcomes when already known)."""
    if not any(t.devices for t in group.tasks):
        return NodeVerdict(node, group, "none", frozenset({True}), [])
    judge = judge or Judgements()
    checker = judge.feasible(group, node) if checker is None else checker
    walk = _Walk(group, node, judge, enterprise=enterprise)
    possible = walk.run()
    if walk.unknown_locality and True in possible:
        possible = frozenset({True, False})
    if True not in checker or True not in possible:
        outcome = "fails"
    elif checker == frozenset({True}) and possible == frozenset({True}):
        outcome = "places"
    else:
        outcome = "may"
    verdict = NodeVerdict(node, group, outcome, checker, walk.leaves, walk.truncated)
    if False in checker and True in possible:
        verdict.notes.append(
            "Nomad's feasibility check walks the node's device groups in random order and "
            "can use up instances a later request needs: on some evaluations it filters "
            'this node ("missing devices")'
        )
    if walk.instance_branches and possible == frozenset({True, False}):
        verdict.notes.append(
            "which instances Nomad takes from a group is random (Go map order), and a later "
            "request cares which (${device.ids} or NUMA): some choices leave it nothing"
        )
    if walk.unknown_locality:
        verdict.notes.append(_UNKNOWN_LOCALITY)
    if walk.truncated:
        verdict.notes.append(
            f"more than {MAX_LEAVES} outcomes: the first are listed, the verdict covers all"
        )
    return verdict


_UNKNOWN_LOCALITY: Final = (
    "the task binds devices to a NUMA node, and this node's JSON does not say which NUMA "
    "node each device's bus is on (Nomad v2.0.5's API leaves BusAssociativity out): "
    "whether the devices are local is not known here"
)


def first_success(
    group: TaskGroup,
    node: Node,
    *,
    enterprise: bool = False,
    judge: Judgements | None = None,
) -> Leaf | None:
    """The first outcome that places (reported order, the first of equal groups)."""
    walk = _Walk(group, node, judge or Judgements(), enterprise=enterprise)
    walk.run()
    return next((leaf for leaf in walk.leaves if leaf.ok), None)
