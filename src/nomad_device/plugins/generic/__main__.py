"""``nomad-device-generic``: the executable to drop into a Nomad client's ``plugin_dir``."""

from __future__ import annotations

from nomad_device.plugin.serve import serve
from nomad_device.plugins.generic.plugin import GenericDevicePlugin


def main() -> None:
    serve(GenericDevicePlugin)


if __name__ == "__main__":
    main()
