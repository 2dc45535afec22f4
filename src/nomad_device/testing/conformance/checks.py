"""What the conformance suite checks, and why each check matters to Nomad.

Every :class:`Check` names one expectation a Nomad client has of a device
plugin (see the protocol notes, sections 1-6), explains what goes wrong in
Nomad when it is not met, and says how to fix it. The runner produces one
:class:`CheckResult` per check.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["CHECKS", "Check", "CheckResult", "Status", "check"]


class Status(enum.Enum):
    """A check's outcome. Only ``FAIL`` makes the suite fail."""

    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    """One expectation of a Nomad client."""

    id: str
    title: str
    why: str
    fix: str
    section: str


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check against one plugin, with what was observed."""

    check: Check
    status: Status
    summary: str
    evidence: tuple[str, ...] = field(default=())
    #: Advice for what was observed, when the check's general ``fix`` does not fit.
    advice: str = ""

    @property
    def id(self) -> str:
        return self.check.id

    @property
    def fix(self) -> str:
        return self.advice or self.check.fix

    @property
    def failed(self) -> bool:
        return self.status is Status.FAIL


#: Every check the suite runs, in the order it reports them.
CHECKS: tuple[Check, ...] = (
    Check(
        "cookie-refusal",
        "Refuses to run without Nomad's magic cookie",
        "Nomad sets NOMAD_PLUGIN_MAGIC_COOKIE when it launches a plugin. Run any other way "
        "(by an operator, by a script), a plugin should explain itself on stderr and exit 1 "
        "instead of listening on a socket nobody will ever connect to or printing a handshake "
        "into someone's terminal.",
        "Check the cookie before doing anything else; on a mismatch print a one-line "
        "explanation to stderr and exit with status 1. The SDK's serve() and go-plugin's "
        "plugin.Serve() both do this for you: make sure nothing runs before them.",
        "2",
    ),
    Check(
        "handshake",
        "Prints a valid handshake line first on stdout",
        "Nomad reads the plugin's first stdout line as the go-plugin handshake "
        "(CORE|APP|NETWORK|ADDRESS|PROTOCOL|CERT). Anything printed before it, a malformed "
        "line, an app version other than 2, a protocol other than grpc or an unrequested "
        "certificate makes the agent refuse the plugin -- and a failed fingerprint launch "
        "stops the whole agent from starting.",
        "Print nothing on stdout before serving (no banners, no print() at import time, no "
        "library chatter); let serve() write the handshake. Start listening before printing "
        "it, speak gRPC, and leave the certificate field empty unless PLUGIN_CLIENT_CERT is "
        "set.",
        "2",
    ),
    Check(
        "stdout-quiet",
        "Writes nothing to stdout after the handshake",
        "After the handshake line Nomad reads stdout only to throw it away: whatever a plugin "
        "prints there is lost, and so is any diagnostic an operator would have needed.",
        "Log through hclog on stderr instead (Python's logging in the SDK). Do not write to "
        "the original stdout file descriptor; the SDK routes print() and child-process output "
        "into the log for you.",
        "2",
    ),
    Check(
        "health",
        "Reports SERVING on the 'plugin' health service",
        "go-plugin hosts ping grpc.health.v1.Health/Check with service 'plugin' to see "
        "whether the plugin is alive. Plugins built on go-plugin or this SDK register it "
        "automatically; a plugin without it looks dead to hosts that ping.",
        "Register the gRPC health service and set service 'plugin' to SERVING (the SDK's "
        "serve() and go-plugin's plugin.Serve() do).",
        "3",
    ),
    Check(
        "plugin-info",
        "PluginInfo: device type, API v0.1.0, semver version, a name",
        "Nomad keys plugins by PluginInfo.name, skips plugins whose plugin_api_versions lack "
        "v0.1.0, loads a plugin of another type as something else entirely, and aborts agent "
        "start when plugin_version does not parse as a version.",
        "Answer PluginInfo with type DEVICE, plugin_api_versions ['v0.1.0'], a semantic "
        "version such as '0.1.0' and a non-empty name (the SDK builds this from your "
        "class's name and version).",
        "5",
    ),
    Check(
        "config-schema",
        "ConfigSchema answers with a schema Nomad can convert",
        "At agent start Nomad converts the hclspec tree into a decoder for the operator's "
        "config block. An unknown type expression, a broken Literal or an incomplete node "
        "fails that conversion and the agent refuses to start.",
        "Return a complete hclspec tree rooted at an Object; type expressions like string, "
        "number, bool, list(string), map(number); Literal values that are constant HCL "
        "expressions (strings quoted: '\"info\"').",
        "5",
    ),
    Check(
        "schema-safe",
        "No config can make the schema crash a Nomad agent",
        "Nomad decodes labelled blocks (a BlockMap) into one cty map, and go-cty panics when "
        "the map's elements differ in type: the agent dies, with every job on the node. A "
        "Default whose Literal has a type of its own ([] is an empty tuple, {} an empty "
        "object, null has none) does that as soon as one labelled block sets the setting and "
        "another does not; a setting of type any inside a block map crashes the agent on "
        "every config, and any as a BlockAttrs element type on mixed values.",
        "Give list, set and map settings inside labelled blocks no Literal default (leave "
        "them optional and apply the default in the plugin, as the SDK's dataclass schemas "
        "do), make every Literal's type the attribute's own, and use concrete types, not "
        "any, inside block maps and block attributes. The failing config is printed.",
        "5",
    ),
    Check(
        "set-config",
        "SetConfig accepts the config Nomad would send",
        "With no config block Nomad still decodes an empty body against the schema, applies "
        "the Default literals and sends the result to SetConfig -- twice in a validation "
        "launch, once more in the long-lived one. An error here is shown to the operator and "
        "aborts agent start.",
        "Make every optional setting decode from its default: match the types of Default "
        "literals to their attributes, accept null for absent optional blocks and [] for "
        "absent block lists, and give precise error messages for genuinely bad values.",
        "5",
    ),
    Check(
        "first-fingerprint",
        "Sends the first Fingerprint message promptly",
        "The agent waits for every device plugin's first fingerprint before registering the "
        "node (up to 50 s), and starts collecting stats only after it. A slow first message "
        "delays every agent start; no message blocks the node for the full wait.",
        "Send the current state at once when Fingerprint is called -- even an empty list of "
        "groups -- and update it later. Do slow discovery in the background, not before the "
        "first message.",
        "5",
    ),
    Check(
        "device-groups-valid",
        "Every fingerprinted device group is valid",
        "Nomad validates each message: vendor, type and name set, every device ID non-empty, "
        "each attribute holding exactly one value with a known unit. One invalid group "
        "removes all of the plugin's devices from the node and kills the plugin until the "
        "agent restarts.",
        "Fill vendor, type and name; give every device a stable, non-empty ID; put units only "
        "on numeric attributes and use the units Nomad knows (MiB, GB, MHz, W, MB/s ...). The "
        "SDK's DeviceGroup.validate() applies the same rules.",
        "5",
    ),
    Check(
        "fingerprint-stream-open",
        "Keeps the Fingerprint stream open",
        "Any end of the Fingerprint stream, and any error on it, removes the plugin's devices "
        "from the node and kills the plugin until the agent restarts: only a crashed process "
        "is relaunched.",
        "Never return from the Fingerprint handler and never fail it for a transient "
        "problem: keep the last known state, log the problem and retry. (The SDK's engine does "
        "this for detect(); a raw fingerprint_stream is restarted if it ends.)",
        "5",
    ),
    Check(
        "stats-interval",
        "Stats accepts interval 0 and reports about once a second",
        "Nomad passes its telemetry collection interval to Stats; zero means one second. A "
        "plugin that rejects it gets no stats collected at all, and one that takes zero "
        "literally spins a CPU sending messages.",
        "Treat a zero (or missing) collection interval as 1 s; send the first statistics at "
        "once, then one message per interval.",
        "5",
    ),
    Check(
        "stats-stream-open",
        "Keeps the Stats stream open",
        "When the Stats stream ends Nomad stops collecting device stats for good; when it "
        "fails, Nomad retries only after a back-off of 5 s growing to 30 min.",
        "Keep the Stats stream open until the host cancels it; report a failed measurement "
        "by skipping it (and logging), not by ending or failing the stream.",
        "5",
    ),
    Check(
        "reserve-unknown-id",
        "Reserve with an unknown device ID is refused, not a crash",
        "Reserve runs when an allocation is placed. A plugin that crashes on an unexpected "
        "ID takes every device of the node down with it until it is relaunched, and the "
        "allocation fails without a useful message.",
        "Check the requested IDs against what you reported and answer unknown ones with a "
        "gRPC error such as InvalidArgument or NotFound naming the ID (raise the SDK's "
        "InvalidArgument/NotFound).",
        "5",
    ),
    Check(
        "reserve-empty",
        "Reserve with an empty ID list gets an answer, not a crash",
        "Reserve requests come from the scheduler; a plugin must survive odd requests and "
        "keep serving the node's other allocations.",
        "Handle an empty list explicitly: an empty reservation or an InvalidArgument error.",
        "5",
    ),
    Check(
        "sigint-ignored",
        "Ignores SIGINT",
        "Ctrl-C in the agent's terminal reaches the whole process group; the agent decides "
        "when plugins stop. A plugin that dies on SIGINT loses its devices while the agent "
        "shuts down in order (go-plugin plugins ignore SIGINT).",
        "Ignore SIGINT (signal.signal(signal.SIGINT, signal.SIG_IGN), or let the SDK's "
        "serve() handle it); exit on Shutdown, or on SIGTERM.",
        "6",
    ),
    Check(
        "shutdown",
        "Exits within 2 s of the Shutdown call",
        "Nomad kills a plugin by calling GRPCController/Shutdown, waiting 2 s, then sending "
        "SIGKILL. A plugin that is still running after 2 s loses whatever cleanup it had "
        "left and slows every agent start (plugins are launched three times each).",
        "Answer Shutdown at once, stop serving, cancel background work and exit 0 well within "
        "a second; do not wait for blocked threads.",
        "6",
    ),
    Check(
        "stable-ids",
        "Reports the same device IDs after a restart",
        "Allocations refer to device IDs. When the agent restarts it relaunches the plugin; "
        "IDs that change (random UUIDs, enumeration order, PIDs) orphan running allocations "
        "and confuse the scheduler.",
        "Derive IDs from something that identifies the hardware: a serial number, a PCI "
        "address, a stable path -- never from a counter, a random value or the process.",
        "5",
    ),
    Check(
        "hclog-stderr",
        "Every stderr line is hclog JSON",
        "Nomad reads a plugin's stderr as hclog JSON lines with @level, @message and "
        "@timestamp. Any other line is logged at debug level, which the agent's default "
        "level hides: tracebacks and warnings become invisible to operators. A non-string "
        "level, message or timestamp crashes the host's log reader.",
        "Log only through hclog (Go) or the SDK's logging (Python); never write plain text "
        "to the original stderr descriptor, and have child processes' output captured.",
        "4",
    ),
)

_BY_ID = {c.id: c for c in CHECKS}


def check(check_id: str) -> Check:
    """The check with this id (KeyError for an unknown one)."""
    return _BY_ID[check_id]
