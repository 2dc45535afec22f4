"""``serve(PluginClass)``: the one-line entry point of a plugin executable."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any, Final, NoReturn

import grpc

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.hclog import install_early_excepthook
from nomad_device.goplugin.server import ServeConfig
from nomad_device.goplugin.server import serve as serve_goplugin
from nomad_device.plugin.base import DevicePlugin
from nomad_device.plugin.calls import describe
from nomad_device.plugin.lifetime import CLEANUP_TIMEOUT
from nomad_device.plugin.runtime import runtime_of
from nomad_device.plugin.servicer import register

__all__ = ["CLOSE_TIMEOUT", "close_plugin", "serve"]

#: How long the author's ``close()`` may take. The host SIGKILLs the plugin
#: 2 s after Shutdown; the server's own stop takes up to
#: ``STOP_GRACE_SECONDS`` (0.2 s) and the ``on_close`` clean-up up to
#: ``CLEANUP_TIMEOUT`` (0.3 s), and the rest is left as margin for a loaded
#: machine, so that a slow ``close()`` costs a warning, not a SIGKILL.
CLOSE_TIMEOUT: Final = 1.0

log = logging.getLogger("nomad_device.server")

# Launched by a host: from the first import on, even a crash while the author's
# module loads must reach the host as hclog, not as raw text.
if NOMAD_HANDSHAKE.cookie_ok():
    install_early_excepthook()


async def close_plugin(plugin: DevicePlugin[Any], timeout: float = CLOSE_TIMEOUT) -> None:
    """End the plugin's life once; never raise.

    In this order: its pending ``call_later`` timers are cancelled, the
    author's ``close()`` runs for at most ``timeout`` seconds, then the
    ``on_close`` clean-up (at most ``CLEANUP_TIMEOUT``, even when ``close()``
    overran), and the plugin's own pools refuse new work.
    """
    runtime = runtime_of(plugin)
    if runtime.closed:
        return
    runtime.closed = True
    lifetime, calls = runtime.lifetime, runtime.calls
    await lifetime.stop_timers()
    try:
        await asyncio.wait_for(calls.call("other", plugin.close, what="close()"), timeout)
    except TimeoutError:
        log.warning("close() did not return within %gs; exiting without it", timeout)
    except Exception as exc:
        log.error("close() failed: %s", describe(exc), exc_info=exc)
    await lifetime.run_closers(CLEANUP_TIMEOUT)
    calls.close_author_pools()


def serve(plugin: type[DevicePlugin[Any]] | DevicePlugin[Any]) -> NoReturn:
    """Serve a device plugin to a Nomad client over go-plugin; never returns.

    On Shutdown or SIGTERM the plugin's :meth:`~DevicePlugin.close` runs
    (time-boxed, see :data:`CLOSE_TIMEOUT`) before the process exits. Run by
    hand (without Nomad's cookie) it explains itself and exits 1. Once the
    plugin object exists the working directory is ``/``; the one the host
    started it in is its :attr:`~DevicePlugin.launch_dir`.
    """
    instance = plugin() if isinstance(plugin, type) else plugin
    # Relative paths would otherwise mean wherever the agent was started: an
    # empty LD_LIBRARY_PATH entry (a library dlopen()ed later), a probe's
    # working directory. The plugin keeps the old one as ``launch_dir``, and
    # imports still to come find what a relative sys.path entry named.
    try:
        here = os.getcwd()
    except OSError:  # removed under us: nothing relative can be found anyway
        here = "/"
    sys.path[:] = [p if p.startswith("/") else os.path.join(here, p) for p in sys.path]
    os.chdir("/")

    async def registrar(server: grpc.aio.Server) -> None:
        await register(instance, server)

    async def on_stop() -> None:
        await close_plugin(instance)

    serve_goplugin(
        ServeConfig(
            handshake=NOMAD_HANDSHAKE,
            versions={NOMAD_HANDSHAKE.protocol_version: registrar},
            on_stop=on_stop,
        )
    )
