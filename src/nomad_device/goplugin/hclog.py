"""hclog JSON logging, both directions.

A go-plugin host reads the plugin's stderr line by line as hclog JSON; any
other text lands at debug level, which operators never see. So in plugin mode
*everything* that could reach stderr -- the SDK's and the author's ``logging``
calls, warnings, uncaught exceptions, even raw writes to fd 1 and 2 by C code or
child processes -- is turned into one JSON object per line here. The host side
parses those lines back into Python ``logging`` records with their levels.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import field
from types import TracebackType
from typing import Any, Final

from nomad_device.frozen import frozen, set_field

__all__ = [
    "QUIET_LIBRARIES",
    "TRACE",
    "HclogEntry",
    "HclogFormatter",
    "HclogHandler",
    "StdioCapture",
    "format_timestamp",
    "hclog_level",
    "install_early_excepthook",
    "install_plugin_logging",
    "parse_line",
    "python_level",
]

#: Python has no TRACE level; hclog does, and go-plugin hosts log at it.
TRACE: Final = 5
logging.addLevelName(TRACE, "TRACE")

#: go-plugin's host reads stderr with a 64 KiB line buffer; longer lines are
#: split and lose their JSON. Stay well below.
MAX_LINE_BYTES: Final = 60_000

_LEVELS: Final = {
    "trace": TRACE,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}

#: Libraries whose debug lines describe their own internals, not the plugin:
#: gRPC's asyncio glue logs ``[_cygrpc] Loaded running loop: id(loop)=...``
#: for nearly every call (about twenty per launch), asyncio its selector. A
#: plugin logs at trace by default and the host filters, so at ``-v`` or an
#: agent's ``log_level = "debug"`` those lines would bury the plugin's own.
#: Their warnings and errors still come through. A level set on one of these
#: loggers before serving starts is kept.
QUIET_LIBRARIES: Final = ("grpc", "asyncio")

# LogRecord attributes that are plumbing, not author-supplied fields.
_RECORD_ATTRS: Final = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None))
) | {"message", "asctime", "taskName"}


def hclog_level(levelno: int) -> str:
    """Map a Python level number onto hclog's five level words."""
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warn"
    if levelno >= logging.INFO:
        return "info"
    if levelno >= logging.DEBUG:
        return "debug"
    return "trace"


def python_level(word: str) -> int:
    """Map an hclog level word to a Python level; unknown words become debug."""
    return _LEVELS.get(word.lower(), logging.DEBUG)


def format_timestamp(when: float) -> str:
    """hclog's timestamp: local time, six fractional digits, ``Z`` for UTC."""
    moment = _dt.datetime.fromtimestamp(when).astimezone()
    text = moment.isoformat(timespec="microseconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _jsonable(value: object) -> object:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


class HclogFormatter(logging.Formatter):
    """One hclog JSON object per record; ``extra=`` fields become key/values."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "@level": hclog_level(record.levelno),
            "@message": record.getMessage(),
            "@module": record.name,
            "@timestamp": format_timestamp(record.created),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and not key.startswith("_"):
                entry[key] = _jsonable(value)
        if record.exc_info and record.exc_info[0] is not None:
            entry["error"] = "".join(
                traceback.format_exception_only(record.exc_info[0], record.exc_info[1])
            ).strip()
            entry["traceback"] = "".join(traceback.format_exception(*record.exc_info))
        elif record.stack_info:
            entry["stack"] = record.stack_info
        line = json.dumps(entry, ensure_ascii=False)
        if len(line.encode()) > MAX_LINE_BYTES:
            line = _shrink(entry)
        return line


def _shrink(entry: dict[str, object]) -> str:
    """Cut the longest string fields until the line fits the host's buffer."""
    budget = MAX_LINE_BYTES // 2
    for key in ("traceback", "@message", "stack", "error"):
        value = entry.get(key)
        if isinstance(value, str) and len(value.encode()) > budget // 2:
            entry[key] = value[: budget // 8] + " …[truncated]… " + value[-budget // 8 :]
    line = json.dumps(entry, ensure_ascii=False)
    if len(line.encode()) > MAX_LINE_BYTES:
        keep = {k: entry[k] for k in ("@level", "@module", "@timestamp")}
        keep["@message"] = str(entry["@message"])[:1000] + " …[truncated]"
        line = json.dumps(keep, ensure_ascii=False)
    return line


class HclogHandler(logging.Handler):
    """Writes formatted records straight to a file descriptor.

    Writing to the fd (not ``sys.stderr``) keeps working after stderr has been
    redirected into the capture pipe. When the host is gone the pipe is broken:
    records are then dropped silently instead of raising in the caller.
    """

    def __init__(self, fd: int, level: int = TRACE) -> None:
        super().__init__(level)
        self.fd = fd
        self.broken = False
        self.setFormatter(HclogFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        if self.broken:
            return
        try:
            data = (self.format(record) + "\n").encode("utf-8", "replace")
        except Exception:  # a bad extra= value must not lose the record entirely
            data = (
                json.dumps(
                    {
                        "@level": hclog_level(record.levelno),
                        "@message": str(record.msg),
                        "@module": record.name,
                        "@timestamp": format_timestamp(record.created),
                    }
                )
                + "\n"
            ).encode()
        with self.lock or threading.Lock():
            try:
                while data:
                    written = os.write(self.fd, data)
                    data = data[written:]
            except OSError:
                self.broken = True


Listener = Callable[[int, bytes], None]


class StdioCapture:
    """Redirect fds 1 and 2 into pipes and turn what arrives into log records.

    The originals are kept (``real_stdout``/``real_stderr``) for the handshake
    line and the log handler. Raw output is also offered to listeners, which is
    how the GRPCStdio service forwards it to the host.
    """

    STDOUT: Final = 1
    STDERR: Final = 2

    def __init__(self) -> None:
        self.real_stdout = os.dup(1)
        self.real_stderr = os.dup(2)
        os.set_inheritable(self.real_stdout, False)
        os.set_inheritable(self.real_stderr, False)
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._log = {
            self.STDOUT: (logging.getLogger("stdout"), logging.DEBUG),
            self.STDERR: (logging.getLogger("stderr"), logging.WARNING),
        }

    def start(self) -> None:
        for channel in (self.STDOUT, self.STDERR):
            read_fd, write_fd = os.pipe()
            os.dup2(write_fd, channel)
            os.close(write_fd)
            thread = threading.Thread(
                target=self._pump, args=(channel, read_fd), name=f"stdio-{channel}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        # Author prints should arrive line by line, not when a buffer fills.
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(line_buffering=True)

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._lock, _suppress_value_error():
            self._listeners.remove(listener)

    def stop(self, timeout: float = 0.5) -> None:
        """Flush Python's streams and let the pumps drain what is buffered."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        for channel in (self.STDOUT, self.STDERR):
            os.dup2(devnull, channel)  # closes the pipes' last write ends -> EOF
        os.close(devnull)
        for thread in self._threads:
            thread.join(timeout)

    def _pump(self, channel: int, read_fd: int) -> None:
        logger, level = self._log[channel]
        pending = b""
        while True:
            try:
                chunk = os.read(read_fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            with self._lock:
                listeners = list(self._listeners)
            for listener in listeners:
                try:
                    listener(channel, chunk)
                except Exception:  # a failing listener must not stop capture
                    logging.getLogger("goplugin.stdio").debug("stdio listener failed")
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                text = raw.decode("utf-8", "replace").rstrip("\r")
                if text:
                    logger.log(level, text)
            if len(pending) > MAX_LINE_BYTES // 2:
                logger.log(level, pending.decode("utf-8", "replace"))
                pending = b""
        if pending.strip():
            logger.log(level, pending.decode("utf-8", "replace"))
        os.close(read_fd)


class _suppress_value_error:
    def __enter__(self) -> None:
        return None

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> bool:
        return et is ValueError


def _log_uncaught(
    kind: str, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    logging.getLogger("python").error(
        "%s: %s",
        kind,
        "".join(traceback.format_exception_only(exc_type, exc)).strip(),
        exc_info=(exc_type, exc, tb),
    )


def install_early_excepthook() -> None:
    """Report an exception raised before serving starts as one hclog line.

    Covers errors in the author's module or plugin constructor, which happen
    before :func:`install_plugin_logging` runs and would otherwise print a raw
    traceback that a host shows only at debug level.
    """
    handler = HclogHandler(2)

    def excepthook(et: type[BaseException], ev: BaseException, tb: TracebackType | None) -> None:
        record = logging.LogRecord(
            "python",
            logging.ERROR,
            __file__,
            0,
            "plugin failed to start: %s",
            ("".join(traceback.format_exception_only(et, ev)).strip(),),
            (et, ev, tb),
        )
        handler.emit(record)

    sys.excepthook = excepthook


def install_plugin_logging(level: int = TRACE, capture_stdio: bool = True) -> StdioCapture | None:
    """Route every way Python can write to stderr through hclog JSON.

    Returns the stdio capture (whose ``real_stdout`` carries the handshake), or
    None when ``capture_stdio`` is false (in-process tests).
    """
    capture = StdioCapture() if capture_stdio else None
    fd = capture.real_stderr if capture else 2
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(HclogHandler(fd))
    root.setLevel(level)
    for name in QUIET_LIBRARIES:
        library = logging.getLogger(name)
        if library.level == logging.NOTSET:
            library.setLevel(logging.INFO)
    logging.raiseExceptions = False  # never print logging's own errors as raw text
    logging.captureWarnings(True)
    warnings.simplefilter("default")

    def excepthook(et: type[BaseException], ev: BaseException, tb: TracebackType | None) -> None:
        _log_uncaught("uncaught exception", et, ev, tb)

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            name = args.thread.name if args.thread else "?"
            _log_uncaught(
                f"uncaught exception in thread {name}",
                args.exc_type,
                args.exc_value,
                args.exc_traceback,
            )

    def unraisable_hook(args: Any) -> None:
        if args.exc_value is not None:
            _log_uncaught(
                f"unraisable exception ({args.err_msg or 'ignored'})",
                args.exc_type,
                args.exc_value,
                args.exc_traceback,
            )

    sys.excepthook = excepthook
    threading.excepthook = thread_hook
    sys.unraisablehook = unraisable_hook
    if capture:
        capture.start()
    return capture


@frozen
class HclogEntry:
    """One parsed stderr line from a plugin."""

    level: str
    message: str
    timestamp: _dt.datetime | None
    module: str | None = None
    fields: Mapping[str, object] = field(default_factory=dict)
    raw: bool = False

    def __init__(
        self,
        level: str,
        message: str,
        timestamp: _dt.datetime | None,
        module: str | None = None,
        fields: Mapping[str, object] | None = None,
        raw: bool = False,
    ) -> None:
        set_field(self, "level", level)
        set_field(self, "message", message)
        set_field(self, "timestamp", timestamp)
        set_field(self, "module", module)
        set_field(self, "fields", {} if fields is None else fields)
        set_field(self, "raw", raw)


_TS_FORMATS: Final = ("%Y-%m-%dT%H:%M:%S.%f%z",)


def _parse_ts(text: str) -> _dt.datetime:
    if len(text) < 27 or text[19] != "." or not text[20:26].isdigit():
        raise ValueError(f"timestamp {text!r} is not in hclog's six-digit form")
    tail = text[26:]
    if tail != "Z" and not (len(tail) == 6 and tail[0] in "+-" and tail[3] == ":"):
        raise ValueError(f"timestamp {text!r} has a bad zone")
    return _dt.datetime.strptime(text.replace("Z", "+00:00"), _TS_FORMATS[0])


def parse_line(line: str, strict: bool = False) -> HclogEntry:
    """Parse a stderr line as go-plugin's host does.

    Non-JSON text becomes a debug entry marked ``raw`` (what a Go host does).
    With ``strict`` any deviation that would break or demote the line in a Go
    host raises ValueError instead -- that is what conformance checks use.
    """
    text = line.rstrip("\r\n")
    try:
        obj = json.loads(text)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
    except ValueError:
        if strict:
            raise ValueError(f"not hclog JSON: {text[:200]!r}") from None
        return HclogEntry("debug", text, None, raw=True)
    for key in ("@level", "@message", "@timestamp"):
        if key in obj and not isinstance(obj[key], str):
            raise ValueError(f"{key} must be a string in {text[:200]!r}")
        if strict and key not in obj:
            raise ValueError(f"{key} missing in {text[:200]!r}")
    level = obj.pop("@level", "")
    if strict and level not in _LEVELS:
        raise ValueError(f"unknown level {level!r}")
    message = obj.pop("@message", "")
    ts = obj.pop("@timestamp", None)
    timestamp = _parse_ts(ts) if ts is not None else None
    module = obj.pop("@module", None)
    return HclogEntry(
        level if level in _LEVELS else "debug",
        message,
        timestamp,
        module if isinstance(module, str) else None,
        obj,
    )
