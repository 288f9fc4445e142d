"""Compile caches of one engine's own: vLLM's (`VLLM_CACHE_ROOT`), Inductor's and Triton's
under one directory, so that an engine loads only what it, or an engine deliberately given
the same directory, compiled. The GPU tests compare engines that each compile; the engine
benchmark's start-up times are fresh starts. What a compile left there (its kernels and the
configs it tuned) is how two engines' compiles are compared."""

from __future__ import annotations

import json
import re
from pathlib import Path


def compile_cache_env(root: Path) -> dict[str, str]:
    """The environment variables that put an engine's compile caches under `root`."""
    return {
        "VLLM_CACHE_ROOT": str(root / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
    }


#: The heuristic each generated Triton kernel is launched through (its decorator).
KERNEL_KIND = re.compile(r"@triton_heuristics\.(\w+)\(")
#: Kinds whose tuned configs (block sizes, warps) change how fast a kernel runs but not what
#: it computes: elementwise work, no sum whose order a config sets. Reductions, persistent
#: reductions, scans and templates (matmuls) sum in an order their config sets.
NUMERICS_NEUTRAL_KINDS = frozenset({"pointwise", "foreach"})


def best_config_path(kernel: Path) -> Path | None:
    """Where Inductor's local autotune cache keeps the config chosen for a generated kernel
    (torch's own key: a hash of the kernel file's name and of torch), or None where this
    torch has no such cache."""
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    cache = AutotuneCache.create({"autotune_local_cache": True}, str(kernel), configs_hash="")
    return Path(cache.local_cache[1]) if cache and cache.local_cache else None


def compiled_kernels(caches: Path) -> dict:
    """What the engine's compiles left in its caches: the generated Triton kernels (Inductor
    names each file by a hash of its text; the graphs' wrapper modules, which name the cache's
    own path, left out), each kernel's kind (pointwise, reduction, persistent_reduction, ...)
    and, per kernel Inductor tuned on the device, the config it chose (kernel arguments,
    warps and stages; the time it took dropped)."""
    triton = {"triton", "triton_cache"}  # Triton's own cache: launchers, not generated kernels
    kinds: dict[str, str] = {}
    configs: dict[str, dict] = {}
    for path in caches.rglob("*.py"):
        if triton & set(path.relative_to(caches).parts):
            continue
        text = path.read_text(errors="replace")
        kind = KERNEL_KIND.search(text)
        # A graph's wrapper module holds its kernels' sources as strings (`async_compile.triton(
        # name, source)`) beside `# kernel path:` comments that name this cache's own folder.
        if kind is None or "async_compile" in text:
            continue
        kinds[path.name] = kind.group(1)
        chosen = best_config_path(path)
        if chosen is not None and chosen.is_file():
            configs[path.name] = {
                k: v
                for k, v in json.loads(chosen.read_text()).items()
                if k not in ("time_taken_ms", "triton_cache_hash")
            }
    return {"sources": sorted(kinds), "kinds": kinds, "configs": configs}


def kernel_differences(a: dict, b: dict) -> list[str]:
    """Where two engines' compiles differ in what they compute: kernels only one generated,
    and kernels both tuned that chose different configs, where the kernel's kind makes the
    config part of its numerics (a pointwise kernel's block size is not)."""
    ka, kb = a.get("compiled_kernels") or {}, b.get("compiled_kernels") or {}
    sa, sb = set(ka.get("sources", ())), set(kb.get("sources", ()))
    found = []
    if sa != sb:
        found.append(f"{len(sa - sb)} kernel sources only in the first, {len(sb - sa)} only in the second")
    ca, cb = ka.get("configs", {}), kb.get("configs", {})
    kinds = {**kb.get("kinds", {}), **ka.get("kinds", {})}
    for key in sorted(ca.keys() & cb.keys()):
        kind = kinds.get(key, "unknown kind")
        if ca[key] != cb[key] and kind not in NUMERICS_NEUTRAL_KINDS:
            changed = {
                k: (ca[key].get(k), cb[key].get(k))
                for k in ca[key].keys() | cb[key].keys()
                if ca[key].get(k) != cb[key].get(k)
            }
            found.append(f"{kind} kernel {key[:24]} chose another config: {changed}")
    return found
