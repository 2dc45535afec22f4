"""The conformance suite passes on the nvidia plugin, with and without GPUs.

Without GPUs: nvidia-ml-py is installed but no libnvidia-ml.so.1 can be found
(``LD_LIBRARY_PATH`` names an empty directory and the fake is not built into
it). With GPUs: the fake NVML, one plain GPU and one with MIG instances. Both
run at once; each is mostly waiting on its plugin.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nomad_device.testing.conformance import SuiteOptions, run_conformance

from .fakenvml import gpu, mig
from .nvidia_support import PLUGIN, Scenarios

pytest.importorskip("pynvml")


def test_conforms_without_gpus_and_on_the_fake(scenario: Scenarios, tmp_path: Path) -> None:
    empty = tmp_path / "no-driver"
    empty.mkdir()
    bare = dict(os.environ, LD_LIBRARY_PATH=str(empty))
    bare.pop("FAKE_NVML_SCENARIO", None)
    parent = gpu(1, mig_mode=1, mig=[mig(1, 1, 0, "1g.5gb", 4864), mig(1, 2, 0, "3g.20gb", 19968)])
    live = scenario({"gpus": [gpu(0), parent]})
    with ThreadPoolExecutor(2) as pool:
        without = pool.submit(run_conformance, PLUGIN, SuiteOptions(env=bare))
        fake = pool.submit(run_conformance, PLUGIN, SuiteOptions(env=live.env()))
        reports = {"no GPUs": without.result(), "fake NVML": fake.result()}
    for report in reports.values():
        report.assert_ok(allow_warnings=False)
    assert (
        reports["no GPUs"].result("stable-ids").summary == "the same 0 device ID(s) after a restart"
    )
    assert "3 device(s)" in reports["fake NVML"].result("device-groups-valid").summary
