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

__all__ = ["Interrupted", "SignalGuard", "resolve_command"]

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


def resolve_command(command: Sequence[str]) -> list[str]:
    """Make a plugin command runnable: a non-executable ``.py`` file runs with this
    Python; a bare name not on PATH is looked for in the current directory, then
    beside this Python (the console scripts of a venv that is not activated)."""
    if not command:
        raise ValueError("no plugin command")
    first, rest = command[0], list(command[1:])
    if first.endswith(".py") and os.path.isfile(first) and not os.access(first, os.X_OK):
        return [*python_command(isolated=False), first, *rest]
    if os.sep not in first:
        import shutil

        if shutil.which(first) is None:
            if os.path.isfile(first):
                return [os.path.join(os.curdir, first), *rest]
            # A console script installed beside this Python (an inactive venv).
            beside = os.path.join(os.path.dirname(sys.executable), first)
            if os.path.isfile(beside) and os.access(beside, os.X_OK):
                return [beside, *rest]
    return [first, *rest]
