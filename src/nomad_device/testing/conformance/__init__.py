"""The conformance suite: check any device plugin executable against what Nomad expects.

Run it as ``nomad-device-conformance -- PLUGIN_CMD ARGS...``, from pytest (the
``device_plugin_conformance`` fixture or ``--nomad-device-conformance=CMD``),
or from Python::

    from nomad_device.testing.conformance import run_conformance

    report = run_conformance(["./my-plugin"])
    print(report.render())
    report.assert_ok()
"""

from nomad_device.testing.conformance.checks import CHECKS, Check, CheckResult, Status
from nomad_device.testing.conformance.report import ConformanceError, ConformanceReport
from nomad_device.testing.conformance.runner import SuiteOptions, run_conformance

__all__ = [
    "CHECKS",
    "Check",
    "CheckResult",
    "ConformanceError",
    "ConformanceReport",
    "Status",
    "SuiteOptions",
    "run_conformance",
]
