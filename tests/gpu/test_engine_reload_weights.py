"""A streamed tower's weights reloaded in place, through vLLM's own `LLM` engine (Qwen3-VL, 8B tower).

RL trainers sync weights into a running vLLM every step through its layerwise reload
(`reload_weights`, the NCCL weight transfer): each layer is put on the meta device, loaded,
processed and copied into the tensors it had. With `--offload-towers` those tensors are the
tower's parameters in pinned host memory, and the next encode must stream the new values.
Both engines reload the same new tower weights (`engine_probe.py --reload-tower-weights`):
the same greedy tokens and prompt logprobs before and after, outputs that changed with the
weights, and nothing of the tower left on the GPU by the reload.
"""

from __future__ import annotations

import pytest
import torch
from engine_runs import assert_same_outputs, record, run_probe

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

MiB = 1 << 20


@pytest.fixture(scope="module", params=["eager", "encoder-cudagraphs"])
def runs(request, checkpoints) -> dict[str, dict]:
    """Eager, and with encoder CUDA graphs, whose replays copy from the arena's addresses:
    the reload must keep them. With encoder graphs vLLM compiles the decoder too: both
    engines compile in Inductor's deterministic mode, so that their outputs compare the
    streamer, not two compiles' tuning (engine_runs.run_probe)."""
    checkpoint = checkpoints["qwen3_vl"]
    graphs = request.param == "encoder-cudagraphs"
    # The compared prompts go in one batch, beyond every captured budget, so vLLM encodes
    # them eagerly: with encoder graphs, two images alone after the reload replay a graph.
    extra = ("--encoder-cudagraphs", "--requests", "2") if graphs else ("--requests", "0")
    results = {
        mode: run_probe(checkpoint, mode, "--reload-tower-weights", *extra, deterministic=graphs)
        for mode in ("resident", "streamed")
    }
    record(f"engine_qwen3_vl_reload_weights_{request.param}.json", results)
    return results


def test_same_outputs_before_and_after_the_reload(runs):
    resident, streamed = runs["resident"], runs["streamed"]
    assert_same_outputs(resident, streamed)
    assert streamed["after_reload"]["tensors_loaded"] == resident["after_reload"]["tensors_loaded"] > 0
    assert_same_outputs(resident["after_reload"], streamed["after_reload"])
    if streamed["encoder_cudagraphs"]:
        # Every encode after the first batch came after the reload (the second batch reads
        # the encoder cache), and some replayed a graph over the reloaded arena. Their
        # outputs are among the embeddings compared above.
        for mode, run in runs.items():
            before, after = run["encoder_graph_stats_after_compared"], run["encoder_graph_stats"]
            print(f"\n[engine] {mode}, encoder graphs: {before} -> {after}")
            assert after["graph_hits"] > before["graph_hits"], f"{mode}: no graph replayed after the reload"
        assert resident["growth"] == streamed["growth"]


def test_the_reload_changed_what_the_images_encode_to(runs):
    """Else equal outputs after the reload would prove nothing: the images' encoder outputs
    and the image prompts' logprobs move with the tower's weights, the text-only prompt's
    (the last) do not."""
    for mode in ("resident", "streamed"):
        before, after = runs[mode]["compared"], runs[mode]["after_reload"]["compared"]
        changed = [a["prompt_logprobs"] != b["prompt_logprobs"] for a, b in zip(before, after)]
        print(f"\n[engine] {mode}: prompts whose logprobs changed with the reload {changed}")
        assert changed == [True] * (len(before) - 1) + [False]
        # The images were encoded again, and to something else.
        encoded, reencoded = runs[mode]["embeddings"], runs[mode]["after_reload"]["embeddings"]
        assert reencoded, f"{mode}: no encoder output was recorded after the reload"
        assert reencoded.keys() <= encoded.keys(), f"{mode}: other images encoded after the reload"
        assert all(encoded[key]["sha256"] != digest["sha256"] for key, digest in reencoded.items())


def test_the_reload_leaves_nothing_of_the_tower_on_the_gpu(runs):
    streamed = runs["streamed"]
    after = streamed["after_reload"]["figures"]
    on_gpu = {
        "before": streamed["gpu_tensor_bytes"]["by_child"].get("visual", 0),
        "after": after["gpu_tensor_bytes"]["by_child"].get("visual", 0),
    }
    # Allocated after the reload and its prompts over allocated after load; the resident
    # engine's growth (its first prompts' workspaces) is the baseline.
    grown = {
        mode: runs[mode]["after_reload"]["figures"]["gpu_allocated_bytes"] - runs[mode]["gpu_allocated_bytes"]
        for mode in ("resident", "streamed")
    }
    print(
        f"\n[engine] streamed: the tower on the GPU {on_gpu['before'] / MiB:.2f} -> {on_gpu['after'] / MiB:.2f} MiB "
        f"across the reload; allocated since load {grown['resident'] / MiB:+.1f} MiB resident, "
        f"{grown['streamed'] / MiB:+.1f} MiB streamed; arena {after['streamer_host_bytes'] / MiB:.1f} MiB"
    )
    assert on_gpu["after"] == on_gpu["before"] < 1 * MiB  # its rotary cache
    assert after["streamer_host_bytes"] == streamed["streamer_host_bytes"]
    # A tower materialized on the GPU by the reload and kept would be 1099 MiB more.
    assert grown["streamed"] < grown["resident"] + 64 * MiB
