"""GitPython against the subprocess git layer (`vllm_fork.core.git`) on the queue's hot paths.

    python benchmarks/bench_git_layer.py [--out benchmarks/results/git_layer.json]

Measured in one run, on a scratch fork of this repository (the shared cache's upstream import
is reused, downloads excluded):
1. apply (warm), export and check, with every git call counted and timed by subcommand;
2. each kind of call those paths make, done both ways on the real patched tree (median of N):
   rev-parse of a ref, the git dir, a clean/dirty status, a config read, and a porcelain
   command through `repo.git.<command>` against `subprocess.run`;
3. what `import git` adds to every `invoke` command (a fresh interpreter, median of N).
From these: what GitPython would save or cost per hot path.
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
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vllm_fork.core import git as gitlayer  # noqa: E402
from vllm_fork.core.fs import write_atomic  # noqa: E402
from vllm_fork.queue import apply as queue  # noqa: E402
from vllm_fork.queue import check as check_mod  # noqa: E402
from vllm_fork.queue.export import export  # noqa: E402

RUNS = 30


def median_ms(fn, runs: int = RUNS) -> float:
    fn()  # warm: page cache, GitPython's lazy state
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 2)


def counted(fn) -> dict:
    """Run fn with every git subprocess counted and timed by subcommand."""
    real_run = gitlayer.subprocess.run
    calls: Counter[str] = Counter()
    spent: dict[str, float] = defaultdict(float)

    def run(cmd, *args, **kwargs):
        start = time.perf_counter()
        try:
            return real_run(cmd, *args, **kwargs)
        finally:
            sub = next((a for a in cmd[1:] if not a.startswith("-") and "/" not in a), "?")
            calls[sub] += 1
            spent[sub] += time.perf_counter() - start

    gitlayer.subprocess.run = run
    try:
        start = time.perf_counter()
        fn()
        total = time.perf_counter() - start
    finally:
        gitlayer.subprocess.run = real_run
    return {
        "total_s": round(total, 3),
        "git_s": round(sum(spent.values()), 3),
        "calls": dict(calls.most_common()),
        "ms_by_command": {k: round(v * 1000, 1) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])},
    }


def fresh_python_ms(code: str, runs: int = 10) -> float:
    cmd = [sys.executable, "-c", code]
    return median_ms(lambda: subprocess.run(cmd, check=True, cwd=REPO), runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "git_layer.json")
    args = parser.parse_args()
    try:
        import git as gitpython  # GitPython is not a dependency: only this benchmark uses it
    except ImportError:
        sys.exit("bench_git_layer.py compares against GitPython: `.venv/bin/pip install GitPython` first")

    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fork"
        root.mkdir()
        shutil.copy(REPO / "upstream.toml", root)
        shutil.copytree(REPO / "patches", root / "patches")
        shutil.copytree(REPO / "ops-cache", root / "ops-cache")
        queue.apply(root)  # cold apply: not a hot path, and it warms the scratch tree
        tree = root / "build" / "vllm"
        results["apply_warm"] = counted(lambda: queue.apply(root))
        results["export"] = counted(lambda: export(tree=tree, root=root))
        results["check"] = counted(lambda: check_mod.check(root))

        env = gitlayer.git_env()
        repo = gitpython.Repo(tree)
        ops = {
            "rev-parse HEAD": (
                lambda: gitlayer.rev(tree, "HEAD"),
                lambda: repo.head.commit.hexsha,
            ),
            "rev-parse HEAD, new Repo each time": (
                lambda: gitlayer.rev(tree, "HEAD"),
                lambda: gitpython.Repo(tree).head.commit.hexsha,
            ),
            "git dir": (
                lambda: gitlayer.out(tree, "rev-parse", "--absolute-git-dir"),
                lambda: repo.git_dir,
            ),
            "status (dirty?)": (
                lambda: gitlayer.dirty_paths(tree),
                lambda: repo.is_dirty(untracked_files=True),
            ),
            "config read": (
                lambda: gitlayer.git(tree, "config", "--get", "core.bare", check=False),
                lambda: repo.config_reader("repository").get_value("core", "bare"),
            ),
            "porcelain: repo.git.<command> vs subprocess": (
                lambda: gitlayer.git(tree, "rev-parse", "HEAD"),
                lambda: repo.git.rev_parse("HEAD", env=env),
            ),
        }
        per_call = {}
        for name, (by_subprocess, by_gitpython) in ops.items():
            per_call[name] = {"subprocess_ms": median_ms(by_subprocess), "gitpython_ms": median_ms(by_gitpython)}
        results["per_call"] = per_call
        repo.close()

    base = fresh_python_ms("pass")
    results["import_ms"] = {
        "vllm_fork.core.git": round(fresh_python_ms("import vllm_fork.core.git") - base, 1),
        "git (GitPython)": round(fresh_python_ms("import git") - base, 1),
    }
    # What GitPython could take off each hot path: its in-Python rev-parse replaces the
    # subprocess one (refs read from files); every other call stays a git process either way.
    saving = per_call["rev-parse HEAD"]["subprocess_ms"] - per_call["rev-parse HEAD"]["gitpython_ms"]
    results["estimate_ms"] = {
        path: {
            "rev_parse_calls": results[path]["calls"].get("rev-parse", 0),
            "saved_by_in_python_refs": round(results[path]["calls"].get("rev-parse", 0) * saving, 1),
            "added_by_import_git": results["import_ms"]["git (GitPython)"],
        }
        for path in ("apply_warm", "export", "check")
    }
    record = {
        "command": "python benchmarks/bench_git_layer.py",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "gitpython": gitpython.__version__,
        "git": subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip(),
        "results": results,
    }
    write_atomic(args.out, json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
