"""What the launcher needs before any plugin runs, without loading gRPC.

Signals that must never leave a plugin behind (:class:`SignalGuard`), and how
a plugin command is made runnable (:func:`resolve_command`). ``check`` against
a cluster or node files uses these and no plugin at all, so this module keeps
grpc (a quarter of a second to import) off its path.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Final

from nomad_device.interpreter import python_command

__all__ = ["Interrupted", "PluginNotFound", "SignalGuard", "find_program", "resolve_command"]

_HANDLED: Final = tuple(
    s
    for s in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None))
    if s is not None
)


class Interrupted(BaseException):
    """Ctrl-C or a termination signal; ``exit_code`` is 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class SignalGuard:
    """Turns the first SIGINT/SIGTERM/SIGHUP into :class:`Interrupted`; later ones
    (and any during clean-up) SIGKILL the registered plugin processes at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.cleaning = False
        self._pids: set[int] = set()
        self._previous: dict[int, object] = {}
        self._pending: BaseException | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in _HANDLED:
            with contextlib.suppress(OSError, ValueError):
                self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def __enter__(self) -> SignalGuard:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def watch(self, pid: int) -> None:
        self._pids.add(pid)

    def forget(self, pid: int) -> None:
        self._pids.discard(pid)

    def hurry(self) -> None:
        """SIGKILL every registered plugin now."""
        for pid in list(self._pids):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    @contextlib.contextmanager
    def cleanup(self) -> Iterator[None]:
        """While inside, signals no longer interrupt: they speed the clean-up up."""
        was = self.cleaning
        self.cleaning = True
        try:
            yield
        finally:
            self.cleaning = was

    def raise_in_main(self, exc: BaseException) -> None:
        """From another thread: make the main thread raise ``exc`` (even out of input())."""
        self._pending = exc
        ident = threading.main_thread().ident
        if ident is not None and signal.SIGINT in self._previous:
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(ident, signal.SIGINT)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and not self.cleaning:
            raise pending
        if self.cleaning or self.signum is not None:
            self.hurry()
            if self.signum is None:
                self.signum = signum
            return
        self.signum = signum
        raise Interrupted(signum)


class PluginNotFound(ValueError):
    """A bare plugin name found neither beside the launcher nor on ``PATH``."""


def resolve_command(command: Sequence[str]) -> list[str]:
    """Make a plugin command runnable, never from the current directory by accident.

    A name with a slash is a path, used as given. A ``.py`` name is a file, as
    ``python NAME.py`` takes it (one that is not executable runs with this
    Python). Any other name is a program: looked up beside this Python (the
    launcher's own ``bin``, where its plugins are installed), then in the
    absolute directories of ``PATH``. The current directory is never searched,
    not even through an empty or relative ``PATH`` entry: root running the
    launcher from ``/tmp`` must not run what another user planted there.
    """
    if not command:
        raise ValueError("no plugin command")
    first, rest = command[0], list(command[1:])
    if first.endswith(".py") and os.path.isfile(first):
        if not os.access(first, os.X_OK):
            return [*python_command(isolated=False), first, *rest]
        return [first if os.sep in first else os.path.join(os.curdir, first), *rest]
    if os.sep in first:
        return [first, *rest]
    found = find_program(first)
    if found is None:
        raise PluginNotFound(
            f"no plugin named {first!r} beside the launcher ({_own_bin() or '?'}) or on PATH;"
            f" a file in the current directory is run only as a path: ./{first}"
        )
    return [found, *rest]


def find_program(name: str) -> str | None:
    """``name`` beside this Python, else in an absolute ``PATH`` directory; its path."""
    import shutil

    own = _own_bin()
    beside = os.path.join(own, name) if own else ""
    if beside and os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    path = os.environ.get("PATH", os.defpath)
    absolute = [d for d in path.split(os.pathsep) if os.path.isabs(d)]
    return shutil.which(name, path=os.pathsep.join(absolute)) if absolute else None


def _own_bin() -> str:
    """The launcher's ``bin``: its console scripts sit beside its Python."""
    return os.path.dirname(os.path.abspath(sys.executable)) if sys.executable else ""
