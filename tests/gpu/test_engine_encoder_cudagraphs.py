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
one does; the managers' hit counts prove the graphs ran.

These engines compile their decoders too (torch.compile, decoder CUDA graphs). The pair that
the tests compare float for float compiles in Inductor's deterministic mode, each engine into
caches of its own (engine_runs.run_probe). A second pair compiles as users run it, with
Inductor timing its reductions' configs on the device: on the real wheel (gpu-real
2026-12-05, 2026-12-05b) such a pair's prompt logprobs parted from one position on while the
decoder's inputs, input embeddings and deepstack alike, were equal bit for bit; the test of
that pair holds such a difference to kernels its two compiles chose differently
(benchmarks/results/gpu-real/logprob-classes.md). Figures go to `$VLLM_FORK_RESULTS` as
`engine_qwen3_vl_encoder_cudagraphs_<backend>.json.gz`.
"""

from __future__ import annotations

import os

import pytest
import torch
from engine_runs import (
    assert_same_compiled_kernels,
    assert_same_embeddings,
    assert_same_outputs,
    record,
    run_probe,
)

from vllm_fork_testkit.compile_caches import kernel_differences
from vllm_fork_testkit.engine_compare import input_differences, logprob_differences, report, stored_output_changes
from vllm_fork_testkit.kernels import uses_standins

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

MiB = 1 << 20


#: The compared pair (deterministic compiles) and the pair compiled as users run it.
PAIRS = {"deterministic": ("resident", "streamed"), "autotuned": ("resident_autotuned", "streamed_autotuned")}


def pair_of(engines: dict, pair: str) -> tuple[dict, dict]:
    if PAIRS[pair][0] not in engines:
        pytest.skip(f"no {pair} pair: the stand-ins compile nothing, or ENCGRAPHS_AUTOTUNED=0 left it out")
    return engines[PAIRS[pair][0]], engines[PAIRS[pair][1]]


def skip_uncompiled(engine: dict) -> None:
    if engine["standins"]:
        pytest.skip("the stand-ins compile nothing")


@pytest.fixture(scope="module", params=["vllm-default", "TRITON_ATTN"])
def engines(request, checkpoints) -> dict[str, dict]:
    backend = request.param
    standins = uses_standins()
    if backend == "vllm-default" and standins:
        pytest.skip("the stand-ins have no FlashAttention, vLLM's default ViT backend on Hopper")
    extra = ("--encoder-cudagraphs", "--requests", "8")
    if backend != "vllm-default":
        extra += ("--mm-encoder-attn-backend", backend)
    results = {}
    # The stand-ins compile nothing (mode 0): the autotuned pair would be the other again.
    # ENCGRAPHS_AUTOTUNED=0 runs the compared pair alone (half the device time).
    autotuned = not standins and os.environ.get("ENCGRAPHS_AUTOTUNED", "1") != "0"
    pairs = PAIRS if autotuned else {"deterministic": PAIRS["deterministic"]}
    for pair, names in pairs.items():
        for name, mode in zip(names, ("resident", "streamed"), strict=True):
            results[name] = run_probe(checkpoints["qwen3_vl"], mode, *extra, deterministic=pair == "deterministic")
            # After each engine: a call cut at its time limit still returns the engines it ran.
            record(f"engine_qwen3_vl_encoder_cudagraphs_{backend}.json", results)
    return results


def test_the_encoder_graphs_ran_in_both_engines(engines):
    for mode in ("resident", "streamed"):
        stats = engines[mode]["encoder_graph_stats"]
        print(f"\n[engine] {mode}: encoder CUDA graphs {stats}")
        assert stats is not None, f"{mode}: the engine made no encoder CUDA graphs"
        assert stats["num_budgets"] > 0 and stats["graph_hits"] > 0, stats


@pytest.mark.parametrize("pair", PAIRS)
def test_streamed_encoder_outputs_are_bit_identical(engines, pair):
    """Every image's embeddings, eager batches and graph replays alike (sha256 of each)."""
    assert_same_embeddings(*pair_of(engines, pair))


def test_stored_encoder_outputs_are_unchanged_after_the_batch(engines):
    """Each encoder output digested when stored and again after the batched prompts: nothing
    wrote into their memory in between (in the streamed engine, no copy of the streamer)."""
    for mode in ("resident", "streamed"):
        changed = stored_output_changes(engines[mode])
        assert not changed, f"{mode}: stored encoder outputs changed:\n" + "\n".join(changed)


@pytest.mark.parametrize("pair", PAIRS)
def test_the_decoder_gets_the_same_inputs(engines, pair):
    """The input embeddings and deepstack embeddings of each forward of the batch, bit for bit."""
    resident, streamed = pair_of(engines, pair)
    assert resident.get("compared_inputs"), "no decoder inputs recorded"
    differ = input_differences(resident, streamed)
    assert not differ, "decoder inputs differ:\n" + "\n".join(differ)


def test_compiled_decoders_are_the_same_kernels(engines):
    """The compared pair compiled the same kernels and, where a tuned config sets what a
    kernel computes (a reduction's, not an elementwise kernel's), chose the same
    config: equal logprobs then compare the streamer, not two compiles."""
    resident, streamed = engines["resident"], engines["streamed"]
    skip_uncompiled(resident)
    assert_same_compiled_kernels(resident, streamed)


def test_same_tokens_and_prompt_logprobs(engines):
    """Resident vs streamed, batched and alone: the same tokens, prompt logprobs float for float."""
    assert engines["resident"]["compared"][0]["prompt_tokens"] > 2223  # the 2223-token image went in
    assert_same_outputs(engines["resident"], engines["streamed"])


def test_the_batch_run_again_from_the_encoder_cache_matches_resident(engines):
    """The compared batch once more, right after: its embeddings come from the encoder cache
    (no encoder input in its steps), so only the decoder runs. Resident and streamed give the
    same prompt logprobs float for float, and each engine its own first run's."""
    resident, streamed = engines["resident"], engines["streamed"]
    for mode, engine in (("resident", resident), ("streamed", streamed)):
        steps = engine.get("compared_again_steps") or []
        assert not any(sum(step["encoder_inputs"]) for step in steps), f"{mode}: the batch was encoded again"
    again = logprob_differences(
        {"compared": resident["compared_again"]}, {"compared": streamed["compared_again"]}, parts=("compared",)
    )
    own = logprob_differences(
        {"compared": streamed["compared"]}, {"compared": streamed["compared_again"]}, parts=("compared",)
    )
    print(
        f"\n[engine] run again: resident vs streamed {again or 'all equal'}; streamed first vs again {own or 'all equal'}"
    )
    assert not again and not own, "\n".join(again + own)


def test_autotuned_compiles_differ_only_where_their_kernels_do(engines):
    """The pair compiled as users run it: the same tokens, and any prompt logprob that differs
    comes with kernels the two compiles chose differently (the decoder's inputs being equal:
    the test above)."""
    resident, streamed = pair_of(engines, "autotuned")
    assert not resident["inductor_deterministic"] and not streamed["inductor_deterministic"]
    tokens = [
        f"{part} {i}"
        for part in ("compared", "growth")
        for i, (x, y) in enumerate(zip(resident[part], streamed[part]))
        if x["tokens"] != y["tokens"]
    ]
    differ = logprob_differences(resident, streamed)
    kernels = kernel_differences(resident, streamed)
    print(f"\n[engine] autotuned pair: logprobs {differ or 'all equal'}; kernels {kernels or 'the same'}")
    print(report(engines))
    assert not tokens, f"tokens differ: {tokens}"
    assert not differ or kernels, "prompt logprobs differ although both compiles chose the same kernels:\n" + "\n".join(
        differ
    )


def test_single_image_requests_match_float_for_float_at_any_kv_cache_size(engines):
    """Each image request alone (one request per engine step: the same step composition in
    both engines), prompt logprobs float for float, although the streamed engine's KV cache
    is larger."""
    resident, streamed = engines["resident"], engines["streamed"]
    assert resident["growth"] and len(resident["growth"]) == len(streamed["growth"])
    assert resident["num_gpu_blocks"] < streamed["num_gpu_blocks"]
    differ = logprob_differences(resident, streamed, parts=("growth",))
    assert not differ, "\n".join(differ)


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
