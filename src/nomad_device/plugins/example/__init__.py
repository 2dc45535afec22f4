"""Nomad's file-backed example device plugin, rebuilt on the SDK.

Every file in a directory (the ``dir`` setting) is a device of group
``nomad/file/mock``; a file whose permissions read ``unhealthy_perm`` (by
default ``-rwxrwxrwx``, i.e. mode 0777) is unhealthy. Installed as the console
script ``nomad-device-example``; ``docs/plugins/example.md`` covers installing
it into Nomad, a walk-through, and how it differs from the Go original.

The ``demo/`` directory beside this module holds the walk-through's devices:
``device01``, ``device02`` and ``device03``, small text files. It carries no
README of its own, because any file in it would be a device.
:func:`prepare_demo_dir` copies them somewhere writable and gives them the
walk-through's modes (``device01`` 0777, hence unhealthy; the others 0644),
which git cannot store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nomad_device.plugins.example.plugin import ExampleConfig, FsDevicePlugin

if TYPE_CHECKING:
    from nomad_device.plugins.example.demo import prepare_demo_dir

__all__ = ["ExampleConfig", "FsDevicePlugin", "prepare_demo_dir"]


def __getattr__(name: str) -> Any:
    # The demo helper pulls in importlib.resources, pathlib, shutil and tempfile:
    # about 1.5 MiB and several ms that a serving plugin would pay at every launch.
    if name == "prepare_demo_dir":
        from nomad_device.plugins.example.demo import prepare_demo_dir

        return prepare_demo_dir
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
