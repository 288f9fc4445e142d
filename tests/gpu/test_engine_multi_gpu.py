"""`--offload-towers` across GPUs through vLLM's `LLM` engine (issue 16): TP, PP, TP x PP.

The engine tests' checkpoint (Qwen3-VL, full-size 8B tower, 2-layer text model), resident vs
streamed, one engine per subprocess, on 2 or 4 GPUs. Per rank (`ranks` in engine_probe's
output): weights on the GPU, KV cache, the tower's bytes there and the host bytes pinned for
it, the worker's RSS. With tensor parallelism the tower is sharded (each rank streams its
shard) unless `mm_encoder_tp_mode=data` replicates it (each rank streams a full copy); with
pipeline parallelism a stage without a tower pins nothing. Host RAM is shared by all ranks:
the total pinned for towers is the sum over ranks. Skipped, saying so, where fewer GPUs are
present (the lent H200 machines have one unless `status` lists nvidia-h200-x2 or -x4).
"""

from __future__ import annotations

import pytest
import torch
from engine_runs import assert_same_outputs, record, run_probe

MiB = 1 << 20

LAYOUTS = {
    "tp2": {"tp": 2, "pp": 1, "mm_encoder_tp_mode": None},
    "tp2-encoder-data": {"tp": 2, "pp": 1, "mm_encoder_tp_mode": "data"},
    "pp2": {"tp": 1, "pp": 2, "mm_encoder_tp_mode": None},
    "tp2-pp2": {"tp": 2, "pp": 2, "mm_encoder_tp_mode": None},
}


def _layout(name: str):
    layout = LAYOUTS[name]
    gpus = layout["tp"] * layout["pp"]
    present = torch.cuda.device_count() if torch.cuda.is_available() else 0
    skip = pytest.mark.skipif(
        present < gpus,
        reason=f"{name} needs {gpus} GPUs, {present} present (issue 16: run on nvidia-h200-x{gpus})",
    )
    return pytest.param(name, id=name, marks=[pytest.mark.gpu, skip])


@pytest.fixture(scope="module", params=[_layout(name) for name in LAYOUTS])
def engines(request, checkpoints) -> dict[str, dict]:
    layout = LAYOUTS[request.param]
    extra = ["--tp", str(layout["tp"]), "--pp", str(layout["pp"])]
    if layout["mm_encoder_tp_mode"]:
        extra += ["--mm-encoder-tp-mode", layout["mm_encoder_tp_mode"]]
    results = {
        mode: run_probe(checkpoints["qwen3_vl"], mode, *extra, "--requests", "8") for mode in ("resident", "streamed")
    }
    results["layout"] = {"name": request.param, **layout}
    record(f"engine_multi_gpu_{request.param}.json", results)
    return results


def test_same_tokens_and_prompt_logprobs(engines):
    assert_same_outputs(engines["resident"], engines["streamed"])


def test_each_rank_frees_its_tower_and_pins_only_that(engines):
    resident, streamed = engines["resident"]["ranks"], engines["streamed"]["ranks"]
    layout = engines["layout"]
    assert len(resident) == len(streamed) == layout["tp"] * layout["pp"]
    for rank, (r, s) in enumerate(zip(resident, streamed)):
        tower = r["tower_param_bytes"]
        print(
            f"\n[{layout['name']} rank {rank}] tower {tower / MiB:.1f} MiB; weights "
            f"{r['weights_bytes'] / MiB:.1f} -> {s['weights_bytes'] / MiB:.1f} MiB; KV "
            f"{r['kv_cache_bytes'] / MiB:.1f} -> {s['kv_cache_bytes'] / MiB:.1f} MiB; pinned "
            f"{s['streamer_host_bytes'] / MiB:.1f} MiB; RSS {s['rss_bytes'] / MiB:.0f} MiB"
        )
        assert r["weights_bytes"] - s["weights_bytes"] >= 0.99 * tower
        assert s["streamer_host_bytes"] <= 1.10 * tower  # a stage without a tower pins nothing
        if tower:
            assert s["kv_cache_bytes"] > r["kv_cache_bytes"]
    towers = [r["tower_param_bytes"] for r in resident]
    if layout["mm_encoder_tp_mode"] == "data":
        assert all(t == towers[0] for t in towers)  # a full replica per rank
    total_pinned = sum(s["streamer_host_bytes"] for s in streamed)
    print(f"\n[{layout['name']}] host RAM pinned for towers, all ranks: {total_pinned / MiB:.1f} MiB")
