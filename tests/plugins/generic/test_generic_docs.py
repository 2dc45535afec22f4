"""Every HCL block in docs/plugins/generic.md decodes as a Nomad agent would decode it.

Agent configs go through the launcher's mirror of Nomad's pipeline (HCL 1 into
Go-shaped JSON, then hcldec against the plugin's own schema, then cty msgpack)
and on into the plugin's decoder and validation. Job blocks must parse, and
every device they ask for must name a group the page's agent configs produce.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import hcl2
import pytest
from support import ROOT

from nomad_device.agentconfig import agentfile
from nomad_device.agentconfig.hcldec import compile_spec, decode, encode
from nomad_device.errors import InvalidArgument
from nomad_device.plugins.generic.config import Settings, settings_from
from nomad_device.plugins.generic.plugin import GenericDevicePlugin

DOC = ROOT / "docs" / "plugins" / "generic.md"
BLOCKS = re.findall(r"```hcl\n(.*?)```", DOC.read_text(), re.S)
AGENT = [b for b in BLOCKS if b.lstrip().startswith('plugin "nomad-device-generic"')]
JOBS = [b for b in BLOCKS if b.lstrip().startswith("job ")]


def agent_settings(text: str) -> Settings:
    plugin = GenericDevicePlugin()
    block = agentfile.parse_agent_text(text, "generic.md").select(["nomad-device-generic"], None)
    decoded = decode(compile_spec(plugin.config_schema()), block.config)
    assert decoded.ok, [d.render("generic.md") for d in decoded.diagnostics]
    return settings_from(plugin.decode_config(encode(decoded)))


def test_the_page_has_the_examples_the_issue_asks_for() -> None:
    assert len(BLOCKS) == len(AGENT) + len(JOBS), "every hcl block is an agent config or a job"
    labels = {k.label for text in AGENT for k in agent_settings(text).kinds}
    assert {"kvm", "fuse", "tun", "serial", "zigbee-upstairs", "coral"} <= labels
    # The PCI presets (issue 21), each run on its fake tree by test_generic_pci.py.
    presets = {"amd", "intel", "gaudi", "neuron", "alveo", "edgetpu", "passthrough"}
    assert presets | {"virtio-disk"} <= labels
    drivers = " ".join(JOBS)
    assert drivers.count('driver = "exec"') >= 6 and drivers.count('driver = "docker"') >= 6


@pytest.mark.parametrize("text", AGENT, ids=[f"agent{i}" for i in range(len(AGENT))])
def test_agent_examples_decode_and_validate(text: str) -> None:
    settings = agent_settings(text)
    assert settings.kinds


def _groups() -> set[tuple[str, str, str]]:
    return {(k.vendor, k.type, k.name) for text in AGENT for k in agent_settings(text).kinds}


def _resolves(request: str, groups: set[tuple[str, str, str]]) -> bool:
    """Nomad's name forms: type, vendor/type, vendor/type/name."""
    parts = request.split("/", 2)
    for vendor, dtype, name in groups:
        if len(parts) == 1 and parts[0] == dtype:
            return True
        if len(parts) == 2 and parts == [vendor, dtype]:
            return True
        if len(parts) == 3 and parts == [vendor, dtype, name]:
            return True
    return False


@pytest.mark.parametrize("text", JOBS, ids=[f"job{i}" for i in range(len(JOBS))])
def test_job_examples_parse_and_ask_for_configured_groups(text: str) -> None:
    hcl2.loads(text)
    requests = re.findall(r'device "([^"]+)"', text)
    assert requests
    groups = _groups()
    for request in requests:
        assert _resolves(request, groups), f"no example config offers {request!r}"


def test_refused_configs_read_as_the_page_says() -> None:
    """The error messages quoted on the page are the plugin's own."""
    quoted = re.search(r"```text\n(.*?)```", DOC.read_text(), re.S)
    assert quoted is not None
    lines = quoted.group(1).strip().splitlines()
    bad = {
        "kvm": 'device "kvm" {\n paths = ["/dev/kvm"]\n permissions = "rwx"\n }',
        "ch340": 'device "ch340" {\n usb {\n vendor_id = "zz12"\n }\n }',
        "disk": 'device "disk" {\n pci {\n vendor_id = "0x1af4"\n }\n }',
        "b": 'device "a" {\n type = "kvm"\n name = "kvm"\n paths = ["/dev/kvm"]\n }\n'
        'device "b" {\n type = "kvm"\n name = "kvm"\n paths = ["/dev/kvm"]\n }',
    }
    for line, body in zip(lines, bad.values(), strict=True):
        text = f'plugin "nomad-device-generic" {{\n config {{\n{body}\n }}\n}}\n'
        with pytest.raises(InvalidArgument) as refused:
            agent_settings(text)
        assert line == f"SetConfig failed: {refused.value}"


def test_duplicate_labels_and_unknown_keys_are_refused_by_the_agent() -> None:
    plugin = GenericDevicePlugin()
    spec = compile_spec(plugin.config_schema())
    for body, phrase in (
        ('device "kvm" {\n paths = ["/a"]\n }\ndevice "kvm" {\n paths = ["/b"]\n }', "Duplicate"),
        ('device "kvm" {\n pathz = ["/a"]\n }', '"pathz"'),
    ):
        text = f'plugin "nomad-device-generic" {{\n config {{\n{body}\n }}\n}}\n'
        block = agentfile.parse_agent_text(text, "t.hcl").select(["nomad-device-generic"], None)
        decoded = decode(spec, block.config)
        assert not decoded.ok
        assert phrase in " ".join(d.render("t.hcl") for d in decoded.diagnostics)


def test_maps_decode_from_either_spelling() -> None:
    """An agent file reads ``env { ... }`` and ``env = { ... }`` alike: as a block."""
    for spelling in ('env {\n A = "b"\n }', 'env = { A = "b" }'):
        body = f'device "kvm" {{\n paths = ["/dev/kvm"]\n {spelling}\n }}'
        text = f'plugin "nomad-device-generic" {{\n config {{\n{body}\n }}\n}}\n'
        (kind,) = agent_settings(text).kinds
        assert dict(kind.env) == {"A": "b"}


def test_the_presets_say_what_their_layouts_were_checked_against() -> None:
    text = DOC.read_text()
    section = text[text.index("### Presets") : text.index("## Device identity")]
    table = re.search(
        r"\| preset \| layout checked against \| met a real kernel \(`tests/kernel`\) \|\n"
        r"\| --- \| --- \| --- \|\n(.*?)\n\n",
        section,
        re.S,
    )
    assert table is not None
    rows = table.group(1).splitlines()
    assert len(rows) == 8
    # Every preset says which of its parts met the real-kernel tier, if only "none".
    assert all(len([c for c in row.split(" | ") if c.strip(" |")]) == 3 for row in rows), rows
    anchors = re.findall(r"\]\(#([a-z0-9-]+)\)", table.group(1))
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#### (.*)$", section, re.M)
    }
    assert set(anchors) <= headings, set(anchors) - headings
    assert sum("a real sysfs" in row for row in rows) == 1


def test_the_agents_unknown_key_message_is_what_the_decoder_says() -> None:
    """The agent's message and the launcher's, as quoted, for ``pathz`` in ``device "kvm"``."""
    page = DOC.read_text()
    agent = next(b for b in re.findall(r"```text\n(.*?)```", page, re.S) if "Error starting" in b)
    launcher = next(b for b in re.findall(r"```text\n(.*?)```", page, re.S) if "$ nomad" in b)
    plugin = GenericDevicePlugin()
    name = plugin.plugin_info().name
    text = (
        'plugin "nomad-device-generic" {\n  config {\n    device "kvm" {\n'
        '      pathz = ["/dev/kvm"]\n    }\n  }\n}\n'
    )
    where = "/etc/nomad.d/client.hcl"
    block = agentfile.parse_agent_text(text, where).select(["nomad-device-generic"], None)
    [diagnostic] = decode(compile_spec(plugin.config_schema()), block.config).diagnostics
    # Nomad's loader: multierror prefixes around "<summary>: <detail>" (helper/pluginutils).
    assert agent.splitlines()[1] == (
        f'\t* plugin "{name}" (device): failed to parse config:  '
        f"{diagnostic.summary}: {diagnostic.detail}"
    )
    assert launcher.splitlines()[1:] == ["error: failed to parse config:", diagnostic.render(where)]


def test_the_loop_device_pattern_leaves_loop_control_out(tmp_path: Path) -> None:
    # The plugin matches paths with Python's glob; the page's pattern is the one it names.
    page = DOC.read_text()
    [pattern] = re.findall(r"`/dev/(loop[^`]*)` gives `loop0`", page)
    for name in ("loop0", "loop12", "loop-control"):
        (tmp_path / name).touch()
    assert sorted(Path(p).name for p in glob.glob(str(tmp_path / pattern))) == ["loop0", "loop12"]
    assert "loop-control" in {Path(p).name for p in glob.glob(str(tmp_path / "loop*"))}
