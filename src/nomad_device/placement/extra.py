"""What placement takes from the launcher's ``cli`` extra, and the hint when it is missing.

Reading job files (python-hcl2), a cluster (httpx, msgspec) and Go's regexps
(google-re2) need packages a plugin never does; each is imported on first use
and, when absent, named with the command that installs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["CLI_EXTRA_HINT", "MissingExtraError", "load_hcl2"]

CLI_EXTRA_HINT: Final = "pip install 'nomad-device-sdk[cli]'"


class MissingExtraError(RuntimeError):
    """python-hcl2 is not installed (or too old to be used)."""


def load_hcl2() -> ModuleType:
    """python-hcl2's API module (HCL 2, for job files), or :class:`MissingExtraError`."""
    try:
        import hcl2.api
    except ImportError:
        raise MissingExtraError(
            "reading HCL 2 files needs python-hcl2, which comes with the launcher's "
            f"extra: {CLI_EXTRA_HINT}"
        ) from None
    if not hasattr(hcl2.api, "parses_to_tree"):
        raise MissingExtraError(
            f"python-hcl2 is too old for the launcher (need 8 or newer): {CLI_EXTRA_HINT}"
        )
    return hcl2.api
