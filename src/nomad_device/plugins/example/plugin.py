"""The file-backed example device plugin: every file in a directory is a device.

This is Nomad's ``plugins/device/cmd/example`` rebuilt on the SDK, and it is
meant to be read. :class:`FsDevicePlugin` shows the whole author API: a typed
config with Go's exact schema, ``detect`` (what is there, and is it healthy),
``watch`` (an event source, so that changes are seen at once rather than at
the next period), ``reserve`` (how a task gets a device) and ``stats``.
Everything Nomad sees matches the Go plugin; where Go's plugin could end a
stream or lose a node's devices, this one reports what it can see and logs
why. ``docs/plugins/example.md`` lists every difference.
"""

from __future__ import annotations

import datetime as _dt
import functools
import itertools
import math
import os
import re
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

from nomad_device.errors import Internal, InvalidArgument
from nomad_device.golang import (
    GoDurationError,
    file_mode_string,
    filepath_abs,
    filepath_clean,
    filepath_join,
    parse_duration,
    quote,
    time_string,
)
from nomad_device.model import (
    Attribute,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DeviceStats,
    Mount,
    Reservation,
    StatObject,
    StatValue,
)
from nomad_device.plugin.base import DevicePlugin
from nomad_device.sources import LISTING, inotify

__all__ = [
    "DEVICE_NAME",
    "DEVICE_TYPE",
    "GROUP_ATTRIBUTES",
    "PLUGIN_NAME",
    "PLUGIN_VERSION",
    "TASK_MOUNT_ROOT",
    "VENDOR",
    "ExampleConfig",
    "FsDevicePlugin",
    "Listing",
    "list_devices",
]

# What Nomad shows and jobs ask for: ``device "nomad/file/mock" { ... }``.
PLUGIN_NAME: Final = "example-fs-device"
PLUGIN_VERSION: Final = "v0.1.0"
VENDOR: Final = "nomad"
DEVICE_TYPE: Final = "file"
DEVICE_NAME: Final = "mock"
GROUP_ATTRIBUTES: Final = {"cool-attribute": Attribute("attribute-wearing-sunglasses")}

#: Where a reserved device appears inside the task (the Go plugin's choice).
TASK_MOUNT_ROOT: Final = "/tmp/task-mounts"


@dataclass(frozen=True)
class ExampleConfig:
    """The ``plugin "nomad-device-example" { config { ... } }`` block.

    It is also the schema Nomad asks for, node for node the Go plugin's: an
    optional string attribute per field, its default an HCL literal.
    ``list_period`` stays a string rather than a ``timedelta`` so that a bad
    value is reported in the Go plugin's own words (see ``configure``).
    """

    dir: str = "."
    list_period: str = "5s"
    unhealthy_perm: str = "-rwxrwxrwx"


# Go's Mode().Perm().String() for all 512 permission values, computed once:
# a rescan of 100,000 files then costs one tuple lookup per file. Built from
# the nine flags (owner's r first) rather than by 512 perm_string() calls, which
# cost every launch 2 ms; tests/plugins/example/test_example_unit.py checks that they agree.
_PERM_STRINGS: Final = tuple("-" + "".join(f) for f in itertools.product(*("-r", "-w", "-x") * 3))

# What Go's Perm().String() can ever produce; anything else never matches.
_PERM_SHAPE: Final = re.compile(r"-[r-][w-][x-][r-][w-][x-][r-][w-][x-]")

#: While the directory keeps changing, at most one rescan per this many seconds
#: (a lone change is still seen at once): a storm of files costs a few listings,
#: and Nomad hears of intermediate states no more than once a second.
_STORM_DELAY: Final = 1.0

# One device as reported: (ID, healthy, health description).
Entry = tuple[str, bool, str]


class _Settings(NamedTuple):
    """The config in the form the scanning code needs; replaced, never mutated.

    ``directory`` is ``dir`` as the operator wrote it (for the log); ``path``
    is where it is: a relative ``dir`` means the directory the agent started
    the plugin in, as for Go's plugin, although the SDK moves the process to
    ``/``.
    """

    directory: str
    period: float
    unhealthy_perm: str
    path: str


@dataclass(frozen=True)
class Listing:
    """One look at the device directory.

    ``state`` is ``"ok"`` when it could be listed, ``"missing"`` when it does not
    exist (or is not a directory) and ``"unreadable"`` for any other failure;
    ``error`` then says why. ``problems`` name entries that were listed but
    could not be used as Go would use them, for the log.
    """

    entries: tuple[Entry, ...]
    state: Literal["ok", "missing", "unreadable"] = "ok"
    error: str = ""
    problems: tuple[str, ...] = ()


def _reason(exc: OSError) -> str:
    """An OS error the way Go words it: ``permission denied``, not ``[Errno 13] ...``."""
    return (exc.strerror or str(exc)).lower()


def _valid_utf8(name: str) -> bool:
    # os.fsdecode smuggles undecodable bytes in as lone surrogates.
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def list_devices(directory: str, unhealthy_perm: str) -> Listing:
    """Decide, as Go's ``ioutil.ReadDir`` plus the example's rules do, which entries are devices.

    Each entry is ``lstat``-ed, so a symlink is a device in its own right (its
    permissions are the link's ``rwxrwxrwx``, even when it points at a
    directory); only real directories are skipped, and an entry that vanished
    between listing and ``lstat`` is ignored. A device is unhealthy when its
    permission string equals ``unhealthy_perm``. Entries come sorted by name.

    Where Go would give up on the whole directory, this reports what it can:
    an entry whose mode cannot be read is an unhealthy device saying why, and a
    name that is not UTF-8 (which protobuf, hence Nomad, cannot carry) is left
    out and named in ``problems``.
    """
    bad_perms = f"Device has bad permissions {quote(unhealthy_perm)}"
    found: list[Entry] = []
    problems: list[str] = []
    try:
        with os.scandir(directory) as listing:
            for entry in listing:
                name = entry.name
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if _is_directory(entry):
                        continue
                    if _valid_utf8(name):
                        found.append((name, False, f"Device mode unreadable: {_reason(exc)}"))
                    problems.append(f"cannot read the mode of {quote(name)}: {_reason(exc)}")
                    continue
                if stat.S_ISDIR(mode):
                    continue
                if not _valid_utf8(name):
                    problems.append(f"skipped {quote(name)}: its name is not valid UTF-8")
                    continue
                healthy = _PERM_STRINGS[mode & 0o777] != unhealthy_perm
                found.append((name, healthy, "" if healthy else bad_perms))
    except (FileNotFoundError, NotADirectoryError) as exc:
        return Listing((), "missing", _reason(exc))
    except OSError as exc:
        return Listing((), "unreadable", _reason(exc))
    # Valid UTF-8 sorts the same by code point as by byte, which is Go's order.
    found.sort()
    return Listing(tuple(found), "ok", "", tuple(problems))


def _is_directory(entry: os.DirEntry[str]) -> bool:
    """The kernel's d_type verdict, for entries that cannot be ``lstat``-ed."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _groups(entries: tuple[Entry, ...]) -> list[DeviceGroup]:
    if not entries:
        return []  # no group at all: Nomad shows nothing rather than an empty group
    devices = tuple(Device(name, healthy, desc) for name, healthy, desc in entries)
    return [DeviceGroup(VENDOR, DEVICE_TYPE, DEVICE_NAME, devices, GROUP_ATTRIBUTES)]


def _join_prefix(directory: str) -> str:
    """``prefix + name`` equals Go's ``filepath.Join(directory, name)`` for any entry name."""
    base = filepath_clean(directory)
    if base == ".":
        return ""
    return base if base.endswith("/") else base + "/"


@functools.lru_cache(maxsize=256)
def _mode_text(st_mode: int) -> str:
    return file_mode_string(st_mode)


def _file_stats(info: os.stat_result) -> tuple[StatValue, StatObject]:
    """The Go plugin's summary and stats for one ``os.Stat`` result."""
    size = StatValue(int_numerator=info.st_size, unit="bytes", desc="Filesize in bytes")
    attributes = {
        "size": size,
        "modify_time": StatValue(string_value=time_string(info.st_mtime_ns), desc="Last modified"),
        "mode": StatValue(string_value=_mode_text(info.st_mode), desc="File mode"),
    }
    return size, StatObject(attributes)


class FsDevicePlugin(DevicePlugin[ExampleConfig]):
    """Every file in ``dir`` is a ``nomad/file/mock`` device; mode ``unhealthy_perm`` is sick.

    The SDK calls ``detect`` every ``list_period``, and at once when ``watch``
    sees the directory change, and tells Nomad only about changes; ``reserve``
    and ``stats`` run in worker threads meanwhile, so all shared state is
    swapped under one lock and read as a consistent snapshot.
    """

    name = PLUGIN_NAME
    version = PLUGIN_VERSION
    Config = ExampleConfig
    #: No fixed period: each ``detect`` asks for the next one ``list_period``
    #: later (``rescan(..., key="period")``), as the config says.
    fingerprint_period = math.inf
    #: No extra wait after rescan(): the inotify source batches a burst itself
    #: (and rescans at most once a second while one lasts), so waiting again
    #: would only delay the lone change.
    rescan_settle = 0.0

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._settings = _Settings(".", 5.0, "-rwxrwxrwx", self._where("."))
        # The last detected devices: what Nomad was (or is being) told about.
        self._entries: tuple[Entry, ...] = ()
        self._known: frozenset[str] = frozenset()
        self._groups: list[DeviceGroup] = []
        # What has been logged already, so a lasting problem is logged once.
        self._dir_status: tuple[str, str] = ("ok", "")
        self._problems: frozenset[str] = frozenset()
        self._stat_failures: set[str] = set()
        # Per path: the (size, mtime, mode) last seen and the stats built from it.
        # Each collection builds a new dict and swaps it in whole, so concurrent
        # Stats streams never see one half-built.
        self._stat_cache: dict[str, tuple[tuple[int, int, int], StatValue, StatObject]] = {}

    # -- config ----------------------------------------------------------------

    def configure(self, config: ExampleConfig) -> None:
        """Check the config as Go does, plus the two values Go silently mishandles."""
        try:
            period_ns = parse_duration(config.list_period)
        except GoDurationError as exc:
            # The Go plugin's wrapping around Go's own error text.
            message = f"failed to parse list period {quote(config.list_period)}: {exc}"
            raise InvalidArgument(message) from None
        if period_ns <= 0:
            # Go would rescan in a busy loop; refusing is kinder than spinning a core.
            raise InvalidArgument(
                f"list period {quote(config.list_period)} must be greater than zero"
            )
        if not config.dir:
            # Go only fails later, in Fingerprint, which makes Nomad drop the plugin.
            raise InvalidArgument("device directory not set in config")
        if not _PERM_SHAPE.fullmatch(config.unhealthy_perm):
            self.log.warning(
                "unhealthy_perm can never match, so every device will be healthy;"
                ' permissions look like "-rw-r--r--"',
                extra={"unhealthy_perm": config.unhealthy_perm},
            )
        settings = _Settings(
            config.dir, period_ns / 1e9, config.unhealthy_perm, self._where(config.dir)
        )
        with self._lock:
            moved = settings.path != self._settings.path
            if moved:
                self._entries, self._known, self._groups = (), frozenset(), []
            self._settings = settings
        if moved:
            self.rewatch()  # watch() starts again, on the new directory
        self.log.info(
            "config set",
            extra={
                "dir": config.dir,
                "list_period": config.list_period,
                "unhealthy_perm": config.unhealthy_perm,
            },
        )
        self.rescan()

    def _where(self, directory: str) -> str:
        # Go's filepath.Join (lexical) where resolve_path() keeps the text as is.
        if directory.startswith("/") or not self.launch_dir:
            return directory
        return filepath_join(self.launch_dir, directory)

    # -- fingerprint -------------------------------------------------------------

    def detect(self) -> list[DeviceGroup]:
        """List the directory; the SDK diffs and sends only changes.

        A directory that cannot be read keeps its last known devices, marked
        unhealthy with the reason: Nomad should stop placing work on devices
        whose state nobody can see, but they have not gone away either.
        """
        settings = self._settings
        self.rescan(settings.period, key="period")  # the next look, list_period from now
        listing = list_devices(settings.path, settings.unhealthy_perm)
        with self._lock:
            if settings is not self._settings:
                return self._groups  # reconfigured meanwhile; the rescan it asked for follows
            entries = listing.entries
            if listing.state == "unreadable":
                why = f"Device directory unreadable: {listing.error}"
                entries = tuple((name, False, why) for name, _, _ in self._entries)
            if entries != self._entries:
                self._entries = entries
                self._known = frozenset(name for name, _, _ in entries)
                self._groups = _groups(entries)
            groups = self._groups
        self._log_listing(settings.directory, listing, len(entries))
        # The same objects while nothing changes make the SDK's diff nearly free.
        return groups

    def _log_listing(self, directory: str, listing: Listing, count: int) -> None:
        status = (listing.state, listing.error)
        if status != self._dir_status:
            where = {"dir": directory, "error": listing.error}
            if listing.state == "missing":
                self.log.warning(
                    "device directory not found; reporting no devices until it appears",
                    extra=where,
                )
            elif listing.state == "unreadable":
                self.log.error(
                    "cannot list the device directory; its last known devices are"
                    " reported unhealthy until it can be read",
                    extra={**where, "devices": count},
                )
            else:
                self.log.info("device directory readable again", extra={"dir": directory})
            self._dir_status = status
        problems = frozenset(listing.problems)
        for problem in sorted(problems - self._problems):
            self.log.warning(problem, extra={"dir": directory})
        self._problems = problems

    # -- events --------------------------------------------------------------------

    async def watch(self) -> None:
        """Rescan as soon as the directory's entries or modes change.

        The source watches ``dir`` and, while ``dir`` is missing, its nearest
        existing parent, so a removed and recreated directory is noticed as
        well. A lone change is reported within milliseconds; while changes
        keep coming, batches come at most once a second, so 10,000 new files
        cost a handful of listings (and the SDK coalesces rescans as well).
        Where inotify is unavailable the source logs why once and never
        yields: ``list_period`` then does the work alone, as it bounds
        staleness in any case.
        """
        directory = self._settings.path  # configure() calls rewatch() when it changes
        async with inotify(directory, mask=LISTING, max_delay=_STORM_DELAY) as source:
            if source.available:
                self.rescan()  # whatever changed before the watch was in place
            async for _batch in source:
                self.rescan()

    # -- reserve -------------------------------------------------------------------

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        """Bind-mount each file at ``/tmp/task-mounts/<id>``, as the Go plugin does.

        Answers from the last detected set, the one Nomad was told about, so a
        reservation never depends on a listing Nomad has not seen.
        """
        if not device_ids:
            raise InvalidArgument("no device ids given")
        with self._lock:
            known, directory = self._known, self._settings.path
        try:
            host_dir = filepath_abs(directory)
        except OSError:
            raise Internal("failed to load device dir abs path") from None
        mounts = []
        for device_id in device_ids:
            if device_id not in known:
                raise InvalidArgument(f"unknown device {quote(device_id)}")
            mounts.append(
                Mount(
                    task_path=f"{TASK_MOUNT_ROOT}/{device_id}",
                    host_path=filepath_join(host_dir, device_id),
                    read_only=False,
                )
            )
        return Reservation(mounts=tuple(mounts))

    # -- stats ---------------------------------------------------------------------

    def stats(self) -> list[DeviceGroupStats]:
        """Size, modification time and mode of each device, in Go's formats.

        Unlike ``detect`` this follows symlinks (Go uses ``os.Stat`` here). A
        file that cannot be stat-ed is left out and logged once, and a rescan is
        requested so that Nomad hears about a vanished device promptly.
        """
        with self._lock:
            entries, directory = self._entries, self._settings.path
        if not entries:
            return []  # Go sends nothing either when there are no devices
        now = _dt.datetime.now(_dt.UTC)
        prefix = _join_prefix(directory)
        previous, cache = self._stat_cache, {}
        instances: dict[str, DeviceStats] = {}
        failed: dict[str, str] = {}
        for device_id, _, _ in entries:
            path = prefix + device_id
            try:
                info = os.stat(path)
            except OSError as exc:
                failed[device_id] = f"failed to stat {quote(path)}: {_reason(exc)}"
                continue
            # Rendering Go's strings is the costly part; redo it only for changed files.
            key = (info.st_size, info.st_mtime_ns, info.st_mode)
            cached = previous.get(path)
            if cached is None or cached[0] != key:
                cached = (key, *_file_stats(info))
            cache[path] = cached
            instances[device_id] = DeviceStats(cached[1], cached[2], now)
        self._stat_cache = cache
        self._log_stat_failures(failed)
        if not instances:
            return []
        return [DeviceGroupStats(VENDOR, DEVICE_TYPE, DEVICE_NAME, instances)]

    def _log_stat_failures(self, failed: dict[str, str]) -> None:
        """One warning per newly failing batch (not per file, not per interval)."""
        with self._lock:
            new = sorted(set(failed) - self._stat_failures)
            self._stat_failures = set(failed)
        if not new:
            return
        shown = "; ".join(failed[device_id] for device_id in new[:3])
        more = f" (and {len(new) - 3} more)" if len(new) > 3 else ""
        self.log.warning(f"devices left out of stats: {shown}{more}", extra={"devices": len(new)})
        self.rescan()
