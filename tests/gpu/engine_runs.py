"""Run `engine_probe.py` (one vLLM engine) in a subprocess, read what it measured, record it,
and the assertions the engine tests share (the comparisons: vllm_fork_testkit.engine_compare)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from vllm_fork_testkit import engine_probe
from vllm_fork_testkit.compile_caches import (
    compile_cache_env,
    compile_key_differences,
    compiled_kernels,
    generated_deterministically,
    kernel_differences,
    kernels_not_deterministic,
    used_compile_keys,
)
from vllm_fork_testkit.engine_compare import embedding_differences, logprob_differences

HERE = Path(__file__).resolve().parent
#: The engine's log lines kept with the figures.
LOG_KEYS = (
    "Model loading took",
    "Available KV cache",
    "Streaming tower",
    "KV cache size",
    "WARNING",
    "vit attention",  # which ViT attention backend vLLM chose
    "Compiling a graph",  # vLLM compiled the model ...
    "Directly load",  # ... or loaded it from its compile cache
    "Using cache directory",  # ... keyed by the factors in that directory
    "AOT comp",  # torch >= 2.10: the whole model's artifact loaded, saved or not saved
    "Compiling model again",  # ... or found and failed to load (the reason follows)
)


def record(name: str, data: dict) -> None:
    """Write `data` as `$VLLM_FORK_RESULTS/name.gz` (the device run's `$OUT`; nothing when unset).

    Gzipped: the per-request tokens and prompt logprobs make each file ~250 KB of JSON, and
    the committed results travel with every device call (64 MiB at most, .gpu/ included).
    """
    directory = os.environ.get("VLLM_FORK_RESULTS")
    if directory:
        Path(directory, f"{name}.gz").write_bytes(gzip.compress(json.dumps(data).encode()))


def run_probe(
    checkpoint: Path,
    mode: str,
    *extra: str,
    timeout: int = 600,
    deterministic: bool = False,
    caches: Path | None = None,
) -> dict:
    """One engine in a subprocess, with compile caches of its own (vLLM's, Inductor's and
    Triton's under one fresh directory): no engine loads what another compiled, so two
    engines' compiled decoders are each their own compile. `deterministic` compiles in
    Inductor's deterministic mode (vLLM's `inductor_compile_config`, engine_probe's
    `--inductor-deterministic`): no on-device benchmarking of kernel configs that change numerics.
    Without it, each compile picks its reductions' configs by timing them on the device,
    so two compiles of the same model can differ in their last bits. `caches`: another
    engine's (its result's `compile_caches`), to start from what that one compiled."""
    label = f"{mode}-{'-'.join(extra) or 'eager'}{'-deterministic' if deterministic else ''}"
    out = checkpoint.parent / f"probe-{label}.json"
    caches = caches or Path(tempfile.mkdtemp(prefix=f"compile-{mode}-", dir=checkpoint.parent))
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "INFO", **compile_cache_env(caches)}
    env.pop("TORCHINDUCTOR_DETERMINISTIC", None)  # one way to ask for it: the option below
    options = (*extra, "--inductor-deterministic") if deterministic else extra
    proc = subprocess.run(
        engine_probe.command(checkpoint, mode, out, *options),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(f"engine_probe {mode} {extra} exited {proc.returncode}:\n{log[-6000:]}")
    result = json.loads(out.read_text())
    result["log_lines"] = [line for line in log.splitlines() if any(key in line for key in LOG_KEYS)]
    result["compiled_kernels"] = compiled_kernels(caches)
    result["inductor_deterministic"] = generated_deterministically(result["compiled_kernels"])
    result["compile_keys"] = used_compile_keys(log)
    result["compile_caches"] = str(caches)
    return result


def assert_same_compiled_kernels(resident: dict, streamed: dict) -> None:
    """Both engines compiled deterministically, generated the same kernels and, where a
    tuned config sets what a kernel computes (a reduction's), chose the same one: equal
    logprobs then compare the streamer, not two compiles."""
    assert resident["compiled_kernels"]["sources"], "the decoder compiled no kernels into its own cache"
    for engine in (resident, streamed):
        assert engine["inductor_deterministic"], (
            f"{engine['mode']}: kernels not generated in Inductor's deterministic mode: "
            f"{kernels_not_deterministic(engine['compiled_kernels'])}"
        )
    differ = kernel_differences(resident, streamed)
    assert not differ, "\n".join(differ)


def assert_same_embeddings(resident: dict, streamed: dict) -> None:
    """Every image's encoder output, bit for bit (digests recorded in the worker)."""
    assert resident.get("embeddings"), "no encoder output was recorded"
    assert resident["embeddings"].keys() == streamed["embeddings"].keys()
    differ = embedding_differences(resident, streamed)
    assert not differ, "encoder outputs differ:\n" + "\n".join(differ)


def assert_same_outputs(resident: dict, streamed: dict) -> None:
    """The same encoder outputs, bit for bit, then the same greedy tokens and, float for
    float, the same prompt logprobs."""
    r, s = resident["compared"], streamed["compared"]
    assert [x["prompt_tokens"] for x in r] == [x["prompt_tokens"] for x in s]
    assert_same_embeddings(resident, streamed)
    differ = logprob_differences(resident, streamed)
    assert not differ, "\n".join(differ)


def compile_key_differences_of(a: dict, b: dict) -> list[str]:
    """Why engine `b` did not load engine `a`'s compile: the factors of the compile keys they
    used that differ (one key each where a graph compiled)."""
    if not a.get("compile_keys") or not b.get("compile_keys"):
        return ["no compile cache directory recorded (the log line was not found)"]
    (dir_a, key_a), (dir_b, key_b) = next(iter(a["compile_keys"].items())), next(iter(b["compile_keys"].items()))
    # Equal keys: the same directory, so what failed is the load itself (its log lines say why).
    return compile_key_differences(key_a, key_b) or [
        f"no factor differs ({dir_a} and {dir_b}); the load's log lines:",
        *(line for line in b["log_lines"] if any(key in line for key in ("AOT comp", "Compiling model again"))),
    ]
