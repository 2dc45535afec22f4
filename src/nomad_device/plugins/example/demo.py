"""A ready-made device directory for trying the example plugin by hand."""

from __future__ import annotations

import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Final

__all__ = ["DEMO_MODES", "prepare_demo_dir"]

#: The walk-through's permissions. Git keeps only 0644 and 0755, so they are
#: set on each copy; 0777 is the default ``unhealthy_perm``, "-rwxrwxrwx".
DEMO_MODES: Final = {"device01": 0o777, "device02": 0o644, "device03": 0o644}


def prepare_demo_dir(target: Path | None = None) -> Path:
    """Copy the demo devices into ``target`` (default: a fresh temp dir) and return it.

    ``device01`` ends up unhealthy and the others healthy. Existing files of the
    same names are overwritten; nothing else in ``target`` is touched, but any
    other file there is a device too.
    """
    if target is None:
        target = Path(tempfile.mkdtemp(prefix="nomad-device-example-"))
    else:
        target.mkdir(parents=True, exist_ok=True)
    source = resources.files("nomad_device.plugins.example") / "demo"
    for name, mode in DEMO_MODES.items():
        destination = target / name
        destination.unlink(missing_ok=True)  # a read-only leftover must not stop us
        with (source / name).open("rb") as src, destination.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        destination.chmod(mode)
    return target
