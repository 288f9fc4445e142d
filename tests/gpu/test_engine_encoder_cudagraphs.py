"""`--offload-towers` with vLLM's encoder CUDA graphs (`cudagraph_mm_encoder`), resident vs
streamed, through vLLM's own `LLM` engine.

vLLM captures the vision encoder per token budget and replays it for the images that fit;
a streamed tower is captured with its unit copies (the streamer patch). Qwen3-VL with its
full-size 8B vision tower, decoder and encoder graphs, with two ViT attention backends:
the one vLLM picks (FlashAttention on Hopper, with the real wheel) and Triton's. Both read
`cu_seqlens` on the device (SDPA's host split sizes are refused in a capture: the cu_seqlens
patch). On the stand-in harness (no FlashAttention) only Triton's runs. Equal encoder
outputs (a digest of each image's embeddings, recorded in the worker) and equal prompt
logprobs prove the replayed streamed encoder computes what the replayed resident one does;
the managers' hit counts prove the graphs ran. Figures go to `$VLLM_FORK_RESULTS` as
`engine_qwen3_vl_encoder_cudagraphs_<backend>.json.gz`.
"""

from __future__ import annotations

import os

import pytest
import torch
from engine_runs import assert_same_outputs, record, run_probe

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

MiB = 1 << 20


@pytest.fixture(scope="module", params=["vllm-default", "TRITON_ATTN"])
def engines(request, checkpoints) -> dict[str, dict]:
    backend = request.param
    if backend == "vllm-default" and os.environ.get("VLLM_GPU_STANDINS") == "1":
        pytest.skip("the stand-ins have no FlashAttention, vLLM's default ViT backend on Hopper")
    extra = () if backend == "vllm-default" else ("--mm-encoder-attn-backend", backend)
    results = {
        mode: run_probe(checkpoints["qwen3_vl"], mode, "--encoder-cudagraphs", "--requests", "8", *extra)
        for mode in ("resident", "streamed")
    }
    record(f"engine_qwen3_vl_encoder_cudagraphs_{backend}.json", results)
    return results


def test_the_encoder_graphs_ran_in_both_engines(engines):
    for mode, result in engines.items():
        stats = result["encoder_graph_stats"]
        print(f"\n[engine] {mode}: encoder CUDA graphs {stats}")
        assert stats is not None, f"{mode}: the engine made no encoder CUDA graphs"
        assert stats["num_budgets"] > 0 and stats["graph_hits"] > 0, stats


def test_same_tokens_and_prompt_logprobs_with_encoder_graphs(engines):
    assert engines["resident"]["compared"][0]["prompt_tokens"] > 2223  # the 2223-token image went in
    assert_same_outputs(engines["resident"], engines["streamed"])


def test_no_gpu_memory_growth_over_replays(engines):
    ranges = {}
    for mode in ("resident", "streamed"):
        allocated = engines[mode]["gpu_allocated_after_requests"]
        settled = allocated[len(allocated) // 4 :]
        ranges[mode] = max(settled) - min(settled)
        print(
            f"\n[engine] {mode}, encoder graphs: allocated after requests {min(allocated) / MiB:.1f}..{max(allocated) / MiB:.1f} MiB"
        )
    # Replays of a streamed encode allocate nothing that stays (the ring is the graph's
    # or kept from the first encode).
    assert ranges["streamed"] <= max(1 * MiB, ranges["resident"] + 1 * MiB), ranges


def test_kv_cache_grows_by_nearly_the_tower_with_encoder_graphs(engines):
    resident, streamed = engines["resident"], engines["streamed"]
    gained = streamed["kv_cache_bytes"] - resident["kv_cache_bytes"]
    print(
        f"\n[engine] encoder graphs: KV cache +{gained / MiB:.1f} MiB; tower {resident['tower_param_bytes'] / MiB:.1f} MiB"
    )
    assert gained >= 0.85 * resident["tower_param_bytes"]
