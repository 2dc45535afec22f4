"""Reading a job's device requests as Nomad reads a jobspec, and refusing what Nomad refuses.

HCL forms follow Nomad's ``jobspec2`` (``hcl_conversions.go``: ``decodeConstraint``,
``decodeAffinity``; ``types.config.go``: ``EvalContext``'s ``UndefinedVariable``
keeping unknown references as text); API JSON follows ``api.Job`` with Go's
case-insensitive field match and ``Canonicalize`` defaults (``api/resources.go``
count 1, ``api/tasks.go`` weight 50); validation follows ``nomad/structs``
(``RequestedDevice.Validate``, ``Constraint.Validate``, ``Affinity.Validate``,
``validateConstraintAttribute``).
"""

from __future__ import annotations

import json

import pytest

from nomad_device.placement.jobspec import JobError, parse_job_text
from nomad_device.placement.model import Affinity, Constraint, DeviceRequest


def one_device(body: str) -> DeviceRequest:
    text = f"""job "j" {{
  group "g" {{
    task "t" {{
      resources {{
        device "gpu" {{
{body}
        }}
      }}
    }}
  }}
}}
"""
    job = parse_job_text(text, "job.hcl")
    (req,) = job.groups[0].tasks[0].devices
    return req


# jobspec2/hcl_conversions.go decodeConstraint: attribute/value/operator, "=" by default,
# shorthands version, semver, regexp, set_contains, distinct_hosts, distinct_property.
CONSTRAINTS = [
    (
        'attribute = "${device.attr.memory}"\n operator = ">="\n value = "2 GiB"',
        Constraint("${device.attr.memory}", "2 GiB", ">="),
    ),
    ('attribute = "${device.model}"\n value = "T4"', Constraint("${device.model}", "T4", "=")),
    (
        'attribute = device.model\n value = "T4"',
        Constraint("${device.model}", "T4", "="),
    ),  # a bare reference
    (  # kept as written, and then no device target Nomad knows: always missing
        'attribute = "${device.model}"\n value = "${ device.model }"',
        Constraint("${device.model}", "${ device.model }", "="),
    ),
    ('attribute = "x-${node.class}-y"\n value = "T4"', Constraint("x-${node.class}-y", "T4", "=")),
    ('attribute = "$${device.model}"\n value = "T4"', Constraint("${device.model}", "T4", "=")),
    (
        'attribute = "${device.attr.cores}"\n operator = ">"\n value = 2000',
        Constraint("${device.attr.cores}", "2000", ">"),
    ),
    (
        'attribute = "${device.attr.clock}"\n value = 1.50',
        Constraint("${device.attr.clock}", "1.5", "="),
    ),
    (
        'attribute = "${device.attr.ecc}"\n value = true',
        Constraint("${device.attr.ecc}", "true", "="),
    ),
    (
        'attribute = "${device.model}"\n regexp = "^T"',
        Constraint("${device.model}", "^T", "regexp"),
    ),
    (
        'attribute = "${device.attr.driver}"\n version = ">= 1.0"',
        Constraint("${device.attr.driver}", ">= 1.0", "version"),
    ),
    (
        'attribute = "${device.attr.driver}"\n semver = "< 2"',
        Constraint("${device.attr.driver}", "< 2", "semver"),
    ),
    (
        'attribute = "${device.attr.f}"\n set_contains = "a,b"',
        Constraint("${device.attr.f}", "a,b", "set_contains"),
    ),
    # the block knows set_contains_any/all and is_set, but decodeConstraint ignores them
    (
        'attribute = "${device.attr.f}"\n set_contains_any = "a"',
        Constraint("${device.attr.f}", "", "="),
    ),
    (
        'attribute = "${device.attr.f}"\n operator = "is_set"',
        Constraint("${device.attr.f}", "", "is_set"),
    ),
]


@pytest.mark.parametrize(
    ("body", "want"), CONSTRAINTS, ids=[c[1].operand + " " + c[1].ltarget for c in CONSTRAINTS]
)
def test_constraint_blocks(body: str, want: Constraint) -> None:
    if want.operand == "=" and not want.rtarget:
        with pytest.raises(JobError, match="requires a value"):
            one_device(f"constraint {{\n{body}\n}}")
        return
    assert one_device(f"constraint {{\n{body}\n}}").constraints == (want,)


# jobspec2/hcl_conversions.go decodeAffinity: weight 50 unless given, int8 of the number.
AFFINITIES = [
    ('attribute = "${device.model}"\n value = "T4"', Affinity("${device.model}", "T4", "=", 50)),
    (
        'attribute = "${device.model}"\n value = "T4"\n weight = -20',
        Affinity("${device.model}", "T4", "=", -20),
    ),
    (
        'attribute = "${device.model}"\n value = "T4"\n weight = 2.9',
        Affinity("${device.model}", "T4", "=", 2),
    ),
    (
        'attribute = "${device.model}"\n value = "T4"\n weight = 200',
        Affinity("${device.model}", "T4", "=", -56),
    ),
    (
        'attribute = "${device.attr.f}"\n set_contains_any = "a"',
        Affinity("${device.attr.f}", "a", "set_contains_any", 50),
    ),
    (
        'attribute = "${device.attr.f}"\n set_contains_all = "a"',
        Affinity("${device.attr.f}", "a", "set_contains_all", 50),
    ),
]


@pytest.mark.parametrize(("body", "want"), AFFINITIES)
def test_affinity_blocks(body: str, want: Affinity) -> None:
    assert one_device(f"affinity {{\n{body}\n}}").affinities == (want,)


def test_count_defaults_to_one_and_reads_numbers() -> None:
    assert one_device("").count == 1
    assert one_device("count = 3").count == 3
    assert one_device('count = "4"').count == 4  # cty converts the string


# nomad/structs/structs.go RequestedDevice.Validate, Constraint.Validate, Affinity.Validate.
INVALID = [
    (
        'constraint {\n attribute = "${device.model}"\n operator = "~="\n value = "x"\n}',
        "unknown constraint type '~='",
    ),
    (
        'constraint {\n attribute = "${device.model}"\n operator = ">"\n}',
        "operator '>' requires a value",
    ),
    (
        'constraint {\n attribute = "${device.model}"\n regexp = "(?=x)"\n}',
        "regular expression failed to compile",
    ),
    (
        'constraint {\n attribute = "${device.model}"\n version = "1.x"\n}',
        "version constraint is invalid",
    ),
    (
        'constraint {\n attribute = "${device.model}"\n semver = "~> 1"\n}',
        "semver constraint is invalid",
    ),
    ("constraint {\n distinct_hosts = true\n}", "using unsupported operand 'distinct_hosts'"),
    (
        'constraint {\n attribute = "${device.model}"\n operator = "is_set"\n value = "x"\n}',
        "does not take a value",
    ),
    ('constraint {\n operator = "="\n value = "x"\n}', "no attribute provided"),
    (
        'constraint {\n attribute = "${devices.model}"\n value = "x"\n}',
        "unsupported attribute '${devices.model}'",
    ),
    ('constraint {\n attribute = "${ device.model }"\n value = "x"\n}', "unsupported attribute"),
    (
        'affinity {\n attribute = "${device.model}"\n value = "x"\n weight = 0\n}',
        "weight cannot be zero",
    ),
    (
        'affinity {\n attribute = "${device.model}"\n value = "x"\n weight = 101\n}',
        "within the range [-100,100]",
    ),
    (
        'affinity {\n attribute = "${device.model}"\n operator = "is_set"\n}',
        "unknown affinity operator 'is_set'",
    ),
    (
        'constraint {\n attribute = "${device.model}"\n color = "red"\n}',
        "unsupported argument 'color'",
    ),
    ("size = 2", "unsupported argument 'size'"),
    ("count = -1", "out of range"),
    ("count = 1.5", "whole number"),
]


@pytest.mark.parametrize(("body", "message"), INVALID)
def test_invalid_requests(body: str, message: str) -> None:
    with pytest.raises(JobError, match=None) as info:
        one_device(body)
    assert message in str(info.value)
    assert str(info.value).startswith("job.hcl:")


def test_errors_name_the_line() -> None:
    with pytest.raises(JobError) as info:
        one_device(
            'constraint {\n attribute = "${device.model}"\n operator = "~="\n value = "x"\n}'
        )
    assert str(info.value).startswith('job.hcl:5: group "g" task "t" device "gpu": constraint 1')


def test_a_bad_escape_names_its_line() -> None:
    with pytest.raises(JobError) as info:
        one_device('constraint {\n attribute = "${device.model}"\n value = "a\\qb"\n}')
    assert str(info.value) == "job.hcl:8: invalid escape \\q"


REFUSED = [
    "count = var.n",
    "count = local.n",
    'constraint {\n attribute = "${device.model}"\n value = "${var.model}"\n}',
    'constraint {\n attribute = "${device.model}"\n value = upper("t4")\n}',
    'constraint {\n attribute = "${device.model}"\n value = "%{ if true }x%{ endif }"\n}',
    "count = 1 + 1",
    'dynamic "constraint" {\n for_each = []\n content {}\n}',
]


@pytest.mark.parametrize("body", REFUSED)
def test_what_needs_rendering_is_refused(body: str) -> None:
    with pytest.raises(JobError) as info:
        one_device(body)
    assert "nomad job run -output job.hcl > job.json" in str(info.value)


def test_several_groups_and_tasks_and_job_settings() -> None:
    text = """
job "multi" {
  datacenters = ["dc1", "dc2"]
  node_pool   = "gpus"
  group "a" {
    count = 3
    task "x" {
      resources {
        device "gpu" {}
        device "nvidia/gpu" { count = 2 }
      }
    }
    task "y" {
      driver = "docker"
    }
  }
  group "b" {
    task "z" {
      resources { device "fpga" {} }
    }
  }
}
"""
    job = parse_job_text(text, "multi.hcl")
    assert job.id == "multi"
    assert job.datacenters == ("dc1", "dc2")
    assert job.node_pool == "gpus"
    assert [g.name for g in job.groups] == ["a", "b"]
    assert job.groups[0].count == 3
    assert [(t.name, [(d.name, d.count) for d in t.devices]) for t in job.groups[0].tasks] == [
        ("x", [("gpu", 1), ("nvidia/gpu", 2)]),
        ("y", []),
    ]


def test_hcl_syntax_error_has_a_line() -> None:
    with pytest.raises(JobError, match=r"^job.hcl:2: invalid HCL"):
        parse_job_text('job "x" {\n group "g" {{\n}\n', "job.hcl")


# api.Job as JSON: {"Job": {...}} or bare, Go's case-insensitive field names, Canonicalize.
def _api_job(device: dict[str, object], wrap: bool = True) -> str:
    job = {
        "ID": "j",
        "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Resources": {"Devices": [device]}}]}],
    }
    return json.dumps({"Job": job} if wrap else job, indent=2)


def test_api_json() -> None:
    text = _api_job(
        {
            "Name": "nvidia/gpu",
            "Constraints": [
                {"LTarget": "${device.attr.memory}", "RTarget": "2 GiB", "Operand": ">="}
            ],
            "Affinities": [{"LTarget": "${device.model}", "RTarget": "T4", "Operand": "="}],
        }
    )
    job = parse_job_text(text, "job.json")
    (req,) = job.groups[0].tasks[0].devices
    assert req.count == 1
    assert req.constraints == (Constraint("${device.attr.memory}", "2 GiB", ">="),)
    assert req.affinities == (Affinity("${device.model}", "T4", "=", 50),)
    assert job.datacenters == ("*",)


def test_bare_json_and_case_insensitive_fields() -> None:
    job = parse_job_text(_api_job({"name": "gpu", "count": 2}, wrap=False), "job.json")
    assert job.groups[0].tasks[0].devices[0].count == 2


def test_json_errors_name_line_and_field() -> None:
    text = _api_job({"Name": "gpu", "Count": "2"})
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if '"Count"' in ln)
    with pytest.raises(JobError) as info:
        parse_job_text(text, "job.json")
    assert str(info.value) == (
        f"job.json:{line}: Job.TaskGroups[0].Tasks[0].Resources.Devices[0].Count: "
        "want a number, found a string"
    )


def test_json_without_operand_is_refused() -> None:
    # No HCL default here: an empty Operand fails Constraint.Validate.
    text = _api_job(
        {"Name": "gpu", "Constraints": [{"LTarget": "${device.model}", "RTarget": "T4"}]}
    )
    with pytest.raises(JobError, match="missing constraint operand"):
        parse_job_text(text, "job.json")


def test_json_target_without_closing_brace() -> None:
    # validateConstraintAttribute; python-hcl2 cannot even lex this target in HCL.
    text = _api_job(
        {
            "Name": "gpu",
            "Constraints": [{"LTarget": "${device.model", "RTarget": "x", "Operand": "="}],
        }
    )
    with pytest.raises(JobError, match="is missing a closing brace"):
        parse_job_text(text, "job.json")


def test_hcl_json_syntax_is_refused() -> None:
    with pytest.raises(JobError, match="HCL's JSON syntax"):
        parse_job_text('{"job": {"x": {}}}', "job.json")


def test_bad_json_has_line_and_column() -> None:
    with pytest.raises(JobError, match=r"^job.json:2:3: "):
        parse_job_text("{\n  x}", "job.json")


def test_job_type_is_read() -> None:
    job = parse_job_text('job "s" {\n  type = "system"\n  group "g" {}\n}\n', "s.hcl")
    assert job.type == "system"
    assert parse_job_text('{"Job": {"ID": "b", "Type": "batch"}}', "b.json").type == "batch"


def test_damaged_input_only_ever_gives_job_errors() -> None:
    # Cut and splice a valid jobspec and API JSON at random: every outcome is a job or a
    # JobError with a file:line prefix, never another exception.
    import random

    hcl = """job "j" {
  group "g" {
    task "t" {
      resources {
        device "nvidia/gpu" {
          count = 2
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "2 GiB"
          }
          affinity {
            attribute = device.model
            value     = "T4"
            weight    = -50
          }
        }
      }
    }
  }
}
"""
    js = _api_job(
        {
            "Name": "gpu",
            "Count": 2,
            "Constraints": [{"LTarget": "${device.model}", "RTarget": "T4", "Operand": "="}],
            "Affinities": [
                {"LTarget": "${device.model}", "RTarget": "T4", "Operand": "=", "Weight": 5}
            ],
        }
    )
    rng = random.Random(7)
    pieces = ['"', "{", "}", "[", "]", ",", ":", "=", "${", "null", "-1", "1.5", "true", "\n", "\\"]
    for source in (hcl, js):
        for _ in range(150):
            text = source
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(len(text))
                if rng.random() < 0.5:
                    text = text[:at] + text[at + rng.randint(1, 6) :]
                else:
                    text = text[:at] + rng.choice(pieces) + text[at:]
            try:
                parse_job_text(text, "x")
            except JobError as exc:
                assert str(exc).startswith("x:") or str(exc).startswith("x "), exc
