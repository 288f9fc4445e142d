"""What the fork's tests and benchmarks share: code that builds what they measure.

Not the tool (`vllm_fork/`, typed, never imports torch or vLLM): this package does both.

- `tower_families`: every multimodal encoder tower family vLLM builds, at full size or tiny,
  with inputs shaped as its model's runner makes them (tests/gpu, tests/patches, tower_matrix.py).
- `vlm_checkpoint`: small Qwen3-VL / Qwen2.5-VL checkpoints with full-size towers, made on the
  spot for the engine tests and benchmarks.
- `encode_bench`: timing of encodes (CUDA events or wall clock), machine records.
- `trace_gaps`: the copy stream's gaps in a torch.profiler trace (`python -m
  vllm_fork_testkit.trace_gaps TRACE`).
- `vllm_tree`: the patched vLLM tree imported on the CPU (the benchmarks' `--smoke` runs).
- `fork_copy`, `scale_queue`: fork checkouts of this repository's queue, and generated queues of
  many patches (the rebase benchmarks and integration tests).
"""
