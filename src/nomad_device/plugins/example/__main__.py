"""``nomad-device-example``: the executable to drop into a Nomad client's ``plugin_dir``."""

from __future__ import annotations

from nomad_device.plugin.serve import serve
from nomad_device.plugins.example.plugin import FsDevicePlugin


def main() -> None:
    serve(FsDevicePlugin)


if __name__ == "__main__":
    main()
