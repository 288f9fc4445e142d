"""Run vLLM's `LLM` engine once, resident or with `--offload-towers`; print JSON.

    python3 -m vllm_fork_testkit.engine_probe CHECKPOINT_DIR --mode resident|streamed
        [--cudagraphs] [--encoder-cudagraphs] [--requests 20] [--latency-repeats 0]
        [--tp N] [--pp N] [--mm-encoder-tp-mode weights|data] [--reload-tower-weights]

One engine per process, so every figure (GPU memory, pinned host memory,
RSS) is this engine's alone; the engine core runs in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so the worker's figures are read
directly. The tests (`test_engine_offload_towers.py`) and the benchmark
(`benchmarks/engine_offload.py`) both run it as a subprocess.

On the GPU test machine vLLM's compiled kernels are stand-ins
(`VLLM_GPU_STANDINS=1`, see ../shared/gpu/README.md), which need a few
backend choices; on a real install those are left to vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vllm_fork_testkit.kernels import uses_standins
from vllm_fork_testkit.vlm_checkpoint import family_of, image_of_tokens

MiB = 1 << 20
VISION_TOKENS = "<|vision_start|><|image_pad|><|vision_end|>"

# Image sizes in tokens (each a 2x2 merge of the tower's patches).
COMPARED_IMAGES = [[2223], [64, 256], [1024], [256, 64, 768]]
GROWTH_SIZES = [64, 256, 1024, 2223, 128, 512, 768, 1536]
#: The result's records of the compared batches (tokens, prompt logprobs, decoder inputs,
#: embedding digests), which the engine tests compare and a benchmark's
#: report leaves out.
COMPARISON_RECORDS = ("compared", "compared_again", "compared_inputs", "embeddings", "embeddings_after_compared")


def harness_kwargs(cudagraphs: bool, encoder_cudagraphs: bool = False) -> dict:
    """Engine options the GPU test machine's stand-in kernels need.

    `encoder_cudagraphs`: vLLM's encoder CUDA graphs (`cudagraph_mm_encoder`, with the
    decoder's graphs). They need a ViT attention backend that reads `cu_seqlens` on the
    device; FlashAttention, vLLM's default, is not among the stand-ins: Triton's is.
    """
    cudagraphs = cudagraphs or encoder_cudagraphs
    # Budgets in image tokens that hold every prompt here (2223 tokens alone, up to three
    # images of 1088 together): three graphs, not one per power of two up to the
    # scheduler's token budget.
    encoder_graphs = {
        "cudagraph_mm_encoder": True,
        "encoder_cudagraph_token_budgets": [256, 1024, 2304],
        "encoder_cudagraph_max_vision_items_per_batch": 3,
    }
    if not uses_standins():
        if encoder_cudagraphs:
            return {"compilation_config": encoder_graphs}
        return {} if cudagraphs else {"enforce_eager": True}
    compilation: dict = {"custom_ops": ["none"], "mode": 0}
    if cudagraphs:
        compilation["cudagraph_mode"] = "FULL_DECODE_ONLY"
    if encoder_cudagraphs:
        compilation.update(encoder_graphs)
    return {
        "attention_backend": "TRITON_ATTN",
        **({"mm_encoder_attn_backend": "TRITON_ATTN"} if encoder_cudagraphs else {}),
        "enforce_eager": not cudagraphs,
        "compilation_config": compilation,
        "kernel_config": {
            "ir_op_priority": {
                "rms_norm": ["native"],
                "fused_add_rms_norm": ["native"],
            }
        },
    }


def with_deterministic_inductor(kwargs: dict) -> dict:
    """`kwargs` with Inductor's deterministic mode asked through vLLM's compilation config
    (`inductor_compile_config`, which vLLM hands each compile as config patches and hashes
    into its compile cache key): no on-device timing of the configs that set the order in
    which a reduction sums. The environment variable TORCHINDUCTOR_DETERMINISTIC did not
    reach the compiles of the real wheel's engines (docs/tower-streaming.md)."""
    compilation = dict(kwargs.get("compilation_config") or {})
    compilation["inductor_compile_config"] = {**compilation.get("inductor_compile_config", {}), "deterministic": True}
    return {**kwargs, "compilation_config": compilation}


def mode_kwargs(mode: str, resident_gb: float = 0.0) -> dict:
    if mode == "streamed":
        return {"offload_backend": "prefetch", "offload_towers": True, "offload_towers_resident_gb": resident_gb}
    assert mode == "resident" and not resident_gb, (mode, resident_gb)
    return {}


def image_prompt(sizes: list[int], seed: int, family: str) -> dict:
    images = [image_of_tokens(tokens, seed=seed * 10 + i, family=family) for i, tokens in enumerate(sizes)]
    prompt = (
        "<|im_start|>user\n"
        + VISION_TOKENS * len(sizes)
        + "Describe the picture in one sentence.<|im_end|>\n<|im_start|>assistant\n"
    )
    return {"prompt": prompt, "multi_modal_data": {"image": images}}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _gpu_bytes_by_module(model, streamer) -> dict:
    """Bytes of the model's parameters and buffers in GPU memory, per top-level child.

    Views of a streamer's pinned arena (UVA) are host memory and do not count.
    The tower's own entries are listed by name, largest first: what of the
    tower stays on the GPU after load.
    """
    arenas = [
        (t.arena.device_view.data_ptr(), t.arena.device_view.data_ptr() + t.arena.nbytes)
        for t in (streamer.towers if streamer else [])
        if t.arena.device_view.is_cuda
    ]
    by_child: dict[str, int] = {}
    tower_entries: list[tuple[int, str]] = []
    seen: set[int] = set()
    tensors = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    for name, tensor in tensors:
        if not tensor.is_cuda or tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        if any(lo <= tensor.data_ptr() < hi for lo, hi in arenas):
            continue
        nbytes = tensor.numel() * tensor.element_size()
        child = name.split(".")[0]
        by_child[child] = by_child.get(child, 0) + nbytes
        if child == "visual":
            tower_entries.append((nbytes, name))
    tower_entries.sort(reverse=True)
    return {"by_child": by_child, "tower_largest": [[n, b] for b, n in tower_entries[:12]]}


def _worker_figures(worker) -> dict:
    """Read in each worker (one per rank): weights, KV cache, tower and host memory."""
    import torch
    from vllm.model_executor.offloader import get_offloader

    model = worker.model_runner.get_model()
    tower = getattr(model, "visual", None)
    tower_bytes = sum(p.numel() * p.element_size() for p in tower.parameters()) if tower else 0
    streamer = getattr(get_offloader(), "tower_streamer", None)
    host_stats = torch.cuda.host_memory_stats()
    return {
        "weights_bytes": int(worker.model_runner.model_memory_usage),
        # With --kv-cache-memory-bytes vLLM skips the profile and never sets the attribute.
        "kv_cache_bytes": int(
            getattr(worker, "available_kv_cache_memory_bytes", None) or worker.cache_config.kv_cache_memory_bytes
        ),
        "num_gpu_blocks": worker.cache_config.num_gpu_blocks,
        "tower_param_bytes": tower_bytes,
        "streamer_host_bytes": streamer.host_bytes if streamer else 0,
        "streamer_kept_resident_bytes": sum(streamer.kept_resident.values()) if streamer else 0,
        "streamer_lookahead": streamer.lookahead if streamer else 0,
        "streamer_ring_bytes": streamer.ring_bytes if streamer else 0,
        "streamer_pinning": sorted({t.arena.pinning for t in streamer.towers}) if streamer else [],
        "caching_allocator_pinned_bytes": int(host_stats.get("allocated_bytes.current", 0)),
        "caching_allocator_pinned_reserved_bytes": int(host_stats.get("reserved_bytes.current", 0)),
        "gpu_allocated_bytes": torch.cuda.memory_allocated(),
        "gpu_tensor_bytes": _gpu_bytes_by_module(model, streamer),
        "rss_bytes": _rss_bytes(),  # the worker's process (another process than the driver's at TP/PP > 1)
    }


def _encoder_graph_stats(worker) -> dict | None:
    """The encoder CUDA graph manager's hits and misses (V1 or V2 model runner), or None
    when the engine made no encoder graphs."""
    runner = worker.model_runner
    manager = getattr(runner, "encoder_cudagraph_manager", None)
    if manager is None:
        encoder_runner = getattr(getattr(runner, "model_state", None), "encoder_runner", None)
        manager = getattr(encoder_runner, "cudagraph_manager", None)
    return None if manager is None else manager.get_cumulative_stats()


#: The seed of the tower weights `--reload-tower-weights` loads: the same values in every engine.
RELOAD_SEED = 7


def _reload_tower_weights(worker) -> int:
    """Reload the tower's weights in place with new values through vLLM's own
    `reload_weights` (checkpoint format: each layer put on the meta device, loaded,
    processed and copied into the tensors it had), as an RL trainer's weight sync does.
    Returns how many tensors were loaded."""
    import torch

    model = worker.model_runner.get_model()
    generator = torch.Generator().manual_seed(RELOAD_SEED)
    weights = [
        (name, (torch.randn(param.shape, generator=generator) * 0.02).to(param.dtype))
        for name, param in model.named_parameters()
        if name.startswith("visual.")
    ]
    worker.model_runner.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
    return len(weights)


class _RecordingOutputs(dict):
    """The worker's encoder outputs (mm hash -> embeddings), recording a digest of each one
    stored: its sha256 and per-row float64 sums, so two engines' embeddings of the same image
    can be compared bit for bit and, where they differ, row by row."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.digests: dict[str, dict] = {}
        self.stored: dict = {}

    def _record(self, key, value) -> None:
        import torch

        if key in self.digests or not isinstance(value, torch.Tensor):
            return
        self.digests[key] = _tensor_digest(value)
        self.stored[key] = value  # kept for `_redigest_embeddings`

    def __setitem__(self, key, value) -> None:
        self._record(key, value)
        super().__setitem__(key, value)

    def update(self, *args, **kwargs) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value


def _encoder_cache(worker):
    """The V2 model runner's encoder cache (mm hash -> embeddings), or None."""
    runner = worker.model_runner
    cache = getattr(runner, "encoder_cache", None)
    if cache is None:
        cache = getattr(getattr(runner, "model_state", None), "encoder_cache", None)
    return cache


def _start_recording_embeddings(worker) -> bool:
    cache = _encoder_cache(worker)
    if cache is None or not hasattr(cache, "encoder_outputs"):
        return False
    cache.encoder_outputs = _RecordingOutputs(cache.encoder_outputs)
    return True


def _redigest_embeddings(worker) -> dict:
    """The digests of the encoder outputs recorded so far, taken again now."""
    outputs = getattr(_encoder_cache(worker), "encoder_outputs", None)
    if not isinstance(outputs, _RecordingOutputs):
        return {}
    return {key: _tensor_digest(value) for key, value in outputs.stored.items()}


def _recorded_embeddings(worker) -> dict:
    cache = _encoder_cache(worker)
    outputs = getattr(cache, "encoder_outputs", None)
    if not isinstance(outputs, _RecordingOutputs):
        return {}
    digests = dict(outputs.digests)
    cache.encoder_outputs = dict(outputs)  # stop recording
    return digests


def _tensor_digest(tensor) -> dict:
    """sha256 of a tensor's bytes and its per-row float64 sums (where two differ, which rows)."""
    import hashlib

    import torch

    host = tensor.detach().to("cpu").contiguous()
    return {
        "shape": list(host.shape),
        "sha256": hashlib.sha256(host.view(torch.uint8).numpy().tobytes()).hexdigest(),
        "row_sums": host.double().reshape(host.shape[0], -1).sum(dim=1).tolist(),
    }


def _start_recording_inputs(worker) -> bool:
    """Digest what the decoder is given at each eager forward from now on: its input
    embeddings and, for Qwen3-VL, the deepstack embeddings it adds in its first layers. Set
    beside the encoder-output digests, they tell where two engines' bits part: in the
    encoder, between the encoder cache and the decoder, or in the decoder."""
    import torch

    model = worker.model_runner.get_model()
    inner = model.forward
    steps: list[dict] = []

    def forward(*args, **kwargs):
        embeds = kwargs.get("inputs_embeds")
        if isinstance(embeds, torch.Tensor) and not (embeds.is_cuda and torch.cuda.is_current_stream_capturing()):
            rows = embeds.shape[0]
            step = {"inputs_embeds": _tensor_digest(embeds), **_streams(embeds)}
            for i, deepstack in enumerate(getattr(model, "deepstack_input_embeds", None) or []):
                step[f"deepstack_{i}"] = _tensor_digest(deepstack[:rows])
            steps.append(step)
        return inner(*args, **kwargs)

    forward.recorded_steps = steps  # type: ignore[attr-defined]
    model.forward = forward
    return True


def _streams(tensor) -> dict:
    """The CUDA stream the forward is issued on and the one vLLM tracks (`set_stream`):
    two engines that differ here run the decoder on another stream than its inputs'."""
    if not tensor.is_cuda:
        return {}
    import torch
    from vllm.utils import torch_utils

    tracked = getattr(torch_utils._current_stream_tls, "value", None)
    return {
        "stream": torch.cuda.current_stream().cuda_stream,
        "default_stream": torch.cuda.default_stream().cuda_stream,
        "tracked_stream": None if tracked is None else tracked.cuda_stream,
    }


def _recorded_inputs(worker) -> list[dict]:
    model = worker.model_runner.get_model()
    steps = getattr(model.forward, "recorded_steps", None)
    if steps is None:
        return []
    del model.forward  # the instance attribute: the class's method again
    return steps


@contextmanager
def schedule_trace(llm) -> Iterator[list[dict] | None]:
    """What each engine step schedules while the block runs: per request, in the order the
    step lists them, its tokens and its encoder inputs. The batch composition is what the
    decoder's last bits depend on (its GEMMs run at the step's token count). Yields None
    where the engine core is not in this process (VLLM_ENABLE_V1_MULTIPROCESSING=1)."""
    scheduler = getattr(getattr(getattr(llm.llm_engine, "engine_core", None), "engine_core", None), "scheduler", None)
    if scheduler is None:
        yield None
        return
    steps: list[dict] = []
    inner = scheduler.schedule

    def schedule(*args, **kwargs):
        out = inner(*args, **kwargs)
        if out.total_num_scheduled_tokens:
            steps.append(
                {
                    "tokens": list(out.num_scheduled_tokens.values()),
                    "encoder_inputs": [len(v) for v in out.scheduled_encoder_inputs.values()],
                }
            )
        return out

    scheduler.schedule = schedule
    try:
        yield steps
    finally:
        del scheduler.schedule  # the instance attribute: the class's method again


def _gpu_allocated(worker) -> int:
    import torch

    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def honour_vit_attn_backend() -> None:
    """Let `mm_encoder_attn_backend` choose the ViT attention on the stand-ins.

    The stand-ins pin every tower's ViT attention to TORCH_SDPA (vLLM would pick
    FlashAttention, which they lack); encoder CUDA graphs need a backend that reads
    `cu_seqlens` on the device, so the configured one (Triton's) is taken as vLLM
    takes it. Without a configured backend, TORCH_SDPA as before.
    """
    import vllm.model_executor.layers.attention.mm_encoder_attention as mm_encoder_attention
    import vllm.model_executor.models.qwen3_vl as qwen3_vl
    from vllm.model_executor.models.vision import get_multimodal_config
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    def configured_or_sdpa(head_size: int, dtype: object) -> AttentionBackendEnum:
        config = get_multimodal_config()
        chosen = config.mm_encoder_attn_backend if config is not None else None
        return chosen or AttentionBackendEnum.TORCH_SDPA

    mm_encoder_attention.get_vit_attn_backend = configured_or_sdpa
    qwen3_vl.get_vit_attn_backend = configured_or_sdpa


def request_record(out) -> dict:
    """What the tests compare of one finished request (a vLLM `RequestOutput`): its prompt's
    length, its greedy tokens, and the logprob of each prompt token (None for the first)."""
    return {
        "prompt_tokens": len(out.prompt_token_ids),
        "tokens": list(out.outputs[0].token_ids),
        "prompt_logprobs": [
            None if lp is None else lp[token].logprob for token, lp in zip(out.prompt_token_ids, out.prompt_logprobs)
        ],
    }


def run(
    checkpoint: str,
    mode: str,
    cudagraphs: bool,
    requests: int,
    repeats: int,
    tp: int = 1,
    pp: int = 1,
    mm_encoder_tp_mode: str | None = None,
    resident_gb: float = 0.0,
    encoder_cudagraphs: bool = False,
    reload_tower_weights: bool = False,
    mm_encoder_attn_backend: str | None = None,
    kv_cache_memory_bytes: int | None = None,
    latency_tokens: tuple[int, ...] = (2223,),
    inductor_deterministic: bool = False,
) -> dict:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    from vllm import LLM, SamplingParams

    if encoder_cudagraphs and uses_standins():
        honour_vit_attn_backend()
    family = family_of(Path(checkpoint))
    harness = harness_kwargs(cudagraphs, encoder_cudagraphs)
    if inductor_deterministic:
        harness = with_deterministic_inductor(harness)
    rss_before = _rss_bytes()
    started = time.perf_counter()
    llm = LLM(
        model=checkpoint,
        load_format="dummy",
        max_model_len=8192,
        gpu_memory_utilization=0.3,
        limit_mm_per_prompt={"image": 3},
        seed=0,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        **({"mm_encoder_tp_mode": mm_encoder_tp_mode} if mm_encoder_tp_mode else {}),
        **harness,
        **({"mm_encoder_attn_backend": mm_encoder_attn_backend} if mm_encoder_attn_backend else {}),
        **({"kv_cache_memory_bytes": kv_cache_memory_bytes} if kv_cache_memory_bytes else {}),
        **mode_kwargs(mode, resident_gb),
    )
    startup_s = time.perf_counter() - started
    ranks = llm.collective_rpc(_worker_figures)
    figures = ranks[0]
    rss_after_load = _rss_bytes()

    greedy = SamplingParams(temperature=0.0, max_tokens=8, prompt_logprobs=0, logprobs=0)
    prompts = [image_prompt(sizes, seed=i, family=family) for i, sizes in enumerate(COMPARED_IMAGES)]
    prompts.append({"prompt": "<|im_start|>user\nHello there.<|im_end|>\n<|im_start|>assistant\n"})

    def generate_compared() -> list[dict]:
        return [request_record(out) for out in llm.generate(prompts, greedy, use_tqdm=False)]

    recording = llm.collective_rpc(_start_recording_embeddings)[0]
    llm.collective_rpc(_start_recording_inputs)
    with schedule_trace(llm) as steps:
        compared = generate_compared()
    compared_inputs = llm.collective_rpc(_recorded_inputs)[0]
    # The stored encoder outputs digested again after the batch: equal to the digests taken
    # when they were stored, unless something wrote into their memory in between.
    embeddings_after = llm.collective_rpc(_redigest_embeddings)[0] if recording else {}
    embeddings = llm.collective_rpc(_recorded_embeddings)[0] if recording else {}
    graph_stats_after_compared = llm.collective_rpc(_encoder_graph_stats)[0]
    # The same batch again: its images' embeddings come from the encoder cache (no encode in
    # its steps) and prompt logprobs skip the prefix cache, so only the decoder runs. Against
    # the first run it tells a difference made while the encoder runs in the same step from
    # one the decoder keeps.
    with schedule_trace(llm) as steps_again:
        compared_again = generate_compared()
    reload: dict = {}
    if reload_tower_weights:
        reload["tensors_loaded"] = llm.collective_rpc(_reload_tower_weights)[0]
        # As vLLM asks after a weight update (`reset_encoder_cache`): the worker's reload
        # empties its encoder cache but not the scheduler's record of it (the same images
        # would miss), and the prefix cache holds KV computed from the old embeddings.
        llm.llm_engine.reset_encoder_cache()
        llm.reset_prefix_cache()
        # The images encoded again with the new weights (recording stopped after the first batch).
        recording = llm.collective_rpc(_start_recording_embeddings)[0]
        reload["compared"] = generate_compared()
        reload["embeddings"] = llm.collective_rpc(_recorded_embeddings)[0] if recording else {}
        reload["figures"] = llm.collective_rpc(_worker_figures)[0]

    # 20 image requests of varying sizes, one at a time: GPU memory after each. Alone, each
    # image is one encode (a replay where encoder CUDA graphs hold its size): their
    # embeddings and prompt logprobs are recorded too.
    allocated = []
    growth = []
    recording = llm.collective_rpc(_start_recording_embeddings)[0]
    for i in range(requests):
        size = GROWTH_SIZES[i % len(GROWTH_SIZES)]
        out = llm.generate([image_prompt([size], seed=100 + i, family=family)], greedy, use_tqdm=False)[0]
        growth.append(request_record(out))
        allocated.append(llm.collective_rpc(_gpu_allocated)[0])
    if recording:
        embeddings.update(llm.collective_rpc(_recorded_embeddings)[0])

    latency = []
    for i in range(repeats):
        for tokens in latency_tokens:
            prompt = image_prompt([tokens], seed=1000 + i, family=family)  # a new image each time
            for max_tokens in (1, 16):
                params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
                t0 = time.perf_counter()
                llm.generate([prompt], params, use_tqdm=False)
                latency.append({"tokens": tokens, "max_tokens": max_tokens, "seconds": time.perf_counter() - t0})
                prompt = image_prompt([tokens], seed=2000 + i, family=family)

    return {
        "family": family,
        "mode": mode,
        # Which kernels made these figures: vLLM's real ones (the installed wheel) or the
        # stand-in harness's pure-torch ones (../shared/gpu/standins.py).
        "standins": uses_standins(),
        "vllm_version": __import__("vllm").__version__,
        "resident_gb": resident_gb,
        "cudagraphs": cudagraphs,
        "encoder_cudagraphs": encoder_cudagraphs,
        "encoder_graph_stats": llm.collective_rpc(_encoder_graph_stats)[0],
        "encoder_graph_stats_after_compared": graph_stats_after_compared,
        "mm_encoder_attn_backend": mm_encoder_attn_backend,
        # Asked for; whether the compiles honoured it, their kernels' sources say
        # (compile_caches.compiled_kernels, read by engine_runs.run_probe).
        "inductor_deterministic_asked": inductor_deterministic,
        "embeddings": embeddings,
        "parallel": {"tp": tp, "pp": pp, "mm_encoder_tp_mode": mm_encoder_tp_mode},
        "ranks": ranks,
        "startup_s": startup_s,
        **figures,
        "rss_before_bytes": rss_before,
        "rss_after_load_bytes": rss_after_load,
        "rss_end_bytes": _rss_bytes(),
        "peak_rss_bytes": _peak_rss_bytes(),
        "compared": compared,
        "compared_steps": steps,
        "compared_inputs": compared_inputs,
        "compared_again": compared_again,
        "compared_again_steps": steps_again,
        "embeddings_after_compared": embeddings_after,
        "growth": growth,
        "after_reload": reload,
        "gpu_allocated_after_requests": allocated,
        "latency": latency,
    }


def command(checkpoint: Path, mode: str, out: Path, *options: str) -> list[str]:
    """The command line that runs one engine in a process of its own and writes what it
    measured to `out` (the GPU tests and the engine benchmark run each engine so)."""
    return [
        sys.executable,
        "-m",
        "vllm_fork_testkit.engine_probe",
        str(checkpoint),
        "--mode",
        mode,
        *options,
        "--out",
        str(out),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--mode", choices=["resident", "streamed"], required=True)
    parser.add_argument("--cudagraphs", action="store_true")
    parser.add_argument("--encoder-cudagraphs", action="store_true", help="cudagraph_mm_encoder (and decoder graphs)")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--latency-repeats", type=int, default=0)
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    parser.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    parser.add_argument("--mm-encoder-tp-mode", choices=["weights", "data"])
    parser.add_argument("--resident-gb", type=float, default=0.0, help="--offload-towers-resident-gb (streamed)")
    parser.add_argument(
        "--reload-tower-weights",
        action="store_true",
        help="after the compared prompts, reload the tower's weights in place (new values) and run them again",
    )
    parser.add_argument("--mm-encoder-attn-backend", help="the ViT attention backend (vLLM picks one when unset)")
    parser.add_argument(
        "--kv-cache-memory-bytes", type=int, help="the KV cache's size (vLLM sizes it from free memory when unset)"
    )
    parser.add_argument(
        "--latency-tokens", default="2223", help="comma-separated image sizes (tokens) of the latency requests"
    )
    parser.add_argument(
        "--inductor-deterministic",
        action="store_true",
        help="compile in Inductor's deterministic mode (inductor_compile_config.deterministic)",
    )
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args()
    result = run(
        args.checkpoint,
        args.mode,
        args.cudagraphs,
        args.requests,
        args.latency_repeats,
        tp=args.tp,
        pp=args.pp,
        mm_encoder_tp_mode=args.mm_encoder_tp_mode,
        resident_gb=args.resident_gb,
        encoder_cudagraphs=args.encoder_cudagraphs,
        reload_tower_weights=args.reload_tower_weights,
        mm_encoder_attn_backend=args.mm_encoder_attn_backend,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        latency_tokens=tuple(int(t) for t in args.latency_tokens.split(",") if t),
        inductor_deterministic=args.inductor_deterministic,
    )
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
