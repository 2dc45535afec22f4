"""Which exceptions become which gRPC status, over the real wire.

Only the SDK's refusals (``InvalidArgument``, config-decoding errors) and an
author's ``DevicePluginError`` subclasses choose a status; anything else from
author code is a bug: INTERNAL, with a short message, and a logged traceback.
"""

from __future__ import annotations

import sys

import grpc
import msgpack
import pytest
from support import PLUGINS
from support.processes import Launched, Launcher

from nomad_device.config import config_spec
from nomad_device.errors import DevicePluginError, InvalidArgument
from nomad_device.host import CallError
from nomad_device.wire import cty, hclspec

ERRORS_PLUGIN = PLUGINS / "errors_plugin.py"


def _plugin(launch: Launcher, *args: str) -> Launched:
    return launch([sys.executable, str(ERRORS_PLUGIN), *args])


def _config(mode: str) -> bytes:
    sys.path.insert(0, str(ERRORS_PLUGIN.parent))
    try:
        from errors_plugin import Config
    finally:
        sys.path.pop(0)
    return cty.marshal({"mode": mode}, hclspec.implied_type(config_spec(Config)))


def _fails(call: object, *args: object) -> CallError:
    with pytest.raises(CallError) as info:
        call(*args)  # type: ignore[operator]
    return info.value


def _logged(plugin: Launched, start: str, needle: str) -> None:
    entries = plugin.wait_for_log(lambda e: e.message.startswith(start))
    assert entries, plugin.messages()
    assert entries[0].level == "error"
    assert needle in str(entries[0].fields["traceback"])


@pytest.mark.parametrize(
    ("command", "exception"),
    [
        ("!value", "ValueError: a plain ValueError from reserve"),
        ("!json", "JSONDecodeError: Expecting value"),
        ("!unicode", "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff"),
    ],
)
def test_value_errors_from_author_code_are_internal_and_logged(
    command: str, exception: str, launch: Launcher
) -> None:
    plugin = _plugin(launch)
    error = _fails(plugin.client.reserve, [command])
    assert error.code == grpc.StatusCode.INTERNAL
    assert error.details.startswith(f"Reserve failed: {exception}")
    assert len(error.details) <= 300
    _logged(plugin, "Reserve failed", exception.split(":")[0])


def test_sdk_refusals_and_author_codes_keep_their_status(launch: Launcher) -> None:
    plugin = _plugin(launch)
    error = _fails(plugin.client.reserve, ["!busy"])
    assert (error.code, error.details) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "all slots taken")
    refused = _fails(plugin.client.set_config, _config("refuse"))
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.details == "SetConfig failed: mode: refused on purpose"
    undecodable = _fails(plugin.client.set_config, msgpack.packb({"mode": True}))
    assert undecodable.code == grpc.StatusCode.INVALID_ARGUMENT
    assert undecodable.details.startswith("SetConfig failed: mode: ")
    assert [e for e in plugin.logs if e.level == "error"] == []


@pytest.mark.parametrize(
    ("mode", "exception"),
    [("json", "JSONDecodeError"), ("value", "ValueError")],
)
def test_configure_bugs_are_internal_and_logged(
    mode: str, exception: str, launch: Launcher
) -> None:
    """Only InvalidArgument refuses a config; a ValueError in configure() is a bug."""
    plugin = _plugin(launch)
    error = _fails(plugin.client.set_config, _config(mode))
    assert error.code == grpc.StatusCode.INTERNAL
    assert error.details.startswith(f"SetConfig failed: {exception}: ")
    _logged(plugin, "SetConfig failed", exception)
    plugin.client.set_config(_config("ok"))  # the plugin is fine afterwards


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("!none", "reserve() returned a NoneType, not a Reservation"),
        ("!badenv", "env['A'] must be a str, not int"),
        ("!surrogate", "mount 0: host path '/dev/\\udcff' is not valid UTF-8"),
    ],
)
def test_bad_reservations_are_internal_with_the_reason(
    command: str, problem: str, launch: Launcher
) -> None:
    plugin = _plugin(launch)
    error = _fails(plugin.client.reserve, [command])
    assert error.code == grpc.StatusCode.INTERNAL
    assert problem in error.details
    assert plugin.client.reserve(["e0"]).envs == {"DEVICES": "e0"}


def test_bad_plugin_info_is_internal(launch: Launcher) -> None:
    plugin = _plugin(launch, "badinfo")
    error = _fails(plugin.client.info)
    assert error.code == grpc.StatusCode.INTERNAL
    assert "version must be a string, not NoneType" in error.details
    assert plugin.client.health() == "SERVING"


def test_bad_config_schema_is_internal(launch: Launcher) -> None:
    plugin = _plugin(launch, "badschema")
    error = _fails(plugin.client.schema_proto)
    assert error.code == grpc.StatusCode.INTERNAL
    assert error.details.startswith("ConfigSchema failed: config_schema() returned a schema")
    _logged(plugin, "ConfigSchema failed", "not a spec")


def test_misspelt_code_fails_at_class_definition() -> None:
    with pytest.raises(TypeError, match="'INVALID_ARGUMNT' is not a gRPC status code name"):

        class Wrong(InvalidArgument):
            code = "INVALID_ARGUMNT"

    with pytest.raises(TypeError, match="is not a gRPC status code name"):

        class NotEvenText(DevicePluginError):
            code = grpc.StatusCode.NOT_FOUND  # type: ignore[assignment]

    class Fine(DevicePluginError):
        code = "ABORTED"

    assert Fine("x").code == "ABORTED"


def test_status_code_names_are_grpcs() -> None:
    from nomad_device.errors import STATUS_CODES

    assert {c.name for c in grpc.StatusCode} - {"OK"} == STATUS_CODES
