"""Release tracking over the real wire: a plugin subprocess, a fake agent's HTTP API.

What a plugin author and an operator rely on: ``released()`` exactly once per
device and holder, whatever the stream and the processes do meanwhile; the
devices unhealthy while they are cleaned, and a Reserve of one waiting for the
end; ``held_by`` in the stats; and when the agent cannot be asked, devices
served as before.
"""

from __future__ import annotations

import threading

import grpc
import pytest
from support.release import (
    GROUP,
    Setup,
    gpus,
    health,
    held_by,
    reserve_error,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)

CLEANING = "being cleaned after"


def test_one_release_per_device_per_holder(setup: Setup) -> None:
    agent = setup.agent
    launched, fingerprint = setup.start()
    agent.place("a1", gpus("GPU-0", "GPU-1"), status="running", name="train.gpu[0]")
    # Not ours: another node's allocation, and another plugin's devices with the same IDs.
    agent.place("elsewhere", gpus("GPU-2"), status="running", node_id="other-node")
    agent.place("other-plugin", [("nvidia", "gpu", "x1", ["GPU-2"])], status="running")
    setup.wait_held(launched, {"GPU-0": "a1", "GPU-1": "a1"})

    mark = fingerprint.count()
    agent.set_status("a1", "complete")
    (call,) = setup.journal.wait(1)
    assert sorted(call["ids"]) == ["GPU-0", "GPU-1"]
    assert call["cleaning"] == {"GPU-0": "a1", "GPU-1": "a1"}
    # Quicker than the settle time: the devices never showed as unhealthy.
    fingerprint.wait(lambda g: all(h == (True, "") for h in health(g).values()), after=mark)

    # A gap in the stream and the catch-up that follows repeat nothing.
    lists = len(agent.asked("/v1/node/"))
    agent.drop_streams()
    wait_until(lambda: len(agent.asked("/v1/node/")) > lists and agent.stream_count() == 1)
    for alloc in ("elsewhere", "other-plugin"):
        agent.set_status(alloc, "complete")

    # The next holder of GPU-0 is lost: one more release, for it alone.
    agent.place("b1", gpus("GPU-0"), status="pending")
    agent.set_status("b1", "running")
    setup.wait_held(launched, {"GPU-0": "b1"})
    agent.set_status("b1", "lost")
    calls = setup.journal.wait(2)
    assert calls[1]["ids"] == ["GPU-0"]
    assert calls[1]["cleaning"] == {"GPU-0": "b1"}
    agent.drop_streams()
    wait_until(lambda: agent.stream_count() == 1)
    lists = len(agent.asked("/v1/node/"))
    wait_until(lambda: len(agent.asked("/v1/node/")) >= lists)
    assert len(setup.journal.calls()) == 2


def test_devices_held_at_start_are_held(setup: Setup) -> None:
    setup.agent.place("a1", gpus("GPU-1"), status="running")
    launched, _ = setup.start()
    setup.wait_held(launched, {"GPU-1": "a1"})
    env = launched.client.reserve(["GPU-2"]).envs
    assert env["HELD"] == '{"GPU-1": "a1"}'  # what held_by() tells the plugin itself
    assert setup.journal.calls() == []


def test_a_stop_while_the_plugin_is_down_is_released_after_its_restart(setup: Setup) -> None:
    agent = setup.agent
    agent.place("a1", gpus("GPU-0"), status="running")
    agent.place("a2", gpus("GPU-1"), status="running")
    launched, _ = setup.start()
    setup.wait_held(launched, {"GPU-0": "a1", "GPU-1": "a2"})
    launched.client.kill()
    agent.set_status("a1", "complete", event=False)  # nobody heard it
    agent.set_status("a2", "failed")
    agent.gc("a2")  # and garbage-collected before the plugin is back: asked for by ID

    launched, _ = setup.start()
    calls = setup.journal.wait(2)
    assert sorted(tuple(c["ids"]) for c in calls) == [("GPU-0",), ("GPU-1",)]
    assert "/v1/allocation/a2" in agent.asked("/v1/allocation/")
    setup.wait_held(launched, {})

    # Handled, and remembered: the next start repeats nothing.
    launched.client.kill()
    lists = len(agent.asked("/v1/node/"))  # before the start: its first list may come at once
    launched, _ = setup.start()
    wait_until(lambda: len(agent.asked("/v1/node/")) > lists)
    wait_until(lambda: agent.stream_count() == 1)
    assert len(setup.journal.calls()) == 2


def test_an_agent_restart_loses_no_release(setup: Setup) -> None:
    agent = setup.agent
    agent.place("a1", gpus("GPU-2"), status="running")
    launched, _ = setup.start()
    setup.wait_held(launched, {"GPU-2": "a1"})
    agent.stop()  # the stream drops; the plugin retries with back-off
    agent.set_status("a1", "complete", event=False)
    agent.start()
    (call,) = setup.journal.wait(1)
    assert call["ids"] == ["GPU-2"]
    # One line said why the agent could not be asked; devices were served throughout.
    warned = launched.wait_for_log(
        lambda e: "release tracking:" in e.message and e.level.lower().startswith("warn")
    )
    assert "devices are served as before" in warned[0].message
    assert health(launched.client.fingerprint().next(10)).keys() == {"GPU-0", "GPU-1", "GPU-2"}


def test_unhealthy_while_cleaned_and_reserve_waits(setup: Setup) -> None:
    agent = setup.agent
    setup.hold.touch()
    launched, fingerprint = setup.start()
    agent.place("a1", gpus("GPU-0"), status="running")
    setup.wait_held(launched, {"GPU-0": "a1"})
    agent.set_status("a1", "complete")
    cleaning = fingerprint.wait(lambda g: health(g)["GPU-0"] == (False, f"{CLEANING} a1"))
    assert health(cleaning)["GPU-1"] == (True, "")
    mark = fingerprint.count()

    # A task that got GPU-0 anyway (placed before Nomad heard) waits for the cleaning.
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(launched.client.reserve(["GPU-0"])))
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive() and not got
    setup.hold.unlink()
    waiter.join(30)
    assert got and got[0].envs["IDS"] == "GPU-0"  # type: ignore[attr-defined]
    fingerprint.wait(lambda g: health(g)["GPU-0"] == (True, ""), after=mark)


def test_a_failed_cleaning_keeps_the_device_unhealthy_until_a_retry_works(
    setup: Setup,
) -> None:
    agent = setup.agent
    setup.fail.write_text("scrub failed: device busy\n")
    launched, fingerprint = setup.start()
    agent.place("a1", gpus("GPU-1"), status="running")
    setup.wait_held(launched, {"GPU-1": "a1"})
    agent.set_status("a1", "complete")
    reason = "cleaning after a1 failed: scrub failed: device busy"
    fingerprint.wait(lambda g: health(g)["GPU-1"] == (False, reason))
    error = reserve_error(launched, ["GPU-1"])
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION
    assert reason in error.details
    setup.journal.wait(2)  # retried with back-off
    mark = fingerprint.count()
    setup.fail.unlink()
    fingerprint.wait(lambda g: health(g)["GPU-1"] == (True, ""), timeout=60, after=mark)
    calls = setup.journal.calls()
    assert all(c["ids"] == ["GPU-1"] for c in calls)
    launched.client.reserve(["GPU-1"])
    # Handled at last: a restart does not clean again.
    launched.client.kill()
    setup.start()
    wait_until(lambda: agent.stream_count() == 1)
    assert len(setup.journal.calls()) == len(calls)


def test_stats_say_which_allocation_holds_each_instance(setup: Setup) -> None:
    launched, _ = setup.start()
    setup.agent.place("a1", gpus("GPU-0", "GPU-1"), status="running")
    recorder = setup.stats(launched)
    groups = recorder.wait(lambda g: held_by(g) == {"GPU-0": "a1", "GPU-1": "a1"})
    recorder.close()
    (group,) = groups
    assert (group.vendor, group.type, group.name) == GROUP
    # The plugin's own stat stays beside it; an instance it had no stats for gets held_by.
    assert group.instance_stats["GPU-0"].summary.int_numerator == 40  # type: ignore[union-attr]
    assert group.instance_stats["GPU-1"].summary is None
    assert "GPU-2" not in group.instance_stats


def test_an_unreachable_agent_changes_nothing_but_one_log_line(setup: Setup) -> None:
    agent = setup.agent
    agent.stop()
    launched, fingerprint = setup.start()
    assert health(fingerprint.messages[-1]) == {i: (True, "") for i in ("GPU-0", "GPU-1", "GPU-2")}
    assert launched.client.reserve(["GPU-0"]).envs["IDS"] == "GPU-0"
    with launched.client.stats(0.1) as stats:
        assert stats.next(10)
    # Retried with back-off (1 s, 2 s ...): said once, at warning level.
    retries = launched.wait_for_log(lambda e: "retrying in" in e.message, timeout=30, count=2)
    assert len(retries) >= 2
    warned = [e for e in launched.logs if e.level.lower().startswith("warn")]
    assert len([e for e in warned if "cannot reach Nomad" in e.message]) == 1
    agent.start()
    launched.wait_for_log(lambda e: "following the allocations of node" in e.message, timeout=30)


def test_a_refused_token_is_said_once_and_a_new_one_is_read(setup: Setup) -> None:
    agent = setup.agent
    agent.token = "the-right-one"
    token = setup.tmp / "token"
    token.write_text("a-wrong-one\n")
    token.chmod(0o600)
    launched, _ = setup.start(token_file=str(token))
    launched.wait_for_log(lambda e: "retrying in" in e.message, timeout=30, count=2)
    refused = [e for e in launched.logs if "403" in e.message and e.level != "debug"]
    assert len(refused) == 1 and refused[0].level.lower().startswith("warn")
    token.write_text("the-right-one\n")  # rotated: read again at the next connection
    launched.wait_for_log(lambda e: "following the allocations of node" in e.message, timeout=30)
    agent.place("a1", gpus("GPU-0"), status="running")
    setup.wait_held(launched, {"GPU-0": "a1"})
    seen = [r.headers.get("X-Nomad-Token") for r in agent.requests]
    assert "the-right-one" in seen
    for entry in launched.logs:  # never logged
        text = entry.message + repr(dict(entry.fields))
        assert "the-right-one" not in text and "a-wrong-one" not in text


def test_a_holder_the_token_can_no_longer_read_still_holds(setup: Setup) -> None:
    """A list that leaves a holder out is not a release: it may be a namespace the
    token cannot read. Only a 404 for the allocation's ID says it is gone."""
    agent = setup.agent
    agent.place("a1", gpus("GPU-0"), status="running", namespace="team")
    launched, _ = setup.start()
    setup.wait_held(launched, {"GPU-0": "a1"})
    agent.hidden.add("team")
    agent.drop_streams()  # the catch-up that follows no longer lists a1
    launched.wait_for_log(lambda e: "cannot tell whether allocation a1" in e.message, timeout=30)
    setup.wait_held(launched, {"GPU-0": "a1"})  # still held, as far as anyone can tell
    assert setup.journal.calls() == []
    agent.hidden.clear()
    agent.set_status("a1", "complete", event=False)
    agent.gc("a1")
    agent.drop_streams()
    (call,) = setup.journal.wait(1)
    assert call == {"ids": ["GPU-0"], "cleaning": {"GPU-0": "a1"}, "pid": call["pid"]}
