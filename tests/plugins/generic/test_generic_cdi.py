"""CDI devices over the real wire: matching, Reserve, hooks, trust, specs changing under streams.

The plugin is launched as Nomad launches it, on a fake /dev and /sys
(fake_tree.py); its spec directories lie under the fake /dev root, which the
trust rules take for /dev (the directories above it are the test's), and the
spec files and the mounts they name are root's, mode 0644, as on a host.
Nodes are named in specs by their /dev path (the plugin finds them under the
fake root); mount sources by their real path.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.cdi import write_spec
from support.fake_tree import FakeTree, mkdirs, require_root
from support.generic import by_key, devices, logged, start, wait_for
from support.processes import Launched, Launcher

from nomad_device.model import Attribute, DeviceSpec, Mount
from nomad_device.plugins.generic.cdidevices import REFUSAL
from nomad_device.plugins.generic.config import CdiBlock, DeviceBlock, GenericConfig
from nomad_device.testing.conformance import SuiteOptions, run_conformance

pytestmark = pytest.mark.timeout(120)

GPU_MAJOR = 195
DRM_MAJOR = 226


class Host:
    """A fake host with two GPUs: ``/dev/gpu<N>`` (no sysfs entry, as NVIDIA's), DRM
    nodes below a PCI function each, a control node, and a library to mount."""

    def __init__(self, base: Path) -> None:
        self.tree = FakeTree(base)
        self.specs = mkdirs(self.tree.dev / "cdi")
        self.run_specs = mkdirs(self.tree.dev / "run-cdi")
        self.lib = mkdirs(self.tree.dev / "lib")
        for index in range(2):
            address = f"0000:3{index}:00.0"
            handle = self.tree.pci(
                address, 0x10DE, 0x2330, 0x030200, driver="nvidia", numa_node=index
            )
            self.tree.pci_node(handle, f"drm/card{index + 1}", f"dri/card{index + 1}", DRM_MAJOR,
                               index + 1, subsystem="drm")  # fmt: skip
            # /dev/gpu<N>: the kernel lists its major (1, "mem"), sysfs nothing.
            self.tree.node(f"gpu{index}", "char", 1, 100 + index)
        self.tree.char("gpuctl", 10, 250)
        self.libfoo = self.lib / "libfoo.so.1"
        self.libfoo.write_text("ELF")
        self.libfoo.chmod(0o644)

    def spec(
        self,
        devices: list[dict[str, Any]],
        *,
        name: str = "vendor.yaml",
        directory: Path | None = None,
        edits: dict[str, Any] | None = None,
        style: str = "yaml-k8s",
        **extra: Any,
    ) -> Path:
        spec: dict[str, Any] = {
            "cdiVersion": "0.7.0",
            "kind": "example.com/gpu",
            "devices": devices,
        }
        spec.update(extra)
        if edits is not None:
            spec["containerEdits"] = edits
        return write_spec(directory or self.specs, name, spec, style)

    def gpu(self, index: int, **edits: Any) -> dict[str, Any]:
        nodes = [{"path": f"/dev/gpu{index}"}, {"path": f"/dev/dri/card{index + 1}"}]
        return {"name": f"gpu{index}", "containerEdits": {"deviceNodes": nodes, **edits}}

    def common(self) -> dict[str, Any]:
        return {
            "env": ["VENDOR_VISIBLE=void", "SHARED=spec"],
            "deviceNodes": [{"path": "/dev/gpuctl", "permissions": "rw"}],
            "mounts": [{"hostPath": str(self.libfoo), "containerPath": "/usr/lib/libfoo.so.1",
                        "options": ["ro", "nosuid", "nodev", "bind"]}],
        }  # fmt: skip

    def real(self, dev_path: str) -> str:
        return str(self.tree.dev / dev_path.removeprefix("/dev/"))


@pytest.fixture
def host(tmp_path: Path) -> Host:
    require_root()
    return Host(tmp_path / "root")


def config(host: Host, block: DeviceBlock | None = None, **cdi: Any) -> GenericConfig:
    """One block ``gpu`` over the host's spec directory (``cdi`` overrides its fields)."""
    matcher = CdiBlock(**{"kind": "example.com/gpu", "spec_dirs": [str(host.specs)], **cdi})
    block = dataclasses.replace(block or DeviceBlock(), cdi=matcher)
    return GenericConfig(device={"gpu": block}, fingerprint_period=timedelta(hours=1))


def start_cdi(launch: Launcher, host: Host, cfg: GenericConfig) -> Launched:
    return start(launch, cfg, host.tree.env)


GROUP = "example.com/gpu/gpu"


def test_cdi_devices_become_a_group_named_after_the_kind(launch: Launcher, host: Host) -> None:
    host.spec([host.gpu(0), host.gpu(1)], edits=host.common(),
              annotations={"example.com/driver": "550.1"})  # fmt: skip
    launched = start_cdi(launch, host, config(host))
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
    group = by_key(groups)[GROUP]
    found = devices(groups, GROUP)
    assert sorted(found) == ["gpu0", "gpu1"]
    assert all(d.healthy for d in found.values()), found
    # Each GPU's locality from its DRM node; the group keeps what both share.
    assert found["gpu0"].pci_bus_id == "0000:30:00.0"
    assert found["gpu1"].pci_bus_id == "0000:31:00.0"
    assert group.attributes["cdi_kind"] == Attribute("example.com/gpu")
    assert group.attributes["cdi_example_com_driver"] == Attribute(550.1)
    assert group.attributes["pci_vendor_id"] == Attribute(0x10DE)
    assert "numa_node" not in group.attributes  # 0 and 1


def test_devices_globs_and_a_block_of_its_own(launch: Launcher, host: Host) -> None:
    host.spec([host.gpu(0), host.gpu(1), {"name": "all", "containerEdits": {
        "deviceNodes": [{"path": "/dev/gpu0"}, {"path": "/dev/gpu1"}]}}])  # fmt: skip
    cfg = config(host, DeviceBlock(vendor="acme", type="accel"), devices=["gpu*"])
    launched = start_cdi(launch, host, cfg)
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
    assert sorted(devices(groups, "acme/accel/gpu")) == ["gpu0", "gpu1"]


def test_reserve_one_device_grants_its_edits(launch: Launcher, host: Host) -> None:
    host.spec([host.gpu(0, env=["GPU=0", "SHARED=gpu0"]), host.gpu(1)], edits=host.common())
    block = DeviceBlock(env={"LD_LIBRARY_PATH": "/usr/lib/vendor"})
    launched = start_cdi(launch, host, config(host, block))
    with launched.client.fingerprint() as stream:
        stream.next(15)
    reservation = launched.client.reserve(["gpu0"])
    assert reservation.devices == (
        DeviceSpec("/dev/gpuctl", host.real("/dev/gpuctl"), "rw"),
        DeviceSpec("/dev/gpu0", host.real("/dev/gpu0"), "rwm"),
        DeviceSpec("/dev/dri/card1", host.real("/dev/dri/card1"), "rwm"),
    )
    assert reservation.mounts == (Mount("/usr/lib/libfoo.so.1", str(host.libfoo), True),)
    assert dict(reservation.envs) == {
        "VENDOR_VISIBLE": "void",
        "SHARED": "gpu0",  # the device's own, after its spec's
        "GPU": "0",
        "GENERIC_GPU_IDS": "gpu0",
        "GENERIC_GPU_PATHS": "/dev/gpu0",
        "LD_LIBRARY_PATH": "/usr/lib/vendor",
    }


def test_reserve_several_merges_as_cdi_does(launch: Launcher, host: Host) -> None:
    host.spec([host.gpu(0, env=["SHARED=gpu0"]), host.gpu(1, env=["SHARED=gpu1", "ONE=1"])],
              edits=host.common())  # fmt: skip
    launched = start_cdi(launch, host, config(host))
    with launched.client.fingerprint() as stream:
        stream.next(15)
    reservation = launched.client.reserve(["gpu1", "gpu0"])
    # The spec's edits once, then each device's in the order asked; the control node once.
    assert [d.task_path for d in reservation.devices] == [
        "/dev/gpuctl", "/dev/gpu1", "/dev/dri/card2", "/dev/gpu0", "/dev/dri/card1",
    ]  # fmt: skip
    assert len(reservation.mounts) == 1
    envs = dict(reservation.envs)
    assert envs["SHARED"] == "gpu0"  # set last by the device reserved last
    assert envs["ONE"] == "1"
    assert envs["GENERIC_GPU_IDS"] == "gpu1,gpu0"
    assert envs["GENERIC_GPU_PATHS"] == "/dev/gpu1,/dev/gpu0"


HOOKS = [{"hookName": "createContainer", "path": "/usr/bin/vendor-hook",
          "args": ["vendor-hook", "update-ldcache", "--folder", "/usr/lib"]}]  # fmt: skip


def test_hooks_refused_make_the_device_unhealthy(launch: Launcher, host: Host) -> None:
    host.spec([host.gpu(0, hooks=HOOKS), host.gpu(1)])
    launched = start_cdi(launch, host, config(host))
    with launched.client.fingerprint() as stream:
        found = devices(stream.next(15), GROUP)
    assert found["gpu1"].healthy
    assert not found["gpu0"].healthy
    assert found["gpu0"].health_description == (
        REFUSAL + "createContainer hook vendor-hook update-ldcache"
    )


def test_hooks_skipped_are_listed_logged_and_named_to_the_task(
    launch: Launcher, host: Host
) -> None:
    host.spec([host.gpu(0, hooks=HOOKS, additionalGids=[44])], edits={"env": ["A=1"]})
    launched = start_cdi(launch, host, config(host, hooks="skip"))
    skipped = "createContainer hook vendor-hook update-ldcache; additionalGids 44"
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
        found = devices(groups, GROUP)
        assert found["gpu0"].healthy
        assert by_key(groups)[GROUP].attributes["cdi_skipped"] == Attribute(skipped)
        lines = logged(launched, "offered without what Nomad cannot apply", count=2)
        assert sorted(line.rsplit(": ", 1)[1].strip() for line in lines) == sorted(
            skipped.split("; ")
        )
        envs = dict(launched.client.reserve(["gpu0"]).envs)
        assert envs["GENERIC_GPU_CDI_SKIPPED"] == skipped
        # Another scan (a new spec) says nothing more about it.
        host.spec([host.gpu(1)], name="second.yaml")
        wait_for(stream, lambda g: sorted(devices(g, GROUP)) == ["gpu0", "gpu1"])
    assert len(logged(launched, "offered without what Nomad cannot apply")) == 2


def test_a_rewritten_spec_reaches_open_streams(launch: Launcher, host: Host) -> None:
    path = host.spec([host.gpu(0)])
    launched = start_cdi(launch, host, config(host))
    with launched.client.fingerprint() as stream:
        assert sorted(devices(stream.next(15), GROUP)) == ["gpu0"]
        # Regenerated the way nvidia-ctk writes: a new file renamed over the old.
        staged = host.spec([host.gpu(0), host.gpu(1)], name=".vendor.tmp")
        staged.rename(path)
        wait_for(stream, lambda g: sorted(devices(g, GROUP)) == ["gpu0", "gpu1"])
        # Rewritten in place, a device dropped.
        host.spec([host.gpu(1)])
        wait_for(stream, lambda g: sorted(devices(g, GROUP)) == ["gpu1"])
        # Removed: nothing left.
        path.unlink()
        wait_for(stream, lambda g: GROUP not in by_key(g))


def test_a_broken_spec_is_skipped_and_the_stream_goes_on(launch: Launcher, host: Host) -> None:
    host.spec([host.gpu(0)])
    launched = start_cdi(launch, host, config(host))
    with launched.client.fingerprint() as stream:
        assert sorted(devices(stream.next(15), GROUP)) == ["gpu0"]
        broken = host.specs / "broken.yaml"
        broken.write_text("cdiVersion: 0.6.0\nkind: example.com/gpu\ndevices: [\n")
        broken.chmod(0o644)
        (line,) = logged(launched, "broken.yaml is skipped")
        assert "the text ends inside a flow collection" in line
        host.spec([host.gpu(1)], name="more.json", style="json")
        wait_for(stream, lambda g: sorted(devices(g, GROUP)) == ["gpu0", "gpu1"])


def test_a_later_directory_overrides_an_earlier(launch: Launcher, host: Host) -> None:
    host.spec([host.gpu(0, env=["FROM=etc"])])
    host.spec([host.gpu(0, env=["FROM=run"])], directory=host.run_specs)
    cfg = config(host, spec_dirs=[str(host.specs), str(host.run_specs)])
    launched = start_cdi(launch, host, cfg)
    with launched.client.fingerprint() as stream:
        stream.next(15)
    assert dict(launched.client.reserve(["gpu0"]).envs)["FROM"] == "run"


def test_a_spec_others_may_write_is_refused(launch: Launcher, host: Host) -> None:
    path = host.spec([host.gpu(0)])
    launched = start_cdi(launch, host, config(host))
    with launched.client.fingerprint() as stream:
        assert sorted(devices(stream.next(15), GROUP)) == ["gpu0"]
        path.chmod(0o666)  # chmod is an event in the spec directory too
        wait_for(stream, lambda g: GROUP not in by_key(g))
        (line,) = logged(launched, "vendor.yaml is skipped")
        assert "is writable by every user" in line
        path.chmod(0o644)
        wait_for(stream, lambda g: sorted(devices(g, GROUP)) == ["gpu0"])
        os.chown(path, 1000, 0)
        wait_for(stream, lambda g: GROUP not in by_key(g))
        logged(launched, "owned by uid 1000")


def test_a_symlinked_host_path_is_refused(launch: Launcher, host: Host) -> None:
    link = host.lib / "libbar.so"
    link.symlink_to(host.libfoo)
    os.lchown(link, 1000, 1000)
    mount = {"hostPath": str(link), "containerPath": "/usr/lib/libbar.so", "options": ["ro"]}
    host.spec([host.gpu(0, mounts=[mount]), host.gpu(1)])
    launched = start_cdi(launch, host, config(host))
    with launched.client.fingerprint() as stream:
        assert sorted(devices(stream.next(15), GROUP)) == ["gpu1"]
    (line,) = logged(launched, "libbar.so is not offered")
    assert "symlink owned by uid 1000" in line


def test_nodes_must_be_there_and_what_the_spec_says(launch: Launcher, host: Host) -> None:
    host.spec([
        {"name": "gone", "containerEdits": {"deviceNodes": [{"path": "/dev/gpu7"}]}},
        {"name": "wrong", "containerEdits": {"deviceNodes": [
            {"path": "/dev/gpu0", "type": "c", "major": GPU_MAJOR, "minor": 0}]}},
        {"name": "file", "containerEdits": {"deviceNodes": [{"path": str(host.libfoo)}]}},
    ])  # fmt: skip
    launched = start_cdi(launch, host, config(host))
    with launched.client.fingerprint() as stream:
        found = devices(stream.next(15), GROUP)
    assert found["gone"].health_description == "/dev/gpu7 does not exist"
    assert found["wrong"].health_description == "/dev/gpu0 is 1:100, but the spec says 195:0"
    assert "is a regular file, not a device node" in found["file"].health_description


def test_a_device_named_by_two_blocks_belongs_to_the_first(launch: Launcher, host: Host) -> None:
    host.spec([host.gpu(0), host.gpu(1)])
    matcher = CdiBlock(kind="example.com/*", spec_dirs=[str(host.specs)])
    cfg = GenericConfig(
        device={"a": DeviceBlock(cdi=matcher, type="gpu"),
                "b": DeviceBlock(cdi=dataclasses.replace(matcher, devices=["gpu1"]), type="one")},
        fingerprint_period=timedelta(hours=1),
    )  # fmt: skip
    launched = start_cdi(launch, host, cfg)
    with launched.client.fingerprint() as stream:
        groups = stream.next(15)
    # The vendor from the kind's (no wildcard there), the type set.
    assert sorted(devices(groups, "example.com/gpu/a")) == ["gpu0", "gpu1"]
    assert "example.com/one/b" not in by_key(groups)
    logged(launched, 'only device "a" offers it')


# ------------------------------------------------------------- launcher, check, conformance

GENERIC = [sys.executable, "-m", "nomad_device.plugins.generic"]
#: The agent file's block for it (run as ``python -m``, it has no file name to match).
NAME = "nomad-device-generic"


def launcher(host: Host, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("nomad-device-launcher")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "nomad_device.cli"]
    env = {**os.environ, **host.tree.env, "NO_COLOR": "1"}
    return subprocess.run(
        [*command, *args, "--plugin-name", NAME, "--", *GENERIC],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def agent_file(host: Host, directory: Path, hooks: str = "refuse") -> Path:
    path = directory / "agent.hcl"
    path.write_text(
        'plugin "nomad-device-generic" {\n  config {\n    fingerprint_period = "1h"\n'
        f'    device "gpu" {{\n      cdi {{\n        kind      = "example.com/gpu"\n'
        f'        spec_dirs = ["{host.specs}"]\n        hooks     = "{hooks}"\n      }}\n'
        '      env {\n        LD_LIBRARY_PATH = "/usr/lib/vendor"\n      }\n    }\n  }\n}\n'
    )
    return path


def test_the_launcher_reserve_shows_what_a_task_gets_and_lacks(host: Host, tmp_path: Path) -> None:
    host.spec([host.gpu(0, hooks=HOOKS)], edits=host.common())
    agent = agent_file(host, tmp_path, hooks="skip")
    result = launcher(host, "reserve", "-q", "-c", str(agent), "gpu0")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert [host.real("/dev/gpu0"), "/dev/gpu0", "rwm"] in rows
    assert [str(host.libfoo), "/usr/lib/libfoo.so.1", "ro"] in rows
    assert ["LD_LIBRARY_PATH=/usr/lib/vendor"] in rows
    skipped = (
        "Skipped (the task does not get these)\n  createContainer hook vendor-hook update-ldcache"
    )
    assert skipped in result.stdout


JOB = """\
job "train" {
  datacenters = ["dc1"]
  group "g" {
    task "t" {
      resources {
        device "example.com/gpu" {
          count = %d
          constraint {
            attribute = "${device.attr.cdi_kind}"
            value     = "example.com/gpu"
          }
        }
      }
    }
  }
}
"""


def test_check_places_cdi_devices_and_explains_refused_ones(host: Host, tmp_path: Path) -> None:
    host.spec([host.gpu(0), host.gpu(1, hooks=HOOKS)])
    agent = agent_file(host, tmp_path)
    job = tmp_path / "job.hcl"
    job.write_text(JOB % 1)
    result = launcher(host, "check", "-q", "-c", str(agent), str(job))
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'device "example.com/gpu": example.com/gpu/gpu [gpu0]' in result.stdout
    job.write_text(JOB % 2)
    result = launcher(host, "check", "-q", "-c", str(agent), str(job))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f'gpu1 unhealthy ("{REFUSAL}createContainer hook vendor-hook update-ldcache")' in (
        result.stdout
    )


def test_the_plugin_conforms_with_a_cdi_block(host: Host, tmp_path: Path) -> None:
    host.spec([host.gpu(0), host.gpu(1, hooks=HOOKS)], edits=host.common())
    agent = agent_file(host, tmp_path)
    options = SuiteOptions(config_file=agent, env={**os.environ, **host.tree.env}, plugin_name=NAME)
    report = run_conformance(GENERIC, options)
    report.assert_ok()
    assert "2 device(s)" in report.result("device-groups-valid").summary
