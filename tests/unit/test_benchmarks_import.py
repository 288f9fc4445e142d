"""Every benchmark script imports: a helper moved elsewhere would otherwise break a command the
README gives without any test noticing (benchmarks/bench_rebase_scale.py did, 2026-12-02)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))

IMPORT_ALL = """
import importlib, sys
sys.argv = ["benchmark"]
failed = []
for name in sys.stdin.read().split():
    try:
        importlib.import_module(name)
    except BaseException as e:
        failed.append(f"{name}: {type(e).__name__}: {e}")
print("\\n".join(failed))
"""


def test_every_benchmark_imports():
    assert len(BENCHMARKS) > 10
    # As the README runs them: `python benchmarks/<name>.py`, so the folder is first on sys.path.
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL],
        input=" ".join(p.stem for p in BENCHMARKS),
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert proc.stdout.strip() == "", proc.stdout
