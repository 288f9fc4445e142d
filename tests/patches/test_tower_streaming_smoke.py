"""benchmarks/tower_streaming.py --smoke: the tower benchmark's code on the CPU, a tiny tower.

The same builder (vLLM's `Qwen3_VisionTransformer` from the patched tree, at a tiny size),
resident and streamed by vLLM's own `PrefetchOffloader`; the JSON and the Markdown written
as a real run writes them. What the CPU cannot do is said so, not faked: no times, no GPU
memory, and the UVA mode and the pinned H2D copy "skipped: needs CUDA".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_tower_pipeline_smoke import CPU_ONLY, REPO, benchmark_module, run_on_cpu

BENCHMARK = REPO / "benchmarks" / "tower_streaming.py"
NEEDS_CUDA = "skipped: needs CUDA"

pytestmark = [CPU_ONLY]


@pytest.fixture(scope="module")
def smoke_run(vllm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("tower_streaming") / "result.json"
    run_on_cpu(BENCHMARK, vllm_tree, "--out", str(out))
    return json.loads(out.read_text()), out.with_suffix(".md").read_text()


def test_resident_and_streamed_run_and_agree_bit_for_bit(smoke_run):
    report, _ = smoke_run
    assert report["smoke"] is True and report["device"] == "cpu" and report["gpu"] is None
    resident, streamed = report["results"]["resident"], report["results"]["streamed"]
    assert resident["bit_identical_to_resident"] is None  # the reference
    assert streamed["bit_identical_to_resident"] is True
    assert resident["repeatable"] is True and streamed["repeatable"] is True
    # The tiny tower is the benchmark's builder at another size, streamed in units.
    tower = report["tower"]
    assert tower["config"].startswith("tiny Qwen3-VL vision (--smoke)")
    assert tower["streamed_units"] > 1 and 0 < tower["largest_unit_mib"] < tower["param_mib"]
    assert tower["arena_pinning"] == "none"  # no pinned memory without CUDA
    # Between encodes the streamed tower's parameters rest in the arena, but the kept ones.
    assert resident["param_bytes_on_gpu_between_encodes"] == tower["param_bytes"]
    kept = report["summary"]["kept_resident_bytes"]
    assert 0 < kept < tower["param_bytes"]
    assert streamed["param_bytes_on_gpu_between_encodes"] == kept
    assert report["summary"]["targets_met"]["no param bytes between encodes but the kept ones"] is True


def test_no_timing_or_memory_claims_and_the_cuda_parts_said_skipped(smoke_run):
    report, markdown = smoke_run
    for mode in ("resident", "streamed"):
        r = report["results"][mode]
        timed = ("median_ms", "min_ms", "max_ms", "times_ms")
        memory = ("gpu_allocated_between_encodes_mib", "gpu_peak_during_encode_mib", "encode_extra_over_between_mib")
        assert all(r[key] is None for key in (*timed, *memory))
    assert report["results"]["uva"] == {"mode": "uva", "skipped": NEEDS_CUDA}
    assert report["results"]["h2d_floor"]["skipped"] == NEEDS_CUDA
    assert "median_ms" not in report["results"]["h2d_floor"]
    summary = report["summary"]
    assert summary["streamed_over_resident"] is None and summary["uva_over_streamed"] is None
    assert summary["targets_met"]["streamed <= 1.10 x resident"] == "not timed (smoke)"
    assert summary["targets_met"]["streamed >= 7 x faster than uva"] == NEEDS_CUDA
    assert set(report["not_run"]) == {"timings", "gpu_memory", "uva", "h2d_floor"}

    assert "a --smoke run: a tiny tower, no timing or memory claims" in markdown
    assert "| uva | skipped: needs CUDA |" in markdown
    assert "H2D floor: skipped: needs CUDA" in markdown
    assert "| streamed | not timed (smoke) | - |" in markdown and "| True |" in markdown
    assert " ms " not in markdown and "GB/s" not in markdown  # no figure a reader could take as a time
    assert "no param bytes between encodes but the kept ones: yes" in markdown


def test_the_committed_gpu_run_renders_as_it_was_committed():
    """The Markdown of a real (GPU) run, from its JSON: the smoke mode changed nothing there."""
    results = REPO / "benchmarks" / "results" / "engine_offload"
    report = json.loads((results / "engine_offload.json").read_text())["tower_alone"]
    tower_streaming = benchmark_module("tower_streaming")
    try:
        rendered = "#" + tower_streaming.render_markdown(report)  # engine_offload.md nests it a level down
    finally:
        sys.modules.pop("tower_streaming", None)
    committed = (results / "engine_offload.md").read_text()
    assert rendered in committed and "| uva | 777.6 | 18.16x |" in rendered
