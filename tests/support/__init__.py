"""Helpers the tests share (fake sysfs trees, fake agents, fixture plugins, the kernel VM).

Nothing here is a test: ``tests/test_layers.py`` keeps every helper in this package and
every test under the directory of the layer it tests, as ``src/`` is laid out.
"""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
ROOT = TESTS.parent
INTEROP = ROOT / "interop"
#: The plugin programs tests start; the conformance suite's broken ones below.
PLUGINS = SUPPORT / "plugins"
CONFORMANCE_PLUGINS = PLUGINS / "conformance"
SDK_PLUGIN = PLUGINS / "sdk_plugin.py"
