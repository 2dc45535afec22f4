"""The rules of release tracking: who holds each device, and which releases are due.

Pure bookkeeping, no I/O: :mod:`.release` feeds it what the agent's API
says (the node's allocations, each change) and what the author's
``released()`` did, and does what it answers. Kept apart so the rules read
(and are tested) on their own:

- a device is *held* while an allocation holding it has not reached a
  terminal client status (``complete``, ``failed``, ``lost``); with several
  holders (Nomad may place a new allocation on a device in the same plan that
  stops the old one), the one created last is its holder;
- it is *released* when no live allocation holds it: once per holder, after
  the one created last. Each device keeps one record, its last holder (with
  its ``CreateIndex``) and whether that release was handled; a holder created
  later makes a new release, one created earlier (an old event replayed by
  the stream) does not;
- a holder the API no longer lists and has not been confirmed gone (a 404
  for its ID) still holds the device, as far as anyone can tell;
- only devices of the groups the plugin reports are its own: allocations
  also hold other plugins' devices, with IDs that may look the same;
- while ``released()`` runs for a device, another release of it waits; a
  failed one waits for its retry, unless a new holder has come and gone.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "TERMINAL",
    "DeviceKey",
    "Group",
    "Holding",
    "Ledger",
    "Record",
    "Release",
    "holding_of",
]

#: ``Allocation.ClientTerminalStatus``: a holder in one of these holds nothing.
TERMINAL: Final = frozenset({"complete", "failed", "lost"})

#: (vendor, type, name, device ID): a device instance as Nomad names it.
DeviceKey = tuple[str, str, str, str]
Group = tuple[str, str, str]


@dataclass(frozen=True)
class Holding:
    """What the API says of one allocation: its node, status, order and devices."""

    alloc: str
    name: str
    node: str
    status: str
    create_index: int
    modify_index: int
    devices: frozenset[DeviceKey]

    @property
    def live(self) -> bool:
        return self.status not in TERMINAL

    @property
    def order(self) -> tuple[int, int, str]:
        return (self.create_index, self.modify_index, self.alloc)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def holding_of(obj: object) -> Holding | None:
    """An ``api.Allocation`` (a list item or an event's payload); None if it is not one."""
    if not isinstance(obj, dict):
        return None
    alloc, node, status = obj.get("ID"), obj.get("NodeID"), obj.get("ClientStatus")
    if not (isinstance(alloc, str) and alloc and isinstance(node, str)):
        return None
    devices: set[DeviceKey] = set()
    resources = obj.get("AllocatedResources")
    tasks = resources.get("Tasks") if isinstance(resources, dict) else None
    for task in (tasks or {}).values() if isinstance(tasks, dict) else ():
        for device in (task.get("Devices") or ()) if isinstance(task, dict) else ():
            if not isinstance(device, dict):
                continue
            group = (device.get("Vendor"), device.get("Type"), device.get("Name"))
            if not all(isinstance(part, str) for part in group):
                continue
            for device_id in device.get("DeviceIDs") or ():
                if isinstance(device_id, str) and device_id:
                    devices.add((*group, device_id))  # type: ignore[arg-type]
    name = obj.get("Name")
    return Holding(
        alloc=alloc,
        name=name if isinstance(name, str) else "",
        node=node,
        status=status if isinstance(status, str) else "",
        create_index=_int(obj.get("CreateIndex")),
        modify_index=_int(obj.get("ModifyIndex")),
        devices=frozenset(devices),
    )


@dataclass(frozen=True)
class Record:
    """A device's last holder we know of (and its ``CreateIndex``), and whether its
    release was handled. One per device, never more: they are kept for good."""

    alloc: str
    done: bool
    created: int = 0


@dataclass(frozen=True)
class Release:
    """Devices one allocation gave back, for one ``released()`` call."""

    alloc: str
    name: str
    devices: tuple[DeviceKey, ...]

    @property
    def ids(self) -> list[str]:
        return [key[3] for key in self.devices]


@dataclass
class _Cleaning:
    alloc: str
    running: bool = True
    failed: str = ""
    due: bool = False  # a failed one whose retry time has come

    @property
    def reason(self) -> str:
        if self.failed:
            return f"cleaning after {self.alloc} failed: {self.failed}"
        return f"being cleaned after {self.alloc}"


class Ledger:
    """Who holds which device, which releases were handled, which devices are being
    cleaned. Safe from any thread; the tracker is its only writer.

    Every input (:meth:`sync`, :meth:`update`, :meth:`observe_groups`,
    :meth:`finished`, :meth:`retry`) returns the releases that became due, and
    counts them as running from then on: the caller runs each, once, and says
    how it went (:meth:`finished`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._allocs: dict[str, Holding] = {}
        self._records: dict[DeviceKey, Record] = {}
        self._groups: set[Group] = set()
        self._cleaning: dict[DeviceKey, _Cleaning] = {}
        self._gone: set[str] = set()
        self._synced = False
        #: Bumped whenever the records change (they are saved then).
        self.version = 0

    # -- inputs ----------------------------------------------------------------------

    def load(self, records: Mapping[DeviceKey, Record]) -> None:
        """What the state file says, before the first sync."""
        with self._lock:
            for key, record in records.items():
                self._records.setdefault(key, record)

    def sync(self, holdings: Iterable[Holding], gone: Iterable[str] = ()) -> list[Release]:
        """The node's whole allocation list; ``gone``: past holders the API no longer has."""
        with self._lock:
            fresh: dict[str, Holding] = {}
            for h in holdings:
                known = self._allocs.get(h.alloc)
                fresh[h.alloc] = known if known and known.modify_index > h.modify_index else h
            self._allocs = {a: h for a, h in fresh.items() if h.devices}
            self._gone = set(gone)
            self._synced = True
            return self._evaluate()

    def update(self, holdings: Iterable[Holding]) -> list[Release]:
        """Allocations of the node that changed (from the event stream)."""
        with self._lock:
            for h in holdings:
                known = self._allocs.get(h.alloc)
                if known is not None and known.modify_index > h.modify_index:
                    continue
                if h.devices:
                    self._allocs[h.alloc] = h
                else:
                    self._allocs.pop(h.alloc, None)
            return self._evaluate()

    def observe_groups(self, groups: Iterable[Group]) -> list[Release]:
        """Groups the plugin reports: only their devices are its own."""
        with self._lock:
            new = set(groups) - self._groups
            if not new:
                return []
            self._groups |= new
            return self._evaluate()

    def finished(self, release: Release, failed: Mapping[str, str]) -> list[Release]:
        """``released()`` ended; ``failed`` maps the IDs it could not clean to why."""
        with self._lock:
            for key in release.devices:
                known = self._cleaning.get(key)
                if known is None or known.alloc != release.alloc:
                    continue
                reason = failed.get(key[3])
                if reason is None:
                    del self._cleaning[key]
                    record = self._records.get(key)
                    if record is not None and record.alloc == release.alloc:
                        self._set(key, dataclasses.replace(record, done=True))
                else:
                    known.running, known.failed, known.due = False, reason, False
            return self._evaluate()

    def retry(self, release: Release) -> list[Release]:
        """The back-off after a failure is over: what is still due runs again."""
        with self._lock:
            for key in release.devices:
                known = self._cleaning.get(key)
                if known is not None and known.alloc == release.alloc and not known.running:
                    known.due = True
            return self._evaluate()

    # -- outputs -----------------------------------------------------------------------

    def absent_holders(self, listed: Iterable[str]) -> set[str]:
        """Holders not handled yet that a list of the node's allocations left out."""
        seen = set(listed)
        with self._lock:
            return {r.alloc for r in self._records.values() if not r.done and r.alloc not in seen}

    def held(self) -> dict[DeviceKey, str]:
        """Each of the plugin's devices an allocation holds, with its holder."""
        with self._lock:
            return self._held()

    def cleaning(self) -> dict[DeviceKey, str]:
        """Each device being cleaned (or whose cleaning failed), with the health reason."""
        with self._lock:
            return {key: c.reason for key, c in self._cleaning.items()}

    def cleaning_after(self) -> dict[DeviceKey, str]:
        """Each device being cleaned (or whose cleaning failed), with the allocation."""
        with self._lock:
            return {key: c.alloc for key, c in self._cleaning.items()}

    def cleaning_state(self, ids: Iterable[str]) -> dict[str, _Cleaning]:
        wanted = set(ids)
        with self._lock:
            return {
                key[3]: dataclasses.replace(c)
                for key, c in self._cleaning.items()
                if key[3] in wanted
            }

    def records(self) -> dict[DeviceKey, Record]:
        with self._lock:
            return dict(self._records)

    # -- the rules ------------------------------------------------------------------------

    def _set(self, key: DeviceKey, record: Record) -> None:
        if self._records.get(key) != record:
            self._records[key] = record
            self.version += 1

    def _ours(self, key: DeviceKey) -> bool:
        return key[:3] in self._groups

    def _holders(self) -> dict[DeviceKey, list[Holding]]:
        found: dict[DeviceKey, list[Holding]] = {}
        for h in self._allocs.values():
            for key in h.devices:
                if self._ours(key) or key in self._records:
                    found.setdefault(key, []).append(h)
        return found

    def _held(self) -> dict[DeviceKey, str]:
        out: dict[DeviceKey, str] = {}
        holders = self._holders()
        for key, hs in holders.items():
            live = [h for h in hs if h.live]
            if live:
                out[key] = max(live, key=lambda h: h.order).alloc
        if self._synced:
            for key, record in self._records.items():
                if (
                    key not in out
                    and not record.done
                    and record.alloc not in self._allocs
                    and record.alloc not in self._gone
                ):
                    out[key] = record.alloc  # not listed, not known gone: as far as we know, held
        return out

    def _evaluate(self) -> list[Release]:
        if not self._synced:
            return []
        holders = self._holders()
        due: dict[str, list[DeviceKey]] = {}
        names: dict[str, str] = {}
        for key in sorted(set(holders) | set(self._records)):
            found = self._due(key, holders.get(key, []))
            if found is None:
                continue
            alloc, name = found
            cleaning = self._cleaning.get(key)
            if cleaning is not None and (
                cleaning.running or (cleaning.alloc == alloc and not cleaning.due)
            ):
                continue  # running now, or failed and waiting for its retry
            if cleaning is not None and cleaning.alloc == alloc:
                cleaning.running, cleaning.due = True, False  # keeps its failure: no flapping
            else:
                self._cleaning[key] = _Cleaning(alloc)
            due.setdefault(alloc, []).append(key)
            names[alloc] = name
        return [Release(alloc, names[alloc], tuple(keys)) for alloc, keys in due.items()]

    def _due(self, key: DeviceKey, holders: list[Holding]) -> tuple[str, str] | None:
        """The release of ``key`` that is due (holder, its name), if any; keeps its record."""
        record = self._records.get(key)
        live = [h for h in holders if h.live]
        if live:
            top = max(live, key=lambda h: h.order)
            self._set(key, Record(top.alloc, False, top.create_index))
            return None
        last = max(holders, key=lambda h: h.order) if holders else None
        if record is not None and not record.done and record.alloc not in self._allocs:
            if record.alloc not in self._gone:
                return None  # the API cannot tell (yet) whether it still holds the device
            if last is None or last.create_index <= record.created:
                return record.alloc, ""
        if last is None:
            return None
        if record is not None and (
            (record.alloc == last.alloc and record.done) or record.created > last.create_index
        ):
            return None  # handled, or an older holder brought back by a replayed event
        self._set(key, Record(last.alloc, False, last.create_index))
        return last.alloc, last.name
