"""The rules of release tracking (plugin/ledger.py), on their own."""

from __future__ import annotations

from nomad_device.plugin.ledger import Holding, Ledger, Record, Release, holding_of

G = ("acme", "gpu", "x1")
OTHER = ("nvidia", "gpu", "x1")


def key(device: str, group: tuple[str, str, str] = G) -> tuple[str, str, str, str]:
    return (*group, device)


def h(alloc: str, status: str, *devices: str, created: int = 1, modified: int = 0,
      group: tuple[str, str, str] = G) -> Holding:  # fmt: skip
    return Holding(
        alloc, f"{alloc}.g[0]", "node", status, created, modified or created,
        frozenset(key(d, group) for d in devices),
    )  # fmt: skip


def ledger(*holdings: Holding, gone: tuple[str, ...] = ()) -> tuple[Ledger, list[Release]]:
    book = Ledger()
    book.observe_groups([G])
    return book, book.sync(holdings, gone)


def test_a_live_holder_holds_and_nothing_is_released() -> None:
    book, due = ledger(h("a", "running", "0", "1"), h("b", "pending", "2", created=2))
    assert due == []
    assert book.held() == {key("0"): "a", key("1"): "a", key("2"): "b"}


def test_a_terminal_last_holder_releases_each_device_once() -> None:
    book, due = ledger(h("a", "running", "0", "1"))
    due = book.update([h("a", "complete", "0", "1", modified=5)])
    assert due == [Release("a", "a.g[0]", (key("0"), key("1")))]
    assert book.cleaning() == {key("0"): "being cleaned after a", key("1"): "being cleaned after a"}
    assert book.update([h("a", "complete", "0", "1", modified=5)]) == []  # a repeat: nothing
    assert book.finished(due[0], {}) == []
    assert book.cleaning() == {}
    assert book.records()[key("0")] == Record("a", True, 1)
    assert book.sync([h("a", "complete", "0", "1", modified=5)]) == []  # a catch-up: nothing


def test_still_held_by_a_newer_holder_is_not_released() -> None:
    # Nomad may place b on the device in the plan that stops a.
    book, _ = ledger(h("a", "running", "0"), h("b", "pending", "0", created=3))
    assert book.update([h("a", "complete", "0", modified=4)]) == []
    assert book.held() == {key("0"): "b"}
    (due,) = book.update([h("b", "failed", "0", created=3, modified=6)])
    assert due.alloc == "b"


def test_other_plugins_devices_are_not_ours() -> None:
    book, due = ledger(h("a", "complete", "0", group=OTHER))
    assert due == [] and book.held() == {}
    # Unknown until the plugin reports the group: nothing before, the release after.
    fresh = Ledger()
    assert fresh.sync([h("a", "complete", "0")]) == []
    (release,) = fresh.observe_groups([G])
    assert release.alloc == "a"


def test_a_terminal_holder_at_start_without_records_is_released() -> None:
    _, due = ledger(h("a", "complete", "0"), h("old", "complete", "0", created=0))
    assert [(r.alloc, r.ids) for r in due] == [("a", ["0"])]


def test_records_from_the_last_run_are_honoured() -> None:
    book = Ledger()
    book.load({key("0"): Record("a", True, 1), key("1"): Record("b", False, 2)})
    book.observe_groups([G])
    due = book.sync([h("a", "complete", "0"), h("b", "complete", "1", created=2)])
    assert [(r.alloc, r.ids) for r in due] == [("b", ["1"])]


def test_a_holder_gone_from_the_api_is_released_only_once_confirmed() -> None:
    book = Ledger()
    book.load({key("0"): Record("a", False, 1)})
    book.observe_groups([G])
    assert book.absent_holders([]) == {"a"}
    assert book.sync([]) == []  # not listed, not known gone: still held, as far as we know
    assert book.held() == {key("0"): "a"}
    (due,) = book.sync([], gone=["a"])
    assert (due.alloc, due.ids) == ("a", ["0"])


def test_a_replayed_event_of_an_older_holder_releases_nothing() -> None:
    book = Ledger()
    book.load({key("0"): Record("b", True, 7)})
    book.observe_groups([G])
    assert book.sync([]) == []
    assert book.update([h("a", "complete", "0", created=3, modified=4)]) == []
    assert book.update([h("c", "complete", "0", created=9)]) != []


def test_a_failed_release_waits_for_its_retry() -> None:
    book, _ = ledger(h("a", "running", "0"))
    (due,) = book.update([h("a", "lost", "0", modified=2)])
    assert book.finished(due, {"0": "busy"}) == []
    assert book.cleaning() == {key("0"): "cleaning after a failed: busy"}
    assert book.sync([h("a", "lost", "0", modified=2)]) == []  # not before its time
    (again,) = book.retry(due)
    assert book.cleaning() == {key("0"): "cleaning after a failed: busy"}  # no flapping
    book.finished(again, {})
    assert book.cleaning() == {}


def test_a_release_waits_for_the_one_running() -> None:
    book, _ = ledger(h("a", "running", "0"))
    (first,) = book.update([h("a", "complete", "0", modified=2)])
    assert book.update([h("b", "running", "0", created=3)]) == []
    assert book.update([h("b", "complete", "0", created=3, modified=4)]) == []  # a is running
    (second,) = book.finished(first, {})
    assert second.alloc == "b"
    assert book.records()[key("0")] == Record("b", False, 3)


def test_an_older_answer_does_not_undo_a_newer_one() -> None:
    book, _ = ledger(h("a", "running", "0", modified=1))
    assert book.update([h("a", "complete", "0", modified=5)]) != []
    assert book.update([h("a", "running", "0", modified=3)]) == []
    assert book.held() == {}


def test_holding_of_reads_the_api_shape() -> None:
    alloc = {
        "ID": "a1",
        "Name": "web.api[0]",
        "NodeID": "n1",
        "ClientStatus": "running",
        "CreateIndex": 10,
        "ModifyIndex": 12,
        "AllocatedResources": {
            "Tasks": {
                "one": {"Devices": [{"Vendor": "v", "Type": "t", "Name": "n", "DeviceIDs": ["x"]}]},
                "two": {"Devices": None},
                "three": {
                    "Devices": [{"Vendor": "v", "Type": "t", "Name": "m", "DeviceIDs": ["y", 3]}]
                },
            },
            "Shared": {"DiskMB": 300},
        },
    }
    found = holding_of(alloc)
    assert found is not None and found.live
    assert found.devices == {("v", "t", "n", "x"), ("v", "t", "m", "y")}
    assert (found.create_index, found.modify_index, found.node) == (10, 12, "n1")
    assert holding_of({"ID": "x", "NodeID": "n", "AllocatedResources": None}) is not None
    assert holding_of([]) is None and holding_of({"NodeID": "n"}) is None
    assert not h("a", "lost").live and not h("a", "failed").live and h("a", "unknown").live


def test_a_release_can_fail_for_some_of_its_devices() -> None:
    book, _ = ledger(h("a", "running", "0", "1"))
    (due,) = book.update([h("a", "complete", "0", "1", modified=2)])
    assert book.finished(due, {"1": "busy"}) == []
    assert book.cleaning() == {key("1"): "cleaning after a failed: busy"}
    assert book.records()[key("0")].done and not book.records()[key("1")].done
    (again,) = book.retry(Release("a", "", (key("1"),)))
    assert again.devices == (key("1"),)
