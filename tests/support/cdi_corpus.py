"""Spec shapes the cross-check reads: vendors' generators, CDI's own examples, every version.

Written here from what each generator emits (no file is copied): NVIDIA's
``nvidia-ctk cdi generate`` (GPUs by index and UUID, MIG devices, ``all``,
IMEX channels; libraries, binaries, firmware and the persistenced socket as
read-only mounts; ``nvidia-cdi-hook`` hooks), Intel's GPU and Gaudi specs,
AMD's ``amd-ctk`` spec, the shapes of the CDI repository's examples, one spec
per version with the feature that needs it, and files that are broken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nomad_device.plugins.generic.cdi import SPEC_VERSIONS
from support.cdi import STYLES, render

LIB = "/usr/lib/x86_64-linux-gnu"
DRIVER = "550.54.15"
HOOK = "/usr/bin/nvidia-cdi-hook"
RO = ["ro", "nosuid", "nodev", "bind"]


def _hook(*args: str) -> dict[str, Any]:
    return {"args": ["nvidia-cdi-hook", *args], "hookName": "createContainer", "path": HOOK}


def _mount(path: str, *extra: str) -> dict[str, Any]:
    return {"containerPath": path, "hostPath": path, "options": [*RO, *extra]}


def nvidia_gpu_spec(gpus: int = 2, mig: bool = True, nodes: str = "real") -> dict[str, Any]:
    """``nvidia-ctk cdi generate`` for ``gpus`` GPUs (index and UUID names), the first
    with two MIG devices, and ``all``. ``nodes``: "real" (the paths as on a GPU host),
    "minimal" (type and numbers given, as a runtime may inject without the host's
    nodes), "null" (host paths this machine has, to inject for real)."""

    def node(path: str, major: int, minor: int) -> dict[str, Any]:
        if nodes == "minimal":
            return {"path": path, "type": "c", "major": major, "minor": minor}
        if nodes == "null":
            return {"path": path, "hostPath": "/dev/null"}
        return {"path": path}

    devices = []
    every: list[dict[str, Any]] = []
    for index in range(gpus):
        uuid = f"GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c1{index:02d}"
        bus = f"0000:{0x3B + index:02x}:00.0"
        own = [
            node(f"/dev/nvidia{index}", 195, index),
            node(f"/dev/dri/card{index + 1}", 226, index + 1),
            node(f"/dev/dri/renderD{128 + index}", 226, 128 + index),
        ]
        every.extend(own)
        edits = {
            "deviceNodes": own,
            "hooks": [
                _hook(
                    "create-symlinks",
                    "--link",
                    f"../card{index + 1}::/dev/dri/by-path/pci-{bus}-card",
                    "--link",
                    f"../renderD{128 + index}::/dev/dri/by-path/pci-{bus}-render",
                ),
                _hook("chmod", "--mode", "755", "--path", "/dev/dri"),
            ],
        }
        devices.append({"containerEdits": edits, "name": str(index)})
        devices.append({"containerEdits": edits, "name": uuid})
        if mig and index == 0:
            for gi, caps in ((0, (12, 13)), (1, (21, 22))):
                mig_nodes = [node("/dev/nvidia0", 195, 0)] + [
                    node(f"/dev/nvidia-caps/nvidia-cap{c}", 236, c) for c in caps
                ]
                every.extend(mig_nodes[1:])
                mig_edits = {"deviceNodes": mig_nodes}
                devices.append({"containerEdits": mig_edits, "name": f"0:{gi}"})
                devices.append(
                    {
                        "containerEdits": mig_edits,
                        "name": f"MIG-a1b2c3d4-0000-5555-aaaa-00000000000{gi}",
                    }
                )
    devices.append({"containerEdits": {"deviceNodes": every}, "name": "all"})
    common = [
        node(f"/dev/{n}", 195, m)
        for n, m in (
            ("nvidia-modeset", 254),
            ("nvidia-uvm", 0),
            ("nvidia-uvm-tools", 1),
            ("nvidiactl", 255),
        )
    ]
    if nodes == "minimal":
        common[1]["major"] = common[2]["major"] = 510
    return {
        "cdiVersion": "0.5.0" if nodes != "minimal" else "0.3.0",
        "containerEdits": {
            "deviceNodes": common,
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "hooks": [
                {
                    **_hook(
                        "create-symlinks",
                        "--link",
                        f"libglxserver_nvidia.so.{DRIVER}::{LIB}/nvidia/xorg/libglxserver_nvidia.so",
                    ),
                    "env": ["NVIDIA_CTK_DEBUG=false"],
                },
                _hook("enable-cuda-compat", f"--host-driver-version={DRIVER}"),
                _hook("update-ldcache", "--folder", LIB),
                _hook("disable-device-node-modification"),
            ],
            "mounts": [
                _mount("/run/nvidia-persistenced/socket", "noexec"),
                _mount("/usr/bin/nvidia-smi"),
                _mount("/usr/bin/nvidia-debugdump"),
                _mount(f"{LIB}/libcuda.so.{DRIVER}"),
                _mount(f"{LIB}/libnvidia-ml.so.{DRIVER}"),
                _mount(f"{LIB}/libnvidia-ptxjitcompiler.so.{DRIVER}"),
                _mount(f"/lib/firmware/nvidia/{DRIVER}/gsp_ga10x.bin"),
            ],
        },
        "devices": devices,
        "kind": "nvidia.com/gpu",
    }


def nvidia_imex_spec(channels: int = 4) -> dict[str, Any]:
    return {
        "cdiVersion": "0.5.0",
        "devices": [
            {
                "containerEdits": {
                    "deviceNodes": [{"path": f"/dev/nvidia-caps-imex-channels/channel{i}"}]
                },
                "name": str(i),
            }
            for i in range(channels)
        ],
        "kind": "nvidia.com/imex-channel",
    }


def intel_gpu_spec() -> dict[str, Any]:
    return {
        "cdiVersion": "0.5.0",
        "kind": "intel.com/gpu",
        "devices": [
            {
                "name": f"card{i}",
                "containerEdits": {
                    "deviceNodes": [
                        {"path": f"/dev/dri/card{i}", "type": "c", "major": 226, "minor": i},
                        {
                            "path": f"/dev/dri/renderD{128 + i}",
                            "type": "c",
                            "major": 226,
                            "minor": 128 + i,
                        },
                    ]
                },
            }
            for i in range(2)
        ],
    }


def habana_spec() -> dict[str, Any]:
    return {
        "cdiVersion": "0.6.0",
        "kind": "habana.ai/gaudi",
        "annotations": {"habana.ai/driver": "1.17.0"},
        "devices": [
            {
                "name": str(i),
                "annotations": {"habana.ai/pci": f"0000:{0x19 + i:02x}:00.0"},
                "containerEdits": {
                    "deviceNodes": [
                        {"path": f"/dev/accel/accel{i}"},
                        {"path": f"/dev/accel/accel_controlD{i}"},
                    ]
                },
            }
            for i in range(2)
        ],
    }


def amd_spec() -> dict[str, Any]:
    return {
        "cdiVersion": "0.6.0",
        "kind": "amd.com/gpu",
        "containerEdits": {"deviceNodes": [{"path": "/dev/kfd", "hostPath": "/dev/kfd"}]},
        "devices": [
            {
                "name": f"gpu{i}",
                "containerEdits": {
                    "deviceNodes": [
                        {"path": f"/dev/dri/card{i + 1}", "hostPath": f"/dev/dri/card{i + 1}"},
                        {
                            "path": f"/dev/dri/renderD{128 + i}",
                            "hostPath": f"/dev/dri/renderD{128 + i}",
                        },
                    ]
                },
            }
            for i in range(2)
        ]
        + [{"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/dri/card1"}]}}],
    }


def vendor_example(version: str = "0.3.0") -> dict[str, Any]:
    """The shape of the CDI README's example: one device, spec-level edits of every kind
    the earliest version has."""
    return {
        "cdiVersion": version,
        "kind": "vendor.com/device",
        "devices": [
            {
                "name": "myDevice",
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": "/dev/card1",
                            "type": "c",
                            "major": 25,
                            "minor": 25,
                            "fileMode": 384,
                            "permissions": "rw",
                            "uid": 1000,
                            "gid": 1000,
                        },
                        {"path": "/dev/card-render1", "type": "c", "major": 25, "minor": 25},
                    ]
                },
            },
        ],
        "containerEdits": {
            "env": ["FOO=VALID_SPEC", "BAR=BARVALUE1"],
            "deviceNodes": [{"path": "/dev/vendorctl", "type": "b", "major": 25, "minor": 25}],
            "mounts": [
                {"hostPath": "/bin/vendorBin", "containerPath": "/bin/vendorBin"},
                {"hostPath": "/usr/lib/libVendor.so.0", "containerPath": "/usr/lib/libVendor.so.0"},
            ],
            "hooks": [{"hookName": "createContainer", "path": "/bin/vendor-hook"}],
        },
    }


def null_devices(kind: str = "example.com/dev", version: str = "1.1.0") -> dict[str, Any]:
    """Devices on nodes every Linux host has: injecting them works for real."""
    return {
        "cdiVersion": version,
        "kind": kind,
        "containerEdits": {
            "env": ["SPEC=1", "SHARED=spec"],
            "deviceNodes": [{"path": "/dev/full"}],
            "mounts": [
                {"hostPath": "/usr/lib", "containerPath": "/usr/lib/ext", "options": ["ro", "bind"]}
            ],
        },
        "devices": [
            {
                "name": "null",
                "containerEdits": {
                    "deviceNodes": [{"path": "/dev/null"}],
                    "env": ["SHARED=null", "A=1"],
                },
            },
            {
                "name": "zero",
                "containerEdits": {
                    "deviceNodes": [{"path": "/dev/zero", "permissions": "r"}],
                    "env": ["SHARED=zero", "B=2"],
                    "mounts": [
                        {
                            "hostPath": "/usr/lib",
                            "containerPath": "/usr/lib/ext",
                            "options": ["rw"],
                        },
                        {"hostPath": "/bin", "containerPath": "/x"},
                    ],
                },
            },
            {
                "name": "both",
                "containerEdits": {
                    "deviceNodes": [
                        {"path": "/dev/null"},
                        {"path": "/dev/zero", "permissions": "none"},
                    ]
                },
            },
        ],
    }


def _one(
    version: str,
    edits: dict[str, Any],
    kind: str = "example.com/dev",
    name: str = "d",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name, "containerEdits": edits}
    if annotations:
        device["annotations"] = annotations
    return {"cdiVersion": version, "kind": kind, "devices": [device]}


#: Each feature and the first version that has it.
FEATURES: dict[str, tuple[str, Callable[[str], dict[str, Any]]]] = {
    "mount type": (
        "0.4.0",
        lambda v: _one(v, {"mounts": [{"hostPath": "/a", "containerPath": "/a", "type": "bind"}]}),
    ),
    "hostPath": (
        "0.5.0",
        lambda v: _one(v, {"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/null"}]}),
    ),
    "digit name": ("0.5.0", lambda v: _one(v, {"env": ["A=1"]}, name="0")),
    "annotations": ("0.6.0", lambda v: _one(v, {"env": ["A=1"]}, annotations={"a": "b"})),
    "dotted class": ("0.6.0", lambda v: _one(v, {"env": ["A=1"]}, kind="example.com/a.b")),
    "intelRdt": ("0.7.0", lambda v: _one(v, {"intelRdt": {"closID": "c1"}})),
    "additionalGids": ("0.7.0", lambda v: _one(v, {"additionalGids": [44]})),
    "schemata": ("1.1.0", lambda v: _one(v, {"intelRdt": {"schemata": []}})),
    "enableMonitoring": ("1.1.0", lambda v: _one(v, {"intelRdt": {"enableMonitoring": True}})),
    "netDevices": (
        "1.1.0",
        lambda v: _one(v, {"netDevices": [{"hostInterfaceName": "eth1", "name": "n"}]}),
    ),
}


@dataclass
class Case:
    """Spec directories to write and read: files as (directory, name, bytes)."""

    name: str
    files: list[tuple[int, str, bytes]] = field(default_factory=list)
    dirs: int = 1
    combos: list[list[str]] = field(default_factory=list)
    declined: bool = False  # the plugin refuses what go-yaml reads: outside the subset
    setup: Callable[[list[Path]], None] | None = None


def _case(name: str, spec: dict[str, Any], style: str, **extra: Any) -> Case:
    suffix = ".json" if STYLES[style].json else ".yaml"
    return Case(name, [(0, "spec" + suffix, render(spec, STYLES[style], seed=len(name)))], **extra)


def _text(name: str, text: str | bytes, file: str = "spec.yaml", **extra: Any) -> Case:
    data = text.encode() if isinstance(text, str) else text
    return Case(name, [(0, file, data)], **extra)


GOOD: dict[str, Callable[[], dict[str, Any]]] = {
    "nvidia gpus": nvidia_gpu_spec,
    "nvidia gpus, minimal nodes": lambda: nvidia_gpu_spec(nodes="minimal"),
    "nvidia gpus on /dev/null": lambda: nvidia_gpu_spec(nodes="null"),
    "nvidia imex": nvidia_imex_spec,
    "intel gpu": intel_gpu_spec,
    "habana gaudi": habana_spec,
    "amd gpu": amd_spec,
    "cdi example 0.3.0": vendor_example,
    "cdi example v1.0.0": lambda: vendor_example("v1.0.0"),
    "host nodes": null_devices,
}

NULL_COMBOS = [
    ["example.com/dev=null", "example.com/dev=zero"],
    ["example.com/dev=zero", "example.com/dev=null", "example.com/dev=both"],
    ["example.com/dev=both", "example.com/dev=null"],
]


def version_cases() -> list[Case]:
    """Each feature at its first version (read), the version before (refused), and every
    version with a spec that needs none."""
    cases = []
    for feature, (first, build) in FEATURES.items():
        older = SPEC_VERSIONS[SPEC_VERSIONS.index(first) + 1]
        cases.append(_case(f"{feature} at {first}", build(first), "yaml-k8s"))
        cases.append(_case(f"{feature} at {older}", build(older), "json"))
    for version in (
        "0.1.0",
        "0.2.0",
        "0.3.0",
        "0.4.0",
        "0.5.0",
        "0.6.0",
        "0.7.0",
        "0.8.0",
        "1.0.0",
        "1.1.0",
        "v0.3.0",
        "1.2.0",
        "0.9.0",
        "",
        "V1.0.0",
        "vv1.0.0",
    ):
        cases.append(_case(f"version {version!r}", _one(version, {"env": ["A=1"]}), "yaml-hand"))
    return cases


def overriding_cases() -> list[Case]:
    def spec(value: str, *names: str) -> bytes:
        devices = [{"name": n, "containerEdits": {"env": [f"FROM={value}"]}} for n in names]
        return render(
            {"cdiVersion": "0.6.0", "kind": "example.com/dev", "devices": devices},
            STYLES["yaml-k8s"],
        )

    return [
        Case(
            "later directory overrides",
            [(0, "a.yaml", spec("etc", "x", "y")), (1, "a.yaml", spec("run", "x"))],
            dirs=2,
        ),
        Case(
            "same directory conflicts",
            [(0, "a.yaml", spec("a", "x", "y")), (0, "b.json", spec("b", "x"))],
        ),
        Case(
            "conflict below, override above",
            [
                (0, "a.yaml", spec("a", "x")),
                (0, "b.yaml", spec("b", "x")),
                (1, "c.yaml", spec("c", "x")),
            ],
            dirs=2,
        ),
        Case(
            "override then conflict",
            [
                (0, "a.yaml", spec("a", "x")),
                (1, "b.yaml", spec("b", "x")),
                (1, "c.yaml", spec("c", "x")),
            ],
            dirs=2,
        ),
        Case(
            "three directories",
            [
                (0, "a.yaml", spec("0", "x", "y", "z")),
                (1, "a.yaml", spec("1", "y")),
                (2, "z.json", spec("2", "z")),
            ],
            dirs=3,
        ),
        Case(
            "ignored extensions",
            [
                (0, "a.yml", spec("yml", "x")),
                (0, "b.txt", spec("txt", "y")),
                (0, "c", spec("none", "z")),
                (0, ".json", spec("hidden", "w")),
                (0, "d.JSON", spec("upper", "v")),
            ],
        ),
        Case("directory entries", [(0, "real.yaml", spec("real", "x"))], setup=_directory_entries),
        Case(
            "a spec directory that is a file",
            [(1, "a.yaml", spec("1", "x"))],
            dirs=3,
            setup=_file_dir,
        ),
    ]


def _directory_entries(dirs: list[Path]) -> None:
    (dirs[0] / "sub.yaml").mkdir()
    (dirs[0] / "link.json").symlink_to(dirs[0] / "sub.yaml")
    (dirs[0] / "dangling.yaml").symlink_to(dirs[0] / "nowhere.yaml")
    (dirs[0] / "alias.yaml").symlink_to(dirs[0] / "real.yaml")


def _file_dir(dirs: list[Path]) -> None:
    """The middle directory is a file: the library stops there, leaving the last unread."""
    dirs[1].rename(dirs[1].with_name("gone"))
    dirs[1].write_text("not a directory\n")
    (dirs[2] / "z.yaml").write_bytes(render(_one("0.6.0", {"env": ["A=1"]}), STYLES["yaml-k8s"]))


MINIMAL = (
    "cdiVersion: 0.6.0\nkind: example.com/dev\ndevices:\n- name: d\n  containerEdits:\n"
    "    env: [A=1]\n"
)

BROKEN: dict[str, str | bytes] = {
    "empty file": "",
    "only comments": "# nothing here\n",
    "only a document start": "---\n",
    "null document": "~\n",
    "a list": "- a\n- b\n",
    "a string": "hello\n",
    "truncated": MINIMAL[:-12],
    "truncated json": '{"cdiVersion": "0.6.0", "kind": "example.com/dev", "devices": [',
    "tab indentation": MINIMAL.replace("  containerEdits", "\tcontainerEdits"),
    "unknown escape": MINIMAL.replace("A=1", '"A=\\q"'),
    "json slash escape": '{"cdiVersion": "0.6.0", "kind": "example.com\\/dev", "devices": []}',
    "surrogate escape": MINIMAL.replace("A=1", '"A=\\ud800"'),
    "duplicate key": MINIMAL + "kind: example.com/other\n",
    "duplicate quoted key": MINIMAL + '"kind": example.com/other\n',
    "duplicate annotation": MINIMAL + "annotations:\n  a: b\n  'a': c\n",
    "unknown field": MINIMAL + "vendor: x\n",
    "unknown device field": MINIMAL + "  devices: []\n",
    "wrong case": MINIMAL.replace("cdiVersion", "CDIVersion"),
    "major as a string": MINIMAL.replace(
        "env: [A=1]", "deviceNodes: [{path: /dev/null, major: '1'}]"
    ),
    "major as a bool": MINIMAL.replace(
        "env: [A=1]", "deviceNodes: [{path: /dev/null, major: true}]"
    ),
    "negative minor": MINIMAL.replace("env: [A=1]", "deviceNodes: [{path: /dev/null, minor: -1}]"),
    "uid out of range": MINIMAL.replace(
        "env: [A=1]", "deviceNodes: [{path: /dev/null, uid: 4294967296}]"
    ),
    "null device node": MINIMAL.replace("env: [A=1]", "deviceNodes: [~]"),
    "null mount": MINIMAL.replace("env: [A=1]", "mounts: [null]"),
    "null mount, digit device": MINIMAL.replace("name: d", "name: '0'").replace(
        "env: [A=1]", "mounts: [null]"
    ),
    "null hook": MINIMAL.replace("env: [A=1]", "hooks: [~]"),
    "null net device": MINIMAL.replace("0.6.0", "1.1.0").replace("env: [A=1]", "netDevices: [~]"),
    "env not a list": MINIMAL.replace("env: [A=1]", "env: A=1"),
    "edits a list": MINIMAL.replace("containerEdits:\n    env: [A=1]", "containerEdits: []"),
    "devices a map": "cdiVersion: 0.6.0\nkind: example.com/dev\ndevices: {a: b}\n",
    "control character": MINIMAL.replace("A=1", "A=\x01"),
    "invalid utf-8": MINIMAL.encode().replace(b"A=1", b"A=\xff"),
    "mapping value in a scalar": MINIMAL.replace("kind: example.com/dev", "kind: example.com: dev"),
    "block entry after a value": MINIMAL.replace("env: [A=1]", "env: - A=1"),
    "unclosed flow": MINIMAL.replace("[A=1]", "[A=1"),
    "unclosed quote": MINIMAL.replace("example.com/dev", '"example.com/dev'),
    "two values in flow": MINIMAL.replace("[A=1]", '["A=1" "B=2"]'),
    "no devices": "cdiVersion: 0.6.0\nkind: example.com/dev\ndevices: []\n",
    "empty device edits": "cdiVersion: 0.6.0\nkind: example.com/dev\ndevices:\n- name: d\n",
    "duplicate device": MINIMAL + "- name: d\n  containerEdits: {env: [B=1]}\n",
    "bad permissions": MINIMAL.replace(
        "env: [A=1]", "deviceNodes: [{path: /dev/null, permissions: rwx}]"
    ),
    "bad hook name": MINIMAL.replace("env: [A=1]", "hooks: [{hookName: later, path: /bin/x}]"),
    "bad env": MINIMAL.replace("A=1", "=1"),
    "bad kind": MINIMAL.replace("example.com/dev", "example.com/dev/x"),
    "bad clos": MINIMAL.replace("0.6.0", "0.7.0").replace("env: [A=1]", "intelRdt: {closID: ..}"),
    "duplicate net": MINIMAL.replace("0.6.0", "1.1.0").replace(
        "env: [A=1]",
        "netDevices: [{hostInterfaceName: e, name: a}, {hostInterfaceName: e, name: b}]",
    ),
}

ODD_BUT_FINE: dict[str, str | bytes] = {
    "second document ignored": MINIMAL + "---\n: : garbage [\n",
    "document end then junk": MINIMAL + "...\n\x01 junk\n",
    "bom": b"\xef\xbb\xbf" + MINIMAL.encode(),
    "crlf": MINIMAL.replace("\n", "\r\n"),
    "comments everywhere": "# head\ncdiVersion: 0.6.0 # v\nkind: example.com/dev\n\n"
    "devices: # list\n"
    "  # about d\n  - name: d\n    containerEdits:\n      env:\n        - A=1 # one\n",
    "null keys ignored": MINIMAL + "~: ignored\nnull: too\n",
    "null values": MINIMAL.replace("kind:", "annotations: ~\ncontainerEdits: ~\nkind:"),
    "null list entries dropped": MINIMAL.replace("[A=1]", "[~, A=1, null]"),
    "null device dropped": MINIMAL + "- ~\n",
    "numbers as strings": MINIMAL.replace("name: d", "name: 0x10").replace("0.6.0", "0.6.0"),
    "yaml numbers": MINIMAL.replace(
        "env: [A=1]",
        "deviceNodes: [{path: /dev/null, major: 0x1, minor: 0o3,"
        " fileMode: 0644, uid: 1_000, gid: 1.9}]",
    ),
    "float major": MINIMAL.replace(
        "env: [A=1]", "deviceNodes: [{path: /dev/null, type: c, major: 1e0, minor: .5}]"
    ),
    "bools for monitoring": MINIMAL.replace("0.6.0", "1.1.0").replace(
        "env: [A=1]", "intelRdt: {enableMonitoring: yes}"
    ),
    "quoted bool": MINIMAL.replace("0.6.0", "1.1.0").replace(
        "env: [A=1]", "intelRdt: {enableMonitoring: 'on'}"
    ),
    "quoted true refused": MINIMAL.replace("0.6.0", "1.1.0").replace(
        "env: [A=1]", "intelRdt: {enableMonitoring: 'true'}"
    ),
    "escapes": MINIMAL.replace("A=1", '"A=\\x41\\u00e9\\U0001F600\\t\\\\\\"\\N\\_"'),
    "single quotes": MINIMAL.replace("A=1", "'A=it''s'"),
    "trailing comma": MINIMAL.replace("[A=1]", "[A=1, B=2, ]"),
    "json compact": '{"cdiVersion":"0.6.0","kind":"example.com/dev","devices":'
    '[{"name":"d","containerEdits":{"env":["A=1"]}}]}',
    "annotations not checked": MINIMAL.replace(
        "name: d", "name: d\n  annotations: {'not a valid key!': x}"
    ),
    "v prefix": MINIMAL.replace("0.6.0", "v0.6.0"),
    "indented sequences": "cdiVersion: 0.6.0\nkind: example.com/dev\ndevices:\n"
    "    -   name: d\n        containerEdits:\n"
    "            env:\n                - A=1\n",
    "nested compact sequences": MINIMAL.replace(
        "env: [A=1]",
        "hooks:\n    - hookName: poststop\n      path: /bin/x\n      args:\n      - a\n      - b",
    ),
    "key with spaces before colon": MINIMAL.replace("kind:", "kind   :"),
    "flow over lines": MINIMAL.replace("[A=1]", "[\n  A=1,\n      B=2\n  ]"),
}

#: Valid YAML this plugin does not read: go-yaml reads each; the plugin refuses, saying so.
DECLINED: dict[str, str] = {
    "anchor and alias": MINIMAL.replace(
        "env: [A=1]", "env: &e [A=1]\n- name: e\n  containerEdits:\n    env: *e"
    ),
    "block scalar": MINIMAL.replace("kind: example.com/dev", "kind: |-\n  example.com/dev"),
    "folded plain scalar": MINIMAL.replace("env: [A=1]", "env:\n    - A=one\n      two"),
    "multi-line quoted": MINIMAL.replace("env: [A=1]", 'env:\n    - "A=one\n      two"'),
    "merge key": MINIMAL.replace("env: [A=1]", "<<: {env: [A=1]}"),
    "tag": MINIMAL.replace("kind:", "kind: !!str"),
    "explicit key": MINIMAL.replace("kind: example.com/dev", "? kind\n: example.com/dev"),
    "directive": "%TAG !e! tag:example.com,2000:\n---\n" + MINIMAL,
    "tab after colon": MINIMAL.replace("kind: ", "kind:\t"),
    "implicit pair in flow sequence": MINIMAL.replace(
        "env: [A=1]", "deviceNodes: [path: /dev/null]"
    ),
}


def corpus() -> list[Case]:
    cases: list[Case] = []
    for name, build in GOOD.items():
        for style in sorted(STYLES):
            combos = NULL_COMBOS if name == "host nodes" else []
            if name.startswith("nvidia gpus"):
                combos = [
                    ["nvidia.com/gpu=0", "nvidia.com/gpu=1"],
                    ["nvidia.com/gpu=0:0", "nvidia.com/gpu=0:1"],
                    ["nvidia.com/gpu=all", "nvidia.com/gpu=0"],
                ]
            cases.append(_case(f"{name} ({style})", build(), style, combos=combos))
    cases.append(
        Case(
            "nvidia gpus and imex side by side",
            [
                (0, "nvidia.yaml", render(nvidia_gpu_spec(nodes="minimal"), STYLES["yaml-k8s"])),
                (1, "nvidia-imex.json", render(nvidia_imex_spec(), STYLES["json-indent"])),
            ],
            dirs=2,
            combos=[["nvidia.com/gpu=0", "nvidia.com/imex-channel=1"]],
        )
    )
    cases.extend(version_cases())
    cases.extend(overriding_cases())
    cases.extend(_text(f"broken: {name}", text) for name, text in BROKEN.items())
    cases.extend(_text(f"odd: {name}", text) for name, text in ODD_BUT_FINE.items())
    cases.extend(_text(f"declined: {name}", text, declined=True) for name, text in DECLINED.items())
    return cases


def write_case(base: Path, case: Case) -> list[str]:
    dirs = [base / f"d{i}" for i in range(case.dirs)]
    for directory in dirs:
        directory.mkdir(parents=True)
    for index, name, data in case.files:
        (dirs[index] / name).write_bytes(data)
    if case.setup is not None:
        case.setup(dirs)
    return [str(d) for d in dirs]
