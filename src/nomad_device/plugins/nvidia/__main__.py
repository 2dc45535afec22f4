"""``nomad-device-nvidia``: the executable to drop into a Nomad client's ``plugin_dir``."""

from __future__ import annotations

from nomad_device.plugin.serve import serve
from nomad_device.plugins.nvidia.plugin import NvidiaPlugin


def main() -> None:
    serve(NvidiaPlugin)


if __name__ == "__main__":
    main()
