"""Is a device usable? Node checks on every scan; probe verdicts come from :mod:`.probes`.

Node checks are cheap and run on every scan. For each node a device brings:

- it exists (a dangling by-id link counts as missing);
- it is the expected kind: for USB nodes the kind and major:minor sysfs gives
  (a node left over from an earlier device is caught), for glob matches the
  kind it had when first seen, and for device nodes that the kernel has a
  device with that number at all;
- the plugin can ``access()`` it with the permissions the block grants. Nodes
  are never opened: opening ``/dev/watchdog`` arms it, opening a serial port
  toggles DTR and resets many boards.

A PCI function is checked as a whole first (:func:`pci_problem`): the
driver its block names is bound, it is enabled, a VFIO group can be owned
(every other member bound to a VFIO driver, ``pci-stub`` or nothing, bridges
aside), its AER error counters and those of the ports above it have not risen
lately and no error recovery of it failed (:class:`AerMarks`), it answers and
decodes what its driver enabled (a reset nothing restored clears that; the
one sign of a failed recovery that a restarted plugin can see), and, if the
block asks, its link runs at full speed and width.

A CDI device is checked by :func:`cdi_problem`: the edits Nomad cannot make
(under ``hooks = "refuse"``), then its nodes against its spec, then each
mount's source.

A probe, the operator's own check, is :mod:`.probes`' business; its last
verdict is one more input to a device's health.
"""

from __future__ import annotations

import os
import posixpath
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from nomad_device.plugins.generic.discovery import Found, Node
from nomad_device.plugins.generic.pci import PciFunction, is_vfio_driver

__all__ = [
    "FAILED_RECOVERY",
    "SUCCESSFUL_RECOVERY",
    "AerMarks",
    "cdi_problem",
    "describe_kind",
    "node_problem",
    "pci_problem",
    "unmatched_nodes",
]

_KIND_WORDS: Final = {
    "char": "character device",
    "block": "block device",
    "file": "regular file",
    "directory": "directory",
    "socket": "socket",
    "fifo": "named pipe",
    "other": "special file",
    "missing": "missing file",
}


def describe_kind(kind: str) -> str:
    return _KIND_WORDS.get(kind, kind)


def _access_words(mode: int) -> str:
    wanted = [w for bit, w in ((os.R_OK, "reading"), (os.W_OK, "writing")) if mode & bit]
    return " and ".join(wanted)


def node_problem(
    node: Node, permissions: str, first_kind: str | None, canonical: Callable[[str], str]
) -> str | None:
    """Why this node makes its device unhealthy, or None when it is fine."""
    where = node.task_path
    if node.kind == "missing":
        if node.resolved != node.path:
            return f"{where} points to {canonical(node.resolved)}, which does not exist"
        return f"{where} does not exist"
    if node.expect is not None:
        kind, major, minor = node.expect
        if node.kind != kind:
            return f"{where} is a {describe_kind(node.kind)}, not a {describe_kind(kind)}"
        if (node.major, node.minor) != (major, minor):
            return (
                f"{where} is {node.major}:{node.minor}, but the kernel's device is"
                f" {major}:{minor} (a stale node?)"
            )
    elif first_kind is not None and node.kind != first_kind:
        return f"{where} is now a {describe_kind(node.kind)}, it was a {describe_kind(first_kind)}"
    elif node.is_device and node.known is False:
        return (
            f"{where} is {describe_kind(node.kind)} {node.major}:{node.minor}, which no"
            " device in the kernel has (a stale node?)"
        )
    mode = (os.R_OK if "r" in permissions else 0) | (os.W_OK if "w" in permissions else 0)
    if mode and not _accessible(node.resolved, mode):
        return f"the plugin (uid {os.geteuid()}) may not open {where} for {_access_words(mode)}"
    return None


def _accessible(path: str, mode: int) -> bool:
    if os.access in os.supports_effective_ids:
        return os.access(path, mode, effective_ids=True)
    return os.access(path, mode)


# --------------------------------------------------------------------------- CDI

_CDI_TYPES: Final = {"b": "block", "c": "char", "u": "char"}


def cdi_problem(
    found: Found,
    skip_hooks: bool,
    canonical: Callable[[str], str],
    seen: dict[tuple[int, str], str | None] | None = None,
) -> str | None:
    """Why a CDI device is unhealthy: edits Nomad cannot make (unless the block skips
    them), then its nodes: each a device node of the kind and numbers the spec gives
    (when it gives them), the kernel's, and accessible with CDI's permissions; each
    mount's source there and readable. ``seen`` keeps node verdicts for a scan: the
    devices of a spec share most of their nodes and mounts."""
    seen = {} if seen is None else seen

    def verdict(node: Node, wanted: str) -> str | None:
        key = (id(node), wanted)  # the scan's nodes live as long as the scan's verdicts
        if key not in seen:
            seen[key] = node_problem(node, wanted, None, canonical)
        return seen[key]

    from nomad_device.plugins.generic import cdi, cdidevices

    if found.cdi is None:
        return None
    if found.cdi.skipped and not skip_hooks:
        return cdidevices.refusal(found.cdi.skipped)
    applied = found.cdi.applied
    specs = {n.path: n for n in applied.device_nodes}
    mounts = {m.container_path: m for m in applied.mounts}
    for node in found.nodes[: len(applied.device_nodes)]:
        spec = specs[node.task_path]
        if node.kind != "missing" and not node.is_device:
            return f"{canonical(node.resolved)} is a {describe_kind(node.kind)}, not a device node"
        wanted = _CDI_TYPES.get(spec.type)
        if node.is_device and spec.type == "p":
            return f"{node.task_path} is a {describe_kind(node.kind)}, but the spec says a FIFO"
        if node.is_device and wanted is not None and node.kind != wanted:
            return (
                f"{node.task_path} is a {describe_kind(node.kind)}, but the spec says a"
                f" {describe_kind(wanted)}"
            )
        if (
            node.is_device
            and wanted is not None
            and spec.major
            and ((node.major, node.minor) != (spec.major, spec.minor))
        ):
            return (
                f"{node.task_path} is {node.major}:{node.minor}, but the spec says"
                f" {spec.major}:{spec.minor}"
            )
        problem = verdict(node, cdi.cgroup_access(spec))
        if problem is not None:
            return problem
    for node in found.nodes[len(applied.device_nodes) :]:
        mount = mounts[node.task_path]
        problem = verdict(node, "r" if mount.read_only else "rw")
        if problem is not None:
            return problem
    return None


# --------------------------------------------------------------------------- PCI


def pci_problem(found: Found, full_link: bool, aer: str | None) -> str | None:
    """Why a PCI function is unhealthy as a whole, before its nodes are looked at."""
    function = found.pci
    if function is None:
        return None
    driver = function.ident.driver
    if found.expect_driver is not None and driver is None:
        return f"no driver is bound to {function.address} (expected {found.expect_driver})"
    vfio = is_vfio_driver(driver)
    # VFIO enables a function when a user opens it (an idle one reads enable = 0), and
    # pci-stub only holds a function for later: neither enables it at probe time.
    if driver is not None and not vfio and driver != "pci-stub" and function.enabled is False:
        return f"{function.address} is bound to {driver} but not enabled (enable = 0)"
    if vfio and function.iommu_group is None:
        return f"{function.address} is bound to {driver} but is in no IOMMU group"
    if function.vfio_blockers:
        return (
            f"IOMMU group {function.iommu_group} cannot be given to VFIO: "
            + ", ".join(function.vfio_blockers)
            + " must be bound to vfio-pci (or unbound) as well"
        )
    if aer is not None:
        return aer
    if function.answers is False:
        return f"{function.address} does not answer: its config space reads all ones"
    if function.decodes is False:
        return (
            f"{function.address} lost its configuration: {driver} enabled it, yet it decodes"
            " neither memory nor I/O (as a reset leaves it: a failed error recovery?)"
        )
    if full_link and function.link.degraded:
        return (
            f"the PCIe link runs at {function.link.describe()}, below its maximum"
            f" {function.link.describe(current=False)}"
        )
    if not found.nodes:
        bound = f"bound to {driver}" if driver else "no driver bound"
        return unmatched_nodes(found) or (
            f"{function.address} has no device node of its own ({bound})"
        )
    return None


def unmatched_nodes(found: Found) -> str | None:
    """Why a USB or PCI device brings none of its nodes: the block's ``nodes`` names
    none of them; None when it has none at all."""
    if not found.unfiltered:
        return None
    shown = ", ".join(f"/dev/{n}" for n in found.unfiltered)
    return f"none of its device nodes ({shown}) is one the block's nodes names"


@dataclass(frozen=True)
class _Counts:
    fatal: int | None
    nonfatal: int | None


@dataclass(frozen=True)
class _AerMark:
    reason: str
    until: float  # time.monotonic()


#: ``ERROR_EVENT`` of the kernel's ``change`` uevent for a device when its error
#: recovery failed, and when it came through one (``pci_uevent_ers``).
FAILED_RECOVERY: Final = "FAILED_RECOVERY"
SUCCESSFUL_RECOVERY: Final = "SUCCESSFUL_RECOVERY"


class AerMarks:
    """Rises of each function's AER counters, and how long they keep it unhealthy;
    and the kernel's failed recoveries, which keep it unhealthy until it is made anew.

    A function's own fatal and non-fatal totals count, and so do those of each
    port above it: an error a port detects on its link is counted on the port
    alone, yet the kernel's recovery resets or stops everything below it. The
    first counts seen for a function (at plugin start, or when it appears) are
    its baseline: errors from before are history, not news. A rise marks it
    unhealthy until ``quiet`` seconds pass without another; a count that falls
    (the function was removed and came back) is a new baseline, and one that
    cannot be read keeps the last. Correctable errors are not counted: the link
    recovered from them by itself.

    A ``FAILED_RECOVERY`` uevent for a function, or for a port above it (where
    kernels before a 2025 fix report a recovery they ran from a port), marks the
    function until there is evidence it works again, however quiet it stays: a
    ``SUCCESSFUL_RECOVERY`` for the function itself, the function added again
    (removed and rescanned, or seen gone by a scan) or a driver bound to it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], _Counts] = {}  # (function, "" or its port)
        self._marks: dict[str, _AerMark] = {}
        self._seq = 0  # orders failures against signs of a function made anew
        self._failed: dict[str, tuple[int, str]] = {}  # DEVPATH: (seq, stamp) of its last
        self._anew: dict[str, int] = {}  # a function's DEVPATH: seq of it made anew
        self._present: dict[str, str] = {}  # address: DEVPATH, as the last scan saw them

    def uevent(self, action: str, devpath: str, error_event: str, stamp: str) -> None:
        """A ``pci`` uevent: a failed recovery marks ``devpath`` and what is below it;
        a function added, bound or recovered there is anew."""
        with self._lock:
            self._seq += 1
            anew = action in ("add", "bind") or error_event == SUCCESSFUL_RECOVERY
            if action == "change" and error_event == FAILED_RECOVERY:
                self._failed[devpath] = (self._seq, stamp)
            elif anew and any(p in self._failed for p in _lineage(devpath)):
                self._anew[devpath] = self._seq

    def _failure(self, devpath: str) -> tuple[str, str] | None:
        """Where and when the latest failed recovery at or above ``devpath`` (since the
        function there was last made anew) was reported."""
        anew = self._anew.get(devpath, 0)
        latest: tuple[int, str, str] | None = None
        for path in _lineage(devpath):
            seq, stamp = self._failed.get(path, (0, ""))
            if seq > anew and (latest is None or seq > latest[0]):
                latest = (seq, path, stamp)
        return None if latest is None else latest[1:]

    def judge(self, function: PciFunction, quiet: float, now: float, stamp: str) -> str | None:
        """The reason a rise or a failed recovery makes ``function`` unhealthy now, or None."""
        key = function.address
        sources = [("", function.aer_fatal, function.aer_nonfatal), *function.upstream_aer]
        with self._lock:
            rises = []
            for port, fatal, nonfatal in sources:
                before = self._counts.get((key, port))
                counts = _Counts(fatal, nonfatal)
                if before is not None:  # a count that cannot be read now is no count of zero
                    counts = _Counts(
                        before.fatal if counts.fatal is None else counts.fatal,
                        before.nonfatal if counts.nonfatal is None else counts.nonfatal,
                    )
                self._counts[(key, port)] = counts
                found = [] if before is None else _rises(before, counts)
                if found and port:
                    found[-1] += f" on {port} (the port above it)"
                rises += found
            if rises:
                reason = f"PCIe AER reported {' and '.join(rises)} at {stamp}"
                self._marks[key] = _AerMark(reason, now + quiet)
            mark = self._marks.get(key)
            if mark is not None and now >= mark.until and not rises:
                del self._marks[key]
                mark = None
            reasons = [] if mark is None else [mark.reason]
            failure = self._failure(function.devpath) if function.devpath else None
            if failure is not None:
                path, when = failure
                where = (
                    ""
                    if path == function.devpath
                    else f" on {posixpath.basename(path)} (the port above it)"
                )
                reasons.append(
                    f"the kernel's PCIe error recovery failed{where} at {when}; unhealthy until"
                    " the function is removed and rescanned, bound again, or recovered"
                )
            return "; ".join(reasons) or None

    def deadline(self) -> float | None:
        """When the earliest mark ends (a rescan then shows the function healthy)."""
        with self._lock:
            return min((m.until for m in self._marks.values()), default=None)

    def keep(self, functions: Iterable[PciFunction]) -> None:
        """Forget functions no longer present: one that comes back starts afresh. Failed
        recoveries above none of them are forgotten too."""
        present = {f.address: f.devpath for f in functions}
        with self._lock:
            for key in [k for k in self._counts if k[0] not in present]:
                del self._counts[key]
            for address in [a for a in self._marks if a not in present]:
                del self._marks[address]
            self._seq += 1
            for address, devpath in self._present.items():
                if address not in present and self._failure(devpath) is not None:
                    self._anew[devpath] = self._seq  # gone: what comes back there is new
            self._present = present
            below = set(present.values())
            for path in list(self._failed):
                if not any(d == path or d.startswith(path + "/") for d in below):
                    del self._failed[path]
            for path in [p for p in self._anew if not any(a in self._failed for a in _lineage(p))]:
                del self._anew[path]


def _lineage(devpath: str) -> Iterator[str]:
    """``devpath`` and the directories above it (``/devices/pci0000:00/...``)."""
    while len(devpath) > 1:
        yield devpath
        devpath = posixpath.dirname(devpath)


def _rises(before: _Counts, now: _Counts) -> list[str]:
    out = []
    for what, old, new in (
        ("fatal", before.fatal, now.fatal),
        ("non-fatal", before.nonfatal, now.nonfatal),
    ):
        if old is not None and new is not None and new > old:
            count = new - old
            out.append(f"{count} {what} error{'s' if count > 1 else ''}")
    return out
