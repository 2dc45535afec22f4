"""``nomad-device-bundle --inspect`` reads an untrusted bundle within bounds (issue 26).

On main it read the whole payload into memory and each METADATA whole: a
64 KB bundle whose METADATA inflates to 600 MB cost 627 MB. Here it reads the
payload through a window of the file and at most READ_CAP bytes of any
member, and says what it cut short.
"""

from __future__ import annotations

import re
import tempfile
import tracemalloc
from pathlib import Path

from support.bundle import build

from nomad_device.bundle.archive import READ_CAP, contents, write_bundle
from nomad_device.bundle.build import SCRIPT_MODULE

#: What the huge METADATA inflates to (deflate makes it about 100 KB in the bundle).
HUGE = 96 * 2**20


def _bundle_with_huge_metadata(output: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        (site / f"{SCRIPT_MODULE}.py").write_text("print('never run')\n")
        info = site / "bomb-1.0.dist-info"
        info.mkdir()
        with open(info / "METADATA", "w") as fh:
            fh.write("Metadata-Version: 2.1\nName: bomb\nVersion: 1.0\n\n")
            line = "x" * 1023 + "\n"
            for _ in range(HUGE // 1024):
                fh.write(line)
        write_bundle(
            site, output, name="bomb", version="1", kind="script", entry=SCRIPT_MODULE, glibc=None
        )


def test_a_huge_metadata_is_read_only_as_far_as_its_headers(tmp_path: Path) -> None:
    bundle = tmp_path / "bomb"
    _bundle_with_huge_metadata(bundle)
    assert bundle.stat().st_size < HUGE // 100
    tracemalloc.start()
    try:
        report = contents(bundle)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report["carries"]["site"]["distributions"] == {"bomb": "1.0"}
    (note,) = report["notes"]
    assert re.fullmatch(
        rf"site/bomb-1\.0\.dist-info/METADATA is \d+ bytes: read only its first {READ_CAP} "
        "for its name and version",
        note,
    ), note
    # What was read stays near the cap (a member's window and zipfile's buffers), far
    # below the METADATA's size.
    assert peak < 8 * READ_CAP, peak


def test_a_bootstrap_larger_than_the_cap_is_refused_by_the_command(tmp_path: Path) -> None:
    bundle = tmp_path / "tiny"
    _bundle_with_small_site(bundle)
    text = bundle.read_bytes()
    found = re.search(rb"c\[: *(\d+)\]", text)
    assert found is not None
    width = len(found[1])
    forged = text[: found.start(1)] + str(10**9).rjust(width).encode() + text[found.end(1) :]
    bundle.write_bytes(forged)
    done = build("--inspect", str(bundle))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"nomad-device-bundle: {bundle}'s bootstrap is larger than {READ_CAP // 1024} KiB\n"
    )


def _bundle_with_small_site(output: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        (site / f"{SCRIPT_MODULE}.py").write_text("print('hello')\n")
        write_bundle(
            site, output, name="tiny", version="1", kind="script", entry=SCRIPT_MODULE, glibc=None
        )
