"""The fixed values of Nomad's device-plugin protocol."""

from __future__ import annotations

from typing import Final

from nomad_device.goplugin.handshake import HandshakeConfig

__all__ = [
    "DEVICE_API_VERSION",
    "DROPPED_FIELD",
    "NOMAD_HANDSHAKE",
    "PLUGIN_TYPE_DEVICE",
]

#: Nomad's go-plugin handshake: app protocol 2 and its magic cookie.
NOMAD_HANDSHAKE: Final = HandshakeConfig(
    protocol_version=2,
    magic_cookie_key="NOMAD_PLUGIN_MAGIC_COOKIE",
    magic_cookie_value="e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
)

#: The only device API version Nomad speaks.
DEVICE_API_VERSION: Final = "v0.1.0"

#: ``PluginType.DEVICE`` on the wire.
PLUGIN_TYPE_DEVICE: Final = 3

#: The hclog field on the error a plugin logs when it leaves a group out of a
#: message because Nomad would refuse it: ``dropped=device_group`` (Fingerprint)
#: or ``dropped=stats_group`` (Stats). Hosts such as the launcher look for it.
DROPPED_FIELD: Final = "dropped"
