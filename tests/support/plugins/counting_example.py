"""nomad-device-example that counts its detect() calls, for the storm test.

Each call appends one byte to the file named by ``COUNT_DETECTS_TO``, so the
test reads an exact count once the plugin has stopped (log lines would lag).
"""

from __future__ import annotations

import os

from nomad_device import DeviceGroup, serve
from nomad_device.plugins.example.plugin import FsDevicePlugin


class CountingExample(FsDevicePlugin):
    def detect(self) -> list[DeviceGroup]:
        groups = super().detect()
        fd = os.open(os.environ["COUNT_DETECTS_TO"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, b".")
        finally:
            os.close(fd)
        return groups


if __name__ == "__main__":
    serve(CountingExample)
