"""Read a job's device requests: an HCL2 jobspec as ``nomad job run`` reads it, or API JSON.

HCL2 (``jobspec2`` in Nomad): only the parts placement needs are read (the
job's ``datacenters``, ``node_pool`` and ``namespace``; each ``group`` and
``task``; every ``resources { device "<name>" { count constraint affinity } }``).
A reference to anything but ``var.*``/``local.*`` is what Nomad's parser keeps
as literal text (``${device.attr.memory}``, also written bare as
``device.attr.memory``). Variables, locals, functions and other expressions
are refused with the command that renders the job to JSON first.

Constraint and affinity blocks take Nomad's shorthands (``regexp = "..."``,
``version``, ``semver``, ``set_contains`` and, for affinities only,
``set_contains_any``/``set_contains_all``); ``operator`` defaults to ``=`` and an
affinity's ``weight`` to 50.

JSON: ``{"Job": {...}}`` as the HTTP API takes it (``nomad job run -output``
prints it), or the bare job object. Field names match as Go's encoding/json
matches them (exact, else ignoring case).

Then every request is checked as Nomad's job validation checks it
(``RequestedDevice.Validate``, ``Constraint.Validate``, ``Affinity.Validate``
in ``nomad/structs``), and errors name the file, line and field.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from nomad_device.golang.version import parse_constraint
from nomad_device.placement import jsonpos
from nomad_device.placement.model import (
    Affinity,
    Constraint,
    DeviceRequest,
    Job,
    Numa,
    Task,
    TaskGroup,
)
from nomad_device.placement.operators import (
    AFFINITY_OPERATORS,
    CONSTRAINT_OPERATORS,
    compile_regexp,
)

__all__ = ["RENDER_HINT", "JobError", "load_job", "parse_job_text"]

#: How deep python-hcl2's tree of a jobspec may nest: a real jobspec's is a few dozen
#: levels; the readers here recurse, and stay inside Python's limit up to this.
MAX_NESTING: Final = 200

#: What installs the packages placement takes from the launcher's extra (python-hcl2,
#: httpx, msgspec, google-re2), imported on first use.
CLI_EXTRA_HINT: Final = "pip install 'nomad-device-sdk[cli]'"
RENDER_HINT: Final = (
    "render the job first with `nomad job run -output job.hcl > job.json` and check job.json"
)
_UINT64_MAX: Final = (1 << 64) - 1
_CONSTRAINT_KEYS: Final = frozenset(
    {
        "attribute",
        "value",
        "operator",
        "distinct_property",
        "distinct_hosts",
        "regexp",
        "version",
        "semver",
        "set_contains",
        "set_contains_all",
        "set_contains_any",
        "is_set",
        "is_not_set",
    }
)
_AFFINITY_KEYS: Final = frozenset(
    {
        "attribute",
        "value",
        "operator",
        "weight",
        "version",
        "semver",
        "regexp",
        "set_contains",
        "set_contains_all",
        "set_contains_any",
    }
)
_EXACT_TARGETS: Final = frozenset(
    {
        "${node.unique.id}",
        "${node.datacenter}",
        "${node.unique.name}",
        "${node.class}",
        "${node.pool}",
    }
)


class JobError(ValueError):
    """The job cannot be read or Nomad would refuse it; the message names file:line."""


def load_job(
    path: str,
    variables: list[str] | None = None,
    var_files: list[str] | None = None,
    *,
    enterprise: bool = False,
) -> Job:
    """Read a job file (``-`` for stdin); ``enterprise``: as Nomad Enterprise takes it."""
    if variables or var_files:
        flag = "-var" if variables else "-var-file"
        raise JobError(
            f"{flag} is not supported by check (it reads literal jobspecs only): {RENDER_HINT}"
        )
    text, origin = jsonpos.read_input(path, JobError)
    return parse_job_text(text, origin, enterprise=enterprise)


def parse_job_text(text: str, origin: str, *, enterprise: bool = False) -> Job:
    """A job from its text (HCL2, or the API's JSON when it starts with ``{``), validated as
    Nomad validates one; ``origin`` names it in errors."""
    if text.lstrip(" ").startswith("{"):
        job = _JsonJob(origin).read(text)
    else:
        job = _HclJob(origin, text).read()
    _validate(job, origin, enterprise)
    return job


# ---------------------------------------------------------------- validation


def validate_target(target: str) -> str:
    """``validateConstraintAttribute``: '' when valid, else the problem."""
    if not target.startswith("$"):
        return ""
    if not target.startswith("${"):
        return f"attribute {target!r} is missing an opening brace"
    if not target.endswith("}"):
        return f"attribute {target!r} is missing a closing brace"
    if target in _EXACT_TARGETS:
        return ""
    if target.startswith(("${attr.", "${device.", "${meta.")):
        return ""
    return f"unsupported attribute {target!r}"


def _operand_problems(kind: str, operand: str, rtarget: str) -> list[str]:
    problems = []
    if operand in ("set_contains", "set_contains_all", "set_contains_any"):
        if not rtarget:
            problems.append(f"set contains {kind} requires a value")
    elif operand == "regexp":
        try:
            compile_regexp(rtarget)
        except ValueError as exc:
            problems.append(f"regular expression failed to compile: {exc}")
    elif operand in ("version", "semver"):
        if parse_constraint(rtarget, semver=operand == "semver") is None:
            problems.append(f"{operand} {kind} is invalid: {rtarget!r}")
    elif operand in ("=", "==", "is", "!=", "not", "<", "<=", ">", ">=") and not rtarget:
        problems.append(f"operator {operand!r} requires a value")
    return problems


def constraint_problems(c: Constraint) -> list[str]:
    """``RequestedDevice.Validate`` for one constraint."""
    if c.operand in ("distinct_hosts", "distinct_property"):
        return [f"using unsupported operand {c.operand!r} (not allowed on a device)"]
    problems = []
    if not c.operand:
        problems.append("missing constraint operand")
    elif c.operand in ("is_set", "is_not_set"):
        if c.rtarget:
            problems.append(f"operator {c.operand!r} does not take a value")
    elif c.operand not in AFFINITY_OPERATORS:
        problems.append(
            f"unknown constraint type {c.operand!r} (the operators on a device: "
            f"{', '.join(CONSTRAINT_OPERATORS)})"
        )
    else:
        problems += _operand_problems("constraint", c.operand, c.rtarget)
    if not c.ltarget:
        problems.append("no attribute provided but is required by operator")
    elif err := validate_target(c.ltarget):
        problems.append(err)
    return problems


def affinity_problems(a: Affinity) -> list[str]:
    """``Affinity.Validate``."""
    problems = []
    if not a.operand:
        problems.append("missing affinity operand")
    elif a.operand not in AFFINITY_OPERATORS:
        problems.append(
            f"unknown affinity operator {a.operand!r} (the operators of an affinity: "
            f"{', '.join(AFFINITY_OPERATORS)})"
        )
    else:
        problems += _operand_problems("affinity", a.operand, a.rtarget)
    if not a.ltarget:
        problems.append("no attribute provided but is required")
    if a.weight == 0:
        problems.append("affinity weight cannot be zero")
    if not -100 <= a.weight <= 100:
        problems.append("affinity weight must be within the range [-100,100]")
    return problems


def _validate_numa(group: TaskGroup, task: Task, origin: str, enterprise: bool) -> None:
    """``Resources.Validate`` and ``NUMA.Validate``, then the CE job hook."""
    numa = task.numa
    if numa is None:
        return
    where = numa.where or origin
    field = f'group "{group.name}" task "{task.name}" numa'
    if numa.affinity not in ("none", "prefer", "require"):
        raise JobError(f"{where}: {field}: numa affinity must be one of none, prefer, or require")
    names = {r.name for r in task.devices}
    for name in numa.devices:
        if name not in names:
            raise JobError(f"{where}: {field}: numa device {name!r} not requested as task resource")
    if not numa.requested:
        return
    if not enterprise:
        raise JobError(
            f"{where}: {field}: numa scheduling requires Nomad Enterprise (Nomad CE refuses the "
            "job when it is registered); with --enterprise, check applies Enterprise's rules"
        )
    if numa.devices and numa.affinity != "require":
        raise JobError(
            f'{where}: {field}: numa devices may only be given with affinity = "require" '
            "(Nomad Enterprise's documentation)"
        )


def _validate(job: Job, origin: str, enterprise: bool = False) -> None:
    for group in job.groups:
        for task in group.tasks:
            _validate_numa(group, task, origin, enterprise)
            for req in task.devices:
                where = req.where or origin
                field = f'group "{group.name}" task "{task.name}" device "{req.name}"'
                if not req.name:
                    raise JobError(
                        f"{where}: {field}: device name must be given as one of the following: "
                        "type, vendor/type, or vendor/type/name"
                    )
                for i, c in enumerate(req.constraints, start=1):
                    problems = constraint_problems(c)
                    if problems:
                        raise JobError(
                            f"{where}: {field}: constraint {i} ({c}): {'; '.join(problems)}"
                        )
                for i, a in enumerate(req.affinities, start=1):
                    problems = affinity_problems(a)
                    if problems:
                        raise JobError(
                            f"{where}: {field}: affinity {i} ({a}): {'; '.join(problems)}"
                        )


def _int8(value: int) -> int:
    value &= 0xFF
    return value - 256 if value >= 128 else value


# ---------------------------------------------------------------------- JSON


class _JsonJob:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, node: jsonpos.Located | None, path: str, message: str) -> JobError:
        line = f":{node.line}" if node is not None else ""
        return JobError(f"{self.origin}{line}: {path}: {message}")

    def read(self, text: str) -> Job:
        try:
            root = jsonpos.parse(text)
        except jsonpos.JSONError as exc:
            raise JobError(f"{self.origin}:{exc}") from None
        if not isinstance(root.value, dict):
            raise self.fail(root, "(top)", "a job must be a JSON object")
        job = root.get("Job")
        path = "Job"
        hcl_json = root.value.get("job")
        if hcl_json is not None and isinstance(hcl_json.value, dict):
            known = {"id", "name", "taskgroups", "datacenters", "type", "namespace"}
            if not any(k.casefold() in known for k in hcl_json.value):
                raise self.fail(
                    root,
                    "job",
                    "this looks like HCL's JSON syntax (job -> <id> -> ...), which check does "
                    f"not read; {RENDER_HINT}",
                )
        if job is None or not isinstance(job.value, dict):
            job, path = root, "(job)"
        return self.job(job, path)

    def string(self, node: jsonpos.Located | None, path: str, default: str = "") -> str:
        if node is None or node.value is None:
            return default
        if not isinstance(node.value, str):
            raise self.fail(node, path, f"want a string, found {node.kind}")
        return node.value

    def items(self, node: jsonpos.Located | None, path: str) -> list[jsonpos.Located]:
        if node is None or node.value is None:
            return []
        if not isinstance(node.value, list):
            raise self.fail(node, path, f"want a list, found {node.kind}")
        return node.value

    def obj(self, node: jsonpos.Located, path: str) -> jsonpos.Located:
        if not isinstance(node.value, dict):
            raise self.fail(node, path, f"want an object, found {node.kind}")
        return node

    def whole(self, node: jsonpos.Located, path: str, low: int, high: int) -> int:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(node, path, f"want a number, found {node.kind}")
        if isinstance(value, float) and not value.is_integer():
            raise self.fail(node, path, f"want a whole number, found {value!r}")
        if not low <= int(value) <= high:
            raise self.fail(node, path, f"{int(value)} is out of range [{low}, {high}]")
        return int(value)

    def job(self, job: jsonpos.Located, path: str) -> Job:
        job_id = self.string(job.get("ID"), f"{path}.ID") or self.string(
            job.get("Name"), f"{path}.Name"
        )
        dcs = [
            self.string(d, f"{path}.Datacenters[{i}]")
            for i, d in enumerate(self.items(job.get("Datacenters"), f"{path}.Datacenters"))
        ]
        groups = []
        for gi, g in enumerate(self.items(job.get("TaskGroups"), f"{path}.TaskGroups")):
            gpath = f"{path}.TaskGroups[{gi}]"
            self.obj(g, gpath)
            tasks = []
            for ti, t in enumerate(self.items(g.get("Tasks"), f"{gpath}.Tasks")):
                tpath = f"{gpath}.Tasks[{ti}]"
                self.obj(t, tpath)
                tasks.append(
                    Task(
                        self.string(t.get("Name"), f"{tpath}.Name"),
                        self.devices(t, tpath),
                        self.numa(t, tpath),
                    )
                )
            count_node = g.get("Count")
            count = (
                1
                if count_node is None or count_node.value is None
                else self.whole(count_node, f"{gpath}.Count", 0, (1 << 63) - 1)
            )
            groups.append(
                TaskGroup(self.string(g.get("Name"), f"{gpath}.Name"), tuple(tasks), count)
            )
        return Job(
            job_id,
            tuple(groups),
            tuple(dcs) or ("*",),
            self.string(job.get("NodePool"), f"{path}.NodePool") or "default",
            self.string(job.get("Namespace"), f"{path}.Namespace") or "default",
            self.origin,
            self.string(job.get("Type"), f"{path}.Type") or "service",
        )

    def numa(self, task: jsonpos.Located, tpath: str) -> Numa | None:
        res = task.get("Resources")
        if res is None or not isinstance(res.value, dict):
            return None
        node = res.get("NUMA")
        if node is None or node.value is None:
            return None
        path = f"{tpath}.Resources.NUMA"
        self.obj(node, path)
        devices = [
            self.string(d, f"{path}.Devices[{i}]")
            for i, d in enumerate(self.items(node.get("Devices"), f"{path}.Devices"))
        ]
        affinity = self.string(node.get("Affinity"), f"{path}.Affinity") or "none"
        return Numa(affinity, tuple(devices), f"{self.origin}:{node.line}")

    def devices(self, task: jsonpos.Located, tpath: str) -> tuple[DeviceRequest, ...]:
        res = task.get("Resources")
        if res is None or res.value is None:
            return ()
        rpath = f"{tpath}.Resources"
        self.obj(res, rpath)
        out = []
        for di, d in enumerate(self.items(res.get("Devices"), f"{rpath}.Devices")):
            dpath = f"{rpath}.Devices[{di}]"
            self.obj(d, dpath)
            count_node = d.get("Count")
            count = (
                1
                if count_node is None or count_node.value is None
                else self.whole(count_node, f"{dpath}.Count", 0, _UINT64_MAX)
            )
            constraints = []
            for ci, c in enumerate(self.items(d.get("Constraints"), f"{dpath}.Constraints")):
                cpath = f"{dpath}.Constraints[{ci}]"
                self.obj(c, cpath)
                constraints.append(
                    Constraint(
                        self.string(c.get("LTarget"), f"{cpath}.LTarget"),
                        self.string(c.get("RTarget"), f"{cpath}.RTarget"),
                        self.string(c.get("Operand"), f"{cpath}.Operand"),
                    )
                )
            affinities = []
            for ai, a in enumerate(self.items(d.get("Affinities"), f"{dpath}.Affinities")):
                apath = f"{dpath}.Affinities[{ai}]"
                self.obj(a, apath)
                w = a.get("Weight")
                weight = (
                    50
                    if w is None or w.value is None
                    else self.whole(w, f"{apath}.Weight", -128, 127)
                )
                affinities.append(
                    Affinity(
                        self.string(a.get("LTarget"), f"{apath}.LTarget"),
                        self.string(a.get("RTarget"), f"{apath}.RTarget"),
                        self.string(a.get("Operand"), f"{apath}.Operand"),
                        weight,
                    )
                )
            out.append(
                DeviceRequest(
                    self.string(d.get("Name"), f"{dpath}.Name"),
                    count,
                    tuple(constraints),
                    tuple(affinities),
                    f"{self.origin}:{d.line}",
                )
            )
        return tuple(out)


# ---------------------------------------------------------------------- HCL


def _data(node: Any) -> str:
    data = getattr(node, "data", None)
    return str(data) if data is not None else ""


def _subtrees(node: Any) -> list[Any]:
    return [c for c in node.children if _data(c) and _data(c) != "new_line_or_comment"]


def _tokens(node: Any) -> list[Any]:
    out: list[Any] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if _data(item):
            stack.extend(reversed(item.children))
        else:
            out.append(item)
    return out


def _too_deep(tree: Any) -> Any:
    """The first node of python-hcl2's tree below :data:`MAX_NESTING` levels, or None
    (the readers here recurse; a deeper jobspec is no jobspec anyone writes)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            return node
        stack.extend((child, depth + 1) for child in getattr(node, "children", ()) if _data(child))
    return None


def _line(node: Any) -> int | None:
    for tok in _tokens(node):
        line = getattr(tok, "line", None)
        if isinstance(line, int):
            return line
    return None


_NUMBER_RE: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


class _Refused(Exception):
    def __init__(self, node: Any, what: str) -> None:
        super().__init__(what)
        self.node = node


class _HclJob:
    def __init__(self, origin: str, text: str) -> None:
        self.origin = origin
        self.text = text

    def fail(self, node: Any, message: str) -> JobError:
        line = _line(node) if node is not None else None
        return JobError(f"{self.origin}:{line if line is not None else '?'}: {message}")

    def read(self) -> Job:
        try:
            import hcl2.api as api
        except ImportError:
            raise JobError(f"reading HCL 2 files needs python-hcl2: {CLI_EXTRA_HINT}") from None
        if not hasattr(api, "parses_to_tree"):
            raise JobError(f"python-hcl2 is too old (need 8 or newer): {CLI_EXTRA_HINT}")
        try:
            tree = api.parses_to_tree(self.text)
        except RecursionError:
            raise JobError(f"{self.origin}: nested too deeply to read") from None
        except Exception as exc:  # lark raises many error types; all mean "bad syntax"
            line = getattr(exc, "line", None)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise JobError(
                f"{self.origin}:{line if isinstance(line, int) and line > 0 else '?'}: "
                f"invalid HCL: {first}"
            ) from None
        deep = _too_deep(tree)
        if deep is not None:
            raise self.fail(
                deep,
                f"nested deeper than {MAX_NESTING} levels of HCL syntax (check's limit)",
            )
        body = _subtrees(tree)[0]
        jobs = []
        for item in _subtrees(body):
            if _data(item) == "block":
                kind, labels, inner = self.block_parts(item)
                if kind == "job":
                    if len(labels) != 1:
                        raise self.fail(item, 'a job block takes one label: job "<id>" { }')
                    jobs.append((labels[0], inner, item))
        if not jobs:
            raise self.fail(None, 'no job "<id>" { ... } block')
        if len(jobs) > 1:
            raise self.fail(jobs[1][2], "only one job block is allowed in a jobspec")
        name, inner, _ = jobs[0]
        try:
            return self.job(name, inner)
        except _Refused as exc:
            raise self.fail(exc.node, f"{exc}; {RENDER_HINT}") from None

    # -- structure ---------------------------------------------------------------

    def name_of(self, node: Any) -> str:
        kind = _data(node)
        if kind == "identifier":
            return str(node.children[0])
        if kind == "string":
            value = self.string(node)
            return value
        raise self.fail(node, f"expected a name, found {kind or node!r}")

    def block_parts(self, node: Any) -> tuple[str, list[str], Any]:
        subs = _subtrees(node)
        return self.name_of(subs[0]), [self.name_of(s) for s in subs[1:-1]], subs[-1]

    def items(self, body: Any) -> list[tuple[str, str, list[str], Any, Any]]:
        """(kind, name, labels, value-or-body, node) for each attribute and block."""
        out: list[tuple[str, str, list[str], Any, Any]] = []
        for item in _subtrees(body):
            kind = _data(item)
            if kind == "attribute":
                subs = _subtrees(item)
                out.append(("attribute", self.name_of(subs[0]), [], subs[-1], item))
            elif kind == "block":
                name, labels, inner = self.block_parts(item)
                if name == "dynamic":
                    raise _Refused(item, "dynamic blocks are not read by check")
                out.append(("block", name, labels, inner, item))
        return out

    def job(self, job_id: str, body: Any) -> Job:
        groups = []
        dcs: list[str] = []
        pool = "default"
        namespace = "default"
        job_type = "service"
        for kind, name, labels, value, node in self.items(body):
            if kind == "attribute" and name == "datacenters":
                got = self.value(value)
                if not isinstance(got, list) or not all(isinstance(v, str) for v in got):
                    raise self.fail(node, "datacenters must be a list of strings")
                dcs = list(got)
            elif kind == "attribute" and name == "node_pool":
                pool = self.as_string(value, node, "node_pool") or "default"
            elif kind == "attribute" and name == "namespace":
                namespace = self.as_string(value, node, "namespace") or "default"
            elif kind == "attribute" and name == "type":
                job_type = self.as_string(value, node, "type") or "service"
            elif kind == "block" and name == "group":
                if len(labels) != 1:
                    raise self.fail(node, 'a group block takes one label: group "<name>" { }')
                groups.append(self.group(labels[0], value))
        return Job(
            job_id, tuple(groups), tuple(dcs) or ("*",), pool, namespace, self.origin, job_type
        )

    def group(self, name: str, body: Any) -> TaskGroup:
        tasks = []
        count = 1
        for kind, key, labels, value, node in self.items(body):
            if kind == "attribute" and key == "count":
                count = self.whole(value, node, "count", 0, (1 << 63) - 1)
            elif kind == "block" and key == "task":
                if len(labels) != 1:
                    raise self.fail(node, 'a task block takes one label: task "<name>" { }')
                tasks.append(self.task(labels[0], value))
        return TaskGroup(name, tuple(tasks), count)

    def task(self, name: str, body: Any) -> Task:
        devices: list[DeviceRequest] = []
        numa = None
        for kind, key, _labels, value, _node in self.items(body):
            if kind == "block" and key == "resources":
                for k2, key2, labels2, value2, node2 in self.items(value):
                    if k2 == "block" and key2 == "device":
                        if len(labels2) != 1:
                            raise self.fail(
                                node2, 'a device block takes one label: device "<name>" { }'
                            )
                        devices.append(self.device(labels2[0], value2, node2))
                    elif k2 == "block" and key2 == "numa":
                        if numa is not None:
                            raise self.fail(node2, "only one numa block is allowed in resources")
                        numa = self.numa(value2, node2)
        return Task(name, tuple(devices), numa)

    def numa(self, body: Any, node: Any) -> Numa:
        got = self.settings(body, frozenset({"affinity", "devices"}), "numa")
        affinity = self.setting_text(got, "affinity") or "none"
        devices: list[str] = []
        if "devices" in got:
            value, item = got["devices"]
            listed = self.value(value)
            if not isinstance(listed, list) or not all(isinstance(d, str) for d in listed):
                raise self.fail(item, "numa: devices must be a list of strings")
            devices = listed
        return Numa(affinity, tuple(devices), f"{self.origin}:{_line(node)}")

    def device(self, name: str, body: Any, node: Any) -> DeviceRequest:
        count = 1
        constraints = []
        affinities = []
        for kind, key, _labels, value, item in self.items(body):
            if kind == "attribute" and key == "count":
                count = self.whole(value, item, "count", 0, _UINT64_MAX)
            elif kind == "block" and key == "constraint":
                constraints.append(self.constraint(value))
            elif kind == "block" and key == "affinity":
                affinities.append(self.affinity(value))
            else:
                what = "argument" if kind == "attribute" else "block type"
                raise self.fail(
                    item,
                    f'device "{name}": unsupported {what} {key!r} (a device block takes count, '
                    "constraint and affinity)",
                )
        return DeviceRequest(
            name, count, tuple(constraints), tuple(affinities), f"{self.origin}:{_line(node)}"
        )

    def settings(self, body: Any, allowed: frozenset[str], what: str) -> dict[str, tuple[Any, Any]]:
        out: dict[str, tuple[Any, Any]] = {}
        for kind, key, _labels, value, item in self.items(body):
            if kind != "attribute" or key not in allowed:
                raise self.fail(
                    item,
                    f"{what}: unsupported {'argument' if kind == 'attribute' else 'block'} {key!r}",
                )
            if key in out:
                raise self.fail(item, f"{what}: {key!r} is set twice")
            out[key] = (value, item)
        return out

    def setting_text(self, got: dict[str, tuple[Any, Any]], key: str) -> str:
        """A string setting of a constraint or affinity block ("" when absent)."""
        if key not in got:
            return ""
        value, item = got[key]
        return self.as_string(value, item, key)

    def constraint(self, body: Any) -> Constraint:
        got = self.settings(body, _CONSTRAINT_KEYS, "constraint")

        def text(key: str) -> str:
            return self.setting_text(got, key)

        ltarget, rtarget, operand = text("attribute"), text("value"), text("operator")
        for short in ("version", "semver", "regexp", "set_contains"):
            if text(short):
                operand, rtarget = short, text(short)
        if "distinct_hosts" in got:
            value, item = got["distinct_hosts"]
            flag = self.value(value)
            if not isinstance(flag, bool):
                raise self.fail(item, "distinct_hosts must be a bool")
            operand, rtarget = "distinct_hosts", "true" if flag else "false"
        if text("distinct_property"):
            operand, ltarget = "distinct_property", text("distinct_property")
        return Constraint(ltarget, rtarget, operand or "=")

    def affinity(self, body: Any) -> Affinity:
        got = self.settings(body, _AFFINITY_KEYS, "affinity")

        def text(key: str) -> str:
            return self.setting_text(got, key)

        ltarget, rtarget, operand = text("attribute"), text("value"), text("operator")
        weight = 50
        if "weight" in got:
            value, item = got["weight"]
            number = self.as_number(value, item, "weight")
            weight = _int8(int(number))  # big.Float.Int64 truncates, int8() wraps
        for short in (
            "version",
            "semver",
            "regexp",
            "set_contains_any",
            "set_contains_all",
            "set_contains",
        ):
            if text(short):
                operand, rtarget = short, text(short)
        return Affinity(ltarget, rtarget, operand or "=", weight)

    # -- values ---------------------------------------------------------------------

    def whole(self, expr: Any, node: Any, key: str, low: int, high: int) -> int:
        number = self.as_number(expr, node, key)
        if number != number.to_integral_value():
            raise self.fail(node, f"{key}: want a whole number, found {number}")
        if not low <= int(number) <= high:
            raise self.fail(node, f"{key}: {number} is out of range [{low}, {high}]")
        return int(number)

    def as_number(self, expr: Any, node: Any, key: str) -> Decimal:
        value = self.value(expr)
        if isinstance(value, Decimal):
            return value
        if isinstance(value, str) and _NUMBER_RE.match(value):
            return Decimal(value)
        raise self.fail(node, f"{key}: want a number, found {_kind(value)}")

    def as_string(self, expr: Any, node: Any, key: str) -> str:
        value = self.value(expr)
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, Decimal):
            return format(value.normalize(), "f") if value else "0"
        raise self.fail(node, f"{key}: want a string, found {_kind(value)}")

    def unwrap(self, node: Any) -> Any:
        while _data(node) == "expr_term":
            subs = _subtrees(node)
            if len(subs) != 1:
                break
            node = subs[0]
        return node

    def value(self, expr: Any) -> Any:
        node = self.unwrap(expr)
        kind = _data(node)
        if kind == "string":
            return self.string(node)
        if kind in ("heredoc_template", "heredoc_template_trim"):
            text = _heredoc_text(node, kind.endswith("_trim"))
            if re.search(r"(?<!\$)\$\{\s*(var|local)\.", text):
                raise _Refused(node, "variables and locals are not read by check")
            return text.replace("$${", "${")
        if kind in ("int_lit", "float_lit"):
            try:
                return Decimal(str(node.children[0]))
            except InvalidOperation:
                raise self.fail(node, f"bad number {node.children[0]!s}") from None
        if kind == "literal_value":
            word = str(node.children[0])
            if word == "null":
                return None
            return word == "true"
        if kind == "unary_op":
            op = str(node.children[0])
            inner = self.value(node.children[1])
            if op == "-" and isinstance(inner, Decimal):
                return -inner
            raise _Refused(node, f"the expression {op!r} is not read by check")
        if kind == "tuple":
            return [self.value(s) for s in _subtrees(node)]
        if kind in ("get_attr_expr_term", "identifier"):
            return "${" + self.traversal(node) + "}"
        raise _Refused(node, f"{kind or 'this'} expressions are not read by check")

    def traversal(self, node: Any) -> str:
        """Source text of ``a.b.c``; refused when it names a variable or local."""
        tokens = _tokens(node)
        if any(
            _data(n) not in ("get_attr_expr_term", "expr_term", "identifier", "get_attr")
            for n in _walk_trees(node)
        ):
            raise _Refused(node, "index and splat expressions are not read by check")
        names = [t for t in tokens if getattr(t, "type", "") == "NAME"]
        if names and str(names[0]) in ("var", "local"):
            raise _Refused(node, "variables and locals are not read by check")
        start = min(t.start_pos for t in tokens)
        end = max(t.end_pos for t in tokens)
        return self.text[start:end]

    def string(self, node: Any) -> str:
        from nomad_device.hclexpr import EscapeError, unescape

        out: list[str] = []
        for part in node.children:
            if _data(part) != "string_part":
                continue
            piece = part.children[0]
            if _data(piece) == "interpolation":
                out.append(self.interpolation(piece))
                continue
            if _data(piece):
                raise _Refused(piece, "template directives are not read by check")
            kind = getattr(piece, "type", "")
            text = str(piece)
            if kind == "ESCAPED_INTERPOLATION" or kind == "ESCAPED_DIRECTIVE":
                out.append(text[1:])
            else:
                try:
                    out.append(unescape(text))
                except EscapeError as exc:
                    raise self.fail(part, str(exc)) from None
        return "".join(out)

    def interpolation(self, node: Any) -> str:
        subs = _subtrees(node)
        inner = self.unwrap(subs[0]) if subs else None
        if inner is None or _data(inner) not in ("get_attr_expr_term", "identifier"):
            kind = _data(inner) if inner is not None else "empty"
            raise _Refused(node, f"{kind} expressions in strings are not read by check")
        self.traversal(inner)  # refuses var./local.
        tokens = _tokens(node)
        start = min(t.start_pos for t in tokens)
        end = max(t.end_pos for t in tokens)
        return self.text[start:end]


def _heredoc_text(node: Any, trim: bool) -> str:
    """An HCL 2 heredoc's text (``<<-`` trimmed when ``trim``), from python-hcl2's tree."""
    raw = str(node.children[0])
    first, _, rest = raw.partition("\n")
    marker = first.lstrip("<-").strip()
    lines = rest.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if lines and lines[-1].strip() == marker:
        lines.pop()
    lines = [ln.rstrip("\r") for ln in lines]
    if trim:
        indents = [len(ln) - len(ln.lstrip(" \t")) for ln in lines if ln.strip()]
        cut = min(indents, default=0)
        lines = [ln[cut:] for ln in lines]
    return "".join(ln + "\n" for ln in lines)


def _walk_trees(node: Any) -> list[Any]:
    out = [node]
    for child in getattr(node, "children", []):
        if _data(child):
            out.extend(_walk_trees(child))
    return out


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, Decimal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
