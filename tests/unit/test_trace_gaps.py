"""vllm_fork_testkit/trace_gaps.py on two real H200 traces of the same streamed encode (2B Qwen3-VL
tower, 64-token image, 5 encodes), before and after the cu_seqlens patch moved the SDPA ViT wrapper's
`cu_seqlens` to the host: the per-layer `.tolist()` is a copy into pageable host memory, which
holds the host until the device is there, and must count as a synchronizing call."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fork_testkit import trace_gaps

# Kept from the GPU runs of 2026-12-02b (3-pipeline, 4-recheck-f98f7b1) and 2026-12-02e
# (3-encgraphs-graph); the runs' other results are in git at a3949c7:benchmarks/results/.
TRACES = Path(__file__).resolve().parent / "data" / "traces"
BEFORE = TRACES / "pipeline-2B-image-64-before-patch-0003.json.gz"
AFTER = TRACES / "pipeline-2B-image-64-after-patch-0003.json.gz"


@pytest.fixture(scope="module")
def summaries() -> dict[str, dict]:
    return {
        name: trace_gaps.summarize(trace_gaps.load_events(path))
        for name, path in (("before", BEFORE), ("after", AFTER))
    }


def test_copies_into_pageable_memory_count_as_host_syncs(summaries):
    # 24 `.tolist()` per encode; the ones that found the device behind held the host ~600 us each.
    assert summaries["before"]["per_encode"]["host_sync_us"] > 1000
    assert summaries["after"]["per_encode"]["host_sync_us"] == 0


def test_the_copy_stream_is_found_with_every_unit_copy(summaries):
    for summary in summaries.values():
        copy = next(s for s in summary["streams"] if s["role"] == "copy")
        # 38 units of the 2B tower per encode, 5 encodes, 776 MiB each.
        assert copy["copies"] == 190
        assert copy["htod_bytes"] == pytest.approx(5 * 776.2 * 2**20, rel=0.01)


def test_the_report_names_the_sync_time(summaries):
    text = trace_gaps.render_markdown(summaries["before"])
    assert "ms in synchronizing calls" in text and "0.00 ms in synchronizing calls" not in text
    assert "0.00 ms in synchronizing calls" in trace_gaps.render_markdown(summaries["after"])


def test_kernel_totals_show_a_streamed_graph_runs_the_resident_kernels():
    """One CUDA graph replay each of the 8B tower on 8 images, resident and streamed
    (lookahead 3, `tower_graph.py --profile batch-8:3`): the same kernels for the same time;
    what streaming adds is a copy stream carrying the whole tower."""
    totals, copies = {}, {}
    for name in ("resident", "streamed"):
        events = trace_gaps.load_events(TRACES / f"graph-8B-batch-8-{name}.json.gz")
        ranked = trace_gaps.kernel_totals(events, top=1000)
        assert [k["total_us"] for k in ranked] == sorted((k["total_us"] for k in ranked), reverse=True)
        totals[name] = {k["name"]: k for k in ranked}
        copies[name] = sum(s["htod_bytes"] for s in trace_gaps.summarize(events)["streams"])
    assert sum(k["count"] for k in totals["resident"].values()) == 532
    assert sum(k["count"] for k in totals["streamed"].values()) == 532
    resident, streamed = totals["resident"]["_fwd_kernel"], totals["streamed"]["_fwd_kernel"]
    assert resident["count"] == streamed["count"] == 27  # Triton's ViT attention, one per block
    assert abs(streamed["total_us"] / resident["total_us"] - 1) < 0.01
    assert copies["resident"] == 0 and copies["streamed"] == 1_152_719_360  # the 8B tower's arena
