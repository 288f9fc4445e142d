"""Run `engine_probe.py` (one vLLM engine) in a subprocess, read what it measured, record it."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from vllm_fork_testkit.compile_caches import compile_cache_env

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
    Inductor's deterministic mode (TORCHINDUCTOR_DETERMINISTIC=1, which vLLM's compilation
    config also reads): no on-device benchmarking of kernel configs that change numerics.
    Without it, each compile picks its reductions' configs by timing them on the device,
    so two compiles of the same model can differ in their last bits. `caches`: another
    engine's (its result's `compile_caches`), to start from what that one compiled."""
    label = f"{mode}-{'-'.join(extra) or 'eager'}{'-deterministic' if deterministic else ''}"
    out = checkpoint.parent / f"probe-{label}.json"
    caches = caches or Path(tempfile.mkdtemp(prefix=f"compile-{mode}-", dir=checkpoint.parent))
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "INFO", **compile_cache_env(caches)}
    env.pop("TORCHINDUCTOR_DETERMINISTIC", None)
    if deterministic:
        env["TORCHINDUCTOR_DETERMINISTIC"] = "1"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_fork_testkit.engine_probe",
            str(checkpoint),
            "--mode",
            mode,
            "--out",
            str(out),
            *extra,
        ],
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
    result["compile_caches"] = str(caches)
    return result


def compiled_kernels(caches: Path) -> dict:
    """What the engine's compiles left in its caches: the generated kernels (Inductor names
    each source file by a hash of its text) and, per autotuned kernel, the config it chose
    (kernel arguments, warps and stages; the time it took dropped)."""
    triton = {"triton", "triton_cache"}  # Triton's own cache: launchers, not generated kernels
    inductor = [p for p in caches.rglob("*.py") if not triton & set(p.relative_to(caches).parts)]
    configs = {}
    for path in caches.rglob("*.best_config"):
        chosen = json.loads(path.read_text())
        configs[path.stem] = {k: v for k, v in chosen.items() if k not in ("time_taken_ms", "triton_cache_hash")}
    return {"sources": sorted({p.name for p in inductor}), "configs": configs}


def kernel_differences(a: dict, b: dict) -> list[str]:
    """How two engines' compiles differ: kernels only one generated, and kernels both
    autotuned that chose different configs."""
    ka, kb = a.get("compiled_kernels") or {}, b.get("compiled_kernels") or {}
    sa, sb = set(ka.get("sources", ())), set(kb.get("sources", ()))
    found = []
    if sa != sb:
        found.append(f"{len(sa - sb)} kernel sources only in the first, {len(sb - sa)} only in the second")
    ca, cb = ka.get("configs", {}), kb.get("configs", {})
    for key in sorted(ca.keys() & cb.keys()):
        if ca[key] != cb[key]:
            changed = {
                k: (ca[key].get(k), cb[key].get(k))
                for k in ca[key].keys() | cb[key].keys()
                if ca[key].get(k) != cb[key].get(k)
            }
            found.append(f"kernel {key[:16]} chose another config: {changed}")
    return found


def assert_same_compiled_kernels(resident: dict, streamed: dict) -> None:
    """Both engines compiled deterministically, generated the same kernels and, where they
    tuned one, chose the same config: equal logprobs then compare the streamer, not two
    compiles."""
    assert resident["inductor_deterministic"] and streamed["inductor_deterministic"]
    assert resident["compiled_kernels"]["sources"], "the decoder compiled no kernels into its own cache"
    differ = kernel_differences(resident, streamed)
    assert not differ, "\n".join(differ)


def differing_rows(a: dict, b: dict) -> list[int]:
    """The rows whose float64 sums differ between two tensor digests (engine_probe's)."""
    return [i for i, (x, y) in enumerate(zip(a["row_sums"], b["row_sums"])) if x != y]


def embedding_differences(resident: dict, streamed: dict) -> list[str]:
    """Each image whose encoder output differs between the two engines (same mm hash), with
    the rows that differ and by how much (from the recorded per-row sums)."""
    found = []
    for key, a in resident.get("embeddings", {}).items():
        b = streamed.get("embeddings", {}).get(key)
        if b is None or a["sha256"] == b["sha256"]:
            continue
        rows = differing_rows(a, b)
        worst = max((abs(a["row_sums"][i] - b["row_sums"][i]) for i in rows), default=0.0)
        found.append(
            f"{key[:12]} {a['shape']}: {len(rows)} of {len(a['row_sums'])} rows differ (max |row sum diff| {worst:.3g})"
        )
    return found


def assert_same_embeddings(resident: dict, streamed: dict) -> None:
    """Every image's encoder output, bit for bit (digests recorded in the worker)."""
    assert resident.get("embeddings"), "no encoder output was recorded"
    assert resident["embeddings"].keys() == streamed["embeddings"].keys()
    differ = embedding_differences(resident, streamed)
    assert not differ, "encoder outputs differ:\n" + "\n".join(differ)


def logprob_differences(a: dict, b: dict, parts: tuple[str, ...] = ("compared", "growth")) -> list[str]:
    """Each compared prompt (and image request) whose tokens or prompt logprobs differ."""
    found = []
    for part in parts:
        for i, (x, y) in enumerate(zip(a.get(part, []), b.get(part, []))):
            if x["tokens"] != y["tokens"]:
                found.append(f"{part} {i}: tokens differ")
            pairs = [(u, v) for u, v in zip(x["prompt_logprobs"], y["prompt_logprobs"]) if u != v]
            if pairs:
                worst = max(abs(u - v) for u, v in pairs if u is not None and v is not None)
                found.append(
                    f"{part} {i}: {len(pairs)} of {len(x['prompt_logprobs'])} prompt logprobs differ (max {worst:.3g})"
                )
    return found


def first_differing_row(a: dict, b: dict) -> int | None:
    """The first row whose float64 sum differs between two digests (None: none does)."""
    return next(iter(differing_rows(a, b)), None)


def input_differences(a: dict, b: dict) -> list[str]:
    """Per step of the compared batch, each decoder input (the input embeddings, Qwen3-VL's
    deepstack embeddings) whose bytes differ, and the first row that does."""
    found = []
    steps_a, steps_b = a.get("compared_inputs") or [], b.get("compared_inputs") or []
    if len(steps_a) != len(steps_b):
        found.append(f"{len(steps_a)} vs {len(steps_b)} recorded forwards")
    for i, (x, y) in enumerate(zip(steps_a, steps_b)):
        for name in ("stream", "tracked_stream"):
            # Handles differ between processes; the default stream or not is what compares.
            on_default = [z.get(name) == z.get("default_stream") for z in (x, y)]
            if on_default[0] != on_default[1]:
                found.append(f"forward {i}: {name} is the default stream in one engine only")
        for name in sorted(k for k in x.keys() | y.keys() if isinstance(x.get(k, y.get(k)), dict)):
            if name not in x or name not in y:
                found.append(f"forward {i}: {name} recorded in one engine only")
            elif x[name]["sha256"] != y[name]["sha256"]:
                found.append(
                    f"forward {i}: {name} {x[name]['shape']} differs from row {first_differing_row(x[name], y[name])}"
                )
    return found


def stored_output_changes(engine: dict) -> list[str]:
    """Encoder outputs whose bytes changed between being stored in the encoder cache and the
    end of the compared batch, and the first row that did."""
    after = engine.get("embeddings_after_compared") or {}
    return [
        f"{key[:12]}: from row {first_differing_row(engine['embeddings'][key], digest)}"
        for key, digest in after.items()
        if digest["sha256"] != engine["embeddings"][key]["sha256"]
    ]


def assert_same_outputs(resident: dict, streamed: dict) -> None:
    """The same encoder outputs, bit for bit, then the same greedy tokens and, float for
    float, the same prompt logprobs."""
    r, s = resident["compared"], streamed["compared"]
    assert [x["prompt_tokens"] for x in r] == [x["prompt_tokens"] for x in s]
    assert_same_embeddings(resident, streamed)
    differ = logprob_differences(resident, streamed)
    assert not differ, "\n".join(differ)
