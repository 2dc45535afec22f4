"""``nomad-device-launcher check`` end to end: each source of devices, output, exit codes.

Sources: the example plugin (a real subprocess on a directory of files; the
``interop`` tests add the Go plugin), node JSON as ``nomad node status -json``
prints it, and a fake Nomad HTTP API on loopback (TLS with a client
certificate, the token header, allocations holding devices).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fake_nomad import FakeNomad, allocation, device_group, make_certs, node
from support.launcher import cli_env, launcher_command, run_cli

EXAMPLE = str(Path(sys.executable).with_name("nomad-device-example"))
BAD = 'Device has bad permissions \\"-rwxrwxrwx\\"'

JOB = """\
job "web" {
  datacenters = ["dc*"]
  group "api" {
    task "server" {
      resources {
        device "nomad/file/mock" {
          count = %(count)d
          constraint {
            attribute = "${device.attr.cool-attribute}"
            value     = "attribute-wearing-sunglasses"
          }
        }
      }
    }
  }
}
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    """The example plugin's directory: device01 (0777, unhealthy), device02, device03."""
    d = tmp_path / "devices"
    d.mkdir()
    for name in ("device01", "device02", "device03"):
        (d / name).write_text(name)
    (d / "device01").chmod(0o777)
    (d / "device02").chmod(0o644)
    (d / "device03").chmod(0o644)
    return d


@pytest.fixture
def agent(tmp_path: Path, devices: Path) -> Path:
    return write(
        tmp_path / "agent.hcl",
        f'plugin "nomad-device-example" {{\n  config {{\n    dir = "{devices}"\n  }}\n}}\n',
    )


# ------------------------------------------------------------------ a plugin


def test_plugin_source_places(tmp_path: Path, agent: Path) -> None:
    job = write(tmp_path / "job.hcl", JOB % {"count": 2})
    result = run_cli("check", "-q", "-c", str(agent), str(job), EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert "plugin example-fs-device: places" in result.stdout
    assert 'task "server" device "nomad/file/mock": nomad/file/mock [device02, device03]' in (
        result.stdout
    )
    assert "deterministic: yes" in result.stdout
    assert 'Summary: group "api" places on 1 of 1 node' in result.stdout


def test_plugin_source_explains_a_miss(tmp_path: Path, agent: Path) -> None:
    job = write(tmp_path / "job.hcl", JOB % {"count": 3})
    result = run_cli("check", "-q", "-c", str(agent), str(job), "--", EXAMPLE)
    assert result.returncode == 1, result.stderr
    assert "does not place" in result.stdout
    assert (
        f'nomad/file/mock: 2 of 2 healthy instances free: device01 unhealthy ("{BAD}"); count = 3'
    ) in result.stdout


def test_plugin_source_json(tmp_path: Path, agent: Path) -> None:
    job = write(tmp_path / "job.hcl", JOB % {"count": 1})
    result = run_cli("check", "-q", "--json", "-c", str(agent), str(job), EXAMPLE)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["Places"] is True
    (group,) = data["TaskGroups"]
    (entry,) = group["Nodes"]
    assert entry["Outcome"] == "places"
    assert entry["Deterministic"] is False  # device02 or device03: map order
    (outcome,) = entry["Outcomes"]
    assert outcome["Devices"][0]["DeviceIDs"] == ["device02"]


def test_a_constraint_that_fails_names_the_attribute(tmp_path: Path, agent: Path) -> None:
    job = write(
        tmp_path / "job.hcl",
        (JOB % {"count": 1}).replace(
            'value     = "attribute-wearing-sunglasses"', 'value     = "attribute-wearing-hats"'
        ),
    )
    result = run_cli("check", "-q", "-c", str(agent), str(job), EXAMPLE)
    assert result.returncode == 1
    assert (
        "nomad/file/mock: constraint ${device.attr.cool-attribute} = attribute-wearing-hats is "
        'false: cool-attribute = "attribute-wearing-sunglasses"'
    ) in result.stdout


# ----------------------------------------------------------------- node JSON

T4 = device_group(
    "nvidia",
    "gpu",
    "T4",
    [("GPU-aaa", True, ""), ("GPU-bbb", True, "")],
    memory={"Int": 16384, "Unit": "MiB"},
)
A100 = device_group(
    "nvidia",
    "gpu",
    "A100",
    [("GPU-ccc", True, ""), ("GPU-ddd", False, "Xid 79: fallen off the bus")],
    memory={"Int": 80, "Unit": "GiB"},
)
GPU_JOB = """\
job "train" {
  datacenters = ["dc1"]
  group "trainer" {
    task "main" {
      resources {
        device "nvidia/gpu" {
          count = %(count)d
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "%(memory)s"
          }
          affinity {
            attribute = "${device.model}"
            value     = "A100"
            weight    = 50
          }
        }
      }
    }
  }
}
"""


def test_node_json_file(tmp_path: Path) -> None:
    nodes = write(tmp_path / "node.json", json.dumps(node("1111aaaa-2222", "gpu-1", [T4, A100])))
    job = write(tmp_path / "job.hcl", GPU_JOB % {"count": 1, "memory": "16 GiB"})
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 0, result.stderr
    assert "node gpu-1 (1111aaaa): places" in result.stdout
    assert "nvidia/gpu/A100 [GPU-ccc] affinity score 1" in result.stdout
    assert "deterministic: yes" in result.stdout


def test_node_json_from_stdin_as_a_list(tmp_path: Path) -> None:
    data = json.dumps(
        [node("a1b2c3d4-1", "small", [T4]), node("e5f6a7b8-2", "down", [A100], status="down")]
    )
    job = write(tmp_path / "job.hcl", GPU_JOB % {"count": 2, "memory": "32 GiB"})
    result = subprocess.run(
        [*launcher_command(), "check", str(job), "--node", "-"],
        input=data,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert (
        "nvidia/gpu/T4: constraint ${device.attr.memory} >= 32 GiB is false: memory = 16384 MiB"
    ) in result.stdout
    assert "node down (e5f6a7b8): not considered: not ready (status down)" in result.stdout


def test_a_node_list_stub_is_refused(tmp_path: Path) -> None:
    stub = {"ID": "n-1", "Name": "x", "Status": "ready", "SchedulingEligibility": "eligible"}
    nodes = write(tmp_path / "nodes.json", json.dumps([stub]))
    job = write(tmp_path / "job.hcl", GPU_JOB % {"count": 1, "memory": "1 GiB"})
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 2
    assert "nomad node status -json <id>" in result.stderr


def test_bad_node_json_names_file_line_and_field(tmp_path: Path) -> None:
    bad = copy.deepcopy(node("n-1", "x", [T4]))
    bad["NodeResources"]["Devices"][0]["Instances"][1]["Healthy"] = "yes"
    nodes = write(tmp_path / "node.json", json.dumps(bad, indent=2))
    job = write(tmp_path / "job.hcl", GPU_JOB % {"count": 1, "memory": "1 GiB"})
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 2
    lines = nodes.read_text().splitlines()
    want = next(i for i, ln in enumerate(lines, 1) if '"yes"' in ln)
    assert f"{nodes}:{want}: (node).NodeResources.Devices[0].Instances[1].Healthy: want a bool" in (
        result.stderr
    )


VERSION_JOB = """\
job "train" {
  datacenters = ["dc1"]
  group "trainer" {
    task "main" {
      resources {
        device "nvidia/gpu" {
          count = %s
          constraint {
            attribute = "${device.attr.driver}"
            operator  = "version"
            value     = ">= 1.0"
          }
        }
      }
    }
  }
}
"""


def test_a_version_of_thousands_of_digits_is_judged_as_go_version_judges_it(
    tmp_path: Path,
) -> None:
    # Go's ParseInt stops at the first digit that overflows; Python's int() refused
    # the whole 5,000 digits with a traceback, exit 1 (read as "does not place").
    gpu = device_group("nvidia", "gpu", "T4", [("GPU-aaa", True, "")], driver="1." + "9" * 5000)
    nodes = write(tmp_path / "node.json", json.dumps(node("n-1", "x", [gpu])))
    job = write(tmp_path / "job.hcl", VERSION_JOB % "1")
    result = run_cli("check", "-q", str(job), "--node", str(nodes))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "constraint ${device.attr.driver} version >= 1.0 is false" in result.stdout


@pytest.mark.parametrize(
    ("what", "job_text", "node_text", "said"),
    [
        (
            "a 5,000-digit Int in a node file",
            VERSION_JOB % "1",
            json.dumps(node("n-1", "x", [T4])).replace("16384", "1" * 5000),
            "node.json:1:",
        ),
        (
            "deeply nested lists in a jobspec",
            VERSION_JOB.replace('">= 1.0"', "[" * 5000 + "]" * 5000) % "1",
            json.dumps(node("n-1", "x", [T4])),
            "job.hcl:11: nested deeper than 200 levels",
        ),
        (
            "count = 1+1+... in a jobspec",
            VERSION_JOB % ("1" + "+1" * 3000),
            json.dumps(node("n-1", "x", [T4])),
            "job.hcl:7:",
        ),
    ],
)
def test_unreadable_input_exits_2_naming_where(
    tmp_path: Path, what: str, job_text: str, node_text: str, said: str
) -> None:
    nodes = write(tmp_path / "node.json", node_text)
    job = write(tmp_path / "job.hcl", job_text)
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 2, (what, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, what
    assert said in result.stderr, (what, result.stderr[-500:])


def test_a_plugin_check_cannot_run_is_no_verdict(tmp_path: Path) -> None:
    job = write(tmp_path / "job.hcl", JOB % {"count": 1})
    result = run_cli("check", str(job), str(tmp_path / "no-such-plugin"))
    assert result.returncode == 2, result.stderr
    assert "cannot start plugin" in result.stderr


# ------------------------------------------------------------ a live cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[FakeNomad, dict[str, str]]]:
    certs = make_certs(tmp_path)
    mock = device_group(
        "nomad",
        "file",
        "mock",
        [
            ("device01", False, 'Device has bad permissions "-rwxrwxrwx"'),
            ("device02", True, ""),
            ("device03", True, ""),
        ],
        **{"cool-attribute": "attribute-wearing-sunglasses"},
    )
    fake = FakeNomad(
        nodes=[
            node("8d3f0c55-1111", "client-1", [mock]),
            node("9e4a1d66-2222", "client-2", [mock], eligibility="ineligible"),
            node("7c2b0a44-3333", "client-3", [mock], datacenter="eu1"),
        ],
        allocations={
            "8d3f0c55-1111": [
                allocation(
                    "8f2c1a9d-aaaa-bbbb",
                    "web.api[0]",
                    "8d3f0c55-1111",
                    {"server": [("nomad", "file", "mock", ["device03"])]},
                ),
                allocation(
                    "1234abcd-aaaa-bbbb",
                    "batch.run[0]",
                    "8d3f0c55-1111",
                    {"work": [("nomad", "file", "mock", ["device02"])]},
                    client_status="complete",
                ),
            ]
        },
        token="s3cr3t-token",
        certs=certs,
    )
    address = fake.start()
    env = cli_env(
        NOMAD_ADDR=address,
        NOMAD_TOKEN="s3cr3t-token",
        NOMAD_CACERT=str(certs.ca),
        NOMAD_CLIENT_CERT=str(certs.client_cert),
        NOMAD_CLIENT_KEY=str(certs.client_key),
        NOMAD_REGION="global",
        NOMAD_NAMESPACE="prod",
    )
    yield fake, env
    fake.stop()


def test_cluster_subtracts_what_allocations_hold(
    tmp_path: Path, cluster: tuple[FakeNomad, dict[str, str]]
) -> None:
    fake, env = cluster
    job = write(tmp_path / "job.hcl", (JOB % {"count": 2}).replace('["dc*"]', '["dc1"]'))
    result = run_cli("check", str(job), "--nomad", env=env)
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "node client-1 (8d3f0c55): does not place" in out
    assert (
        f'nomad/file/mock: 1 of 2 healthy instances free: device01 unhealthy ("{BAD}"), '
        "device03 held by allocation 8f2c1a9d (web.api[0]); count = 2"
    ) in out
    assert "node client-2 (9e4a1d66): not considered: not eligible for scheduling" in out
    assert "node client-3 (7c2b0a44): not considered: in datacenter 'eu1'" in out
    # the token went in its header, the region as a query parameter; the allocations of
    # every namespace hold devices, whatever NOMAD_NAMESPACE says
    assert all(h.get("X-Nomad-Token") == "s3cr3t-token" for _, _, h in fake.seen)
    assert all(q.get("region") == ["global"] for _, q, _ in fake.seen)
    assert sorted(fake.asked()) == ["/v1/allocations", "/v1/nodes"]
    (alloc_query,) = [q for p, q, _ in fake.seen if p == "/v1/allocations"]
    assert alloc_query["namespace"] == ["*"]
    assert alloc_query["resources"] == ["true"] and alloc_query["task_states"] == ["false"]


def test_cluster_places_when_the_count_fits(
    tmp_path: Path, cluster: tuple[FakeNomad, dict[str, str]]
) -> None:
    _, env = cluster
    job = write(tmp_path / "job.hcl", JOB % {"count": 1})
    result = run_cli("check", "--json", str(job), "--nomad", env=env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    entries = {e["NodeName"]: e for e in data["TaskGroups"][0]["Nodes"]}
    assert entries["client-1"]["Outcomes"][0]["Devices"][0]["DeviceIDs"] == ["device02"]
    assert entries["client-1"]["Deterministic"] is True
    assert entries["client-2"]["Outcome"] == "skipped"
    assert entries["client-3"]["Outcome"] == "skipped"  # "dc*" does not match "eu1"
    assert entries["client-3"]["Reason"] == "in datacenter 'eu1', not one of the job's (dc*)"


def test_cluster_wrong_token(tmp_path: Path, cluster: tuple[FakeNomad, dict[str, str]]) -> None:
    _, env = cluster
    job = write(tmp_path / "job.hcl", JOB % {"count": 1})
    result = run_cli("check", str(job), "--nomad", env={**env, "NOMAD_TOKEN": "wrong"})
    assert result.returncode == 2
    assert "403" in result.stderr and "node:read" in result.stderr


def test_cluster_needs_the_client_certificate(
    tmp_path: Path, cluster: tuple[FakeNomad, dict[str, str]]
) -> None:
    _, env = cluster
    job = write(tmp_path / "job.hcl", JOB % {"count": 1})
    env = {k: v for k, v in env.items() if k not in ("NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY")}
    result = run_cli("check", str(job), "--nomad", env=env)
    assert result.returncode == 2
    assert "cannot reach Nomad" in result.stderr


def test_cluster_unverified_without_the_ca(
    tmp_path: Path, cluster: tuple[FakeNomad, dict[str, str]]
) -> None:
    _, env = cluster
    job = write(tmp_path / "job.hcl", JOB % {"count": 1})
    no_ca = {k: v for k, v in env.items() if k != "NOMAD_CACERT"}
    refused = run_cli("check", str(job), "--nomad", env=no_ca)
    assert refused.returncode == 2
    assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr
    skipped = run_cli("check", str(job), "--nomad", env={**no_ca, "NOMAD_SKIP_VERIFY": "true"})
    assert skipped.returncode == 0, skipped.stderr


def test_cluster_on_a_unix_socket_with_basic_auth(tmp_path: Path) -> None:
    mock = device_group(
        "nomad",
        "file",
        "mock",
        [("device02", True, "")],
        **{"cool-attribute": "attribute-wearing-sunglasses"},
    )
    fake = FakeNomad(nodes=[node("8d3f0c55-1111", "client-1", [mock])])
    address = fake.start(unix_socket=tmp_path / "nomad.sock")
    try:
        job = write(tmp_path / "job.hcl", JOB % {"count": 1})
        env = cli_env(NOMAD_ADDR=address, NOMAD_HTTP_AUTH="ops:pw")
        result = run_cli("check", str(job), "--nomad", env=env)
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    assert "nomad/file/mock [device02]" in result.stdout
    assert fake.seen[0][2].get("Authorization") == "Basic b3BzOnB3"  # ops:pw


def test_job_from_stdin(tmp_path: Path) -> None:
    nodes = write(tmp_path / "node.json", json.dumps(node("1111aaaa-2222", "gpu-1", [T4])))
    result = subprocess.run(
        [*launcher_command(), "check", "-", "--node", str(nodes)],
        input=GPU_JOB % {"count": 2, "memory": "8 GiB"},
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "nvidia/gpu/T4 [GPU-aaa, GPU-bbb]" in result.stdout


def test_cluster_unreachable(tmp_path: Path) -> None:
    job = write(tmp_path / "job.hcl", JOB % {"count": 1})
    env = cli_env(NOMAD_ADDR="http://127.0.0.1:9")
    result = run_cli("check", str(job), "--nomad", env=env)
    assert result.returncode == 2
    assert "cannot reach Nomad at http://127.0.0.1:9" in result.stderr


# --------------------------------------------------------------- the job file


def test_job_errors_name_file_line_and_field(tmp_path: Path) -> None:
    nodes = write(tmp_path / "node.json", json.dumps(node("n", "n", [T4])))
    job = write(
        tmp_path / "job.hcl",
        (GPU_JOB % {"count": 1, "memory": "1 GiB"}).replace('operator  = ">="', 'operator  = "~="'),
    )
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 2
    assert f"{job}:6: " in result.stderr
    assert "unknown constraint type '~='" in result.stderr


def test_variables_are_refused_with_the_render_command(tmp_path: Path) -> None:
    nodes = write(tmp_path / "node.json", json.dumps(node("n", "n", [T4])))
    job = write(
        tmp_path / "job.hcl",
        'variable "n" { default = 1 }\n'
        + (GPU_JOB % {"count": 1, "memory": "1 GiB"}).replace("count = 1", "count = var.n"),
    )
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 2
    assert "nomad job run -output job.hcl > job.json" in result.stderr
    flag = run_cli("check", str(job), "-var", "n=2", "--node", str(nodes))
    assert flag.returncode == 2
    assert "-var is not supported" in flag.stderr


def test_api_json_job(tmp_path: Path) -> None:
    nodes = write(tmp_path / "node.json", json.dumps(node("n", "gpu-1", [T4, A100])))
    job = {
        "Job": {
            "ID": "train",
            "Datacenters": ["dc1"],
            "TaskGroups": [
                {
                    "Name": "trainer",
                    "Tasks": [
                        {
                            "Name": "main",
                            "Resources": {
                                "Devices": [
                                    {
                                        "Name": "gpu",
                                        "Count": 1,
                                        "Affinities": [
                                            {
                                                "LTarget": "${device.attr.memory}",
                                                "RTarget": "40 GiB",
                                                "Operand": ">=",
                                                "Weight": 80,
                                            }
                                        ],
                                    }
                                ]
                            },
                        }
                    ],
                }
            ],
        }
    }
    path = write(tmp_path / "job.json", json.dumps(job, indent=2))
    result = run_cli("check", str(path), "--node", str(nodes))
    assert result.returncode == 0, result.stderr
    assert "nvidia/gpu/A100 [GPU-ccc] affinity score 1" in result.stdout


def test_exactly_one_source(tmp_path: Path) -> None:
    job = write(tmp_path / "job.hcl", JOB % {"count": 1})
    none = run_cli("check", str(job))
    assert none.returncode == 2 and "exactly one source" in none.stderr
    both = run_cli("check", str(job), "--nomad", "--node", "x.json")
    assert both.returncode == 2 and "exactly one source" in both.stderr


# ------------------------------------------------------ the Go plugin (interop)

GO_JOB = """\
job "files" {
  group "g" {
    task "a" {
      resources {
        device "interop/file" {
          count = %(count)d
          constraint {
            attribute = "${device.attr.files}"
            operator  = ">="
            value     = "2"
          }
        }
      }
    }
    task "b" {
      resources {
        device "file" {
          affinity {
            attribute = "${device.model}"
            value     = "gofile"
            weight    = 100
          }
        }
      }
    }
  }
}
"""


@pytest.fixture
def go_plugin_setup(interop_bin: Path, tmp_path: Path) -> tuple[str, Path]:
    d = tmp_path / "gofiles"
    d.mkdir()
    for name in ("alpha", "beta", "gamma"):
        (d / name).write_text(name)
    agent = write(
        tmp_path / "agent.hcl", f'plugin "goplugin" {{\n  config {{\n    dir = "{d}"\n  }}\n}}\n'
    )
    return str(interop_bin / "goplugin"), agent


@pytest.mark.interop
@pytest.mark.timeout(900)
def test_go_plugin_source(tmp_path: Path, go_plugin_setup: tuple[str, Path]) -> None:
    plugin, agent = go_plugin_setup
    job = write(tmp_path / "job.hcl", GO_JOB % {"count": 2})
    result = run_cli("check", "-q", "-c", str(agent), str(job), plugin)
    assert result.returncode == 0, result.stderr
    assert "plugin go-files: places" in result.stdout
    # task a takes two files in the order the plugin reports them, task b the third
    assert 'task "a" device "interop/file": interop/file/gofile [alpha, beta]' in result.stdout
    assert 'task "b" device "file": interop/file/gofile [gamma] affinity score 1' in result.stdout


@pytest.mark.interop
@pytest.mark.timeout(900)
def test_go_plugin_source_too_few(tmp_path: Path, go_plugin_setup: tuple[str, Path]) -> None:
    plugin, agent = go_plugin_setup
    job = write(tmp_path / "job.hcl", GO_JOB % {"count": 3})
    result = run_cli("check", "-q", "--json", "-c", str(agent), str(job), plugin)
    assert result.returncode == 1, result.stderr
    entry = json.loads(result.stdout)["TaskGroups"][0]["Nodes"][0]
    assert entry["Outcome"] == "fails"
    failed = entry["Outcomes"][0]["Failed"]
    # task a took all three; task b finds none left
    assert failed["Task"] == "b"
    assert failed["Groups"][0]["Reason"] == (
        '0 of 3 healthy instances free: alpha taken by task "a" (device "interop/file"), '
        'beta taken by task "a" (device "interop/file"), gamma taken by task "a" '
        '(device "interop/file"); count = 1'
    )


# ------------------------------------------------------ never overstated

IDS_JOB = """\
job "pair" {
  datacenters = ["dc1"]
  group "g" {
    task "any" {
      resources {
        device "nvidia/gpu" {}
      }
    }
    task "pinned" {
      resources {
        device "nvidia/gpu" {
          constraint {
            attribute = "${device.ids}"
            operator  = "set_contains"
            value     = "%s"
          }
        }
      }
    }
  }
}
"""


@pytest.mark.parametrize("pinned", ["GPU-aaa", "GPU-bbb"])
def test_a_random_instance_choice_is_may_place(tmp_path: Path, pinned: str) -> None:
    # Nomad takes the first task's GPU in Go map order: either one. Reported order
    # said "does not place" (exit 1) for GPU-aaa and "places" (exit 0) for GPU-bbb.
    nodes = write(tmp_path / "node.json", json.dumps(node("1111aaaa-2222", "gpu-1", [T4])))
    job = write(tmp_path / "job.hcl", IDS_JOB % pinned)
    result = run_cli("check", "--json", str(job), "--node", str(nodes))
    assert result.returncode == 1, result.stderr
    entry = json.loads(result.stdout)["TaskGroups"][0]["Nodes"][0]
    assert entry["Outcome"] == "may"
    assert sorted(o["Places"] for o in entry["Outcomes"]) == [False, True]


def test_every_failing_request_in_one_run(tmp_path: Path) -> None:
    nodes = write(tmp_path / "node.json", json.dumps(node("1111aaaa-2222", "gpu-1", [T4])))
    job = write(
        tmp_path / "job.hcl",
        """\
job "four" {
  datacenters = ["dc1"]
  group "g" {
    task "a" {
      resources {
        device "nvidia/gpu/V100" {}
        device "nvidia/gpu" {
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "64 GiB"
          }
        }
      }
    }
    task "b" {
      resources {
        device "amd/gpu" {}
        device "nvidia/gpu" {
          count = 3
        }
      }
    }
  }
}
""",
    )
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert 'task "a" device "nvidia/gpu/V100" (count 1) cannot be met:' in out
    assert 'also, task "a" device "nvidia/gpu" (count 1, 1 constraint) cannot be met:' in out
    assert 'also, task "b" device "amd/gpu" (count 1) cannot be met:' in out
    assert 'also, task "b" device "nvidia/gpu" (count 3) cannot be met:' in out
    data = json.loads(run_cli("check", "--json", str(job), "--node", str(nodes)).stdout)
    (outcome,) = data["TaskGroups"][0]["Nodes"][0]["Outcomes"]
    assert outcome["Failed"]["Device"] == "nvidia/gpu/V100"
    assert [f["Device"] for f in outcome["AlsoFailed"]] == ["nvidia/gpu", "amd/gpu", "nvidia/gpu"]


def test_the_documented_form_with_options_before_the_plugin(tmp_path: Path, agent: Path) -> None:
    # docs/launcher.md: check JOB [-c agent.hcl | --config-json ...] PLUGIN [ARGS]
    job = write(tmp_path / "job.hcl", JOB % {"count": 1})
    result = run_cli("check", str(job), "-q", "-c", str(agent), EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert "plugin example-fs-device: places" in result.stdout
    typo = run_cli("check", str(job), "--nomd")
    assert typo.returncode == 2 and "unrecognized arguments: --nomd" in typo.stderr


def test_a_fingerprint_is_not_a_node(tmp_path: Path, agent: Path) -> None:
    printed = run_cli("fingerprint", "-q", "--json", "-c", str(agent), EXAMPLE)
    assert printed.returncode == 0, printed.stderr
    nodes = write(tmp_path / "fp.json", printed.stdout)
    job = write(tmp_path / "job.hcl", JOB % {"count": 1})
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 2
    assert "device group of a plugin's fingerprint (`fingerprint --json`), not a node" in (
        result.stderr
    )
    assert "check JOB [-c agent.hcl] PLUGIN" in result.stderr


def test_a_typo_in_an_attribute_gets_a_suggestion(tmp_path: Path) -> None:
    nodes = write(tmp_path / "node.json", json.dumps(node("1111aaaa-2222", "gpu-1", [T4])))
    job = write(
        tmp_path / "job.hcl",
        (GPU_JOB % {"count": 1, "memory": "1 GiB"}).replace(
            "${device.attr.memory}", "${device.attr.memroy}"
        ),
    )
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 1
    assert 'memroy is not set (did you mean "memory"?)' in result.stdout


def test_an_unknown_operator_lists_the_operators(tmp_path: Path) -> None:
    nodes = write(tmp_path / "node.json", json.dumps(node("n", "n", [T4])))
    job = write(
        tmp_path / "job.hcl",
        (GPU_JOB % {"count": 1, "memory": "1 GiB"}).replace(
            'operator  = ">="', 'operator  = "greater"'
        ),
    )
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 2
    assert "unknown constraint type 'greater' (the operators on a device: =, ==, is, !=" in (
        result.stderr
    )
    assert "set_contains_any, is_set, is_not_set)" in result.stderr
