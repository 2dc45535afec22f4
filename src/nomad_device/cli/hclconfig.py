"""The launcher's old home of the agent-file reader, now :mod:`nomad_device.agentconfig.agentfile`.

The reader moved below the testing layer so that the conformance suite reads
``--config agent.hcl`` exactly as the launcher does; these names stay for
existing imports.
"""

from nomad_device.agentconfig.agentfile import (
    CLI_EXTRA_HINT,
    AgentFile,
    ConfigFileError,
    MissingExtraError,
    PluginBlock,
    load_json_config,
    parse_agent_file,
    parse_agent_text,
)

__all__ = [
    "CLI_EXTRA_HINT",
    "AgentFile",
    "ConfigFileError",
    "MissingExtraError",
    "PluginBlock",
    "load_json_config",
    "parse_agent_file",
    "parse_agent_text",
]
