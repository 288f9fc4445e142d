"""Each of the tool's benchmarks in its `--smoke` mode, for real: every step once, on the real
vLLM release, in a copy of this repository (a benchmark builds and applies in its checkout: the
copy keeps this one's build/ and dist/ as they are). The figures are not checked, only that each
benchmark runs to the end and writes its record. The tower benchmarks' smoke modes run in
tests/patches (they need the patched tree on the CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_fork_testkit.fork_copy import copy_repository

pytestmark = pytest.mark.slow

SMOKE_RUNS = {
    "queue_speed.py": [],
    "bench_build.py": [],
    "bench_rebase.py": [],
    "bench_rebase_scale.py": [],
    "image_layer_size.py": ["--tree", "build/vllm"],
}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_repository(tmp_path_factory.mktemp("bench") / "fork")


@pytest.mark.parametrize("benchmark", sorted(SMOKE_RUNS))
def test_the_benchmark_runs_in_its_smoke_mode(benchmark: str, checkout: Path, tmp_path: Path):
    out = tmp_path / "result.json"
    if benchmark == "image_layer_size.py" and not (checkout / "build" / "vllm").is_dir():
        subprocess.run([sys.executable, "-m", "invoke", "apply"], cwd=checkout, check=True, capture_output=True)
    proc = subprocess.run(
        [sys.executable, f"benchmarks/{benchmark}", *SMOKE_RUNS[benchmark], "--smoke", "--out", str(out)],
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert json.loads(out.read_text())
