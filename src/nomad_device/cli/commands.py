"""The launcher's subcommands: launch a plugin as a Nomad client would, then act.

Every command that talks to the plugin follows the client's order of calls:
``PluginInfo``, ``ConfigSchema``, ``SetConfig`` with the config decoded and
encoded exactly as an agent would, then ``Fingerprint`` (``Stats`` and
``Reserve`` only once the first fingerprint has arrived). The plugin is always
killed the way Nomad kills it before the command returns.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from nomad_device.cli import nomadjson, render
from nomad_device.cli.console import Console
from nomad_device.cli.process import SignalGuard, find_program
from nomad_device.constants import DEVICE_API_VERSION
from nomad_device.display import printable
from nomad_device.interpreter import python_command
from nomad_device.model import DeviceGroup, PluginInfo
from nomad_device.wire import hclspec

if TYPE_CHECKING:
    from nomad_device.agentconfig.hcldec import Decoded, JValue
    from nomad_device.cli.session import PluginSession, StreamPump
    from nomad_device.host import DevicePluginClient

# Talking to a plugin (grpc, the host client) and reading agent files are
# imported by the methods that do it: `check` against node files or a cluster
# does neither, and the imports are a fifth of its start-up.

__all__ = ["App", "Failure", "Opened", "Options"]

#: How long a Nomad client waits for every plugin's first fingerprint.
FIRST_FINGERPRINT_WAIT: Final = 50.0
_SEMVER_RE: Final = re.compile(r"v?\d+(?:\.\d+)*(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?\Z")


class Failure(Exception):
    """A failure to report as ``error: <message>`` with an exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Options:
    """Parsed command line (see ``__main__``)."""

    command: str
    plugin: list[str] = field(default_factory=list)
    #: True when the command line gave the plugin arguments (a plugin block's
    #: ``args`` are used only when it did not).
    plugin_args_given: bool = False
    ids: list[str] = field(default_factory=list)
    #: ``-c`` paths (files or directories), merged in order as the agent does.
    config_file: list[str] | None = None
    config_json: str | None = None
    plugin_name: str | None = None
    json: bool = False
    watch: bool = False
    interval: float = 1.0
    count: int = 1
    timeout: float = FIRST_FINGERPRINT_WAIT
    start_timeout: float = 60.0
    log_level: str = "info"
    color: str = "auto"
    keep: bool = False
    #: ``check``: the job file, and where the devices come from besides a plugin.
    job: str | None = None
    node_file: str | None = None
    nomad: bool = False
    variables: list[str] = field(default_factory=list)
    var_files: list[str] = field(default_factory=list)
    enterprise: bool = False


@dataclass
class Opened:
    """A launched, configured plugin."""

    session: PluginSession
    client: DevicePluginClient
    info: PluginInfo
    spec: hclspec.Spec | None
    decoded: Decoded | None = None
    config_bytes: bytes = b""


def info_problems(info: PluginInfo) -> list[str]:
    """Why a Nomad client would refuse or skip this plugin (empty when it would not)."""
    problems = []
    if info.type != 3:
        problems.append(f"plugin type is {info.type}, not device (3)")
    if not info.name:
        problems.append("the plugin has no name")
    if DEVICE_API_VERSION not in info.api_versions:
        problems.append(
            f"API versions {list(info.api_versions)} lack {DEVICE_API_VERSION}: "
            "Nomad skips this plugin"
        )
    if not _SEMVER_RE.match(info.version):
        problems.append(
            f"version {info.version!r} is not a semantic version: Nomad refuses to start"
        )
    return problems


class App:
    """Runs one command; raises :class:`Failure` (or Interrupted) on the way out."""

    def __init__(self, opts: Options, console: Console, guard: SignalGuard) -> None:
        self.opts = opts
        self.console = console
        self.guard = guard
        self.style = console.style
        self.session: PluginSession | None = None
        self.config_body: JValue | None = None
        self.config_origin = "config"
        self.block_label: str | None = None

    # -- plumbing ---------------------------------------------------------------

    def run(self) -> int:
        handler = getattr(self, "cmd_" + self.opts.command.replace("-", "_"))
        try:
            code: int = handler()
            return code
        finally:
            self.close()

    def close(self) -> None:
        if self.session is not None:
            self.session.close()

    def load_config(self) -> None:
        """Read --config / --config-json before launching (a plugin block may add args)."""
        from nomad_device.agentconfig import agentfile

        opts = self.opts
        try:
            if opts.config_json is not None:
                self.config_body = agentfile.load_json_config(opts.config_json)
                self.config_origin = (
                    opts.config_json[1:] if opts.config_json.startswith("@") else "--config-json"
                )
            elif opts.config_file:
                agent = agentfile.parse_agent_paths(opts.config_file)
                block = agent.select(opts.plugin, opts.plugin_name)
                for warning in agent.warnings:
                    self.console.error(
                        self.style.yellow(f"warning: {printable(warning, lines=True)}")
                    )
                self.config_body = block.config
                self.config_origin = block.origin or agent.origin
                self.block_label = block.name
                if block.args and not opts.plugin_args_given:
                    opts.plugin = [*opts.plugin, *block.args]
        except agentfile.ConfigFileError as exc:
            raise Failure(str(exc)) from None

    def launch(self) -> tuple[PluginSession, DevicePluginClient]:
        from nomad_device.cli.session import PluginError, PluginSession, display_name

        if not self.opts.plugin:
            raise Failure("no plugin given: add PLUGIN [ARGS...] or -- PLUGIN [ARGS...]", 2)
        session = PluginSession(
            self.opts.plugin,
            self.console,
            self.guard,
            start_timeout=self.opts.start_timeout,
            log_level=self.opts.log_level,
        )
        self.session = session
        try:
            client = session.start()
        except PluginError as exc:
            text = str(exc)
            if not text.startswith("cannot start plugin"):
                text = f"cannot start plugin {display_name(self.opts.plugin)!r}: {text}"
            raise Failure(text) from None
        return session, client

    def fail_call(self, exc: BaseException, doing: str) -> Failure:
        assert self.session is not None
        return Failure(f"{doing}: {self.session.explain(exc)}")

    def open(self, *, configure: bool = True) -> Opened:
        """Launch, then PluginInfo, ConfigSchema and (unless told not to) SetConfig."""
        from nomad_device.host import CallError

        self.load_config()
        session, client = self.launch()
        try:
            info = client.info()
            spec_pb = client.schema_proto()
        except CallError as exc:
            raise self.fail_call(exc, "the plugin did not answer") from None
        for problem in info_problems(info):
            self.console.error(self.style.yellow(f"warning: {printable(problem, lines=True)}"))
        spec = None if spec_pb.WhichOneof("block") is None else hclspec.from_proto(spec_pb)
        if spec is not None:
            self.warn_unsafe(spec)
        opened = Opened(session, client, info, spec)
        if configure:
            opened.decoded, opened.config_bytes = self.encode_config(spec)
            try:
                client.set_config(opened.config_bytes)
            except CallError as exc:
                if session.crashed(exc) is not None:
                    raise self.fail_call(exc, "SetConfig") from None
                raise Failure(
                    f"the plugin refused its config (SetConfig: {exc.code.name}): {exc.details}"
                ) from None
        return opened

    def encode_config(self, spec: hclspec.Spec | None) -> tuple[Decoded | None, bytes]:
        """Decode the config against the schema and encode it as Nomad would.

        Where the agent would refuse the config, or crash on it, so does this,
        with the agent's words and what to write instead.
        """
        from nomad_device.agentconfig import setconfig

        if spec is None:
            if self.config_body is not None and self.config_body.props:
                raise Failure(
                    f"{self.config_origin}: configuration not allowed but config passed "
                    "(the plugin has no config schema)"
                )
            return None, b""
        result = setconfig.from_body(self.config_body, spec, self.config_origin)
        if result.outcome == "panic":
            raise Failure(f"{self.config_origin}: {result.explanation}")
        if result.stage == "schema":
            raise Failure(f"the plugin's config schema is invalid: {result.messages[0]}")
        if result.stage == "msgpack":
            raise Failure(f"{self.config_origin}: {result.explanation}")
        if not result.ok:
            raise Failure("failed to parse config:\n" + result.explanation)
        return result.decoded, result.data

    def warn_unsafe(self, spec: hclspec.Spec) -> None:
        """Say so when some config could make this schema crash a Nomad agent."""
        from nomad_device.agentconfig import agentfile, schemasafety

        names = agentfile.block_names(self.opts.plugin)
        label = self.block_label or (names[-1] if names else "plugin")
        for hazard in schemasafety.hazards(spec, label):
            when = "on every config" if hazard.when == schemasafety.ALWAYS else "on some configs"
            self.console.error(
                self.style.yellow(
                    f"warning: this plugin's schema can crash a Nomad agent {when}: "
                    + printable(f"{hazard.where}: {hazard.problem}.", lines=True)
                    + " This agent config does it:"
                )
            )
            self.console.error(hazard.config.rstrip("\n"))

    def emit_json(self, value: object, *, stream_mode: bool) -> None:
        self.console.print(nomadjson.dumps(value, indent=None if stream_mode else 4), raw=True)

    def first_fingerprint(
        self, opened: Opened
    ) -> tuple[StreamPump[list[DeviceGroup]], list[DeviceGroup]]:
        from nomad_device.cli.session import StreamEnded, StreamPump
        from nomad_device.host import CallError

        pump = StreamPump(opened.client.fingerprint(), "fingerprint")
        try:
            groups = pump.get(self.opts.timeout)
        except TimeoutError:
            raise Failure(
                f"no fingerprint within {self.opts.timeout:g}s (a Nomad client waits "
                f"{FIRST_FINGERPRINT_WAIT:g}s, then registers the node without these devices)"
            ) from None
        except (CallError, StreamEnded) as exc:
            raise self.fail_call(exc, "Fingerprint") from None
        self.warn_invalid(groups)
        return pump, groups

    def warn_invalid(self, groups: Sequence[DeviceGroup]) -> None:
        for group in groups:
            for problem in group.validate():
                self.console.error(
                    self.style.yellow(
                        f"warning: group {group.key!r}: {printable(problem, lines=True)}"
                        " (Nomad would kill the plugin)"
                    )
                )

    # -- commands -----------------------------------------------------------------

    def cmd_info(self) -> int:
        from nomad_device.agentconfig.hcldec import SchemaError, compile_spec
        from nomad_device.host import CallError

        self.load_config()
        _, client = self.launch()
        try:
            info = client.info()
            spec_pb = client.schema_proto()
        except CallError as exc:
            raise self.fail_call(exc, "PluginInfo") from None
        problems = info_problems(info)
        if spec_pb.WhichOneof("block") is not None:
            try:
                spec = hclspec.from_proto(spec_pb)
                compile_spec(spec)
            except (SchemaError, ValueError) as exc:
                problems.append(f"the config schema is invalid: {exc}")
            else:
                self.warn_unsafe(spec)
        if self.opts.json:
            self.emit_json(nomadjson.info_json(info), stream_mode=False)
            for problem in problems:
                self.console.error(f"warning: {problem}")
        else:
            self.console.print(render.render_info(info, self.style, problems))
        return 0

    def cmd_schema(self) -> int:
        from nomad_device.host import CallError

        self.load_config()
        _, client = self.launch()
        try:
            client.info()
            spec_pb = client.schema_proto()
        except CallError as exc:
            raise self.fail_call(exc, "ConfigSchema") from None
        if self.opts.json:
            from google.protobuf import json_format

            data = json_format.MessageToDict(spec_pb, preserving_proto_field_name=True)
            self.emit_json(data, stream_mode=False)
            return 0
        if spec_pb.WhichOneof("block") is None:
            self.console.print(self.style.dim("(the plugin has no config schema)"))
            return 0
        spec = hclspec.from_proto(spec_pb)
        self.warn_unsafe(spec)
        self.console.print(render.render_schema(spec, self.style))
        return 0

    def cmd_config(self) -> int:
        opened = self.open()
        data = opened.config_bytes
        if self.opts.json:
            decoded = opened.decoded
            value = _jsonable(decoded.value) if decoded is not None else None
            self.emit_json({"Config": value, "Msgpack": data.hex()}, stream_mode=False)
            return 0
        if opened.decoded is None:
            self.console.print(self.style.dim("(the plugin has no config schema: nothing sent)"))
            return 0
        text = render.render_config_value(opened.decoded.value, opened.decoded.type)
        source = self.config_origin if self.config_body is not None else "an empty config"
        self.console.print(
            self.style.bold("Decoded config") + " " + self.style.dim(f"(as Nomad decodes {source})")
        )
        self.console.print("config = " + text)
        self.console.print(
            self.style.bold("SetConfig msgpack") + self.style.dim(f" ({len(data)} bytes)")
        )
        self.console.print(render.hex_dump(data))
        self.console.print(self.style.green("The plugin accepted this config."))
        return 0

    def cmd_fingerprint(self) -> int:
        from nomad_device.cli.session import StreamEnded
        from nomad_device.host import CallError

        opened = self.open()
        pump, groups = self.first_fingerprint(opened)
        if not self.opts.watch:
            self.show_groups(groups, 1, single=True)
            # Killed as Nomad kills it, the plugin has had its last log line read.
            opened.session.close()
            self.fail_if_dropped(opened.session)
            return 0
        number = 1
        self.show_groups(groups, number, single=False)
        while True:
            try:
                groups = pump.get(None)
            except (CallError, StreamEnded) as exc:
                self.console.end_live()
                raise self.fail_call(exc, "Fingerprint") from None
            number += 1
            self.warn_invalid(groups)
            self.show_groups(groups, number, single=False)

    def fail_if_dropped(self, session: PluginSession) -> None:
        """Fail when the plugin logged that it left device groups out of its fingerprint."""
        count = session.dropped["device_group"]
        if count:
            raise Failure(
                f"the plugin left {count} invalid device group(s) out of its fingerprint "
                "(its log above says why); Nomad never sees them"
            )

    def show_groups(self, groups: list[DeviceGroup], number: int, *, single: bool) -> None:
        if self.opts.json:
            self.emit_json(nomadjson.devices_json(groups), stream_mode=not single)
            return
        text = render.render_groups(groups, self.style)
        if single:
            self.console.print(text)
            return
        stamp = time.strftime("%H:%M:%S")
        head = self.style.dim(f"fingerprint #{number} at {stamp}  (Ctrl-C to stop)")
        self.console.live(head + "\n" + text)

    def cmd_stats(self) -> int:
        from nomad_device.cli.session import StreamEnded, StreamPump
        from nomad_device.host import CallError

        opened = self.open()
        fingerprint, _ = self.first_fingerprint(opened)
        interval = self.opts.interval
        pump = StreamPump(opened.client.stats(interval), "stats")
        # Nomad's client never waits on stats; a few intervals are plenty to see one.
        wait = max(10.0, 5 * interval)
        shown = 0
        try:
            while self.opts.count <= 0 or shown < self.opts.count:
                try:
                    groups = pump.get(wait)
                except TimeoutError:
                    raise Failure(
                        f"no statistics within {wait:g}s: the plugin reports none, or its "
                        "stats keep failing (see its log with -v)"
                    ) from None
                except (CallError, StreamEnded) as exc:
                    raise self.fail_call(exc, "Stats") from None
                shown += 1
                if self.opts.json:
                    self.emit_json(nomadjson.stats_json(groups), stream_mode=self.opts.count != 1)
                    continue
                if self.opts.count != 1:
                    stamp = time.strftime("%H:%M:%S")
                    self.console.print(self.style.dim(f"stats #{shown} at {stamp}"))
                self.console.print(render.render_stats(groups, self.style))
                if self.opts.count != 1 and shown != self.opts.count:
                    self.console.print()
        finally:
            pump.cancel()
            fingerprint.cancel()
        return 0

    def cmd_reserve(self) -> int:
        from nomad_device.host import CallError

        if not self.opts.ids:
            raise Failure("reserve needs at least one device ID", 2)
        opened = self.open()
        fingerprint, groups = self.first_fingerprint(opened)
        fingerprint.cancel()
        owners = {d.id: g.key for g in groups for d in g.devices}
        unknown = [i for i in self.opts.ids if i not in owners]
        if unknown:
            self.console.error(
                self.style.yellow(
                    f"warning: not in the plugin's fingerprint: {', '.join(unknown)} "
                    "(Nomad would never ask for them)"
                )
            )
        spanned = {owners[i] for i in self.opts.ids if i in owners}
        if len(spanned) > 1:
            self.console.error(
                self.style.yellow(
                    "warning: the IDs span several groups; Nomad reserves from one group at a time"
                )
            )
        try:
            reservation = opened.client.reserve(self.opts.ids)
        except CallError as exc:
            if self.session is not None and self.session.crashed(exc) is not None:
                raise self.fail_call(exc, "Reserve") from None
            raise Failure(f"Reserve failed: {exc.code.name}: {exc.details}") from None
        if self.opts.json:
            self.emit_json(nomadjson.reservation_json(reservation), stream_mode=False)
        else:
            self.console.print(render.render_reservation(reservation, self.style))
        return 0

    def cmd_repl(self) -> int:
        from nomad_device.cli.repl import Repl

        opened = self.open()
        return Repl(self, opened).run()

    def cmd_check(self) -> int:
        from nomad_device.cli.check.command import run_check

        return run_check(self)

    def cmd_demo(self) -> int:
        from nomad_device.cli.demo import run_demo

        return run_demo(self)


def example_command() -> list[str]:
    """How to start ``nomad-device-example``: the console script, else ``python -m``."""
    found = find_program("nomad-device-example")
    if found:
        return [found]
    return [*python_command(isolated=False), "-m", "nomad_device.plugins.example"]


def _jsonable(value: object) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Decimal):
        as_float = float(value)
        return as_float if Decimal(repr(as_float)) == value else str(value)
    return value
