"""Speed of the patch queue on the real vLLM sdist, against what a user would do by hand.

    python benchmarks/queue_speed.py [--out benchmarks/results/queue_speed.json]

Measured in one run, downloads excluded (the sdist is taken from the shared cache):
- sdist import (git fast-import, deterministic) vs. `tar x` + `git add -f -A` + `git commit`;
- `invoke apply` cold (new tree) and warm (tree exists), vs. a fresh `git clone` + `git am`;
- `check`, cold (first scratch tree) and warm, in-process;
- the `invoke check` command itself, as a user runs it on this checkout's queue (a new
  process each time, wall time): once cold (empty check cache), then the median of
  WARM_RUNS warm runs, with Python's bytecode cache and without it, and `invoke status`
  beside it for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vllm_fork.core.fs import write_atomic
from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.checkcache import CACHE_NAME
from vllm_fork.queue.series import read_series
from vllm_fork.upstream.download import fetch
from vllm_fork.upstream.pin import load_pin
from vllm_fork.upstream.sources import import_sdist, upstream_repo

REPO = Path(__file__).resolve().parent.parent
#: Warm `invoke check` runs whose median is recorded.
WARM_RUNS = 5


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def naive_import(sdist: Path, work: Path) -> None:
    work.mkdir()
    subprocess.run(["tar", "xzf", str(sdist), "-C", str(work), "--strip-components=1"], check=True)
    env = dict(
        os.environ, GIT_AUTHOR_NAME="x", GIT_AUTHOR_EMAIL="x@x", GIT_COMMITTER_NAME="x", GIT_COMMITTER_EMAIL="x@x"
    )
    for args in (["init", "-q"], ["add", "-f", "-A"], ["commit", "-qm", "import"]):
        subprocess.run(["git", "-C", str(work), *args], check=True, env=env)


#: The runs of the command itself: name -> (task, whether Python may cache bytecode).
COMMAND_RUNS = {
    "invoke_check": ("check", True),
    # As this machine's environment sets it (PYTHONDONTWRITEBYTECODE=1): every module compiled each run.
    "invoke_check_no_pyc": ("check", False),
    # The same process start and imports, for scale: what any task costs before its own work.
    "invoke_status": ("status", True),
}


def invoke(task: str, pyc: bool = True) -> float:
    """Wall time of one `invoke <task>` on this checkout, in a new process."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not pyc:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "invoke", task], cwd=REPO, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "queue_speed.json")
    parser.add_argument("--smoke", action="store_true", help="the tool's steps only, not the by-hand ones: no ratios")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    pin = load_pin()
    sdist = fetch("vllm", pin.sdist.filename, pin.sdist.sha256)  # cached: excluded from timings
    results: dict[str, float] = {}
    # ignore_cleanup_errors: a `git gc --auto` that git am left running may still write in a scratch repo.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        tmp = Path(tmp)
        os.environ["VLLM_FORK_CACHE"] = str(tmp / "cache")
        results["import_fast_import_s"] = timed(
            lambda: import_sdist(sdist, upstream_repo(), pin.version, pin.sdist.sha256)
        )
        if not args.smoke:
            results["import_tar_git_add_s"] = timed(lambda: naive_import(sdist, tmp / "naive"))
        # A scratch fork checkout, so the real build/vllm is left alone.
        root = tmp / "fork"
        root.mkdir()
        shutil.copy(REPO / "upstream.toml", root)
        shutil.copytree(REPO / "patches", root / "patches")
        results["apply_cold_s"] = timed(lambda: queue.apply(root))
        results["apply_warm_s"] = timed(lambda: queue.apply(root))
        patches = [str(p) for p in read_series(root / "patches")]

        def clone_and_am() -> None:
            dest = tmp / "by-hand"
            shutil.rmtree(dest, ignore_errors=True)
            subprocess.run(["git", "clone", "-q", str(tmp / "naive"), str(dest)], check=True)
            subprocess.run(
                ["git", "-C", str(dest), "-c", "user.name=x", "-c", "user.email=x@x", "am", "-q", *patches], check=True
            )

        if not args.smoke:
            results["clone_and_am_by_hand_s"] = timed(clone_and_am)
        results["check_cold_s"] = timed(lambda: check_mod.check(root))
        results["check_warm_s"] = timed(lambda: check_mod.check(root))
        # The command as users run it, on this checkout's queue, with the downloads and the
        # upstream import above; its first run finds no check results (cold).
        shutil.rmtree(tmp / "cache" / CACHE_NAME, ignore_errors=True)
        results["invoke_check_cold_s"] = invoke("check")
        runs: dict[str, list[float]] = {name: [] for name in COMMAND_RUNS}
        for _ in range(1 if args.smoke else WARM_RUNS):  # interleaved: a busy spell hits each alike
            for name, (task, pyc) in COMMAND_RUNS.items():
                runs[name].append(invoke(task, pyc))
        for name, times in runs.items():
            results[f"{name}_warm_median_s"] = statistics.median(times)
    results = {k: round(v, 3) for k, v in results.items()}
    results_runs = {f"{name}_warm_runs_s": [round(t, 3) for t in times] for name, times in runs.items()}
    if not args.smoke:
        results["ratio_import_naive_over_fast"] = round(
            results["import_tar_git_add_s"] / results["import_fast_import_s"], 2
        )
        results["ratio_by_hand_over_warm_apply"] = round(results["clone_and_am_by_hand_s"] / results["apply_warm_s"], 2)
    record = {
        "command": "python benchmarks/queue_speed.py",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        # The machine is shared: its 1-minute load average before and after the run says how busy it was.
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "upstream": pin.sdist.filename,
        "patches": len(patches),
        "results": results,
        "runs": results_runs,
        "invoke": f"`invoke check` in {REPO.name}/ (new process, wall): 1 cold run (no check results in the cache), "
        f"then the median of {WARM_RUNS} warm runs, with and without bytecode caching; `invoke status` beside them",
    }
    write_atomic(args.out, json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
