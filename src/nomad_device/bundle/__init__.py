"""``nomad-device-bundle``: ship a plugin as one file, as Go plugins ship.

A bundle is a shell prelude, a small Python bootstrap and a zip of the plugin
with the SDK and every dependency. On a node the prelude finds the right
Python; the bootstrap unpacks the zip once into a private cache directory
(keyed by the bundle's content hash) and runs the plugin from there.

Only ``bootstrap.py`` runs on nodes; the rest is the build tool. The tool sits
beside the launcher: it imports the plugin API only to check, at build time,
that an entry point is a DevicePlugin.
"""

from nomad_device.bundle.archive import read_config, write_bundle
from nomad_device.bundle.build import Target, build_bundle, ready_made_plugins, resolve_target
from nomad_device.bundle.collect import BundleError, Root

__all__ = [
    "BundleError",
    "Root",
    "Target",
    "build_bundle",
    "read_config",
    "ready_made_plugins",
    "resolve_target",
    "write_bundle",
]
