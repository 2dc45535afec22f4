"""The SDK's Python host client against a plugin served by the real go-plugin
server (interop/cmd/goplugin: every file in a directory is a device)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import msgpack
import pytest
from support.processes import OwnTime

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.hclog import HclogEntry
from nomad_device.host import CallError, DevicePluginClient
from nomad_device.model import Mount
from nomad_device.proto import base_pb2, base_pb2_grpc, device_pb2, device_pb2_grpc

pytestmark = [pytest.mark.interop, pytest.mark.timeout(900)]

COOKIE = (
    "NOMAD_PLUGIN_MAGIC_COOKIE",
    "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
)

LaunchGo = Callable[..., tuple[DevicePluginClient, list[HclogEntry]]]

#: Why the Python host cannot yet use AutoMTLS with a Go plugin.


@pytest.fixture
def device_dir(tmp_path: Path) -> Path:
    d = tmp_path / "devices"
    d.mkdir()
    (d / "alpha").write_bytes(b"12345")
    (d / "beta").write_bytes(b"")
    (d / "subdir").mkdir()  # not a regular file: not a device
    return d


def config_bytes(**values: str) -> bytes:
    """cty msgpack of the config object: a map with sorted keys."""
    packed: bytes = msgpack.packb(dict(sorted(values.items())))
    return packed


@pytest.fixture
def launch_go(goplugin: str) -> Iterator[LaunchGo]:
    started: list[DevicePluginClient] = []

    def launch(
        *, auto_mtls: bool = False, cwd: str | None = None, start_timeout: float = 10
    ) -> tuple[DevicePluginClient, list[HclogEntry]]:
        logs: list[HclogEntry] = []
        client = DevicePluginClient.launch(
            [goplugin],
            on_log=logs.append,
            start_timeout=start_timeout,  # also the connect deadline
            auto_mtls=auto_mtls,
            cwd=cwd,
        )
        started.append(client)
        return client, logs

    yield launch
    for client in started:
        client.kill()


def _drive(client: DevicePluginClient, logs: list[HclogEntry], device_dir: Path) -> None:
    info = client.info()
    assert (info.name, info.version, info.api_versions, info.type) == (
        "go-files",
        "0.2.0",
        ("v0.1.0",),
        3,
    )
    spec = client.schema_proto()
    assert sorted(spec.object.attributes) == ["dir", "list_period"]
    period = spec.object.attributes["list_period"].default
    assert period.primary.Attr.name == "list_period"
    assert period.primary.Attr.type == "string"
    assert period.default.literal.value == '"5s"'

    client.set_config(config_bytes(dir=str(device_dir), list_period="1s"))

    with client.fingerprint() as stream:
        (group,) = stream.next(10)
        assert (group.vendor, group.type, group.name) == ("interop", "file", "gofile")
        assert [d.id for d in group.devices] == ["alpha", "beta"]
        assert all(d.healthy for d in group.devices)
        assert group.attributes["dir"].value == str(device_dir)
        assert group.attributes["files"].value == 2
        # A new file is a new device, announced with the full set.
        (device_dir / "gamma").write_bytes(b"x")
        (group,) = stream.next(10)
        assert [d.id for d in group.devices] == ["alpha", "beta", "gamma"]

    reservation = client.reserve(["alpha", "gamma"])
    assert dict(reservation.envs) == {"GOFILE_DEVICES": "alpha,gamma"}
    assert reservation.mounts == (
        Mount("/dev/gofile/alpha", str(device_dir / "alpha"), read_only=True),
        Mount("/dev/gofile/gamma", str(device_dir / "gamma"), read_only=True),
    )
    with pytest.raises(CallError) as unknown:
        client.reserve(["nope"])
    assert unknown.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "nope" in unknown.value.details

    with client.stats(0.2) as stats:
        (group_stats,) = stats.next(10)
        assert sorted(group_stats.instance_stats) == ["alpha", "beta", "gamma"]
        alpha = group_stats.instance_stats["alpha"].summary
        assert alpha is not None
        assert (alpha.int_numerator, alpha.unit) == (5, "bytes")

    with OwnTime(client.process.pid) as own:  # "promptly": in the plugin's own time
        result = client.process.kill(grace=30)  # a grace that only a hang runs out
    assert result.outcome == "graceful", result
    assert own.seconds < 1.0, (result, own.seconds)

    # The Go plugin's hclog JSON lines parse, with their levels.
    configured = [e for e in logs if e.message == "configured"]
    assert configured, [(e.level, e.message) for e in logs]
    assert configured[0].level == "info"
    assert configured[0].fields["dir"] == str(device_dir)
    assert not [e for e in logs if e.raw], [e.message for e in logs if e.raw]


def test_python_host_drives_go_plugin(launch_go: LaunchGo, device_dir: Path) -> None:
    client, logs = launch_go()
    _drive(client, logs, device_dir)


def test_python_host_drives_go_plugin_with_automtls(launch_go: LaunchGo, device_dir: Path) -> None:
    client, logs = launch_go(auto_mtls=True)
    _drive(client, logs, device_dir)


@pytest.mark.parametrize("auto_mtls", [False, True], ids=["plaintext", "automtls"])
def test_go_plugin_defaults_from_empty_config(
    launch_go: LaunchGo, device_dir: Path, auto_mtls: bool
) -> None:
    """Empty SetConfig bytes: dir "." (the plugin's working directory)."""
    client, _ = launch_go(auto_mtls=auto_mtls, cwd=str(device_dir))
    client.set_config(b"")
    with client.fingerprint() as stream:
        (group,) = stream.next(10)
    assert [d.id for d in group.devices] == ["alpha", "beta"]
    assert client.kill().outcome == "graceful"


def test_go_plugin_rejects_bad_config(launch_go: LaunchGo, tmp_path: Path) -> None:
    client, _ = launch_go()
    with pytest.raises(CallError) as bad_period:
        client.set_config(config_bytes(dir=str(tmp_path), list_period="soon"))
    assert bad_period.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "list_period" in bad_period.value.details
    with pytest.raises(CallError) as missing:
        client.set_config(config_bytes(dir=str(tmp_path / "absent")))
    assert missing.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert client.kill().outcome == "graceful"


def test_tls_bridge_reaches_go_plugin_with_automtls(goplugin: str, device_dir: Path) -> None:
    """What the Python host needs for AutoMTLS with a Go plugin: OpenSSL.

    Launches the Go plugin with PLUGIN_CLIENT_CERT by hand and talks to it
    through tlsproxy.TLSBridge with a plaintext gRPC channel.
    """
    from nomad_device.goplugin.handshake import HandshakeLine
    from nomad_device.goplugin.tls import cert_from_handshake, generate_keypair
    from nomad_device.goplugin.tlsproxy import TLSBridge
    from nomad_device.proto import goplugin_controller_pb2, goplugin_controller_pb2_grpc

    pair = generate_keypair()
    env = dict(os.environ)
    env[NOMAD_HANDSHAKE.magic_cookie_key] = NOMAD_HANDSHAKE.magic_cookie_value
    env["PLUGIN_PROTOCOL_VERSIONS"] = "2"
    env["PLUGIN_CLIENT_CERT"] = pair.cert_pem.decode()
    proc = subprocess.Popen([goplugin], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = HandshakeLine.parse(proc.stdout.readline().decode())
        assert line.cert, "go-plugin's server published no certificate"
        with TLSBridge(line.network, line.address, cert_from_handshake(line.cert), pair) as bridge:
            channel = grpc.insecure_channel(f"unix:{bridge.address}")
            try:
                info = base_pb2_grpc.BasePluginStub(channel).PluginInfo(
                    base_pb2.PluginInfoRequest(), timeout=10
                )
                assert info.name == "go-files"
                base_pb2_grpc.BasePluginStub(channel).SetConfig(
                    base_pb2.SetConfigRequest(
                        msgpack_config=config_bytes(dir=str(device_dir)),
                        plugin_api_version="v0.1.0",
                    ),
                    timeout=10,
                )
                stream = device_pb2_grpc.DevicePluginStub(channel).Fingerprint(
                    device_pb2.FingerprintRequest(), timeout=10
                )
                # The first message only (closing the channel ends the call).
                ids = []
                for message in stream:
                    ids = [d.ID for d in message.device_group[0].devices]
                    break
                assert ids == ["alpha", "beta"]
                # go-plugin's server stops before it answers; its client
                # ignores the error, and so do we.
                with contextlib.suppress(grpc.RpcError):
                    goplugin_controller_pb2_grpc.GRPCControllerStub(channel).Shutdown(
                        goplugin_controller_pb2.Empty(), timeout=10
                    )
            finally:
                channel.close()
        assert proc.wait(5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
