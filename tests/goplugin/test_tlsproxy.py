"""AutoMTLS through OpenSSL (goplugin.tlsproxy), Python on both ends.

No Go needed, so not marked ``interop``: the Go side of the same paths is in
test_interop_gohost.py (real go-plugin client) and test_interop_pyhost.py
(real go-plugin server).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from support import SDK_PLUGIN
from support.processes import OwnTime

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.handshake import HandshakeLine
from nomad_device.goplugin.tls import KeyPair, cert_from_handshake, generate_keypair
from nomad_device.goplugin.tlsproxy import TLSBridge
from nomad_device.model import Mount
from nomad_device.proto import base_pb2, base_pb2_grpc


@pytest.mark.parametrize("network", ["unix", "tcp"])
def test_python_host_automtls_to_sdk_plugin(launch: Callable[..., Any], network: str) -> None:
    env = dict(os.environ, GOPLUGIN_PY_NETWORK=network)
    launched = launch(auto_mtls=True, env=env)
    client = launched.client
    assert client.reattach_config.network == network
    assert client.reattach_config.server_cert_pem is not None
    assert client.info().name == "sdk-test"
    client.set_config(b"")
    with client.fingerprint() as stream:
        (group,) = stream.next(10)
    assert [d.id for d in group.devices] == ["dev0", "dev1"]
    reservation = client.reserve(["dev1"])
    assert reservation.mounts == (Mount("/dev/sdk/dev1", "/tmp/sdk/dev1"),)
    with OwnTime(client.process.pid) as own:  # "promptly": in the plugin's own time
        result = client.process.kill(grace=30)  # a grace that only a hang runs out
    assert result.outcome == "graceful", result
    assert own.seconds < 1.0, (result, own.seconds)


@pytest.fixture
def sdk_plugin_with_cert() -> Iterator[Callable[[KeyPair], HandshakeLine]]:
    """Start the SDK plugin with PLUGIN_CLIENT_CERT set to a given pair's cert."""
    started: list[subprocess.Popen[bytes]] = []

    def start(pair: KeyPair) -> HandshakeLine:
        env = dict(os.environ)
        env[NOMAD_HANDSHAKE.magic_cookie_key] = NOMAD_HANDSHAKE.magic_cookie_value
        env["PLUGIN_PROTOCOL_VERSIONS"] = "2"
        env["PLUGIN_CLIENT_CERT"] = pair.cert_pem.decode()
        proc = subprocess.Popen(
            [sys.executable, str(SDK_PLUGIN)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        started.append(proc)
        assert proc.stdout is not None
        return HandshakeLine.parse(proc.stdout.readline().decode())

    yield start
    for proc in started:
        proc.kill()
        proc.wait(10)


def _plugin_name(address: str, timeout: float) -> str:
    channel = grpc.insecure_channel(f"unix:{address}")
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        info = base_pb2_grpc.BasePluginStub(channel).PluginInfo(
            base_pb2.PluginInfoRequest(), timeout=timeout
        )
        return str(info.name)
    finally:
        channel.close()


def test_bridge_reaches_sdk_plugin(
    sdk_plugin_with_cert: Callable[[KeyPair], HandshakeLine],
) -> None:
    pair = generate_keypair()
    line = sdk_plugin_with_cert(pair)
    with TLSBridge(line.network, line.address, cert_from_handshake(line.cert), pair) as bridge:
        assert _plugin_name(bridge.address, 10) == "sdk-test"
    assert not os.path.exists(bridge.address)


def test_plugin_refuses_a_host_with_another_certificate(
    sdk_plugin_with_cert: Callable[[KeyPair], HandshakeLine],
) -> None:
    line = sdk_plugin_with_cert(generate_keypair())
    stranger = generate_keypair()
    with (
        TLSBridge(line.network, line.address, cert_from_handshake(line.cert), stranger) as bridge,
        pytest.raises(grpc.FutureTimeoutError),
    ):
        _plugin_name(bridge.address, 1.5)


def test_host_refuses_a_plugin_with_another_certificate(
    sdk_plugin_with_cert: Callable[[KeyPair], HandshakeLine],
) -> None:
    pair = generate_keypair()
    line = sdk_plugin_with_cert(pair)
    impostor = generate_keypair().cert_pem  # not what the handshake published
    with (
        TLSBridge(line.network, line.address, impostor, pair) as bridge,
        pytest.raises(grpc.FutureTimeoutError),
    ):
        _plugin_name(bridge.address, 1.5)


def test_bad_client_cert_env_is_a_clear_error() -> None:
    env = dict(os.environ)
    env[NOMAD_HANDSHAKE.magic_cookie_key] = NOMAD_HANDSHAKE.magic_cookie_value
    env["PLUGIN_PROTOCOL_VERSIONS"] = "2"
    env["PLUGIN_CLIENT_CERT"] = "not a certificate"
    proc = subprocess.run(
        [sys.executable, str(SDK_PLUGIN)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert "PLUGIN_CLIENT_CERT is not a PEM certificate" in proc.stderr
