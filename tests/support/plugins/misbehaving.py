"""A plugin for the launcher's failure tests; what it does is chosen by environment.

``LAUNCHER_TEST_PID_FILE``: write this process's PID there first.
``LAUNCHER_TEST_MODE``:
  ``hang``   -- ignore SIGINT and never complete the handshake;
  ``exit``   -- print a line on stderr and exit 3 before the handshake;
  ``crash``  -- serve the SDK test plugin, but exit with status 7 as soon as
               Reserve is called (a plugin crashing mid-session);
  otherwise  -- serve the SDK test plugin.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

pid_file = os.environ.get("LAUNCHER_TEST_PID_FILE")
if pid_file:
    Path(pid_file).write_text(str(os.getpid()))

mode = os.environ.get("LAUNCHER_TEST_MODE", "serve")
if mode == "hang":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        time.sleep(3600)
if mode == "exit":
    print("misbehaving plugin: giving up before the handshake", file=sys.stderr, flush=True)
    sys.exit(3)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sdk_plugin import SyncPlugin  # noqa: E402

from nomad_device import Reservation, serve  # noqa: E402


class CrashingPlugin(SyncPlugin):
    name = "misbehaving"

    def reserve(self, device_ids: Sequence[str]) -> Reservation:
        if mode == "crash":
            os._exit(7)
        return super().reserve(device_ids)


serve(CrashingPlugin)
