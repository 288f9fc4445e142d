"""benchmarks/ring_model.py --smoke: the real Qwen3-VL towers (tiny) built on the meta device,
split as the streamer splits them, their ring units in the order their forwards run, each with
its FLOPs from the forward on the case's input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only: ViT attention op is CUDA-only here"),
]


def test_the_ring_units_run_in_order_with_their_flops(vllm_tree: Path, tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "ring_model.py"), "--smoke", "--out-dir", str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "VLLM_FORK_TREE": str(vllm_tree)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "ring_model.json").read_text())
    assert [t["tower"] for t in report["towers"]] == ["2B", "8B"]
    for tower in report["towers"]:
        names = [u["name"] for u in tower["units"]]
        # The patch embedding first, then the blocks in order (run under support_torch_compile,
        # past module hooks), the deepstack mergers between them, the merger last.
        assert names[0] == "patch_embed"
        blocks = [n for n in names if n.startswith("blocks.")]
        assert blocks == sorted(blocks, key=lambda n: int(n.split(".")[1])) and len(blocks) >= 2
        assert names[-2:] == ["merger.linear_fc1", "merger.linear_fc2"]
        assert all(u["flops"] > 0 and u["nbytes"] > 0 for u in tower["units"])
        assert len(tower["rows"]) == 7 * 3
        assert all(row["fixed"] >= 1.0 and row["bytes"] >= 1.0 for row in tower["rows"])
    assert (tmp_path / "ring_model.md").read_text().startswith("# Ring depth")
