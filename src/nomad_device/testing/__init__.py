"""Test doubles, harnesses and the conformance suite for plugin authors.

- :class:`MockDevicePlugin` -- a plugin whose every answer is a settable function;
- static builders (:func:`static_fingerprint`, :func:`static_reservation`,
  :func:`static_stats` ...) -- canned answers for those functions;
- :class:`InProcessHarness` -- serve a plugin object in this process over real gRPC;
- :class:`SubprocessHarness` -- launch a plugin executable as Nomad does;
- :func:`defaults_only_config` -- the SetConfig bytes Nomad sends with no config block;
  :func:`config_from_agent_file` -- those for an agent file, read as the agent reads it;
- :func:`run_conformance` -- the conformance suite (also ``nomad-device-conformance``);
- :class:`FakeNomadAgent` -- a Nomad agent's HTTP API, for plugins that follow releases.

Names are imported on first use, so ``import nomad_device.testing`` stays cheap
(pytest loads this package's plugin in every run).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nomad_device.agentconfig.setconfig import (
        AgentCrash,
        ConfigBodyError,
        ConfigRequired,
        config_from_agent_file,
        config_from_json,
        defaults_only_config,
    )
    from nomad_device.testing.conformance import (
        ConformanceReport,
        Status,
        SuiteOptions,
        run_conformance,
    )
    from nomad_device.testing.harness import InProcessHarness, SubprocessHarness
    from nomad_device.testing.mock import MockCall, MockDevicePlugin
    from nomad_device.testing.nomadagent import FakeNomadAgent
    from nomad_device.testing.static import (
        TEST_SPEC,
        device_group,
        error_fingerprint,
        error_reserve,
        error_stats,
        group_stats,
        noop_configure,
        static_fingerprint,
        static_fingerprint_stream,
        static_info,
        static_reservation,
        static_schema,
        static_stats,
        static_stats_stream,
    )

__all__ = [
    "TEST_SPEC",
    "AgentCrash",
    "ConfigBodyError",
    "ConfigRequired",
    "ConformanceReport",
    "FakeNomadAgent",
    "InProcessHarness",
    "MockCall",
    "MockDevicePlugin",
    "Status",
    "SubprocessHarness",
    "SuiteOptions",
    "config_from_agent_file",
    "config_from_json",
    "defaults_only_config",
    "device_group",
    "error_fingerprint",
    "error_reserve",
    "error_stats",
    "group_stats",
    "noop_configure",
    "run_conformance",
    "static_fingerprint",
    "static_fingerprint_stream",
    "static_info",
    "static_reservation",
    "static_schema",
    "static_stats",
    "static_stats_stream",
]

_HOME = {
    "ConformanceReport": "nomad_device.testing.conformance",
    "Status": "nomad_device.testing.conformance",
    "SuiteOptions": "nomad_device.testing.conformance",
    "run_conformance": "nomad_device.testing.conformance",
    "AgentCrash": "nomad_device.agentconfig.setconfig",
    "ConfigBodyError": "nomad_device.agentconfig.setconfig",
    "ConfigRequired": "nomad_device.agentconfig.setconfig",
    "config_from_agent_file": "nomad_device.agentconfig.setconfig",
    "config_from_json": "nomad_device.agentconfig.setconfig",
    "defaults_only_config": "nomad_device.agentconfig.setconfig",
    "InProcessHarness": "nomad_device.testing.harness",
    "SubprocessHarness": "nomad_device.testing.harness",
    "MockCall": "nomad_device.testing.mock",
    "MockDevicePlugin": "nomad_device.testing.mock",
    "FakeNomadAgent": "nomad_device.testing.nomadagent",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_HOME.get(name, f"{__name__}.static"))
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
