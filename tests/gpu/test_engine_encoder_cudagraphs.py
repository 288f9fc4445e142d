"""`--offload-towers` with vLLM's encoder CUDA graphs (`cudagraph_mm_encoder`), resident vs
streamed, through vLLM's own `LLM` engine.

vLLM captures the vision encoder per token budget and replays it for the images that fit;
a streamed tower is captured with its unit copies (the streamer patch). Qwen3-VL with its
full-size 8B vision tower, decoder and encoder graphs, with two ViT attention backends:
the one vLLM picks (FlashAttention on Hopper, with the real wheel) and Triton's. Both read
`cu_seqlens` on the device (SDPA's host split sizes are refused in a capture: the cu_seqlens
patch). On the stand-in harness (no FlashAttention) only Triton's runs. Equal encoder
outputs (a digest of each image's embeddings, recorded in the worker, for batches run
eagerly and single images replayed) prove the streamed encoder computes what the resident
one does; the managers' hit counts prove the graphs ran. The prompt logprobs are compared
with the decoder on the same KV cache size (a third engine: resident at the streamed
engine's size): on the real wheel (gpu-real 2026-12-04) the batched prompts' logprobs
differed in their last bits while every embedding was equal. The engine steps of that
batch are recorded too, and each image request alone is compared float for float: they
tell whether what differs is the KV cache size or the batch's split into steps. Figures go to `$VLLM_FORK_RESULTS` as
`engine_qwen3_vl_encoder_cudagraphs_<backend>.json.gz`.
"""

from __future__ import annotations

import os

import pytest
import torch
from engine_runs import assert_same_embeddings, assert_same_outputs, logprob_differences, record, run_probe

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
    extra = ("--encoder-cudagraphs", "--requests", "8")
    if backend != "vllm-default":
        extra += ("--mm-encoder-attn-backend", backend)
    results = {mode: run_probe(checkpoints["qwen3_vl"], mode, *extra) for mode in ("resident", "streamed")}
    # The resident engine again, with the streamed engine's KV cache size: the decoder then
    # runs on the same number of blocks in both.
    results["resident_at_streamed_kv"] = run_probe(
        checkpoints["qwen3_vl"],
        "resident",
        *extra,
        "--kv-cache-memory-bytes",
        str(results["streamed"]["kv_cache_bytes"]),
    )
    record(f"engine_qwen3_vl_encoder_cudagraphs_{backend}.json", results)
    return results


def test_the_encoder_graphs_ran_in_both_engines(engines):
    for mode in ("resident", "streamed"):
        stats = engines[mode]["encoder_graph_stats"]
        print(f"\n[engine] {mode}: encoder CUDA graphs {stats}")
        assert stats is not None, f"{mode}: the engine made no encoder CUDA graphs"
        assert stats["num_budgets"] > 0 and stats["graph_hits"] > 0, stats


def test_streamed_encoder_outputs_are_bit_identical(engines):
    """Every image's embeddings, eager batches and graph replays alike (sha256 of each)."""
    assert_same_embeddings(engines["resident"], engines["streamed"])


def test_same_tokens_and_prompt_logprobs_at_the_same_kv_cache_size(engines):
    """The decoder on the same KV cache size: the prompt logprobs float for float. With
    unequal sizes (streaming frees the tower's bytes for the KV cache) they may differ in
    the last bits although the embeddings are equal (gpu-real 2026-12-04): what differs
    is then the decoder's, not the encoder's."""
    resident, streamed = engines["resident_at_streamed_kv"], engines["streamed"]
    assert resident["num_gpu_blocks"] == streamed["num_gpu_blocks"], (
        resident["num_gpu_blocks"],
        streamed["num_gpu_blocks"],
    )
    assert resident["compared"][0]["prompt_tokens"] > 2223  # the 2223-token image went in
    assert_same_outputs(resident, streamed)
    print(f"\n[engine] unequal KV cache sizes: {logprob_differences(engines['resident'], streamed) or 'none differ'}")


def test_single_image_requests_match_float_for_float_at_any_kv_cache_size(engines):
    """Each image request alone (one request per engine step: the same step composition in
    both engines), prompt logprobs float for float, although the streamed engine's KV cache
    is larger: the KV cache size alone does not move the decoder's bits."""
    resident, streamed = engines["resident"], engines["streamed"]
    assert resident["growth"] and len(resident["growth"]) == len(streamed["growth"])
    assert resident["num_gpu_blocks"] < streamed["num_gpu_blocks"]
    differ = logprob_differences(resident, streamed, parts=("growth",))
    assert not differ, "\n".join(differ)


def test_batched_prompt_logprobs_differ_only_where_the_engine_steps_differ(engines):
    """The compared prompts go in as one batch; the scheduler splits it into steps. Where two
    engines made the same steps (the same tokens per request per step), their prompt logprobs
    are equal float for float. Where the steps differ, the decoder's GEMMs ran at other token
    counts and their last bits may differ: that is vLLM's batch composition, not the
    encoder's (its outputs are bit-identical, above)."""
    streamed = engines["streamed"]
    for name in ("resident", "resident_at_streamed_kv"):
        other = engines[name]
        if other.get("compared_steps") is None or streamed.get("compared_steps") is None:
            pytest.skip("the engine core ran in another process: no step trace")
        same_steps = other["compared_steps"] == streamed["compared_steps"]
        differ = logprob_differences(other, streamed, parts=("compared",))
        print(
            f"\n[engine] {name} vs streamed: steps {'equal' if same_steps else 'differ'}"
            f" ({[s['tokens'] for s in other['compared_steps']]} vs {[s['tokens'] for s in streamed['compared_steps']]});"
            f" logprobs: {differ or 'all equal'}"
        )
        if same_steps:
            assert not differ, f"{name}: the same steps, different logprobs:\n" + "\n".join(differ)


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
