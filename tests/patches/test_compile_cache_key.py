"""Patch 6's compile key end to end on the CPU: vLLM's own `EngineArgs` turn a Qwen3-VL
checkpoint (made on the spot) into the config an engine compiles with, and a resident engine and an
`--offload-towers` one must key vLLM's compile cache alike, so that the streamed engine loads
the resident engine's compiled model instead of compiling its own.

The key's config part is `compute_env_and_config_hashes`, which vLLM's JIT and AOT compile
caches both use: a hash of the factors' JSON. On the real wheel the two engines' factors
compared equal with `==` and still hashed apart (gpu-real 2026-12-05e: two offload floats were
`0` in one key and `0.0` in the other), so this compares the hashes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_fork_testkit.compile_caches import compile_key_differences
from vllm_fork_testkit.vlm_checkpoint import make_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint("qwen3_vl", tmp_path_factory.mktemp("qwen3_vl"))


def compile_key(checkpoint: Path, **offload: object) -> tuple[str, dict]:
    """The config hash of vLLM's compile cache key for an engine of `checkpoint` built as
    `LLM(...)` or `vllm serve` build it, and the factors hashed."""
    from vllm.compilation.caching import compute_env_and_config_hashes
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=str(checkpoint), load_format="dummy", max_model_len=8192, seed=0, **offload)
    _, config_hash, _, factors = compute_env_and_config_hashes(args.create_engine_config())
    return config_hash, json.loads(json.dumps(factors))


@pytest.mark.parametrize(
    "offload",
    [
        {"offload_backend": "prefetch", "offload_towers": True},
        {"offload_towers": True},
        {"offload_towers": True, "offload_towers_prefetch_step": 3},
        {"offload_towers": True, "offload_towers_resident_gb": 0.25},
    ],
    ids=["prefetch-backend", "auto-backend", "lookahead-3", "resident-budget"],
)
def test_a_streamed_engine_keys_the_compile_cache_as_a_resident_one(checkpoint, offload):
    resident_hash, resident = compile_key(checkpoint)
    streamed_hash, streamed = compile_key(checkpoint, **offload)
    assert streamed_hash == resident_hash, "the config factors differ in:\n" + "\n".join(
        compile_key_differences({"config": resident}, {"config": streamed})
    )


def test_offloaded_decoder_layers_keep_a_key_of_their_own(checkpoint):
    """They change what the compiled graph does: towers or not, their key differs."""
    resident_hash, _ = compile_key(checkpoint)
    layers = {"offload_group_size": 2, "offload_num_in_group": 1}
    layers_hash, _ = compile_key(checkpoint, **layers)
    assert layers_hash != resident_hash
    assert compile_key(checkpoint, offload_towers=True, **layers)[0] == layers_hash
