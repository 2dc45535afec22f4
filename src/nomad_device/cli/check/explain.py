"""The checker's verdicts as text for people and as JSON for scripts.

Names, IDs, attribute values and reasons in the text come from devices, nodes
and job files: each goes through :func:`~nomad_device.display.printable`
before it is styled; the JSON keeps them as they are.
"""

from __future__ import annotations

from typing import Any

from nomad_device.cli.nomadjson import go_number
from nomad_device.cli.render import Style
from nomad_device.display import printable
from nomad_device.placement.evaluate import GroupReport, NodeEntry, Report
from nomad_device.placement.model import DeviceRequest, TaskGroup
from nomad_device.placement.scheduler import (
    ANY_MEMORY_NODE,
    Failure,
    GroupEval,
    Leaf,
    NodeVerdict,
    Pick,
    requests_of,
)

__all__ = ["render_json", "render_text"]

#: How many alternative outcomes the text shows before summing up the rest.
_MAX_SHOWN = 8


def _score(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return text if text not in ("-0", "") else "0"


def _request_text(task: str, req: DeviceRequest) -> str:
    extra = []
    if req.constraints:
        extra.append(f"{len(req.constraints)} constraint{'s' if len(req.constraints) != 1 else ''}")
    if req.affinities:
        extra.append(f"{len(req.affinities)} affinit{'ies' if len(req.affinities) != 1 else 'y'}")
    tail = f", {', '.join(extra)}" if extra else ""
    return printable(f'task "{task}" device "{req.name}" (count {req.count}{tail})')


def _group_heading(group: TaskGroup) -> str:
    reqs = requests_of(group)
    name = printable(group.name)
    if not reqs:
        return f'Group "{name}": asks for no devices'
    n = len(reqs)
    return f'Group "{name}": {n} device request{"s" if n != 1 else ""}'


def _node_name(entry: NodeEntry) -> str:
    node = entry.node
    if node.origin == "plugin":
        return printable(f"plugin {node.name}")
    if node.name and node.id and node.name != node.id:
        return printable(f"node {node.name} ({node.short})")
    return printable(f"node {node.name or node.short}")


def _pick_line(p: Pick) -> str:
    ids = ", ".join(p.ids)
    line = f'task "{p.task}" device "{p.request.name}": {p.device.label} [{ids}]'
    if p.memory_node != ANY_MEMORY_NODE:
        line += f" on NUMA node {p.memory_node}"
    if p.request.affinities:
        line += f" affinity score {_score(p.score)}"
    return printable(line)


def _why_lines(leaf: Leaf, style: Style) -> list[str]:
    """Every request of the outcome that cannot be met, the one Nomad stops at first."""
    lines: list[str] = []
    for n, failure in enumerate(leaf.failures):
        req = failure.request
        head = f"{_request_text(failure.task, req)} cannot be met"
        if failure.memory_node != ANY_MEMORY_NODE:
            head += f" on NUMA node {failure.memory_node}"
        lines.append(head + ":" if n == 0 else f"also, {head}:")
        if n == 0 and leaf.picks:
            taken = "; ".join(
                f'task "{p.task}" device "{p.request.name}" took {p.device.label} '
                f"[{', '.join(p.ids)}]"
                for p in leaf.picks
            )
            lines.append(printable(f"  after {taken}"))
        named = [e for e in failure.evals if e.name_ok]
        if not failure.evals:
            lines.append("  the node has no devices")
        elif not named:
            have = ", ".join(e.device.label for e in failure.evals)
            lines.append(
                printable(f'  no device group here is a "{req.name}" (the node has {have})')
            )
        for e in named:
            lines.append(f"  {style.bold(printable(e.device.label))}: {_reason(e, style)}")
    return lines


def _reason(e: GroupEval, style: Style) -> str:
    return style.red(printable(e.reason())) if style.enabled else printable(e.reason())


def _outcome_word(outcome: str, style: Style) -> str:
    return {
        "places": style.green("places"),
        "may": style.yellow("may place (depends on Nomad's random choice)"),
        "fails": style.red("does not place"),
        "skipped": style.dim("not considered"),
    }.get(outcome, outcome)


def _nomad_words(v: NodeVerdict) -> str:
    words = []
    if False in v.checker:
        words.append('"missing devices"')
    if True in v.checker and v.failures:
        errors = sorted({leaf.error for leaf in v.failures})
        words.extend(printable(f'"devices: {err}"') for err in errors)
    return " or ".join(words)


def _deterministic(v: NodeVerdict) -> tuple[bool, list[str]]:
    notes = []
    wins = v.successes
    groups = {tuple(p.device.label for p in leaf.picks) for leaf in wins}
    if len(groups) > 1:
        notes.append(
            "Nomad's pick among equally scored groups is random: each outcome above is possible"
        )
    if any(p.instance_choice for leaf in wins for p in leaf.picks):
        notes.append(
            "instances are listed in the order the node reports them, the order Nomad was seen "
            "to take; its map iteration does not promise it"
        )
    return v.outcome == "places" and len(groups) <= 1 and not notes, notes


def _entry_lines(entry: NodeEntry, style: Style) -> list[str]:
    head = f"  {style.bold(_node_name(entry))}: {_outcome_word(entry.outcome, style)}"
    if entry.skipped:
        return [f"{head}: {printable(entry.skipped)}"]
    v = entry.verdict
    assert v is not None
    lines = [head]
    if v.outcome == "fails":
        lines[0] += f"  (Nomad says {_nomad_words(v)})"
    seen: set[str] = set()
    distinct = {"; ".join(_pick_line(p) for p in leaf.picks) for leaf in v.successes}
    for leaf in v.successes:
        text = "; ".join(_pick_line(p) for p in leaf.picks)
        if text in seen:
            continue
        if len(seen) == _MAX_SHOWN:
            lines.append(f"    ... and {len(distinct) - len(seen)} more equally good outcomes")
            break
        seen.add(text)
        prefix = "    or " if len(seen) > 1 else "    "
        for i, p in enumerate(leaf.picks):
            lines.append(
                (prefix if i == 0 else "       " if len(seen) > 1 else "    ") + _pick_line(p)
            )
        score = leaf.node_score()
        if score is not None:
            lines.append(f"      node device score {_score(score)}")
    if entry.capacity is not None:
        lines.append(
            f"    group count = {v.group.count}: {entry.capacity} of its allocations fit on "
            "this node at once (each needs its own instances)"
        )
    if v.successes:
        det, notes = _deterministic(v)
        lines.append(f"    deterministic: {'yes' if det else 'no'}")
        lines.extend(printable(f"    note: {n}") for n in notes)
    shown: set[str] = set()
    for leaf in v.failures:
        why = _why_lines(leaf, style)
        key = "\n".join(why)
        if key in shown:
            continue
        shown.add(key)
        if v.successes:
            lines.append("    on other choices it fails:")
            lines.extend("      " + w for w in why)
        else:
            lines.extend("    " + w for w in why)
        if len(shown) >= 3:
            break
    lines.extend(printable(f"    note: {n}") for n in v.notes)
    return lines


def render_text(report: Report, style: Style) -> str:
    job = report.job
    lines = [
        printable(f'Job "{job.id}" ({job.origin}) against {report.source}'),
    ]
    if job.type in ("system", "sysbatch"):
        lines.append(
            style.yellow(
                f"note: {job.type} jobs may preempt lower-priority allocations for devices; "
                "check counts every held instance as held"
            )
        )
    for g in report.groups:
        lines.append("")
        lines.append(style.bold(_group_heading(g.group)))
        if not g.asks:
            continue
        for task, req in requests_of(g.group):
            lines.append(f"  {_request_text(task, req)}")
            for c in req.constraints:
                lines.append(printable(f"    constraint {c}"))
            for a in req.affinities:
                lines.append(printable(f"    affinity {a}"))
        for entry in g.entries:
            lines.extend(_entry_lines(entry, style))
        if not g.entries:
            lines.append("  (no nodes)")
    lines.append("")
    lines.append(_summary(report, style))
    return "\n".join(lines)


def _summary(report: Report, style: Style) -> str:
    parts = []
    for g in report.groups:
        if not g.asks:
            continue
        places = sum(1 for e in g.entries if e.outcome == "places")
        may = sum(1 for e in g.entries if e.outcome == "may")
        considered = sum(1 for e in g.entries if e.outcome != "skipped")
        text = f'group "{printable(g.group.name)}" places on {places} of {considered} node'
        text += "s" if considered != 1 else ""
        if may:
            text += f" (and may on {may} more)"
        parts.append(style.green(text) if g.places else style.red(text))
    if not parts:
        return "No group asks for devices."
    return "Summary: " + "; ".join(parts)


# -------------------------------------------------------------------- JSON


def _pick_json(p: Pick) -> dict[str, Any]:
    return {
        "Task": p.task,
        "Device": p.request.name,
        "Group": p.device.label,
        "DeviceIDs": list(p.ids),
        "AffinityScore": go_number(p.score) if p.request.affinities else None,
        "TiedWith": list(p.tied),
        **({"NumaNode": p.memory_node} if p.memory_node != ANY_MEMORY_NODE else {}),
    }


def _leaf_json(leaf: Leaf) -> dict[str, Any]:
    out: dict[str, Any] = {"Places": leaf.ok, "Devices": [_pick_json(p) for p in leaf.picks]}
    if leaf.ok:
        score = leaf.node_score()
        out["NodeDeviceScore"] = None if score is None else go_number(score)
        return out
    first, *later = [_failure_json(f) for f in leaf.failures]
    out["Failed"] = first
    if later:
        out["AlsoFailed"] = later
    return out


def _failure_json(failure: Failure) -> dict[str, Any]:
    out: dict[str, Any] = {
        "Task": failure.task,
        "Device": failure.request.name,
        "Count": failure.request.count,
        "Error": failure.error,
        "Groups": [
            {"Group": e.device.label, "Matches": e.name_ok, "Reason": e.reason()}
            for e in failure.evals
        ],
    }
    if failure.memory_node != ANY_MEMORY_NODE:
        out["NumaNode"] = failure.memory_node
    return out


def _entry_json(entry: NodeEntry) -> dict[str, Any]:
    node = entry.node
    out: dict[str, Any] = {
        "NodeID": node.id,
        "NodeName": node.name,
        "Outcome": entry.outcome,
    }
    if entry.skipped:
        out["Reason"] = entry.skipped
        return out
    v = entry.verdict
    assert v is not None
    det, notes = _deterministic(v) if v.successes else (False, [])
    out["Deterministic"] = det if v.successes else None
    out["FeasibilityCheck"] = sorted("passes" if c else "fails" for c in v.checker)
    out["Outcomes"] = [_leaf_json(leaf) for leaf in v.leaves]
    out["Truncated"] = v.truncated
    out["AllocationsThatFit"] = entry.capacity
    out["Notes"] = notes + v.notes
    return out


def _group_json(g: GroupReport) -> dict[str, Any]:
    return {
        "Name": g.group.name,
        "Requests": [
            {
                "Task": task,
                "Name": req.name,
                "Count": req.count,
                "Constraints": [
                    {"LTarget": c.ltarget, "RTarget": c.rtarget, "Operand": c.operand}
                    for c in req.constraints
                ],
                "Affinities": [
                    {
                        "LTarget": a.ltarget,
                        "RTarget": a.rtarget,
                        "Operand": a.operand,
                        "Weight": a.weight,
                    }
                    for a in req.affinities
                ],
            }
            for task, req in requests_of(g.group)
        ],
        "Places": g.places,
        "MayPlace": g.may_place,
        "Nodes": [_entry_json(e) for e in g.entries] if g.asks else [],
    }


def render_json(report: Report) -> dict[str, Any]:
    return {
        "Job": report.job.id,
        "Source": report.source,
        "Type": report.job.type,
        "Places": report.all_place,
        "TaskGroups": [_group_json(g) for g in report.groups],
    }
