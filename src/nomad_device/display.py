"""Text that devices and plugins supply, made safe to show on a terminal.

A USB product string, a serial number, a health description or a log line is
whatever the device or the plugin made it: ``ESC ] 2;...`` retitles the
operator's terminal, ``ESC [2J`` clears it, a right-to-left override turns
what follows around. Every human-readable output of the launcher, the REPL,
``check`` and the conformance report passes such strings through
:func:`printable`; JSON output keeps the true string (JSON's own escapes), and
Nomad gets the string as the kernel gave it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["printable"]

_SHORT: Final = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def printable(text: str, *, lines: bool = False, tabs: bool = False) -> str:
    """``text`` with each character that is not printable written as an escape.

    Not printable is what ``str.isprintable`` says: controls (``\\x1b``,
    ``\\x9b``), format characters such as bidirectional overrides
    (``\\u202e``), separators other than the space, unassigned code points,
    and the lone surrogates that stand for undecodable bytes. They are written
    as Python writes them (``\\t``, ``\\x1b``, ``\\u202e``, ``\\U000e0001``); a
    backslash already in the text is left as it is. ``lines`` keeps line
    breaks (a message of several lines), ``tabs`` keeps tabs.
    """
    if text.isprintable():
        return text
    keep = ("\n" if lines else "") + ("\t" if tabs else "")
    out = []
    for ch in text:
        if ch.isprintable() or ch in keep:
            out.append(ch)
        elif ch in _SHORT:
            out.append(_SHORT[ch])
        else:
            code = ord(ch)
            out.append(
                f"\\x{code:02x}"
                if code < 0x100
                else f"\\u{code:04x}"
                if code < 0x10000
                else f"\\U{code:08x}"
            )
    return "".join(out)
