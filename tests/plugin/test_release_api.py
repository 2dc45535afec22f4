"""The agent's API as a plugin reaches it (plugin/nomadapi.py): where, how, with what token.

In process, against the fake agent: the block's defaults from the
environment, TLS with a client certificate and a server name, a unix socket,
no proxy whatever the environment says, and the token file's trust rules
(a token a local user could write or read is never used). The state
directory's rules are here too.
"""

from __future__ import annotations

import os
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fake_nomad import make_certs  # the check --nomad tests' certificates

from nomad_device.errors import InvalidArgument
from nomad_device.plugin.ledger import Record
from nomad_device.plugin.nomadapi import (
    AgentClient,
    ApiError,
    ApiNotFound,
    ApiRefused,
    NomadConfig,
    agent_settings,
    read_token,
)
from nomad_device.plugin.releasestate import StateFile
from nomad_device.testing.nomadagent import FakeNomadAgent


@pytest.fixture
def agent() -> Iterator[FakeNomadAgent]:
    fake = FakeNomadAgent(heartbeat=0.1)
    yield fake
    fake.stop()


def client(address: str, env: dict[str, str] | None = None, **block: object) -> AgentClient:
    settings = agent_settings(NomadConfig(address=address, **block), "p", env or {})  # type: ignore[arg-type]
    return AgentClient(settings, read_token(settings))


def test_defaults_come_from_the_environment_the_agent_gave() -> None:
    env = {
        "NOMAD_ADDR": "https://nomad.local:4646",
        "NOMAD_TOKEN": "from-env",
        "NOMAD_CACERT": "/etc/nomad/ca.pem",
        "NOMAD_CLIENT_CERT": "/etc/nomad/cli.pem",
        "NOMAD_CLIENT_KEY": "/etc/nomad/cli-key.pem",
        "NOMAD_TLS_SERVER_NAME": "client.global.nomad",
        "NOMAD_SKIP_VERIFY": "t",
    }
    s = agent_settings(NomadConfig(), "acme", env)
    assert (s.scheme, s.host, s.port) == ("https", "nomad.local", 4646)
    assert (s.ca_file, s.cert_file, s.key_file) == (
        "/etc/nomad/ca.pem",
        "/etc/nomad/cli.pem",
        "/etc/nomad/cli-key.pem",
    )
    assert s.server_name == "client.global.nomad" and s.skip_verify
    assert s.state_dir == "/var/lib/nomad-device/acme"
    assert read_token(s) == "from-env" and "from-env" not in repr(s)
    # The block wins; a token_file replaces NOMAD_TOKEN altogether.
    s = agent_settings(
        NomadConfig(address="http://[::1]", token_file="/t", tls_skip_verify=False), "", env
    )
    assert (s.host, s.port, s.env_token, s.skip_verify) == ("::1", 80, "", False)
    assert agent_settings(NomadConfig(), "", {}).address == "http://127.0.0.1:4646"


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1:4646", "scheme must be http, https or unix"),
        ("ftp://x", "scheme must be http, https or unix"),
        ("http://user:pw@127.0.0.1", "user information"),
        ("unix://relative.sock", "absolute path"),
        ("http://:4646", "names no host"),
        ("http://127.0.0.1:99999", "is not a URL"),
    ],
)
def test_an_address_that_cannot_work_refuses_the_config(address: str, problem: str) -> None:
    with pytest.raises(InvalidArgument, match=problem):
        agent_settings(NomadConfig(address=address), "p", {})


def test_tls_with_a_client_certificate_and_a_server_name(
    agent: FakeNomadAgent, tmp_path: Path
) -> None:
    certs = make_certs(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs.server_cert, certs.server_key)
    server.load_verify_locations(certs.ca)
    server.verify_mode = ssl.CERT_REQUIRED
    address = agent.start(tls=server)
    tls = {"ca_file": str(certs.ca), "cert_file": str(certs.client_cert),
           "key_file": str(certs.client_key)}  # fmt: skip
    answer, _ = client(address, **tls).get_json("/v1/agent/self")
    assert answer["stats"]["client"]["node_id"] == agent.node_id
    # The name checked (and sent) is the one given, not the address's.
    named, _ = client(address, tls_server_name="server.global.nomad", **tls).get_json(
        "/v1/agent/self"
    )
    assert named["stats"]["client"]["node_id"] == agent.node_id
    with pytest.raises(ApiError, match=r"elsewhere\.nomad"):
        client(address, tls_server_name="elsewhere.nomad", **tls).get_json("/v1/agent/self")
    with pytest.raises(ApiError, match="at https://127"):  # no client certificate
        client(address, ca_file=str(certs.ca)).get_json("/v1/agent/self")
    with pytest.raises(ApiError, match="certificate verify failed"):  # not our CA
        client(address, cert_file=str(certs.client_cert), key_file=str(certs.client_key)).get_json(
            "/v1/agent/self"
        )
    with pytest.raises(ApiError, match="cannot set up TLS"):
        client(address, ca_file=str(tmp_path / "missing.pem")).get_json("/v1/agent/self")


def test_a_unix_socket(agent: FakeNomadAgent, tmp_path: Path) -> None:
    address = agent.start(unix_socket=tmp_path / "http.sock")
    agent.place("a1", [("v", "t", "n", ["0"])])
    answer, headers = client(address).get_json(f"/v1/node/{agent.node_id}/allocations")
    assert [a["ID"] for a in answer] == ["a1"]
    assert int(headers["X-Nomad-Index"]) == answer[0]["ModifyIndex"]


def test_no_proxy_is_ever_used(agent: FakeNomadAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    address = agent.start()
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    env = dict(os.environ)
    answer, _ = client(address, env).get_json("/v1/agent/self")
    assert answer["stats"]["client"]["node_id"] == agent.node_id


def test_answers_are_sorted_by_what_they_mean(agent: FakeNomadAgent) -> None:
    address = agent.start()
    with pytest.raises(ApiNotFound):
        client(address).get_json("/v1/allocation/nope")
    agent.token = "secret"
    with pytest.raises(ApiRefused, match=r"403 Permission denied.*needs agent:read"):
        client(address).get_json("/v1/agent/self")
    agent.stop()
    with pytest.raises(ApiError, match=r"cannot reach Nomad at http://127\.0\.0\.1"):
        client(address).get_json("/v1/agent/self")


def test_a_stream_ends_at_once_when_aborted(agent: FakeNomadAgent) -> None:
    address = agent.start()
    reader = client(address)
    lines: list[bytes] = []
    done = threading.Event()

    def read() -> None:
        try:
            for line in reader.stream("/v1/event/stream", {"topic": "Allocation"}, 60):
                lines.append(line)
        except ApiError:
            pass
        done.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 30
    while len(lines) < 2 and time.monotonic() < deadline:  # heartbeats
        time.sleep(0.01)
    assert lines[:2] == [b"{}\n", b"{}\n"]
    reader.abort()
    assert done.wait(10)


# ------------------------------------------------------------------- the token file


def write_token(path: Path, mode: int = 0o600, text: str = "s3cret\n") -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def settings_for(path: Path) -> object:
    return agent_settings(NomadConfig(token_file=str(path)), "p", {"NOMAD_TOKEN": "env"})


def test_a_token_file_is_read_when_it_may_be_trusted(tmp_path: Path) -> None:
    token = write_token(tmp_path / "token", 0o640)
    assert read_token(settings_for(token)) == "s3cret"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        (0o644, "readable by others"),
        (0o620, "writable by group or others"),
        (0o602, "writable by group or others"),
    ],
)
def test_a_token_file_others_may_touch_is_refused(tmp_path: Path, mode: int, problem: str) -> None:
    token = write_token(tmp_path / "token", mode)
    with pytest.raises(ApiRefused, match=problem) as caught:
        read_token(settings_for(token))  # type: ignore[arg-type]
    assert "s3cret" not in str(caught.value)


def test_a_token_file_that_is_a_link_or_in_an_open_directory_is_refused(tmp_path: Path) -> None:
    token = write_token(tmp_path / "token")
    (tmp_path / "link").symlink_to(token)
    with pytest.raises(ApiRefused, match="symbolic link"):
        read_token(settings_for(tmp_path / "link"))  # type: ignore[arg-type]
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ApiRefused, match="directory that others may write to"):
        read_token(settings_for(write_token(shared / "token")))  # type: ignore[arg-type]
    with pytest.raises(ApiRefused, match="holds no token"):
        read_token(settings_for(write_token(tmp_path / "empty", text="\n")))  # type: ignore[arg-type]
    with pytest.raises(ApiRefused, match="no such file"):
        read_token(settings_for(tmp_path / "missing"))  # type: ignore[arg-type]


def test_a_token_file_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    token = write_token(tmp_path / "token")
    os.chown(token, 65534, -1)
    with pytest.raises(ApiRefused, match="owned by uid 65534"):
        read_token(settings_for(token))  # type: ignore[arg-type]


# ------------------------------------------------------------------ the state directory


def test_the_state_directory_is_made_private_and_others_are_refused(tmp_path: Path) -> None:
    made = StateFile(str(tmp_path / "a" / "state"))
    assert made.prepare()
    assert (tmp_path / "a" / "state").stat().st_mode & 0o777 == 0o700
    made.save({("v", "t", "n", "0"): Record("x", True, 3)})
    assert made.load() == {("v", "t", "n", "0"): Record("x", True, 3)}
    assert (tmp_path / "a" / "state" / "released.json").stat().st_mode & 0o777 == 0o600
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    refused = StateFile(str(open_dir))
    assert not refused.prepare() and "writable by group or others" in refused.problem
    (tmp_path / "link").symlink_to(open_dir)
    assert not StateFile(str(tmp_path / "link")).prepare()


def test_a_plugin_without_a_nomad_block_loads_nothing_of_it() -> None:
    """Start-up cost unchanged when the facility is off (docs/performance.md)."""
    import subprocess

    code = """
import asyncio, sys
from nomad_device.config import encode_config
from nomad_device.plugin.servicer import apply_config
from nomad_device.plugins.generic.config import GenericConfig
from nomad_device.plugins.generic.plugin import GenericDevicePlugin
plugin = GenericDevicePlugin()
asyncio.run(apply_config(plugin, encode_config(GenericConfig())))
assert plugin.held_by() == {} and plugin.cleaning() == {}
print(sorted(m for m in sys.modules if m.startswith(("nomad_device.plugin.", "http."))))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(eval(done.stdout.strip().splitlines()[-1]))
    assert "nomad_device.plugin.nomadapi" in loaded  # the block's dataclass: no I/O, no deps
    assert not loaded & {"nomad_device.plugin.release", "nomad_device.plugin.ledger", "http.client"}
