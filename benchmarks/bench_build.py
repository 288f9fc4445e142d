"""Build speed, measured in one run: `python benchmarks/bench_build.py [--skip-precompiled] [--smoke] [--out FILE]`.

Figures (seconds unless noted), written to benchmarks/results/build.json:
- key_ms: the ops key of build/vllm (median of 25), in-process
- pylayer_check_ms: opening and sha256-checking the Python layer against its manifest (median of 25),
  what every fast-route build pays for the layer's verification
- seed: `ops.seed` into a cache holding only the downloads and the build env
- build_warm: `invoke build` (apply + key + cache + fast route + provenance), median of 3, whole CLI
- build_fresh_clone_warm_cache: `git clone` of this repo, then `invoke build` there, shared warm cache
- build_fresh_clone_downloads_only: the same with a cache holding only the downloads and the build env
  (imports upstream, seeds, makes metadata and the file layer)
- fast vs precompiled: both routes on the same tree, back to back, with the ratio and an identity check
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from vllm_fork.core.fs import write_atomic
from vllm_fork.core.paths import cache_dir, default_tree
from vllm_fork.ops.key import compute_key
from vllm_fork.upstream.pin import load_pin
from vllm_fork.wheel.build import build, seed_cache
from vllm_fork.wheel.pylayer import open_layer

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd, cwd, env=None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return took


def downloads_only_cache(dest: Path) -> Path:
    shared = cache_dir()
    (dest / "downloads").mkdir(parents=True)
    for f in (shared / "downloads").glob(f"vllm-{load_pin(ROOT).version}*"):
        os.link(f, dest / "downloads" / f.name)
    (dest / "buildenv").symlink_to(shared / "buildenv")
    return dest


def members(wheel: Path) -> list[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as zf:
        return [(i.filename, hashlib.sha256(zf.read(i)).hexdigest()) for i in zf.infolist()]


def clones_and_seed(results: dict[str, object], tmp: Path, invoke: list[str], tree: Path) -> None:
    """`invoke build` in fresh clones (warm cache, then downloads only) and `ops.seed`, into `results`."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(tmp / "clone")], check=True)
    results["build_fresh_clone_warm_cache_s"] = round(timed(invoke + ["build"], tmp / "clone"), 2)

    fresh = downloads_only_cache(tmp / "cache")
    env = {**os.environ, "VLLM_FORK_CACHE": str(fresh)}
    subprocess.run(["git", "clone", "-q", str(ROOT), str(tmp / "clone2")], check=True)
    results["build_fresh_clone_downloads_only_s"] = round(timed(invoke + ["build"], tmp / "clone2", env), 2)

    seed_cache_dir = downloads_only_cache(tmp / "seedcache")
    os.environ["VLLM_FORK_CACHE"] = str(seed_cache_dir)
    try:  # the index entry it writes is byte-identical (seeding is deterministic)
        start = time.perf_counter()
        seed_cache(ROOT, tree)
        results["seed_s"] = round(time.perf_counter() - start, 2)
    finally:
        del os.environ["VLLM_FORK_CACHE"]
    subprocess.run(["git", "-C", str(ROOT), "checkout", "-q", "--", "ops-cache/index.json"], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "build.json")
    parser.add_argument("--skip-precompiled", action="store_true", help="leave out vLLM's precompiled route (~70 s)")
    parser.add_argument(
        "--smoke", action="store_true", help="each step once, the fast route only, no fresh clones: no timing claims"
    )
    args = parser.parse_args()
    skip_precompiled = args.skip_precompiled or args.smoke
    repeats = 1 if args.smoke else 25
    results: dict[str, object] = {
        "command": "python benchmarks/bench_build.py" + (" --skip-precompiled" if args.skip_precompiled else ""),
        "machine": f"{os.cpu_count()} cores",
        # The machine may be shared: its load when the run began says how much.
        "load_average_1min": round(os.getloadavg()[0], 1),
        "upstream": load_pin(ROOT).version,
    }
    invoke = [sys.executable, "-m", "invoke"]
    timed(invoke + ["build"], ROOT)  # make sure everything is warm

    tree = default_tree(ROOT)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compute_key(tree, "HEAD", ROOT)
        times.append((time.perf_counter() - start) * 1000)
    results["key_ms"] = round(statistics.median(times), 1)
    results["ops_key_cli_s"] = round(timed(invoke + ["ops.key"], ROOT), 2)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        open_layer(tree, "refs/fork/upstream").close()
        times.append((time.perf_counter() - start) * 1000)
    results["pylayer_check_ms"] = round(statistics.median(times), 1)

    results["build_warm_s"] = round(
        statistics.median(timed(invoke + ["build"], ROOT) for _ in range(1 if args.smoke else 3)), 2
    )

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.smoke:
            fast = build(ROOT, route="fast", apply=False, out_dir=tmp / "fast")
            results["fast_route_s"] = fast.record["timings"]["total"]
        else:
            clones_and_seed(results, tmp, invoke, tree)
        if not skip_precompiled:
            fast = build(ROOT, route="fast", apply=False, out_dir=tmp / "fast")
            slow = build(ROOT, route="precompiled", apply=False, out_dir=tmp / "precompiled")
            results["fast_route_s"] = fast.record["timings"]["total"]
            results["precompiled_route_s"] = slow.record["timings"]["total"]
            results["precompiled_over_fast"] = round(
                slow.record["timings"]["total"] / fast.record["timings"]["total"], 1
            )
            results["identical_members"] = members(fast.wheel) == members(slow.wheel)
            results["wheel"] = fast.wheel.name

    write_atomic(args.out, json.dumps(results, indent=2) + "\n")
    width = max(map(len, results))
    for name, value in results.items():
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
