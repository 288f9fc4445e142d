"""`--offload-towers` through vLLM's own `LLM` engine, resident vs streamed.

Checkpoints made here (`vlm_checkpoint.py`; dummy weights, a 2-layer text
model): Qwen3-VL with its full-size 8B vision tower (1099 MiB bf16), eager and
with decoder CUDA graphs, and Qwen2.5-VL with its full-size 7B tower (a
second family, whose `device` follows a weight), eager. One engine per
subprocess (`engine_probe.py`). The prompt logprobs depend on the image embeddings, so
equal logprobs prove the streamed encoder computes the same output as the
resident one inside the real engine. With decoder CUDA graphs (vLLM's defaults: the
decoder compiled by torch.compile) both engines compile in Inductor's deterministic mode,
each into caches of its own: without it each compile times its reductions' configs on the
device and may pick others, and two compiles of the same resident model can then differ in
their last bits (benchmarks/results/gpu-real/logprob-classes.md). A third engine, streamed in
the resident engine's caches, must load that compile (patch 6's compile key). Figures go to
`$VLLM_FORK_RESULTS` (when set) as `engine_<family>_<graphs>.json.gz`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from engine_runs import (
    assert_same_compiled_kernels,
    assert_same_outputs,
    compile_key_differences_of,
    record,
    run_probe,
)

from vllm_fork_testkit.compile_caches import kernel_differences

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

MiB = 1 << 20


@pytest.fixture(
    scope="module",
    params=[("qwen3_vl", "eager"), ("qwen3_vl", "cudagraphs"), ("qwen2_5_vl", "eager")],
    ids=lambda p: "-".join(p),
)
def engines(request, checkpoints) -> dict[str, dict]:
    family, graphs = request.param
    compiled = graphs == "cudagraphs"
    extra = ("--cudagraphs",) if compiled else ()
    name = f"engine_{family}_{graphs}.json"
    results = {}
    for mode in ("resident", "streamed"):
        results[mode] = run_probe(checkpoints[family], mode, *extra, deterministic=compiled)
        # After each engine: a call cut at its time limit still returns the engines it ran.
        record(name, results)
    if compiled:
        # Streamed again, in the resident engine's compile caches (patch 6: the towers'
        # options are not in vLLM's compile cache key).
        caches = Path(results["resident"]["compile_caches"])
        results["streamed_in_resident_caches"] = run_probe(
            checkpoints[family], "streamed", *extra, deterministic=True, caches=caches
        )
        record(name, results)
    return results


def test_same_tokens_and_prompt_logprobs(engines):
    assert engines["resident"]["compared"][0]["prompt_tokens"] > 2223  # the 2223-token image went in
    assert_same_outputs(engines["resident"], engines["streamed"])


def test_compiled_decoders_are_the_same_kernels(engines):
    """With a compiled decoder: both engines generated the same kernels and, where a tuned
    config sets what a kernel computes (a reduction's), chose the same one; so equal logprobs
    compare the streamer, not two compiles (deterministic mode, checked in the engine)."""
    resident, streamed = engines["resident"], engines["streamed"]
    if not resident["cudagraphs"] or resident["standins"]:
        pytest.skip("nothing compiled: eager, or the stand-ins (mode 0)")
    assert_same_compiled_kernels(resident, streamed)


def streamed_in_resident_caches(engines) -> tuple[dict, dict]:
    resident, again = engines["resident"], engines.get("streamed_in_resident_caches")
    if again is None or resident["standins"]:
        pytest.skip("nothing compiled: eager, or the stand-ins (mode 0)")
    return resident, again


def test_a_streamed_engine_on_the_resident_engines_kernels_gives_its_outputs(engines):
    """A streamed engine started in the resident engine's compile caches runs the resident
    compile's kernels with the configs it chose, and gives the resident engine's tokens and
    prompt logprobs float for float: with the compile held equal, streaming changes no bit."""
    resident, again = streamed_in_resident_caches(engines)
    differ = kernel_differences(resident, again)
    assert not differ, "\n".join(differ)
    assert_same_outputs(resident, again)


def test_a_streamed_engine_loads_the_resident_engines_compile(engines):
    """And it loads that compile instead of compiling again (patch 6: the towers never enter
    a compiled graph, so their options are not in vLLM's compile cache key)."""
    resident, again = streamed_in_resident_caches(engines)
    loaded = [line for line in again["log_lines"] if "Directly load" in line]
    compiled = [line for line in again["log_lines"] if "Compiling a graph" in line]
    print(
        f"\n[engine] streamed in the resident engine's caches: start {again['startup_s']:.1f} s "
        f"(resident {resident['startup_s']:.1f} s, streamed alone {engines['streamed']['startup_s']:.1f} s); "
        f"{len(loaded)} loads, {len(compiled)} compiles"
    )
    assert loaded and not compiled, "vLLM compiled again; its compile keys differ in:\n" + "\n".join(
        compile_key_differences_of(resident, again)
    )


def test_weights_on_gpu_shrink_by_the_tower(engines):
    resident, streamed = engines["resident"], engines["streamed"]
    tower = resident["tower_param_bytes"]
    assert tower > 1000 * MiB  # a full-size tower
    on_gpu = {m["mode"]: sum(m["gpu_tensor_bytes"]["by_child"].values()) for m in (resident, streamed)}
    loader_saved = resident["weights_bytes"] - streamed["weights_bytes"]
    print(
        f"\n[engine] tower {tower / MiB:.1f} MiB; parameters and buffers on the GPU "
        f"{on_gpu['resident'] / MiB:.1f} -> {on_gpu['streamed'] / MiB:.1f} MiB; vLLM's 'Model loading took' "
        f"{resident['weights_bytes'] / MiB:.1f} -> {streamed['weights_bytes'] / MiB:.1f} MiB"
    )
    for mode in (resident, streamed):
        found = mode["gpu_tensor_bytes"]
        by_child = {k: round(v / MiB, 1) for k, v in found["by_child"].items()}
        print(f"[engine] {mode['mode']}: by module (MiB) {by_child}; the tower's largest {found['tower_largest'][:4]}")
    # Of the tower only its buffers stay on the GPU (rotary caches), and they are small.
    assert streamed["gpu_tensor_bytes"]["by_child"].get("visual", 0) <= 0.01 * tower
    assert on_gpu["resident"] - on_gpu["streamed"] >= 0.99 * tower
    # vLLM's own figure also counts allocations that are no module's tensors, made
    # during the load: Qwen2.5-VL's streamed load left 15.7 MiB more of them than
    # its resident load (2026-12-01, gpu-2026-12-01b/), 0.988x the tower saved.
    assert loader_saved >= 0.98 * tower


def test_kv_cache_grows_by_nearly_the_tower(engines):
    resident, streamed = engines["resident"], engines["streamed"]
    gained = streamed["kv_cache_bytes"] - resident["kv_cache_bytes"]
    print(
        f"\n[engine] KV cache {resident['kv_cache_bytes'] / MiB:.1f} -> "
        f"{streamed['kv_cache_bytes'] / MiB:.1f} MiB (+{gained / MiB:.1f}, "
        f"{gained / resident['tower_param_bytes']:.3f}x the tower); blocks "
        f"{resident['num_gpu_blocks']} -> {streamed['num_gpu_blocks']}; the ring "
        f"{streamed['streamer_ring_bytes'] / MiB:.1f} MiB at lookahead {streamed['streamer_lookahead']}"
    )
    # The towers' default lookahead (2): a ring of three slots of the largest unit.
    assert streamed["streamer_lookahead"] == 2
    assert gained >= 0.9 * resident["tower_param_bytes"]
    assert streamed["num_gpu_blocks"] > resident["num_gpu_blocks"]


def test_host_memory_is_about_the_tower(engines):
    resident, streamed = engines["resident"], engines["streamed"]
    tower = streamed["tower_param_bytes"]
    pinned = streamed["streamer_host_bytes"] + (
        streamed["caching_allocator_pinned_bytes"] - resident["caching_allocator_pinned_bytes"]
    )
    rss_growth = streamed["rss_after_load_bytes"] - resident["rss_after_load_bytes"]
    print(
        f"\n[engine] pinned for the tower {pinned / MiB:.1f} MiB "
        f"({streamed['streamer_pinning']}); caching-allocator pinned "
        f"{resident['caching_allocator_pinned_bytes'] / MiB:.1f} -> "
        f"{streamed['caching_allocator_pinned_bytes'] / MiB:.1f} MiB; RSS after load "
        f"{resident['rss_after_load_bytes'] / MiB:.0f} -> "
        f"{streamed['rss_after_load_bytes'] / MiB:.0f} MiB (+{rss_growth / MiB:.0f})"
    )
    assert pinned <= 1.10 * tower
    assert rss_growth <= 1.25 * tower


def test_no_gpu_memory_growth_over_20_image_requests(engines):
    ranges = {}
    for mode in ("resident", "streamed"):
        allocated = engines[mode]["gpu_allocated_after_requests"]
        assert len(allocated) == 20
        settled = allocated[len(allocated) // 4 :]
        ranges[mode] = max(settled) - min(settled)
        print(f"\n[engine] {mode}: allocated after requests {min(allocated) / MiB:.1f}..{max(allocated) / MiB:.1f} MiB")
    # Streaming adds nothing that stays: whatever the engine itself keeps
    # (e.g. its encoder cache) is the same resident.
    assert ranges["streamed"] <= max(1 * MiB, ranges["resident"] + 1 * MiB), ranges
