"""One line of `run.sh ab`'s summary from a tower_host_time.py JSON (base or current side).

The lent host's speed drifts by up to 2x between runs, so besides the raw figures the line
gives the hook's host time other than the copy issue as a multiple of the copy issue clocked
in the same run: a ratio of two costs on one host, stable where the raw figures are not.
"""

from __future__ import annotations

import json
import sys


def summary_line(side: str, round_: str, result: dict) -> str:
    steps = result["streamer_steps"]["us_per_unit"]
    hook = steps["hook entry (all of the below but release)"] + steps["hook exit (the parameters back, release)"]
    copy_issue = steps["fill (a copy's issue, unless issued: prefetch, acquire)"]
    return (
        f"{side} {round_} {result['units']} units; resident {result['resident']['total_ms']:.2f} ms, "
        f"streamed {result['streamed']['total_ms']:.2f} ms, extra host per unit "
        f"{result['extra_host_us_per_unit']:.1f} us; hook {hook:.1f} us/unit, copy issue {copy_issue:.1f}, "
        f"the rest {(hook - copy_issue) / copy_issue:.2f}x the copy issue"
    )


if __name__ == "__main__":
    side, round_, path = sys.argv[1:4]
    with open(path) as f:
        print(summary_line(side, round_, json.load(f)))
