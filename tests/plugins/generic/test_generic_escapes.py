"""A USB device's strings reach Nomad as the kernel gave them and the operator escaped.

Issue 26: a USB product string with ``ESC ] 2;...`` and ``ESC [2J`` was
written as it was by the launcher's fingerprint table. The device here is on
the fake sysfs tree (its ``product``, ``manufacturer`` and ``serial`` files);
the plugin runs as Nomad runs it and the launcher shows its fingerprint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.fake_tree import FakeTree, require_root
from support.generic import COMMAND, first_groups
from support.processes import Launcher

from nomad_device.display import printable
from nomad_device.model import Attribute
from nomad_device.plugins.generic.config import DeviceBlock, GenericConfig, UsbBlock

pytestmark = pytest.mark.timeout(180)

PRODUCT = "CP2102\x1b]2;pwned\x07\x1b[2J"
MANUFACTURER = "Silicon\x9b31m Labs\u202e"
CONFIG = GenericConfig(device={"zigbee": DeviceBlock(usb=[UsbBlock(vendor_id="10c4")])})


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    require_root()
    tree = FakeTree(tmp_path / "root")
    tree.usb(
        "1-1.4", 0x10C4, 0xEA60, serial="0001", manufacturer=MANUFACTURER, product=PRODUCT,
        tty=("ttyUSB0", 0),
    )  # fmt: skip
    return tree


def test_nomad_gets_the_strings_as_the_kernel_gave_them(launch: Launcher, tree: FakeTree) -> None:
    _, groups = first_groups(launch, CONFIG, tree.env)
    (group,) = groups
    assert group.attributes["usb_product"] == Attribute(PRODUCT)
    assert group.attributes["usb_manufacturer"] == Attribute(MANUFACTURER)


def test_the_launcher_shows_them_escaped(tree: FakeTree) -> None:
    script = Path(sys.executable).with_name("nomad-device-launcher")
    launcher = [str(script)] if script.is_file() else [sys.executable, "-m", "nomad_device.cli"]
    config = json.dumps({"device": {"zigbee": {"usb": [{"vendor_id": "10c4"}]}}})
    env = {**os.environ, **tree.env, "NO_COLOR": "1"}

    def run(*args: str) -> str:
        result = subprocess.run(
            [*launcher, "fingerprint", *args, "--config-json", config, "--", *COMMAND],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    table = run()
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in table, table
    assert f"usb_product       {printable(PRODUCT)}\n" in table
    assert f"usb_manufacturer  {printable(MANUFACTURER)}\n" in table
    (group,) = json.loads(run("--json"))
    assert group["Attributes"]["usb_product"]["String"] == PRODUCT
