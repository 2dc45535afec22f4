"""``check --nomad`` at cluster scale and against a server that is not to be trusted.

The fake API (``fake_nomad.py``) pages as Nomad's paginator does. The reading
is checked against the one it replaced (one ``/v1/node/<id>`` and one
``/v1/node/<id>/allocations`` per node, read with ``nodes.py``): the verdicts
and ``--json`` must be the same. Then proxies (Go's rules), the address's
user information, and answers too large or too deeply nested.
"""

from __future__ import annotations

import copy
import io
import json
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fake_nomad import FakeNomad, allocation, device_group, node
from support.launcher import cli_env, launcher_command, run_cli

from nomad_device.cli.__main__ import main
from nomad_device.cli.check.explain import render_json
from nomad_device.golang.proxy import redact_url
from nomad_device.placement import cluster, jsonpos
from nomad_device.placement.apijson import _NODES, _node, decode_allocations, decode_nodes
from nomad_device.placement.cluster import ApiConfig, read_cluster
from nomad_device.placement.evaluate import class_candidates, evaluate_job, node_skip_reason
from nomad_device.placement.jobspec import parse_job_text
from nomad_device.placement.nodes import NodeError, allocation_from_json, node_from_json

JOB = """\
job "train" {
  datacenters = ["dc1"]
  group "g" {
    count = 2
    task "main" {
      resources {
        device "nvidia/gpu" {
          count = 2
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "16 GiB"
          }
        }
      }
    }
  }
}
"""
PROXY_VARS = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def _env(**extra: str) -> dict[str, str]:
    env = cli_env(**extra)
    for name in (*PROXY_VARS, "NO_PROXY", "no_proxy", "REQUEST_METHOD"):
        if name not in extra:
            env.pop(name, None)
    return env


def _cluster(n: int, *, unhealthy: tuple[int, ...] = (), seed: int = 7) -> FakeNomad:
    """``n`` GPU nodes of one class, each with allocations holding some GPUs."""
    rnd = random.Random(seed)
    nodes = []
    allocs: dict[str, list[dict[str, object]]] = {}
    for i in range(n):
        node_id = f"{i:08x}-{rnd.getrandbits(32):08x}"
        gpus = [(f"GPU-{i}-{g}", not (i in unhealthy and g < 3), "") for g in range(4)]
        gpu = device_group("nvidia", "gpu", "A100", gpus, memory={"Int": 40, "Unit": "GiB"})
        full = node(node_id, f"client-{i}", [gpu], computed_class="v1:123")
        full["NodeResources"]["Processors"] = {
            "Topology": {
                "Nodes": [0, 1],
                "Distances": ["ChU=", "FQo="],
                "Cores": [
                    {"SocketID": 0, "NodeID": c // 4, "ID": c, "Grade": True, "Disable": False}
                    for c in range(8)
                ],
                "OverrideTotalCompute": 0,
                "OverrideWitholdCompute": 0,
            }
        }
        nodes.append(full)
        for a in range(rnd.randrange(4)):
            held = [f"GPU-{i}-{a}"]
            status = rnd.choice(["running", "running", "pending", "complete", "failed"])
            alloc = allocation(
                f"{rnd.getrandbits(32):08x}-{i:04x}-{a}",
                f"web.api[{a}]",
                node_id,
                {"server": [("nvidia", "gpu", "A100", held)]},
                client_status=status,
            )
            alloc["CreateIndex"] = rnd.randrange(10, 10_000)
            allocs.setdefault(node_id, []).append(alloc)
    return FakeNomad(nodes=nodes, allocations=allocs)


def _old_reading(fake: FakeNomad, job_text: str) -> dict[str, object]:
    """The report as the per-node reading made it: full nodes, their allocation lists."""
    job = parse_job_text(job_text, "job.hcl")
    nodes = []
    for i, full in enumerate(sorted(fake.nodes, key=lambda n: n["ID"])):
        origin = f"http://x/v1/node/{full['ID']}"
        n = node_from_json(jsonpos.from_plain(full), origin)
        if not node_skip_reason(n, job, filters=True):
            n.allocations = [
                allocation_from_json(jsonpos.from_plain(a), origin, f"[{j}]")
                for j, a in enumerate(fake.allocations.get(full["ID"], []))
            ]
        nodes.append(n)
        assert i >= 0
    return render_json(evaluate_job(job, nodes, "the cluster"))


def _new_reading(address: str, job_text: str) -> dict[str, object]:
    job = parse_job_text(job_text, "job.hcl")
    nodes, _ = read_cluster(
        ApiConfig(address=address),
        lambda n: not node_skip_reason(n, job, filters=True),
        lambda ns: class_candidates(job, ns),
    )
    return render_json(evaluate_job(job, nodes, "the cluster"))


@pytest.fixture
def big() -> Iterator[tuple[FakeNomad, str]]:
    fake = _cluster(1200, unhealthy=(5, 700))
    address = fake.start()
    yield fake, address
    fake.stop()


def test_few_requests_for_many_nodes_and_the_same_verdicts(big: tuple[FakeNomad, str]) -> None:
    fake, address = big
    got = _new_reading(address, JOB)
    assert got == _old_reading(fake, JOB)
    asked = fake.asked()
    # 1200 nodes in pages of 500, the live allocations in pages of 2000
    assert asked.count("/v1/nodes") == 3
    assert asked.count("/v1/allocations") == 1
    # nodes 5 and 700 can fail Nomad's device check (one healthy GPU, two asked for):
    # only then does a computed class matter, and every node of that look is asked
    per_node = [p for p in asked if p.startswith("/v1/node/")]
    assert len(per_node) == 1200
    entries = got["TaskGroups"][0]["Nodes"]  # type: ignore[index]
    noted = [e for e in entries if any("computed class" in n for n in e["Notes"])]
    assert noted, "class-mates of a failing node are said to be at risk"


def test_no_per_node_request_when_no_class_can_matter() -> None:
    fake = _cluster(300)
    address = fake.start()
    try:
        assert _new_reading(address, JOB) == _old_reading(fake, JOB)
    finally:
        fake.stop()
    assert sorted(set(fake.asked())) == ["/v1/allocations", "/v1/nodes"]


def test_terminal_allocations_are_left_to_the_server() -> None:
    fake = _cluster(50)
    address = fake.start()
    try:
        _new_reading(address, JOB)
    finally:
        fake.stop()
    (query,) = [q for p, q, _ in fake.seen if p == "/v1/allocations"]
    assert query["filter"] == [cluster.LIVE_ALLOCATIONS]
    assert query["per_page"] == [str(cluster.ALLOCATIONS_PER_PAGE)]


# -------------------------------------------- the fast reader agrees with nodes.py


def _mutations(rnd: random.Random, value: object, depth: int = 0) -> object:
    """``value`` with some fields nulled, dropped, or given another type."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            roll = rnd.random()
            if roll < 0.01:
                continue
            if roll < 0.02:
                out[k] = None
            elif roll < 0.025:
                out[k] = rnd.choice([1, 2.0, "x", True, [], {}])
            else:
                out[k] = _mutations(rnd, v, depth + 1)
        return out
    if isinstance(value, list):
        return [_mutations(rnd, v, depth + 1) for v in value]
    return value


def _slow_nodes(items: list[object]) -> list[object] | str:
    try:
        return [
            node_from_json(jsonpos.from_plain(n), "w", f"[{i}]", stub_ok=True)
            for i, n in enumerate(items)
        ]
    except NodeError as exc:
        return str(exc)


def test_fast_and_slow_readers_agree_on_every_node() -> None:
    fake = _cluster(20, unhealthy=(3,))
    rich = [{**n, "NodeResources": copy.deepcopy(n["NodeResources"])} for n in fake.nodes]
    rich[0]["NodeResources"]["Devices"][0]["Instances"][0]["Locality"] = {"PciBusID": "0000:3b"}
    rich[1]["NodeResources"]["Processors"]["Topology"]["BusAssociativity"] = {"0000:3b:00.0": 1}
    rnd = random.Random(1)
    typed_used = 0
    for trial in range(300):
        items = [_mutations(rnd, n) for n in rnd.sample(rich, 3)] if trial else rich
        body = json.dumps(items).encode()
        want = _slow_nodes(items)
        try:
            fast: list[object] | None = [_node(s, "w", {}) for s in _NODES.decode(body)]
        except Exception:  # the typed reader declined: decode_nodes reads it slowly
            fast = None
        if fast is not None:
            typed_used += 1
            assert fast == want, trial
        try:
            got: list[object] | str = list(decode_nodes(body, "w"))
        except NodeError as exc:
            got = str(exc)
        assert got == want, trial
    assert typed_used > 30


def test_fast_and_slow_readers_agree_on_allocations() -> None:
    fake = _cluster(30)
    allocs = [a for per in fake.allocations.values() for a in per]
    rnd = random.Random(2)
    for trial in range(200):
        items = [_mutations(rnd, a) for a in allocs[:5]] if trial else allocs
        body = json.dumps(items).encode()
        try:
            want: object = [
                allocation_from_json(jsonpos.from_plain(a), "w", f"[{i}]")
                for i, a in enumerate(items)
            ]
        except NodeError as exc:
            want = str(exc)
        except AttributeError:
            continue  # not an object at all: both refuse, in their own words
        try:
            got: object = [a for _, a in decode_allocations(body, "w")]
        except NodeError as exc:
            got = str(exc)
        assert got == want, trial


@pytest.fixture
def two() -> Iterator[tuple[FakeNomad, str, FakeNomad, str]]:
    """A cluster, and a second fake standing in for an HTTP proxy (a proxied request
    reaches it with an absolute URL, which it serves as the cluster would)."""
    nomad = _cluster(3)
    nomad.token = "s3cr3t"
    proxy = _cluster(3)
    a, b = nomad.start(), proxy.start()
    yield nomad, a, proxy, b
    nomad.stop()
    proxy.stop()


def test_the_token_never_goes_to_a_proxy_for_loopback(
    tmp_path: Path, two: tuple[FakeNomad, str, FakeNomad, str]
) -> None:
    nomad, address, proxy, proxy_address = two
    job = tmp_path / "job.hcl"
    job.write_text(JOB)
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        env = _env(NOMAD_ADDR=address, NOMAD_TOKEN="s3cr3t", **{var: proxy_address})
        result = run_cli("check", str(job), "--nomad", env=env)
        assert result.returncode in (0, 1), result.stderr
    assert proxy.seen == []
    assert nomad.seen and all(h.get("X-Nomad-Token") == "s3cr3t" for _, _, h in nomad.seen)


def test_a_proxy_is_used_where_go_would_and_no_proxy_is_honoured(
    tmp_path: Path, two: tuple[FakeNomad, str, FakeNomad, str]
) -> None:
    _, _, proxy, proxy_address = two
    job = tmp_path / "job.hcl"
    job.write_text(JOB)
    far = "http://nomad.invalid:4646"
    via = run_cli("check", str(job), "--nomad", env=_env(NOMAD_ADDR=far, HTTP_PROXY=proxy_address))
    assert via.returncode == 0, via.stderr
    assert "/v1/nodes" in proxy.asked()
    asked = len(proxy.seen)
    direct = run_cli(
        "check",
        str(job),
        "--nomad",
        env=_env(NOMAD_ADDR=far, HTTP_PROXY=proxy_address, NO_PROXY="nomad.invalid"),
    )
    assert direct.returncode == 2
    assert "cannot reach Nomad at http://nomad.invalid:4646" in direct.stderr
    assert len(proxy.seen) == asked


# ------------------------------------------------------------ user information


def test_user_information_is_never_shown(tmp_path: Path) -> None:
    fake = _cluster(2)
    address = fake.start()
    job = tmp_path / "job.hcl"
    job.write_text(JOB)
    secret = address.replace("http://", "http://admin:hunter2@")
    try:
        text = run_cli("check", str(job), "--nomad", env=_env(NOMAD_ADDR=secret))
        data = run_cli("check", "--json", str(job), "--nomad", env=_env(NOMAD_ADDR=secret))
    finally:
        fake.stop()
    gone = run_cli(
        "check", str(job), "--nomad", env=_env(NOMAD_ADDR="http://admin:hunter2@127.0.0.1:9")
    )
    bad = run_cli("check", str(job), "--nomad", env=_env(NOMAD_ADDR="ftp://admin:hunter2@x"))
    for result in (text, data, gone, bad):
        assert "hunter2" not in result.stdout + result.stderr
        assert "admin" not in result.stdout + result.stderr
    assert text.returncode == 0, text.stderr
    assert address.replace("http://", "http://xxxxx@") in text.stdout
    assert json.loads(data.stdout)["Source"].endswith(address.replace("http://", "http://xxxxx@"))
    assert "cannot reach Nomad at http://xxxxx@127.0.0.1:9" in gone.stderr
    assert "invalid NOMAD_ADDR 'ftp://xxxxx@x'" in bad.stderr
    # the credentials still went, as basic auth
    assert fake.seen[0][2].get("Authorization") == "Basic YWRtaW46aHVudGVyMg=="


def test_redact_url() -> None:
    assert redact_url("http://a:b@h:1/p") == "http://xxxxx@h:1/p"
    assert redact_url("https://token@h") == "https://xxxxx@h"
    assert redact_url("http://h:4646") == "http://h:4646"


# ------------------------------------------------------- answers too big or too deep


def _in_process(
    *args: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str]:
    for k in list(__import__("os").environ):
        if k.startswith("NOMAD_") or k in PROXY_VARS:
            monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out, err)
    return code, out.getvalue() + err.getvalue()


def test_an_answer_too_large_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "MAX_ANSWER_BYTES", 64 * 1024)
    fake = _cluster(2)
    fake.override["/v1/nodes"] = b"[" + b",".join([b'{"ID": "x"}'] * 20_000) + b"]"
    fake.declared["/v1/nodes"] = -1  # no Content-Length: cut off while it streams
    address = fake.start()
    job = tmp_path / "job.hcl"
    job.write_text(JOB)
    try:
        code, text = _in_process(
            "check", str(job), "--nomad", env={"NOMAD_ADDR": address}, monkeypatch=monkeypatch
        )
    finally:
        fake.stop()
    assert code == 2
    assert f"{address}/v1/nodes: the answer is larger than 64 KiB" in text


def test_an_answer_announced_too_large_is_refused_at_once(tmp_path: Path) -> None:
    fake = _cluster(2)
    fake.declared["/v1/nodes"] = 2 * cluster.MAX_ANSWER_BYTES
    address = fake.start()
    job = tmp_path / "job.hcl"
    job.write_text(JOB)
    try:
        result = run_cli("check", str(job), "--nomad", env=_env(NOMAD_ADDR=address))
    finally:
        fake.stop()
    assert result.returncode == 2, result.stderr
    assert f"{address}/v1/nodes: the answer is larger than 128 MiB" in result.stderr


def test_an_answer_nested_too_deeply_exits_2(tmp_path: Path) -> None:
    fake = _cluster(2)
    fake.override["/v1/nodes"] = b"[" * 200_000
    address = fake.start()
    job = tmp_path / "job.hcl"
    job.write_text(JOB)
    try:
        result = run_cli("check", str(job), "--nomad", env=_env(NOMAD_ADDR=address))
    finally:
        fake.stop()
    assert result.returncode == 2, result.stderr
    assert "nested too deeply" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_node_file_nested_too_deeply_exits_2(tmp_path: Path) -> None:
    nodes = tmp_path / "deep.json"
    nodes.write_text("[" * 200_000)
    job = tmp_path / "job.hcl"
    job.write_text(JOB)
    result = run_cli("check", str(job), "--node", str(nodes))
    assert result.returncode == 2, result.stderr
    assert "nested too deeply" in result.stderr


# ------------------------------------------------------------- servers that page forever


def _live(i: int) -> dict[str, object]:
    alloc = allocation(
        f"{i:08x}-0000", f"web.api[{i}]", "n", {"t": [("nvidia", "gpu", "A100", [])]}
    )
    alloc["CreateIndex"] = i
    return alloc


def _read(address: str) -> list[object]:
    nodes, _ = read_cluster(ApiConfig(address=address), lambda n: True, lambda ns: [])
    return list(nodes)


def test_a_short_page_ends_the_list_whatever_token_comes_with_it() -> None:
    fake = _cluster(3)
    fake.endless = {"/v1/allocations": "fresh", "/v1/nodes": "fresh"}
    address = fake.start()
    try:
        assert len(_read(address)) == 3
    finally:
        fake.stop()
    assert fake.asked().count("/v1/nodes") == 1
    assert fake.asked().count("/v1/allocations") == 1


def test_a_token_that_comes_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "ALLOCATIONS_PER_PAGE", 1)  # every page full
    fake = _cluster(3)
    fake.allocations = {"n": [_live(i) for i in range(2)]}
    fake.endless = {"/v1/allocations": "same"}
    address = fake.start()
    try:
        with pytest.raises(cluster.ApiError, match="came twice"):
            _read(address)
    finally:
        fake.stop()
    assert fake.asked().count("/v1/allocations") < 20


def test_pages_past_any_clusters_size_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "NODES_PER_PAGE", 1)
    monkeypatch.setattr(cluster, "MAX_LISTED", 25)
    fake = _cluster(3)
    fake.endless = {"/v1/nodes": "fresh"}  # full pages, a new token each time, forever
    address = fake.start()
    try:
        with pytest.raises(cluster.ApiError, match="still more pages after 25 items"):
            _read(address)
    finally:
        fake.stop()
    assert fake.asked().count("/v1/nodes") == 25


def test_a_signal_stops_check_while_a_list_pages_on(tmp_path: Path) -> None:
    # Full pages of allocations, each with a fresh token, slowly: the allocation
    # fetcher runs for many minutes. SIGTERM must end check at once (it waited for
    # the fetcher before: for ever).
    fake = _cluster(2)
    fake.allocations = {"n": [_live(i) for i in range(cluster.ALLOCATIONS_PER_PAGE)]}
    fake.endless = {"/v1/allocations": "fresh"}
    fake.delay = 0.05
    address = fake.start()
    job = tmp_path / "job.hcl"
    job.write_text(JOB)
    proc = subprocess.Popen(
        [*launcher_command(), "check", str(job), "--nomad"],
        env=_env(NOMAD_ADDR=address),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while fake.asked().count("/v1/allocations") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.asked().count("/v1/allocations") >= 3
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        fake.stop()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "interrupted (SIGTERM)" in err
    assert "Traceback" not in err


def test_the_fast_json_writer_writes_what_the_go_exact_one_does() -> None:
    from nomad_device.cli.nomadjson import dumps, dumps_prepared, go_number

    rnd = random.Random(3)
    floats = [0.0, -0.0, 1.0, -2.0, 0.5, 1 / 3, 1e-4, 9.99e-5, 1e-7, 1e15 + 0.5, 1e16, 3e21]
    floats += [rnd.uniform(-1, 1) for _ in range(50)] + [rnd.choice([1, -1]) / 7**9]
    tree = {
        "a": [go_number(f) for f in floats],
        "b": {"x": 'é\n"q"', "y": [], "z": {}, "n": None, "t": True, "i": -3},
        "c": [{"k": go_number(f)} for f in floats[:5]],
    }
    for indent in (4, None):
        assert dumps_prepared(tree, indent) == dumps(
            {**tree, "a": floats, "c": [{"k": f} for f in floats[:5]]}, indent
        )
