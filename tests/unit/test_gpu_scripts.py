"""The H200 run scripts (benchmarks/gpu/): valid shell, and every test file and benchmark they
run exists, so a GPU session (scarce: 30 minutes) never spends its start on a stale path."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "benchmarks" / "gpu").glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse(script: Path):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_every_path_the_run_script_names_exists():
    text = (ROOT / "benchmarks" / "gpu" / "run.sh").read_text()
    repo_paths = set(re.findall(r"\b((?:tests/gpu|benchmarks)/[\w/]+\.py)\b", text))
    tree_paths = set(re.findall(r"\b(tests/(?:model_executor/offloader|config|kernels/attention))\b", text))
    assert {"tests/gpu/test_engine_offload_towers.py", "benchmarks/engine_offload.py"} <= repo_paths
    missing = sorted(p for p in repo_paths if not (ROOT / p).is_file())
    assert missing == [], f"benchmarks/gpu/run.sh runs {missing}, which do not exist"
    # The vLLM-tree tests it runs travel with the patches.
    patched = "".join(p.read_text() for p in (ROOT / "patches").glob("*.patch"))
    assert tree_paths and all(f"b/{p}/" in patched for p in tree_paths)
    # stage.sh copies what run.sh runs.
    stage = (ROOT / "benchmarks" / "gpu" / "stage.sh").read_text()
    assert all(p in stage for p in tree_paths)


def test_the_run_script_refuses_an_unknown_stage_and_still_packs_its_results(tmp_path: Path):
    """Stages chain in one call; a typo must stop the call at once, before any stage runs
    (device time is scarce), and what was written still comes back as results.tgz."""
    out = tmp_path / "out"
    out.mkdir()
    run = ROOT / "benchmarks" / "gpu" / "run.sh"
    proc = subprocess.run(
        ["bash", str(run), "intree", "hosttime-typo"],
        cwd=tmp_path,
        env={"OUT": str(out), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "unknown stage hosttime-typo" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["results.tgz"]
    listing = subprocess.run(["tar", "tzf", str(out / "results.tgz")], capture_output=True, text=True, check=True)
    assert "./machine.txt" in listing.stdout.split()


def test_the_proof_script_says_what_is_missing_instead_of_a_traceback(tmp_path: Path):
    """Run where vLLM is not installed (this machine): one line that names the next step."""
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu" / "proof.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "proof.sh:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_every_test_the_proof_script_runs_exists():
    text = (ROOT / "benchmarks" / "gpu" / "proof.sh").read_text()
    named = re.findall(r"\b(tests/gpu/\w+\.py)\b", text)
    assert len(named) == 4 and all((ROOT / p).is_file() for p in named)
