"""Every benchmark answers `--help`: its imports resolve (a helper moved elsewhere would otherwise
break a command the README gives without any test noticing, as benchmarks/bench_rebase_scale.py
did on 2026-12-02) and it says what it measures. Run as the README runs them, with this checkout
importable as the project installs it (`pip install -e .`; PYTHONPATH on the GPU machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


def test_the_benchmarks_are_the_readme_table():
    table = (ROOT / "benchmarks" / "README.md").read_text()
    unlisted = [p.name for p in BENCHMARKS if p.name != "plots.py" and f"]({p.name})" not in table]
    assert len(BENCHMARKS) >= 10 and unlisted == []


@pytest.mark.parametrize("benchmark", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_answers_help(benchmark: Path):
    proc = subprocess.run(
        [sys.executable, str(benchmark), "--help"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "usage:" in proc.stdout and len(proc.stdout.splitlines()) > 2
