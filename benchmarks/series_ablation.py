"""What each [Perf] patch of the streamer series is worth, with and without it, in one session.

The streamer's last patches only save eager host time (`[Perf]` in their subjects; the
queue keeps one, cudart calls, after runs per ring slot and a plan per ring position were
measured and dropped). Each stays in the queue only if it pays where users run it (its last verdict: benchmarks/results/gpu-real/2026-12-05/ablation/series_ablation.md). This benchmark
times the host-bound rows of the tower pipeline matrix (tower_pipeline.py; by default the
64- and 256-token images and the 2-frame video on the 2B and 8B towers, vLLM's default
lookahead and ViT attention, eager encodes) under the whole queue and under the queue
without its last [Perf] patch, without its last two, and so on: the streamer's files as
each prefix has them, laid over a copy of the installed vLLM package.

Each row's figure is tower_pipeline's own: streamed / max(resident, H2D floor), taken in
the same process from interleaved resident and streamed encodes, so variants run one after
another compare without the host's drift between them; `--rounds 2` runs them again in
reverse order. A patch *pays* when some row gains at least 5 % with it and none loses more
than 2 %.

    python3 benchmarks/series_ablation.py prepare --out .gpu-ablation     # here, after `invoke apply`
    python3 benchmarks/series_ablation.py run --overlays .gpu-ablation --out-dir $OUT/ablation
                                             # on the GPU machine, inside `.gpu-real/run.sh`
    python3 benchmarks/series_ablation.py summarize $OUT/ablation        # the verdict per patch
    python3 benchmarks/series_ablation.py exec --overlays .gpu-ablation --variant without-14 -- \
        python3 -m pytest -p no:cacheprovider --noconftest tests   # a prefix's in-tree tests, its code

`--smoke` prepares from the patched tree and runs every variant with tower_pipeline.py
--smoke on the CPU (tiny towers; outputs, no timings); tests/patches runs it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PIPELINE = REPO / "benchmarks" / "tower_pipeline.py"
DEFAULT_CASES = "image-64,image-256,video-2"
DEFAULT_TOWERS = "2B,8B"
PAYS_GAIN, PAYS_LOSS = 0.05, 0.02  # a row 5 % faster with the patch; none over 2 % slower


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout


@dataclass(frozen=True)
class Patch:
    index: int  # 1-based, in patches/series
    name: str
    subject: str
    files: tuple[str, ...]  # the code files it touches (not tests/, docs/ or *.md)
    tests: tuple[str, ...]  # the files under tests/ it touches


def read_queue(patches_dir: Path) -> list[Patch]:
    """The queue's patches in series order, with their subjects and the code files they touch."""
    names = [n for n in (patches_dir / "series").read_text().split() if n and not n.startswith("#")]
    queue = []
    for index, name in enumerate(names, 1):
        text = (patches_dir / name).read_text()
        # The header may be folded onto indented lines (RFC 2822).
        subject = re.search(r"^Subject: (?:\[PATCH[^\]]*\] )?(.*(?:\n[ \t].*)*)", text, re.M)
        paths = re.findall(r"^diff --git a/(\S+) b/(\S+)$", text, re.M)
        files = sorted({b for _, b in paths if not b.startswith(("tests/", "docs/")) and not b.endswith(".md")})
        tests = sorted({b for _, b in paths if b.startswith("tests/")})
        title = " ".join(subject.group(1).split()) if subject else name
        queue.append(Patch(index, name, title, tuple(files), tuple(tests)))
    return queue


def variants(queue: list[Patch]) -> list[tuple[str, int, list[Patch]]]:
    """(name, prefix length, patches left out): the whole queue, then without each suffix of its
    last contiguous run of [Perf] patches."""
    perf: list[Patch] = []
    for patch in reversed(queue):
        if patch.subject.startswith("[Perf]"):
            perf.insert(0, patch)
        elif perf:
            break
    found = [("full", len(queue), [])]
    for start in range(len(perf) - 1, -1, -1):
        left_out = perf[start:]
        found.append(("without-" + "-".join(str(p.index) for p in left_out), left_out[0].index - 1, left_out))
    return found


def prefix_commits(tree: Path, queue: list[Patch]) -> list[str]:
    """The commit of each patch in `tree` (the applied queue: one commit per patch on top of
    upstream), checked against the patches' subjects."""
    commits = git(tree, "rev-list", "--reverse", f"HEAD~{len(queue)}..HEAD").split()
    for commit, patch in zip(commits, queue, strict=True):
        subject = git(tree, "log", "-1", "--format=%s", commit).strip()
        if subject != patch.subject:
            raise SystemExit(
                f"{tree}: commit {commit[:12]} is {subject!r}, but patch {patch.index} of patches/series is "
                f"{patch.subject!r}: run `invoke apply` so the tree is the queue, then prepare again."
            )
    return commits


def prepare(tree: Path, patches_dir: Path, out: Path) -> dict[str, Any]:
    """Write, per variant, the [Perf] patches' code files as its prefix has them, and a manifest."""
    queue = read_queue(patches_dir)
    found = variants(queue)
    if len(found) < 2:
        raise SystemExit("patches/series ends with no [Perf] patch: nothing to leave out.")
    commits = prefix_commits(tree, queue)
    files = sorted({f for _, _, left_out in found for p in left_out for f in p.files})
    if out.exists():
        shutil.rmtree(out)
    manifest: dict[str, Any] = {"tree_head": commits[-1], "files": files, "variants": []}
    for name, prefix, left_out in found:
        commit = commits[prefix - 1]
        overlay: dict[str, str | None] = {}
        for path in files:
            listed = git(tree, "ls-tree", "--name-only", commit, "--", path).strip()
            if not listed:
                overlay[path] = None  # the prefix does not have it: removed from the copy
                continue
            content = subprocess.run(
                ["git", "-C", str(tree), "show", f"{commit}:{path}"], check=True, capture_output=True
            ).stdout
            target = out / name / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            overlay[path] = hashlib.sha256(content).hexdigest()
        manifest["variants"].append(
            {
                "name": name,
                "prefix": prefix,
                "commit": commit,
                "left_out": [p.name for p in left_out],
                "overlay": overlay,
            }
        )
    tests = sorted({t for p in queue for t in p.tests})
    for variant in manifest["variants"]:
        write_tests(tree, variant["commit"], tests, out / variant["name"])
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def write_tests(tree: Path, commit: str, tests: list[str], out: Path) -> None:
    """The queue's in-tree test files as `commit` has them (those it lacks are left out), with
    the `__init__.py` of each package above them, so that `exec` can run them under `out`."""
    packages = {str(Path(*Path(t).parts[:i]) / "__init__.py") for t in tests for i in range(1, len(Path(t).parts))}
    listed = set(git(tree, "ls-tree", "-r", "--name-only", commit, "--", "tests").split())
    for path in sorted((set(tests) | packages) & listed):
        content = subprocess.run(
            ["git", "-C", str(tree), "show", f"{commit}:{path}"], check=True, capture_output=True
        ).stdout
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def installed_package() -> Path:
    """The directory of the `vllm` package this interpreter imports, without importing it."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("no vllm package on this interpreter's path: run inside `.gpu-real/run.sh`")
    return Path(list(spec.submodule_search_locations)[0])


def build_variant(package: Path, overlays: Path, variant: dict[str, Any], root: Path) -> Path:
    """A copy of `package` (hard links where the filesystem allows) with the variant's files laid
    over it, under `root/<name>/vllm`; returns `root/<name>` (the directory to put first on the path).
    The installed package is never written: each replaced file is unlinked first."""
    source = overlays / variant["name"]
    base = root / variant["name"]
    target = base / "vllm"
    if target.exists():
        shutil.rmtree(target)
    base.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["cp", "-al", str(package), str(target)], capture_output=True).returncode != 0:
        shutil.copytree(package, target, symlinks=True)
    for path, digest in variant["overlay"].items():
        relative = Path(path).relative_to("vllm")
        dest = target / relative
        cached = dest.parent / "__pycache__"
        for pyc in cached.glob(f"{dest.stem}.*.pyc") if cached.is_dir() else []:
            pyc.unlink()
        if dest.exists() or dest.is_symlink():
            dest.unlink()
        if digest is not None:
            content = (source / path).read_bytes()
            if hashlib.sha256(content).hexdigest() != digest:
                raise SystemExit(f"{source / path}: not the file prepare wrote (sha256 differs): prepare again")
            dest.write_bytes(content)
    return base


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    manifest = json.loads((args.overlays / "manifest.json").read_text())
    chosen = [v for v in manifest["variants"] if not args.variants or v["name"] in args.variants.split(",")]
    root = Path(tempfile.mkdtemp(prefix="series-ablation-", dir=args.scratch))
    try:
        if args.smoke:
            from vllm_fork_testkit.vllm_tree import ensure_tree

            package = ensure_tree() / "vllm"
        else:
            package = installed_package()
        bases = {v["name"]: build_variant(package, args.overlays, v, root) for v in chosen}
        runs = []
        for round_index in range(args.rounds):
            order = chosen if round_index % 2 == 0 else list(reversed(chosen))
            for variant in order:
                runs.append(run_variant(args, variant, bases[variant["name"]], round_index))
        chosen_names = [v["name"] for v in chosen]
        (args.out_dir / "runs.json").write_text(
            json.dumps({"smoke": args.smoke, "variants": chosen_names, "manifest": manifest, "runs": runs}, indent=2)
            + "\n"
        )
        return runs
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_variant(args: argparse.Namespace, variant: dict[str, Any], base: Path, round_index: int) -> dict[str, Any]:
    """tower_pipeline.py in a child process that imports the variant's vllm; what it wrote."""
    env = dict(os.environ)
    if args.smoke:
        env["VLLM_FORK_TREE"] = str(base)  # the CPU harness imports the tree it names
    else:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(base), env.get("PYTHONPATH")]))
    probe = "import vllm.model_executor.offloader.tower_streaming as m; print(m.__file__)"
    if args.smoke:
        probe = (
            "from vllm_fork_testkit.vllm_tree import ensure_tree, import_on_cpu; import_on_cpu(ensure_tree()); " + probe
        )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(REPO)]))
    where = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    if where.returncode != 0 or not where.stdout.strip().startswith(str(base)):
        raise SystemExit(f"variant {variant['name']}: vllm does not import from {base}:\n{where.stdout}{where.stderr}")
    out = args.out_dir / f"{variant['name']}-r{round_index}"
    command = [
        sys.executable,
        str(PIPELINE),
        "--out-dir",
        str(out),
        "--towers",
        args.towers,
        "--lookaheads",
        str(args.lookahead),
        "--cases",
        args.cases,
        "--profile",
        "none",
        "--vit-attention",
        "default",
        "--budget-s",
        str(args.budget_s),
        *(["--smoke"] if args.smoke else []),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    (args.out_dir / f"{variant['name']}-r{round_index}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(
            f"variant {variant['name']}, round {round_index}: tower_pipeline.py failed:\n{done.stderr[-3000:]}"
        )
    return {"variant": variant["name"], "round": round_index, "result": str(out / "tower_pipeline.json")}


def exec_in(args: argparse.Namespace) -> int:
    """Run a command with one variant's vllm first on the path, in its overlay directory (where
    `prepare` put that prefix's in-tree tests): e.g. the CUDA tests of a prefix on the real wheel."""
    manifest = json.loads((args.overlays / "manifest.json").read_text())
    variant = next((v for v in manifest["variants"] if v["name"] == args.variant), None)
    if variant is None:
        raise SystemExit(f"no variant {args.variant!r} in {args.overlays}/manifest.json")
    root = Path(tempfile.mkdtemp(prefix="series-ablation-", dir=args.scratch))
    try:
        base = build_variant(installed_package(), args.overlays, variant, root)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(base), env.get("PYTHONPATH")]))
        cwd = args.overlays / variant["name"]
        return subprocess.run(args.command, env=env, cwd=cwd).returncode
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- the verdict --------------------------------------------------------------


def row_ratios(results_dir: Path) -> dict[str, dict[tuple[str, str], float]]:
    """Per variant, per (tower, case): the median over its rounds of streamed / max(resident, floor)."""
    runs = json.loads((results_dir / "runs.json").read_text())["runs"]
    collected: dict[str, dict[tuple[str, str], list[float]]] = {}
    for run_ in runs:
        report = json.loads(Path(run_["result"]).read_text())
        for row in report["rows"]:
            if row.get("status") == "ok" and row.get("streamed_over_max_resident_floor") is not None:
                key = (row["tower"], row["case"])
                collected.setdefault(run_["variant"], {}).setdefault(key, []).append(
                    row["streamed_over_max_resident_floor"]
                )
    return {v: {k: statistics.median(x) for k, x in rows.items()} for v, rows in collected.items()}


def comparisons(variant_names: list[str]) -> list[tuple[str, str, str]]:
    """(what is judged, the variant with it, the variant without it), in series order."""
    without = [n for n in variant_names if n.startswith("without-")]
    pairs = []
    previous = "full"
    for name in without:
        left_out = name.removeprefix("without-").split("-")
        pairs.append((f"patch {left_out[0]} (default options)", previous, name))
        previous = name
    return pairs


def verdict(changes: list[float]) -> str:
    gains = [c for c in changes if c <= -PAYS_GAIN]
    losses = [c for c in changes if c >= PAYS_LOSS]
    if gains and not losses:
        return "pays"
    if gains:
        return "a trade"
    return "does not pay"


def summarize(results_dir: Path) -> str:
    runs = json.loads((results_dir / "runs.json").read_text())
    ratios = row_ratios(results_dir)
    lines = [
        *(["Smoke run (tiny towers on the CPU): no timing claims.", ""] if runs.get("smoke") else []),
        "| judged | with | without | rows | best change | worst change | rows <= 1.10x (with / without) | verdict |",
        "| --- | --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for judged, with_, without in comparisons(runs["variants"]):
        a, b = ratios.get(with_, {}), ratios.get(without, {})
        keys = sorted(set(a) & set(b))
        changes = [a[k] / b[k] - 1 for k in keys]
        within = (sum(a[k] <= 1.10 for k in keys), sum(b[k] <= 1.10 for k in keys))
        lines.append(
            f"| {judged} | {with_} | {without} | {len(keys)} | "
            + (f"{min(changes):+.1%} | {max(changes):+.1%} | " if changes else "- | - | ")
            + f"{within[0]} / {within[1]} | {verdict(changes) if changes else 'not measured'} |"
        )
    lines.append("")
    lines.append("Per row, streamed / max(resident, floor) (median over rounds):")
    lines.append("")
    names = runs["variants"]
    lines.append("| tower | case | " + " | ".join(names) + " |")
    lines.append("| --- | --- | " + " | ".join("---:" for _ in names) + " |")
    for key in sorted({k for rows in ratios.values() for k in rows}):
        cells = [f"{ratios[n][key]:.3f}" if key in ratios.get(n, {}) else "-" for n in names]
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    (results_dir / "series_ablation.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="here: the overlays of each variant, from the applied tree")
    p.add_argument("--tree", type=Path, default=REPO / "build" / "vllm")
    p.add_argument("--patches", type=Path, default=REPO / "patches")
    p.add_argument("--out", type=Path, default=REPO / ".gpu-ablation")
    r = sub.add_parser("run", help="on the GPU machine: tower_pipeline.py per variant")
    r.add_argument("--overlays", type=Path, required=True)
    r.add_argument("--out-dir", type=Path, required=True)
    r.add_argument("--towers", default=DEFAULT_TOWERS)
    r.add_argument("--cases", default=DEFAULT_CASES)
    r.add_argument("--lookahead", type=int, default=2, help="vLLM's default for towers")
    r.add_argument("--rounds", type=int, default=1, help="2 runs the variants again, in reverse order")
    r.add_argument("--variants", default="", help="comma-separated names (default: all in the manifest)")
    r.add_argument("--budget-s", type=float, default=120.0, help="per variant run (tower_pipeline.py --budget-s)")
    r.add_argument("--scratch", type=Path, default=None, help="where the package copies go (default: $TMPDIR)")
    r.add_argument("--smoke", action="store_true", help="the CPU tree and tower_pipeline.py --smoke")
    e = sub.add_parser("exec", help="on the GPU machine: a command with one variant's vllm (cwd: its overlay)")
    e.add_argument("--overlays", type=Path, required=True)
    e.add_argument("--variant", required=True)
    e.add_argument("--scratch", type=Path, default=None)
    e.add_argument("command", nargs=argparse.REMAINDER, help="after --, e.g. python3 -m pytest tests")
    s = sub.add_parser("summarize", help="the verdict per patch from run's results")
    s.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    if args.step == "prepare":
        manifest = prepare(args.tree, args.patches, args.out)
        for v in manifest["variants"]:
            print(f"{v['name']}: prefix {v['prefix']}, leaves out {', '.join(v['left_out']) or 'nothing'}")
        print(f"wrote {args.out} ({len(manifest['files'])} files per variant); carry it to the device")
    elif args.step == "run":
        args.out_dir.mkdir(parents=True, exist_ok=True)
        run(args)
        print(summarize(args.out_dir))
    elif args.step == "exec":
        args.command = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else args.command
        sys.exit(exec_in(args))
    else:
        print(summarize(args.results))


if __name__ == "__main__":
    main()
