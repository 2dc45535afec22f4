"""``nomad-device-launcher demo``: the example plugin on a ready-made directory.

Shows, in the order a Nomad client makes the calls, what the plugin reports:
PluginInfo, ConfigSchema, the config the agent would send, the fingerprint,
one round of statistics and a reservation.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from nomad_device.agentconfig.hcldec import from_python
from nomad_device.cli import render
from nomad_device.cli.session import StreamEnded, StreamPump
from nomad_device.host import CallError

if TYPE_CHECKING:
    from nomad_device.cli.commands import App

__all__ = ["run_demo"]


def run_demo(app: App) -> int:
    from nomad_device.cli.commands import Failure, example_command

    try:
        from nomad_device.plugins.example.demo import prepare_demo_dir
    except ImportError:
        raise Failure(
            "the example plugin (nomad_device.plugins.example) is not installed"
        ) from None

    style = app.style
    out = app.console.print
    directory = prepare_demo_dir()
    try:
        app.opts.plugin = example_command()
        app.opts.config_file = app.opts.config_json = None
        app.config_origin = "demo config"
        app.config_body = from_python({"dir": str(directory), "list_period": "1s"})

        def step(title: str) -> None:
            out("")
            out(style.bold(f"== {title}"))

        out(style.bold("Demo: ") + f"the example plugin on {directory}")
        out(
            style.dim(
                "device01 has mode 0777 (the example's unhealthy_perm); device02 and "
                "device03 have 0644."
            )
        )
        step("Agent configuration (what the operator writes)")
        out(
            f'plugin "nomad-device-example" {{\n  config {{\n    dir         = '
            f'"{directory}"\n    list_period = "1s"\n  }}\n}}'
        )

        _, client = app.launch()
        info = client.info()
        step("PluginInfo")
        out(render.render_info(info, style))
        spec_pb = client.schema_proto()
        from nomad_device.wire import hclspec

        spec = hclspec.from_proto(spec_pb)
        step("ConfigSchema")
        out(render.render_schema(spec, style))
        decoded, data = app.encode_config(spec)
        assert decoded is not None
        step(f"SetConfig ({len(data)} bytes of cty msgpack)")
        out("config = " + render.render_config_value(decoded.value, decoded.type))
        out(style.dim(render.hex_dump(data)))
        client.set_config(data)

        step("Fingerprint (first message)")
        fingerprint = StreamPump(client.fingerprint(), "fingerprint")
        groups = fingerprint.get(app.opts.timeout)
        out(render.render_groups(groups, style))

        step("Stats (one collection)")
        stats = StreamPump(client.stats(1.0), "stats")
        out(render.render_stats(stats.get(max(app.opts.timeout, 5.0)), style))
        stats.cancel()

        healthy = [d.id for g in groups for d in g.devices if d.healthy]
        if healthy:
            step(f"Reserve({healthy[0]})")
            out(render.render_reservation(client.reserve([healthy[0]]), style))
        fingerprint.cancel()
        out("")
        config = shlex.quote(json.dumps({"dir": str(directory)}))
        command = f"nomad-device-launcher --config-json {config} nomad-device-example"
        out(style.dim(f"Try it yourself: {command}"))
        if not app.opts.keep:
            out(style.dim("(the directory is removed now: add --keep to use it afterwards)"))
        return 0
    except (CallError, StreamEnded, TimeoutError) as exc:
        raise app.fail_call(exc, "demo") from None
    finally:
        app.close()
        if app.opts.keep:
            out(style.dim(f"kept the demo directory {directory}"))
        else:
            shutil.rmtree(Path(directory), ignore_errors=True)
