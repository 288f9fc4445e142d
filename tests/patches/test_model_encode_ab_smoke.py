"""benchmarks/model_encode_ab.py --smoke: tower encodes against model encodes on the CPU.

Three families' tiny towers, as vLLM builds them, against the patched tree: LLaVA
(a vision tower, then a projector), Step3-VL (its vision tower called twice per
encode, for the image and its patches), MiniCPM-V 4.6 (its tower's layers called
one by one, without the tower's forward). The GPU run of the same script is
`bash benchmarks/gpu/run.sh encodeab`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_model_encodes_copy_what_tower_encodes_copy_bit_identically(vllm_tree: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "model_encode_ab.py"), "--smoke", "--out-dir", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "VLLM_FORK_TREE": str(vllm_tree)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads((tmp_path / "model_encode_ab.json").read_text())["rows"]
    assert [row["family"] for row in rows] == ["llava", "step3_vl", "minicpmv4_6"]
    for row in rows:
        tower, model = row["tower"], row["model"]
        assert tower["bit_identical"] and model["bit_identical"], row["family"]
        # Each unit once per call of its tower in both ways: a model encode opens the
        # projector ahead and carries Step3-VL's tower across its two calls without a
        # copy more (no guess past the last unit), and streams MiniCPM-V 4.6's layers
        # through the ring instead of copying each alone.
        assert model["copied_bytes_per_encode"] == tower["copied_bytes_per_encode"] > 0, row["family"]
        assert len(tower["seconds"]) == len(model["seconds"]) == 2
    table = (tmp_path / "model_encode_ab.md").read_text()
    assert "| step3_vl |" in table and "| yes |" in table
