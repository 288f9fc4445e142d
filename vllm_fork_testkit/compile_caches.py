"""Compile caches of one engine's own: vLLM's (`VLLM_CACHE_ROOT`), Inductor's and Triton's
under one directory, so that an engine loads only what it, or an engine deliberately given
the same directory, compiled. The GPU tests compare engines that each compile; the engine
benchmark's start-up times are fresh starts. What a compile left there (its kernels and the
configs it tuned) is how two engines' compiles are compared."""

from __future__ import annotations

import json
from pathlib import Path


def compile_cache_env(root: Path) -> dict[str, str]:
    """The environment variables that put an engine's compile caches under `root`."""
    return {
        "VLLM_CACHE_ROOT": str(root / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
    }


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
