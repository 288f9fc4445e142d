"""benchmarks/series_ablation.py --smoke: each [Perf] prefix of the real queue laid over a copy
of the patched tree and run through tower_pipeline.py --smoke on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCHMARK = REPO / "benchmarks" / "series_ablation.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCHMARK), *args], capture_output=True, text=True, cwd=REPO)


def test_every_prefix_without_the_perf_patches_runs_and_stays_bit_identical(vllm_tree: Path, tmp_path: Path) -> None:
    overlays, out = tmp_path / "overlays", tmp_path / "out"
    prepared = run("prepare", "--tree", str(vllm_tree), "--out", str(overlays))
    assert prepared.returncode == 0, prepared.stderr
    manifest = json.loads((overlays / "manifest.json").read_text())
    names = [v["name"] for v in manifest["variants"]]
    assert names == ["full", "without-14"]
    # The prefixes are the queue's: cudart only from patch 14, the queue's last.
    units = "vllm/model_executor/offloader/tower_units.py"
    assert "CudaRTLibrary" in (overlays / "full" / units).read_text()
    assert "CudaRTLibrary" not in (overlays / "without-14" / units).read_text()
    # Each prefix's in-tree tests: the queue's, as that prefix has them (patches 1 to 13 here).
    assert (overlays / "without-14" / "tests/model_executor/test_kernel_warmup_minimax_m3.py").is_file()
    assert (overlays / "without-14" / "tests/model_executor/offloader/test_tower_units.py").is_file()
    streaming = "tests/model_executor/offloader/test_tower_streaming.py"
    cudart_test = "def test_cuda_a_failed_copy_call_raises_and_issues_nothing_after_it"
    assert cudart_test in (overlays / "full" / streaming).read_text()
    assert cudart_test not in (overlays / "without-14" / streaming).read_text()

    # `exec` runs a command against one variant's copy of the package the interpreter finds.
    probe = (
        "import importlib.util, os; p = importlib.util.find_spec('vllm').submodule_search_locations[0]; "
        "print(os.getcwd(), 'CudaRTLibrary' in open(os.path.join(p, 'model_executor/offloader/tower_units.py')).read())"
    )
    executed = subprocess.run(
        [
            sys.executable,
            str(BENCHMARK),
            "exec",
            "--overlays",
            str(overlays),
            "--variant",
            "without-14",
            "--scratch",
            str(tmp_path),
            "--",
            sys.executable,
            "-c",
            probe,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(vllm_tree)},
    )
    assert executed.stdout.split() == [str(overlays / "without-14"), "False"], executed.stderr

    done = run(
        "run",
        "--smoke",
        "--overlays",
        str(overlays),
        "--out-dir",
        str(out),
        "--towers",
        "2B",
        "--cases",
        "image-64",
        "--scratch",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads((out / "runs.json").read_text())
    assert [r["variant"] for r in runs["runs"]] == names
    for r in runs["runs"]:
        rows = json.loads(Path(r["result"]).read_text())["rows"]
        assert [row["bit_identical"] for row in rows] == [True], r["variant"]
    summary = (out / "series_ablation.md").read_text()
    assert (
        summary.startswith("Smoke run") and "| patch 14 (default options) | full | without-14 |" in summary
    )
    # The package copies are gone, and the tree under test was not written.
    assert not list(tmp_path.glob("series-ablation-*"))
    assert (
        subprocess.run(
            ["git", "-C", str(vllm_tree), "status", "--porcelain", "--", "vllm"], capture_output=True, text=True
        ).stdout
        == ""
    )
