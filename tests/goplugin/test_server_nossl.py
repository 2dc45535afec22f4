"""A plugin on a Python without ``ssl`` asked for AutoMTLS: one clear line (issue 26).

The bundled interpreter is built without OpenSSL; its bootstrap refuses first,
with the bundle's own advice (test_bundle_interpreters.py). Any other Python
without ssl reaches the transport, which refuses the same way: one hclog error
line saying what, why and what to do, no traceback, no handshake, exit 1.
Here ``_ssl`` is made unimportable in an ordinary Python before the plugin
starts, as in a Python built without OpenSSL.
"""

from __future__ import annotations

import subprocess
import sys

from nomad_device.constants import NOMAD_HANDSHAKE
from nomad_device.goplugin.hclog import parse_line
from nomad_device.goplugin.tls import generate_keypair

#: The example plugin, on this Python with ``_ssl`` blocked.
NO_SSL = (
    "import sys; sys.modules['_ssl'] = None\n"
    "from nomad_device.plugins.example.__main__ import main\n"
    "main()\n"
)


def _run(cert: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        NOMAD_HANDSHAKE.magic_cookie_key: NOMAD_HANDSHAKE.magic_cookie_value,
        "PLUGIN_PROTOCOL_VERSIONS": "2",
        "PLUGIN_CLIENT_CERT": cert,
    }
    return subprocess.run(
        [sys.executable, "-c", NO_SSL],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_automtls_without_ssl_is_one_error_line_without_traceback() -> None:
    done = _run(generate_keypair().cert_pem.decode())
    assert done.returncode == 1
    assert done.stdout == ""  # no handshake line
    entries = [parse_line(line, strict=True) for line in done.stderr.splitlines() if line]
    errors = [e for e in entries if e.level == "error"]
    assert len(errors) == 1, done.stderr
    (error,) = errors
    assert "traceback" not in error.fields
    assert error.message == (
        "plugin failed: the host asked for AutoMTLS (PLUGIN_CLIENT_CERT is set), which needs "
        f"Python's ssl module, and {sys.executable} cannot import it (import of _ssl halted; "
        "None in sys.modules); run the plugin on a Python built with OpenSSL, or under a host "
        "that does not ask for AutoMTLS"
    )
