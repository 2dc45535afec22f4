"""How the SDK starts a Python like the one it runs on: the probe reaper, a plugin file.

``sys.executable`` is not always a Python: in a bundle that brings its own
interpreter it is the bundle, whose ``main`` starts the plugin again whatever
flags it is given (issue 26: every probe then failed). Such a bundle offers a
way to run its interpreter as a plain Python (``BUNDLE
--nomad-device-bundle-python -c CODE``, see docs/deploy.md), and its
bootstrap module says how; everywhere else ``sys.executable`` is the answer.
Every place in the SDK that starts this Python goes through
:func:`python_command`.
"""

from __future__ import annotations

import sys
from typing import Final

__all__ = ["BUNDLE_BOOTSTRAP", "python_command"]

#: The module a bundle's own interpreter runs first (bundle/bootstrap.py, from the
#: bundle's boot zip); present in ``sys.modules`` only in such a bundle.
BUNDLE_BOOTSTRAP: Final = "_nomad_bundle_boot"


def python_command(*, isolated: bool = True) -> list[str]:
    """The argv prefix that starts this interpreter as a Python; append ``-c CODE`` etc.

    ``isolated``: without the environment's ``PYTHON*`` variables, user site
    and ``site`` (``-I -S``), for helpers that need only the standard library;
    else with them, for a program that needs this environment's packages. In a
    bundle with its own interpreter both mean the same: its library and the
    bundle's packages, nothing of the node's. Raises :class:`FileNotFoundError`
    where Python cannot say what it runs on (an embedded interpreter).
    """
    boot = sys.modules.get(BUNDLE_BOOTSTRAP)
    offered = getattr(boot, "python_command", None)
    if callable(offered):
        return [str(part) for part in offered()]
    if not sys.executable:
        raise FileNotFoundError("no Python interpreter to run it (sys.executable is empty)")
    return [sys.executable, "-I", "-S"] if isolated else [sys.executable]
