#!/usr/bin/env python3
"""One real vLLM release hop with `invoke rebase`, downloads excluded; budget 30 s.

Setup (untimed): a private cache whose downloads/ links to the shared cache's
verified sdists, and a fork checkout of this repository's queue on which
`invoke apply` has run. Timed, in one run:
  sdist import  the one-time import of the new release's sdist into the cache repo
                (like the download, paid once per release per cache; shown apart);
  cold hop      the pin -> the release before: first time in the tree and the check tree;
  warm hop      back with --latest;
  first hop     import + cold hop: what the bot pays the day a release appears.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from vllm_fork.core.fs import write_atomic
from vllm_fork_testkit.fork_copy import queue_checkout

ROOT = Path(__file__).resolve().parent.parent

BUDGET_S = 30.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "rebase.json")
    parser.add_argument("--smoke", action="store_true", help="the hop down only, no warm hop back: every step, once")
    args = parser.parse_args()
    from vllm_fork.core.paths import cache_dir
    from vllm_fork.rebase.target import release_versions
    from vllm_fork.upstream.download import fetch
    from vllm_fork.upstream.pin import load_pin
    from vllm_fork.upstream.pkgindex import list_files

    shared = cache_dir()
    pin = load_pin(ROOT)
    files = list_files("vllm")
    previous = str([v for v in release_versions(files) if str(v) != pin.version][-1])
    prev_sdist = next(f for f in files if f.filename == f"vllm-{previous}.tar.gz")
    fetch("vllm", prev_sdist.filename, prev_sdist.sha256)  # downloads: excluded from the timing
    fetch("vllm", pin.sdist.filename, pin.sdist.sha256)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["VLLM_FORK_CACHE"] = str(tmp / "cache")
        (tmp / "cache" / "downloads").mkdir(parents=True)
        for name in (prev_sdist.filename, pin.sdist.filename):
            os.symlink(shared / "downloads" / name, tmp / "cache" / "downloads" / name)
        from vllm_fork.queue import apply as queue
        from vllm_fork.queue import check as check_mod
        from vllm_fork.rebase import run as rebase
        from vllm_fork.rebase.state import Options

        root = queue_checkout(tmp / "fork")
        queue.apply(root)  # the user's state before a rebase: imports the pinned sdist
        from vllm_fork.upstream.pin import Artifact
        from vllm_fork.upstream.sources import ensure_upstream

        t0 = time.perf_counter()
        ensure_upstream(
            pin.with_changes(version=previous, sdist=Artifact(prev_sdist.filename, prev_sdist.sha256)), "pypi"
        )
        imported = time.perf_counter() - t0
        t0 = time.perf_counter()
        down = rebase.start(root, to=previous, options=Options(run_tests=False))
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        up = down if args.smoke else rebase.start(root, latest=True, options=Options(run_tests=False))
        warm = 0.0 if args.smoke else time.perf_counter() - t0
        problems = check_mod.check(root)
    result = {
        "hop": f"{pin.version} -> {previous} -> {pin.version}",
        "patches": len(down.state.results),
        "outcomes_down": [r.outcome for r in down.state.results],
        "outcomes_up": [r.outcome for r in up.state.results],
        "cold_hop_s": round(cold, 1),
        "warm_hop_s": round(warm, 1),
        "sdist_import_once_s": round(imported, 1),
        "first_hop_with_import_s": round(imported + cold, 1),
        "budget_s": BUDGET_S,
        "within_budget": cold <= BUDGET_S and warm <= BUDGET_S,
        "check_after": problems,
    }
    result = {"command": "python benchmarks/bench_rebase.py", **result}
    write_atomic(args.out, json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0 if result["within_budget"] or args.smoke else 1  # a smoke run claims no time


if __name__ == "__main__":
    sys.exit(main())
