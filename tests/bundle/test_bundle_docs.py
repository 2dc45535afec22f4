"""Every line that installs a bundle from ``dist/`` in the docs works on what ``make dist``
writes (issue 26: generic.md and nvidia.md still named ``dist/nomad-device-generic``).

The files ``make dist`` writes are taken from its own command lines (``make -n
dist``: each ``--ready-made ... --output-dir DIR`` makes ``DIR/<plugin>`` for
every ready-made plugin); each shell block of the docs that installs from
``dist/`` is then run as written, less ``sudo``, in a scratch checkout where
those files exist (small stand-ins) and ``/opt/nomad`` and ``/root`` are
scratch directories, and what lands in ``plugin_dir`` must be the plugin the
line names.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from support import ROOT

from nomad_device.bundle.build import ready_made_plugins

DOCS = ["docs/deploy.md", "docs/plugins/generic.md", "docs/plugins/nvidia.md"]

#: Commands of those blocks that are run; the rest (make dist, systemctl, pip) are not.
RUN = ("install", "mv", "ln", "cp")


def made_by_make_dist() -> set[str]:
    done = subprocess.run(
        ["make", "-n", "dist"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    made = set()
    for line in done.stdout.splitlines():
        words = shlex.split(line)
        if "--ready-made" in words:
            out = words[words.index("--output-dir") + 1]
            made |= {f"{out}/{name}" for name in ready_made_plugins()}
    assert made, done.stdout
    return made


def install_blocks(doc: str) -> list[list[str]]:
    """The shell blocks of ``doc`` that install from ``dist/``: their lines to run."""
    text = (ROOT / doc).read_text()
    blocks = []
    for body in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        lines = []
        for raw in body.splitlines():
            line = raw.split(" #", 1)[0].strip()
            words = line.removeprefix("sudo ").split()
            if words and words[0] in RUN:
                lines.append(line.removeprefix("sudo "))
        if any(re.search(r"\binstall\b.* dist/", line) for line in lines):
            blocks.append(lines)
    return blocks


@pytest.mark.parametrize("doc", DOCS)
def test_install_lines_work_on_what_make_dist_writes(doc: str, tmp_path: Path) -> None:
    made = made_by_make_dist()
    blocks = install_blocks(doc)
    assert blocks, f"{doc} has no line that installs a bundle from dist/"
    checkout = tmp_path / "checkout"
    for rel in made:
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text(f"bundle {rel}\n")
    opt, home = tmp_path / "opt", tmp_path / "root"
    home.mkdir()
    for lines in blocks:
        (opt / "nomad" / "plugins").mkdir(parents=True, exist_ok=True)
        for name in ready_made_plugins():  # what a swap replaces (nvidia.md: the Go binary)
            (opt / "nomad" / "plugins" / name).write_text("the plugin installed before\n")
        for line in lines:
            command = line.replace("/opt/", f"{opt}/").replace("/root/", f"{home}/")
            done = subprocess.run(
                ["/bin/sh", "-c", command], cwd=checkout, capture_output=True, text=True
            )
            assert done.returncode == 0, f"{doc}: `{line}` failed: {done.stderr}"
        # Each plugin that block installed is the bundle of the same name from dist/.
        sources = [
            re.search(r" (dist/\S+) ", f" {line} ") for line in lines if line.startswith("install")
        ]
        for source in filter(None, sources):
            name = Path(source[1]).name
            installed = opt / "nomad" / "plugins" / name
            assert installed.read_text() == f"bundle {source[1]}\n", (doc, source[1])
            assert installed.stat().st_mode & 0o777 == 0o755
