"""The go-plugin handshake: environment contract and the stdout line.

Both sides live here so the server and the host client cannot drift apart.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Final

from nomad_device.frozen import frozen

__all__ = [
    "CORE_PROTOCOL_VERSION",
    "ENV_CLIENT_CERT",
    "ENV_MAX_PORT",
    "ENV_MIN_PORT",
    "ENV_MULTIPLEX_GRPC",
    "ENV_PROTOCOL_VERSIONS",
    "ENV_UNIX_SOCKET_DIR",
    "ENV_UNIX_SOCKET_GROUP",
    "NOT_A_PLUGIN_MESSAGE",
    "HandshakeConfig",
    "HandshakeError",
    "HandshakeLine",
    "negotiate_version",
]

CORE_PROTOCOL_VERSION: Final = 1
ENV_PROTOCOL_VERSIONS: Final = "PLUGIN_PROTOCOL_VERSIONS"
ENV_MIN_PORT: Final = "PLUGIN_MIN_PORT"
ENV_MAX_PORT: Final = "PLUGIN_MAX_PORT"
ENV_UNIX_SOCKET_DIR: Final = "PLUGIN_UNIX_SOCKET_DIR"
ENV_UNIX_SOCKET_GROUP: Final = "PLUGIN_UNIX_SOCKET_GROUP"
ENV_CLIENT_CERT: Final = "PLUGIN_CLIENT_CERT"
ENV_MULTIPLEX_GRPC: Final = "PLUGIN_MULTIPLEX_GRPC"

NOT_A_PLUGIN_MESSAGE: Final = (
    "This program is a plugin. It is not meant to be run directly:\n"
    "the application that uses it starts it and talks to it.\n"
    "To try it by hand, run it under a plugin launcher instead.\n"
)


class HandshakeError(Exception):
    """The handshake line or environment is not what go-plugin expects."""


@frozen
class HandshakeConfig:
    """What host and plugin must agree on before talking.

    ``protocol_version`` is the application protocol version this side speaks;
    the magic cookie only guards against running the plugin by hand.
    """

    protocol_version: int
    magic_cookie_key: str
    magic_cookie_value: str

    def cookie_ok(self, environ: Mapping[str, str] | None = None) -> bool:
        env = os.environ if environ is None else environ
        return env.get(self.magic_cookie_key) == self.magic_cookie_value


def negotiate_version(offered: str | None, supported: Iterable[int]) -> int:
    """Pick the highest version both sides speak.

    With no common version (or nothing offered) the plugin answers with its own
    highest and lets the host refuse, as go-plugin does.
    """
    ours = sorted(set(supported))
    if not ours:
        raise HandshakeError("no protocol versions supported")
    theirs: set[int] = set()
    for part in (offered or "").split(","):
        part = part.strip()
        if part.isdigit():
            theirs.add(int(part))
    common = [v for v in ours if v in theirs]
    return common[-1] if common else ours[-1]


@frozen
class HandshakeLine:
    """The single line a plugin prints on stdout once it listens."""

    app_version: int
    network: str
    address: str
    protocol: str = "grpc"
    cert: str = ""
    core_version: int = CORE_PROTOCOL_VERSION
    multiplex: bool | None = None

    def render(self) -> str:
        fields = [
            str(self.core_version),
            str(self.app_version),
            self.network,
            self.address,
            self.protocol,
            self.cert,
        ]
        if self.multiplex is not None:
            fields.append("true" if self.multiplex else "false")
        return "|".join(fields) + "\n"

    @classmethod
    def parse(cls, line: str) -> HandshakeLine:
        parts = line.strip().split("|")
        if len(parts) < 4:
            raise HandshakeError(f"unrecognized handshake line: {line.strip()!r}")
        try:
            core, app = int(parts[0]), int(parts[1])
        except ValueError as exc:
            raise HandshakeError(f"bad version numbers in handshake: {line.strip()!r}") from exc
        if core != CORE_PROTOCOL_VERSION:
            raise HandshakeError(
                f"incompatible core protocol version {core}, expected {CORE_PROTOCOL_VERSION}"
            )
        network, address = parts[2], parts[3]
        if network not in ("unix", "tcp"):
            raise HandshakeError(f"unsupported network {network!r} in handshake")
        protocol = parts[4] if len(parts) > 4 and parts[4] else "netrpc"
        cert = parts[5] if len(parts) > 5 else ""
        multiplex = parts[6] == "true" if len(parts) > 6 else None
        return cls(app, network, address, protocol, cert, core, multiplex)
