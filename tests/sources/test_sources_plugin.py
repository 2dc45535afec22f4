"""A real kernel uevent reaches a plugin's ``watch()``, over the real wire.

As root, ``change <uuid>`` written to ``/sys/devices/virtual/mem/null/uevent``
makes the kernel emit a uevent tagged with that uuid; the test plugin
(``tests/support/plugins/uevent_plugin.py``) reports every tagged event it hears for
that device as a device, and its period is an hour, so only ``watch()`` can
bring it to the host. Other tests' uevents are tolerated: the test waits for
its own uuid.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from support import PLUGINS
from support.sources import needs_root

from nomad_device.config import encode_config
from nomad_device.model import DeviceGroup

PLUGIN = PLUGINS / "uevent_plugin.py"
sys.path.insert(0, str(PLUGIN.parent))
from uevent_plugin import Config  # noqa: E402

DEVICE = Path("/sys/devices/virtual/mem/null")


def ids(message: Sequence[DeviceGroup]) -> set[str]:
    return {d.id for g in message for d in g.devices}


@needs_root
def test_a_real_kernel_uevent_reaches_watch(launch: Callable[..., Any]) -> None:
    client = launch([sys.executable, str(PLUGIN)]).client
    client.set_config(encode_config(Config()))
    with client.fingerprint() as stream:
        deadline = time.monotonic() + 20
        while "listening" not in ids(stream.next(20)):
            assert time.monotonic() < deadline, "the plugin never opened its netlink socket"
        tag = str(uuid.uuid4())
        (DEVICE / "uevent").write_text(f"change {tag}")
        while tag not in ids(stream.next(20)):
            assert time.monotonic() < deadline + 20, "the uevent never reached the host"
