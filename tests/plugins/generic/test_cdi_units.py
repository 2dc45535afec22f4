"""The cdi block's settings and the pieces of CDI handling that need no Go and no plugin.

What the library makes of specs is held against Go in test_cdi_crosscheck.py;
over the wire in test_generic_cdi.py. Here: the config's checks, the names
and reasons the plugin writes, and a few rules worth seeing without Go.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import ROOT
from support.cdi import STYLES, render
from support.cdi_corpus import nvidia_gpu_spec

from nomad_device.errors import InvalidArgument
from nomad_device.plugins.generic import cdi
from nomad_device.plugins.generic.cdidevices import (
    MAX_REASON,
    REFUSAL,
    Majors,
    attribute_name,
    refusal,
    select,
    uncarried,
)
from nomad_device.plugins.generic.config import (
    CdiBlock,
    DeviceBlock,
    GenericConfig,
    Kind,
    settings_from,
)


def kind_of(block: DeviceBlock, label: str = "gpu") -> Kind:
    (kind,) = settings_from(GenericConfig(device={label: block})).kinds
    return kind


def refused(block: DeviceBlock) -> str:
    with pytest.raises(InvalidArgument) as caught:
        settings_from(GenericConfig(device={"gpu": block}))
    return caught.value.message


def test_the_group_is_named_after_the_kind() -> None:
    kind = kind_of(DeviceBlock(cdi=CdiBlock(kind="nvidia.com/gpu")))
    assert (kind.vendor, kind.type, kind.name) == ("nvidia.com", "gpu", "gpu")
    assert kind.cdi is not None and kind.cdi.spec_dirs == ("/etc/cdi", "/var/run/cdi")
    assert not kind.cdi.skip_hooks
    # A wildcard in a half leaves that half to the usual defaults; set values win.
    kind = kind_of(DeviceBlock(cdi=CdiBlock(kind="*.com/gpu")), "accel")
    assert (kind.vendor, kind.type) == ("generic", "gpu")
    kind = kind_of(DeviceBlock(cdi=CdiBlock(kind="nvidia.com/*")), "accel")
    assert (kind.vendor, kind.type) == ("nvidia.com", "accel")
    kind = kind_of(DeviceBlock(vendor="nvidia", type="mig", cdi=CdiBlock(kind="nvidia.com/gpu")))
    assert (kind.vendor, kind.type) == ("nvidia", "mig")
    # Without a cdi block nothing changed: vendor "generic", type the label.
    kind = kind_of(DeviceBlock(paths=["/dev/kvm"]), "kvm")
    assert (kind.vendor, kind.type) == ("generic", "kvm")


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            DeviceBlock(cdi=CdiBlock(kind="nvidia.com")),
            'device "gpu": cdi.kind: "nvidia.com" is not a CDI kind: "vendor/class", as in'
            ' "nvidia.com/gpu" (globs allowed: "nvidia.com/*")',
        ),
        (
            DeviceBlock(cdi=CdiBlock(kind="a/b", hooks="run")),
            'device "gpu": cdi.hooks: "run" must be "refuse" or "skip"',
        ),
        (
            DeviceBlock(cdi=CdiBlock(kind="a/b", spec_dirs=["etc/cdi"])),
            'device "gpu": cdi.spec_dirs[0]: "etc/cdi" is not an absolute path',
        ),
        (
            DeviceBlock(cdi=CdiBlock(kind="a/b", spec_dirs=[])),
            'device "gpu": cdi.spec_dirs: give at least one directory (or leave it unset)',
        ),
        (
            DeviceBlock(cdi=CdiBlock(kind="a/b", devices=[""])),
            'device "gpu": cdi.devices[0]: "" is not a device name or glob',
        ),
        (
            DeviceBlock(paths=["/dev/kvm"], cdi=CdiBlock(kind="a/b")),
            'device "gpu": paths: cannot be combined with a cdi block: the spec says what each'
            " device brings (give the CDI devices a block of their own)",
        ),
        (
            DeviceBlock(permissions="r", cdi=CdiBlock(kind="a/b")),
            'device "gpu": permissions: cannot be combined with a cdi block: the spec says what'
            " each device brings (give the CDI devices a block of their own)",
        ),
    ],
)
def test_each_problem_names_the_block_and_field(block: DeviceBlock, message: str) -> None:
    assert refused(block) == message


def test_refusal_reasons_fit_a_table() -> None:
    assert refusal(["createContainer hook x update-ldcache"]) == (
        REFUSAL + "createContainer hook x update-ldcache"
    )
    many = [f"createContainer hook nvidia-cdi-hook step-{i}" for i in range(12)]
    reason = refusal(many)
    assert len(reason) <= MAX_REASON
    assert reason.startswith(REFUSAL + many[0] + ", ")
    assert reason.endswith(" more")


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("nvidia.com/gpu.product", "cdi_nvidia_com_gpu_product"),
        ("cdi.k8s.io/vfio17", "cdi_cdi_k8s_io_vfio17"),
        ("plain", "cdi_plain"),
        ("--x--", "cdi_x"),
    ],
)
def test_annotation_names_become_attribute_names(key: str, name: str) -> None:
    assert attribute_name(key) == name


def _spec(data: bytes) -> cdi.Spec:
    return cdi.read_spec(data, "/etc/cdi/nvidia.yaml", 0)


def test_an_nvidia_spec_resolves_per_device() -> None:
    spec = _spec(render(nvidia_gpu_spec(), STYLES["yaml-k8s"]))
    assert sorted(spec.devices)[:4] == ["0", "0:0", "0:1", "1"]
    device = spec.devices["0:0"]
    applied = cdi.apply(device.resolved)
    assert [n.path for n in applied.device_nodes] == [
        "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl",
        "/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13",
    ]  # fmt: skip
    assert all(m.read_only for m in applied.mounts)
    assert applied.env_map() == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert uncarried(applied) == (
        "createContainer hook nvidia-cdi-hook create-symlinks",
        "createContainer hook nvidia-cdi-hook enable-cuda-compat",
        "createContainer hook nvidia-cdi-hook update-ldcache",
        "createContainer hook nvidia-cdi-hook disable-device-node-modification",
    )


def test_numbers_and_nulls_decode_as_go_yaml_decodes_them() -> None:
    text = (
        b"cdiVersion: 0.6.0\nkind: a.com/b\ndevices:\n- name: d\n  containerEdits:\n"
        b"    env: [~, A=1]\n    deviceNodes:\n"
        b"    - {path: /dev/x, major: 0x10, minor: 017, fileMode: 0o644, uid: 1_000, gid: 2.9}\n"
    )
    (node,) = _spec(text).devices["d"].edits.device_nodes
    assert (node.major, node.minor, node.file_mode, node.uid, node.gid) == (16, 15, 420, 1000, 2)
    assert _spec(text).devices["d"].edits.env == ("A=1",)
    with pytest.raises(cdi.SpecError, match="cannot unmarshal !!str `1` into int64"):
        _spec(text.replace(b"major: 0x10", b"major: '1'"))


def test_selection_names_a_device_two_kinds_share_by_its_qualified_name(tmp_path: Path) -> None:
    for kind in ("a.com/x", "a.com/y"):
        (tmp_path / f"{kind.replace('/', '-')}.yaml").write_bytes(
            f"cdiVersion: 0.6.0\nkind: {kind}\ndevices:\n- name: d\n  containerEdits:\n"
            f"    env: [A=1]\n- name: e{kind[-1]}\n  containerEdits:\n    env: [A=1]\n".encode()
        )
    catalog = cdi.scan_dirs([str(tmp_path)], lambda p, i: _spec(Path(p).read_bytes()))
    kind = kind_of(DeviceBlock(cdi=CdiBlock(kind="a.com/*", spec_dirs=[str(tmp_path)])))
    assert kind.cdi is not None
    ids = sorted(s.id for s in select(kind.cdi, catalog))
    assert ids == ["a.com/x=d", "a.com/y=d", "ex", "ey"]


def test_majors_are_read_from_proc_devices(tmp_path: Path) -> None:
    table = tmp_path / "devices"
    table.write_text(
        "Character devices:\n  1 mem\n195 nvidia-frontend\n236 nvidia-caps\n\n"
        "Block devices:\n  7 loop\n259 blkext\n"
    )
    majors = Majors(str(table))
    assert majors.registered("char", 195) and majors.registered("char", 236)
    assert majors.registered("block", 7) and not majors.registered("char", 7)
    assert not Majors(str(tmp_path / "absent")).registered("char", 1)


DOC = ROOT / "docs" / "plugins" / "generic.md"


def test_the_page_shows_an_nvidia_spec_the_plugin_reads() -> None:
    """generic.md's NVIDIA example is a spec as nvidia-ctk writes it, MIG devices
    included, and the plugin reads it; its agent config is a cdi block."""
    text = DOC.read_text()
    (yaml,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    spec = cdi.read_spec(yaml.encode(), "/var/run/cdi/nvidia.yaml", 1)
    assert spec.kind == "nvidia.com/gpu"
    names = set(spec.devices)
    assert {"0", "0:1", "all"} <= names
    assert any(n.startswith("MIG-") for n in names) and any(n.startswith("GPU-") for n in names)
    assert "cdi {" in text and 'kind    = "nvidia.com/gpu"' in text
    assert "needs CDI hooks Nomad cannot run" in text and "LD_LIBRARY_PATH" in text
