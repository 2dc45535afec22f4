"""Parsers for the launcher's option values, shared by the command line and the REPL.

They raise :class:`argparse.ArgumentTypeError`, so argparse reports them as
usage errors; the REPL turns them into its own messages.
"""

from __future__ import annotations

import argparse

__all__ = ["parse_count", "parse_interval"]


def parse_interval(text: str) -> float:
    """Seconds from ``1.5`` or a Go duration such as ``500ms``/``2s``/``1m``."""
    try:
        value = float(text)
    except ValueError:
        from nomad_device.golang import GoDurationError, parse_duration

        try:
            value = parse_duration(text) / 1e9
        except GoDurationError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("time: ")) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def parse_count(text: str) -> int:
    """A whole number of messages, 0 meaning no limit."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError("count must be 0 (no limit) or more")
    return value
