"""Where Nomad takes a task group's devices from on one node: table-driven.

Vectors written from a reading of Nomad's scheduler (file and function above
each table); none are taken from Nomad's tests.
"""

from __future__ import annotations

import pytest

from nomad_device.placement.attribute import Attribute
from nomad_device.placement.model import (
    Affinity,
    Allocation,
    Constraint,
    DeviceRequest,
    Instance,
    Node,
    NodeDevices,
    Task,
    TaskGroup,
)
from nomad_device.placement.scheduler import check_node, feasibility

GIB = "GiB"


def t4(*instances: Instance) -> NodeDevices:
    return NodeDevices(
        "nvidia",
        "gpu",
        "T4",
        instances or (Instance("T4-0"), Instance("T4-1")),
        {"memory": Attribute(int_value=16, unit=GIB)},
    )


def a100(*instances: Instance) -> NodeDevices:
    return NodeDevices(
        "nvidia",
        "gpu",
        "A100/80GB",
        instances or (Instance("A100-0"),),
        {"memory": Attribute(int_value=80, unit=GIB)},
    )


def node(*devices: NodeDevices, allocs: tuple[Allocation, ...] = ()) -> Node:
    return Node("n1", "n1", list(devices), allocations=list(allocs))


def group(*tasks: tuple[DeviceRequest, ...]) -> TaskGroup:
    return TaskGroup("g", tuple(Task(f"t{i}", reqs) for i, reqs in enumerate(tasks)))


def req(
    name: str, count: int = 1, c: tuple[Constraint, ...] = (), a: tuple[Affinity, ...] = ()
) -> DeviceRequest:
    return DeviceRequest(name, count, c, a)


def picks(v: object) -> set[tuple[tuple[str, tuple[str, ...]], ...]]:
    return {
        tuple((p.device.name, p.ids) for p in leaf.picks)
        for leaf in v.successes  # type: ignore[attr-defined]
    }


# --- nomad/structs/structs.go: RequestedDevice.ID (SplitN on "/", 3 parts) and
# DeviceIdTuple.Matches (an empty part matches anything).
NAMES = [
    ("gpu", True),
    ("nvidia/gpu", True),
    ("nvidia/gpu/A100/80GB", True),  # the name keeps its "/"
    ("nvidia/gpu/A100", False),
    ("amd/gpu", False),
    ("fpga", False),
    ("nvidia/fpga", False),
    ("nvidia", False),  # one part is the type
    ("/gpu", True),  # empty vendor: any vendor
    ("nvidia//A100/80GB", True),  # empty type: any type
    ("//A100/80GB", True),
]


@pytest.mark.parametrize(("name", "places"), NAMES)
def test_name_forms(name: str, places: bool) -> None:
    v = check_node(group((req(name),)), node(a100()))
    assert (v.outcome == "places") is places


# --- nomad/structs/devices.go: NewDeviceAccounter (healthy instances only), AddAllocs
# (non-terminal allocations, Allocation.ClientTerminalStatus) and scheduler/feasible/
# device.go: createOffer (count from one group, instances in order, best score wins).
HEALTHY = (Instance("T4-0", healthy=False, health_description="bad"), Instance("T4-1"))
COUNTS = [
    # (devices, request, outcome, possible picks)
    ((t4(*HEALTHY),), req("nvidia/gpu/T4"), "places", {(("T4", ("T4-1",)),)}),
    ((t4(*HEALTHY),), req("nvidia/gpu/T4", 2), "fails", set()),
    ((t4(),), req("nvidia/gpu/T4", 2), "places", {(("T4", ("T4-0", "T4-1")),)}),
    # one group only: 1 healthy T4 plus 1 A100 never make 2
    ((t4(*HEALTHY), a100()), req("gpu", 2), "fails", set()),
    # equal scores: either group
    (
        (t4(*HEALTHY), a100()),
        req("gpu"),
        "places",
        {(("T4", ("T4-1",)),), (("A100/80GB", ("A100-0",)),)},
    ),
    # count = 0: createOffer refuses a request of zero devices
    ((t4(),), req("gpu", 0), "fails", set()),
    # a node without devices
    ((), req("gpu"), "fails", set()),
]


@pytest.mark.parametrize(("devices", "request_", "outcome", "want"), COUNTS)
def test_counts_and_health(
    devices: tuple[NodeDevices, ...], request_: DeviceRequest, outcome: str, want: set[object]
) -> None:
    v = check_node(group((request_,)), node(*devices))
    assert v.outcome == outcome
    assert picks(v) == want


def test_spanning_groups_passes_the_filter_but_not_the_allocation() -> None:
    # feasible.go DeviceChecker.hasDevices may take a count from several groups;
    # device.go createOffer may not. So Nomad exhausts the node, it does not filter it.
    g = group((req("gpu", 2),))
    n = node(t4(*HEALTHY), a100())
    assert feasibility(g, n) == frozenset({True})
    v = check_node(g, n)
    assert v.outcome == "fails"
    assert {leaf.error for leaf in v.failures} == {"no devices match request"}


def test_error_words_of_create_offer() -> None:
    assert check_node(group((req("gpu"),)), node()).failures[0].error == "no devices available"
    zero = check_node(group((req("gpu", 0),)), node(t4()))
    assert zero.failures[0].error == "invalid request of zero devices"
    assert feasibility(group((req("gpu", 0),)), node(t4())) == frozenset({True})


HELD = Allocation(
    "8f2c1a9d-0000",
    "web.api[0]",
    client_status="running",
    devices={("nvidia", "gpu", "T4"): ("T4-1",)},
)
DONE = Allocation(
    "77aa00bb-0000",
    "web.api[1]",
    client_status="complete",
    devices={("nvidia", "gpu", "T4"): ("T4-0",)},
)
LOST = Allocation(
    "66aa00bb-0000",
    "web.api[2]",
    client_status="lost",
    devices={("nvidia", "gpu", "T4"): ("T4-0",)},
)
PENDING = Allocation(
    "55aa00bb-0000",
    "web.api[3]",
    client_status="pending",
    devices={("nvidia", "gpu", "T4"): ("T4-0",)},
)
OTHER_GROUP = Allocation(
    "44aa00bb-0000", "x", client_status="running", devices={("nvidia", "gpu", "K80"): ("T4-0",)}
)
ALLOCS = [
    ((HELD,), 1, {(("T4", ("T4-0",)),)}),
    ((HELD,), 2, set()),
    ((HELD, DONE), 1, {(("T4", ("T4-0",)),)}),  # complete: terminal, holds nothing
    ((HELD, LOST), 1, {(("T4", ("T4-0",)),)}),
    ((HELD, PENDING), 1, set()),  # pending is not terminal
    ((OTHER_GROUP,), 2, {(("T4", ("T4-0", "T4-1")),)}),  # IDs count only in their own group
]


@pytest.mark.parametrize(("allocs", "count", "want"), ALLOCS)
def test_allocations_hold_instances(
    allocs: tuple[Allocation, ...], count: int, want: set[object]
) -> None:
    v = check_node(group((req("nvidia/gpu/T4", count),)), node(t4(), allocs=allocs))
    assert picks(v) == want


def test_held_instances_are_named() -> None:
    devices = t4(
        Instance(
            "device01", healthy=False, health_description='Device has bad permissions "-rwxrwxrwx"'
        ),
        Instance("device02"),
        Instance("device03"),
    )
    held = Allocation(
        "8f2c1a9d-1111", "web.api[0]", client_status="running", devices={devices.key: ("device03",)}
    )
    v = check_node(group((req("nvidia/gpu/T4", 2),)), node(devices, allocs=(held,)))
    assert v.outcome == "fails"
    (reason,) = [e.reason() for e in v.failures[0].evals]
    assert reason == (
        '1 of 2 healthy instances free: device01 unhealthy ("Device has bad permissions '
        '\\"-rwxrwxrwx\\""), device03 held by allocation 8f2c1a9d (web.api[0]); count = 2'
    )


# --- scheduler/feasible/device.go: deviceIDMatchesConstraint (the other side first,
# the instance ID second) after nodeDeviceMatches has judged the group as a whole.
THREE = t4(Instance("d1"), Instance("d2"), Instance("d3"))
IDS = [
    (Constraint("${device.ids}", "d2", "set_contains"), 1, {(("T4", ("d2",)),)}),
    (Constraint("${device.ids}", "d2", "set_contains"), 2, set()),
    (Constraint("${device.ids}", "d1,d3", "set_contains_any"), 2, {(("T4", ("d1", "d3")),)}),
    (Constraint("${device.ids}", "d3", "set_contains_any"), 1, {(("T4", ("d3",)),)}),
    # the literal on the left: {"d2"} does not contain all of "d1,d2,d3"
    (Constraint("d2", "${device.ids}", "set_contains"), 1, set()),
    (Constraint("${device.ids}", "d4", "set_contains"), 1, set()),
    # "=" against one ID fails at the group level: the whole list is "d1,d2,d3"
    (Constraint("${device.ids}", "d2", "="), 1, set()),
    (Constraint("${device.ids}", "d1,d2,d3", "="), 1, set()),  # then per instance d1 != "d1,d2,d3"
    (Constraint("${device.ids}", "d2", "!="), 2, {(("T4", ("d1", "d3")),)}),
]


@pytest.mark.parametrize(
    ("constraint", "count", "want"), IDS, ids=[str(i[0]) + f" x{i[1]}" for i in IDS]
)
def test_ids_constraint_filters_instances(
    constraint: Constraint, count: int, want: set[object]
) -> None:
    v = check_node(group((req("gpu", count, (constraint,)),)), node(THREE))
    assert picks(v) == want


def test_numeric_ids_never_match_a_set() -> None:
    # resolveDeviceTarget reads the literal "1" with ParseAttribute: an int, not a string.
    numeric = t4(Instance("0"), Instance("1"))
    v = check_node(
        group((req("gpu", 1, (Constraint("${device.ids}", "1", "set_contains"),)),)), node(numeric)
    )
    assert v.outcome == "fails"


def test_excluded_instances_are_named() -> None:
    v = check_node(
        group((req("gpu", 2, (Constraint("${device.ids}", "d2", "set_contains"),)),)), node(THREE)
    )
    reason = v.failures[0].evals[0].reason()
    assert reason.startswith(
        "1 of 3 healthy instances free: d1 excluded by constraint ${device.ids} set_contains d2"
    )


# --- scheduler/feasible/device.go: createOffer's score (sum of matched weights over the
# sum of absolute weights; the best group wins, ties go to whichever Go's map gives last)
# and rank.go: BinPackIterator's node score (matched weights over all absolute weights).
MEM40 = Affinity("${device.attr.memory}", "40 GiB", ">=", 50)
IS_T4 = Affinity("${device.model}", "T4", "=", -50)
AFFINITIES = [
    ((MEM40,), {"A100/80GB": 1.0}, 1.0),
    ((IS_T4,), {"A100/80GB": 0.0}, 0.0),  # T4 scores -1, A100 0
    (
        (
            Affinity("${device.attr.memory}", "40 GiB", ">=", 30),
            Affinity("${device.model}", "T4", "=", 70),
        ),
        {"T4": 0.7},
        0.7,
    ),
    ((Affinity("${device.model}", "V100", "=", 20),), {"T4": 0.0, "A100/80GB": 0.0}, 0.0),  # a tie
    (
        (Affinity("${device.attr.nope}", "x", "!=", 40),),
        {"T4": 1.0, "A100/80GB": 1.0},
        1.0,
    ),  # missing != x
    (
        (
            Affinity("${device.attr.memory}", "16 GiB", "<=", -100),
            Affinity("${device.model}", "T4", "regexp", 25),
        ),
        {"A100/80GB": 0.0},
        0.0,
    ),
]


@pytest.mark.parametrize(("affinities", "scores", "node_score"), AFFINITIES)
def test_affinity_scores(
    affinities: tuple[Affinity, ...], scores: dict[str, float], node_score: float
) -> None:
    v = check_node(group((req("gpu", 1, (), affinities),)), node(t4(), a100()))
    got = {leaf.picks[0].device.name: leaf.picks[0].score for leaf in v.successes}
    assert got == pytest.approx(scores)
    assert [leaf.node_score() for leaf in v.successes] == pytest.approx(
        [node_score] * len(v.successes)
    )


def test_no_affinity_means_no_node_score() -> None:
    v = check_node(group((req("nvidia/gpu/T4"),)), node(t4()))
    assert v.successes[0].node_score() is None


# --- scheduler/feasible/rank.go: BinPackIterator.Next assigns the tasks in order and each
# task's requests in order from one DeviceAccounter (AddReserved after each offer);
# feasible.go: DeviceChecker.SetTaskGroup pools every task's requests for the filter.
MULTI = [
    # two tasks, one T4 each: the second gets the second instance
    (
        ((req("nvidia/gpu/T4"),), (req("nvidia/gpu/T4"),)),
        (t4(),),
        "places",
        {(("T4", ("T4-0",)), ("T4", ("T4-1",)))},
    ),
    # one task, two requests
    (
        ((req("nvidia/gpu/T4"), req("nvidia/gpu/T4")),),
        (t4(),),
        "places",
        {(("T4", ("T4-0",)), ("T4", ("T4-1",)))},
    ),
    # three T4s wanted, two exist
    (((req("nvidia/gpu/T4"),), (req("nvidia/gpu/T4", 2),)), (t4(),), "fails", set()),
    # "gpu" first may take the only A100 the second task needs: it depends on Nomad's draw
    (
        ((req("gpu"),), (req("nvidia/gpu/A100/80GB"),)),
        (t4(Instance("T4-0")), a100()),
        "may",
        {(("T4", ("T4-0",)), ("A100/80GB", ("A100-0",)))},
    ),
    # the specific request first: always places
    (
        ((req("nvidia/gpu/A100/80GB"),), (req("gpu"),)),
        (t4(Instance("T4-0")), a100()),
        "places",
        {(("A100/80GB", ("A100-0",)), ("T4", ("T4-0",)))},
    ),
    # an affinity steers the allocation away from what the second task needs, but the
    # feasibility filter knows no affinities and may still use the A100 up: "may"
    (
        (
            (req("gpu", 1, (), (Affinity("${device.model}", "T4", "=", 10),)),),
            (req("nvidia/gpu/A100/80GB"),),
        ),
        (t4(Instance("T4-0")), a100()),
        "may",
        {(("T4", ("T4-0",)), ("A100/80GB", ("A100-0",)))},
    ),
]


@pytest.mark.parametrize(("tasks", "devices", "outcome", "want"), MULTI)
def test_multi_task_requests(
    tasks: tuple[tuple[DeviceRequest, ...], ...],
    devices: tuple[NodeDevices, ...],
    outcome: str,
    want: set[object],
) -> None:
    v = check_node(group(*tasks), node(*devices))
    assert v.outcome == outcome
    assert picks(v) == want


def test_a_random_order_can_fail_the_filter() -> None:
    # DeviceChecker walks groups in map order; "gpu" may use up the only A100.
    g = group((req("gpu"),), (req("nvidia/gpu/A100/80GB"),))
    assert feasibility(g, node(t4(Instance("T4-0")), a100())) == frozenset({True, False})
    v = check_node(g, node(t4(Instance("T4-0")), a100()))
    assert any("feasibility check" in n for n in v.notes)


def test_node_score_over_several_requests() -> None:
    # rank.go: totals add up over every request with affinities, matched weights too.
    first = req("gpu", 1, (), (Affinity("${device.attr.memory}", "40 GiB", ">=", 50),))
    second = req("gpu", 1, (), (Affinity("${device.model}", "A100/80GB", "=", 100),))
    v = check_node(group((first,), (second,)), node(t4(Instance("T4-0")), a100()))
    assert v.outcome == "places"
    (leaf,) = v.successes
    assert [p.device.name for p in leaf.picks] == ["A100/80GB", "T4"]
    assert leaf.node_score() == pytest.approx(50 / 150)


def test_a_group_without_devices_is_not_judged() -> None:
    v = check_node(TaskGroup("g", (Task("t"),)), node(t4()))
    assert v.outcome == "none"


# --- scheduler/feasible/context.go: EvalContext.ProposedAllocs adds the plan's own
# allocations, so a group's later allocations see the devices its earlier ones took.
@pytest.mark.parametrize(
    ("count", "per_alloc", "fit"), [(3, 1, 2), (2, 2, 1), (4, 1, 2), (1, 3, 0)]
)
def test_group_count_capacity(count: int, per_alloc: int, fit: int) -> None:
    from nomad_device.placement.evaluate import capacity

    g = TaskGroup("g", (Task("t", (req("nvidia/gpu/T4", per_alloc),)),), count)
    assert capacity(g, node(t4())) == fit


def test_many_equal_choices_are_decided_without_listing_them_all() -> None:
    # 9 equal groups and 4 requests: 3024 orders, more than are listed.
    from nomad_device.placement.scheduler import MAX_LEAVES

    devices = [NodeDevices("v", "gpu", f"m{i:02}", (Instance(f"d{i}"),)) for i in range(9)]
    g = group(*[(req("gpu"),) for _ in range(4)])
    v = check_node(g, node(*devices))
    assert v.truncated and len(v.leaves) == MAX_LEAVES
    assert v.outcome == "places"
    g10 = group(*[(req("gpu"),) for _ in range(10)])
    assert check_node(g10, node(*devices)).outcome == "fails"


# --- scheduler/feasible/device.go: createOffer takes the first ``count`` usable instances
# of DeviceAccounterInstance.Instances, a Go map: any of them, in random order. Where a
# later request filters on ${device.ids}, which ones were taken decides.
AB = t4(Instance("a"), Instance("b"))
WANTS_A = req("gpu", 1, (Constraint("${device.ids}", "a", "set_contains"),))
WANTS_B = req("gpu", 1, (Constraint("${device.ids}", "b", "set_contains"),))


@pytest.mark.parametrize("later", [WANTS_A, WANTS_B], ids=["wants-a", "wants-b"])
def test_the_instance_an_earlier_request_takes_decides(later: DeviceRequest) -> None:
    # Taking instances in reported order said "fails" for wants-a (the first task takes a)
    # and "places" for wants-b; Nomad does either, depending on its map order.
    v = check_node(group((req("gpu"),), (later,)), node(AB))
    assert v.outcome == "may"
    assert {leaf.ok for leaf in v.leaves} == {True, False}
    wanted = later.constraints[0].rtarget
    assert picks(v) == {(("T4", ("b" if wanted == "a" else "a",)), ("T4", (wanted,)))}
    assert any("which instances Nomad takes" in n for n in v.notes)


def test_interchangeable_instances_are_not_explored() -> None:
    # Nothing later tells the T4s apart: one choice stands for all, in reported order.
    many = t4(*(Instance(f"g{i}") for i in range(8)))
    v = check_node(group((req("gpu", 3),), (req("gpu", 2),)), node(many))
    assert v.outcome == "places"
    assert picks(v) == {(("T4", ("g0", "g1", "g2")), ("T4", ("g3", "g4")))}


def test_instance_classes_are_explored_once_each() -> None:
    # Eight instances, one of which a later request needs: of the 56 ways to take three,
    # two matter (with g5 or without), each explored once.
    many = t4(*(Instance(f"g{i}") for i in range(8)))
    later = req("gpu", 1, (Constraint("${device.ids}", "g5", "set_contains"),))
    v = check_node(group((req("gpu", 3),), (later,)), node(many))
    assert v.outcome == "may"
    assert [(leaf.picks[0].ids, leaf.ok) for leaf in v.leaves] == [
        (("g0", "g1", "g2"), True),
        (("g0", "g1", "g5"), False),
    ]
    # taking all eight but g5 is the only way left when seven are asked for
    assert check_node(group((req("gpu", 8),), (later,)), node(many)).outcome == "fails"


# --- every request that fails is reported, not only the first Nomad stops at.
def test_every_failing_request_is_reported() -> None:
    bad_attr = req("gpu", 1, (Constraint("${device.attr.memroy}", "1 GiB", ">="),))
    bad_name = req("nvidia/gpu/H100")
    too_many = req("nvidia/gpu/T4", 5)
    fine = req("nvidia/gpu/T4")
    v = check_node(group((bad_attr, fine), (bad_name,), (too_many,)), node(t4()))
    assert v.outcome == "fails"
    (leaf,) = v.leaves
    assert [f.request for f in leaf.failures] == [bad_attr, bad_name, too_many]
    assert leaf.error == "no devices match request"  # what Nomad says: the first
    # the later ones are judged after the requests that could be met took theirs
    (t4_eval,) = [e for e in leaf.failures[2].evals if e.name_ok]
    assert t4_eval.reason().startswith("1 of 2 healthy instances free: T4-0 taken by task")
