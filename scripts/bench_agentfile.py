"""Reading agent files with many ``plugin`` blocks: CPU time against size.

The agent emulator's reader (``agentconfig/agentfile.py`` on ``hcl1.py``) once
kept the keys HCL 1 leaves unused in a list searched for every block, so a
file's reading grew with the square of its blocks (20,000 blocks: 84 s).
This prints the CPU time for 10,000, 20,000 and 40,000 blocks (best of three);
linear reading doubles it with the size.

Run (about a minute):

    .venv/bin/python scripts/bench_agentfile.py
"""

from __future__ import annotations

import time

from nomad_device.agentconfig import agentfile


def main() -> None:
    print(f"{'blocks':>7} {'bytes':>9} {'CPU s':>7}")
    for n in (10_000, 20_000, 40_000):
        text = "".join(
            f'plugin "nomad-device-{i}" {{\n  config {{\n    dir = "/srv/{i}"\n  }}\n}}\n'
            for i in range(n)
        )
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            agentfile.parse_agent_text(text, "agent.hcl")
            best = min(best, time.process_time() - start)
        print(f"{n:>7} {len(text):>9} {best:>7.2f}")


if __name__ == "__main__":
    main()
