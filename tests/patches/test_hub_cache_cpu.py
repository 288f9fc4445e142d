"""`vllm_fork_testkit.hub_cache` on the CPU: vLLM, offline, resolves a Hub repo id to the
checkpoint laid out in the cache, as `run.sh intree` needs for the series' end-to-end test."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from vllm_fork_testkit.hub_cache import cache_checkpoint

REPO_ID = "Qwen/Qwen3-VL-8B-Instruct"

# Run in a child: huggingface_hub reads HF_HOME and HF_HUB_OFFLINE when first imported.
RESOLVE = f"""
import json
from vllm_fork_testkit.vllm_tree import import_on_cpu, tree_path
import_on_cpu(tree_path())
from vllm.engine.arg_utils import EngineArgs
from vllm.transformers_utils.processor import cached_get_processor
config = EngineArgs(model={REPO_ID!r}, load_format="dummy", max_model_len=4096,
                    hf_overrides={{"text_config": {{"num_hidden_layers": 2}}}},
                    offload_towers=True).create_engine_config()
print(json.dumps({{"model": config.model_config.model,
                  "architecture": config.model_config.architectures[0],
                  "processor": type(cached_get_processor({REPO_ID!r})).__name__}}))
"""


def test_vllm_resolves_the_repo_id_offline_to_the_cached_checkpoint(tmp_path):
    snapshot = cache_checkpoint(tmp_path / "hf", REPO_ID, "qwen3_vl")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    child = subprocess.run([sys.executable, "-c", RESOLVE], env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    got = json.loads(child.stdout.strip().splitlines()[-1])
    assert got == {
        "model": str(snapshot),
        "architecture": "Qwen3VLForConditionalGeneration",
        "processor": "Qwen3VLProcessor",
    }


def test_an_uncached_repo_id_is_not_found_offline(tmp_path):
    cache_checkpoint(tmp_path / "hf", REPO_ID, "qwen3_vl")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    other = RESOLVE.replace(REPO_ID, "Qwen/Qwen3-VL-2B-Instruct")
    child = subprocess.run([sys.executable, "-c", other], env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode != 0  # the stand-in serves its own id only: nothing else resolves
