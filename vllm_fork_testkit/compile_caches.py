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
#: The mode a kernel was generated in, as Inductor writes it into the kernel's
#: `inductor_meta`: deterministic mode forbids timing a reduction's configs on the device.
GENERATED_DETERMINISTIC = re.compile(r"'deterministic': (True|False)")
#: vLLM's log line naming the compile cache directory an engine's graph used.
CACHE_DIRECTORY_LINE = re.compile(r"Using cache directory: (\S+) for vLLM's torch.compile")


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
    warps and stages; the time it took dropped); per kernel, whether it was generated in
    Inductor's deterministic mode (None where its source does not say)."""
    triton = {"triton", "triton_cache"}  # Triton's own cache: launchers, not generated kernels
    kinds: dict[str, str] = {}
    configs: dict[str, dict] = {}
    deterministic: dict[str, bool | None] = {}
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
        mode = GENERATED_DETERMINISTIC.search(text)
        deterministic[path.name] = None if mode is None else mode.group(1) == "True"
        chosen = best_config_path(path)
        if chosen is not None and chosen.is_file():
            configs[path.name] = {
                k: v
                for k, v in json.loads(chosen.read_text()).items()
                if k not in ("time_taken_ms", "triton_cache_hash")
            }
    return {"sources": sorted(kinds), "kinds": kinds, "configs": configs, "deterministic": deterministic}


def kernels_not_deterministic(kernels: dict) -> list[str]:
    """The kernels of a compile not generated in Inductor's deterministic mode (or not saying)."""
    return sorted(name for name, mode in (kernels.get("deterministic") or {}).items() if mode is not True)


def generated_deterministically(kernels: dict) -> bool:
    """Whether a compile generated kernels, every one of them in Inductor's deterministic mode."""
    return bool(kernels.get("deterministic")) and not kernels_not_deterministic(kernels)


def used_compile_keys(log: str) -> dict[str, dict]:
    """The compile cache keys an engine's graphs used, by cache directory: the factors vLLM
    hashed into each (its `cache_key_factors.json`, written beside the compiled graph). Two
    engines load each other's compile only where these are equal."""
    keys = {}
    for directory in dict.fromkeys(CACHE_DIRECTORY_LINE.findall(log)):
        factors = Path(directory, "cache_key_factors.json")
        keys[directory] = json.loads(factors.read_text()) if factors.is_file() else {}
    return keys


def _factor_leaves(value: object, path: str = "") -> dict[str, object]:
    """A compile key's factors flattened to `path -> value`; the traced files' list
    (`code.files`, entries of `path` and `hash`) keyed by each file's path."""
    if isinstance(value, dict):
        leaves: dict[str, object] = {}
        for key, item in value.items():
            leaves.update(_factor_leaves(item, f"{path}.{key}" if path else str(key)))
        return leaves
    if isinstance(value, list) and value and all(isinstance(e, dict) and "path" in e for e in value):
        return {f"{path}[{entry['path']}]": entry.get("hash") for entry in value}
    return {path: value}


def compile_key_differences(a: dict, b: dict) -> list[str]:
    """The factors in which two compile keys differ (the hashes vLLM derives from them left
    out): why one engine did not load another's compile."""
    derived = {"config_hash", "code_hash", "compiler_hash"}
    la = {k: v for k, v in _factor_leaves(a).items() if k not in derived}
    lb = {k: v for k, v in _factor_leaves(b).items() if k not in derived}
    absent = "(absent)"
    # Compared as vLLM hashes them, as JSON: 0 and 0.0 (or 1 and True) differ there, not under ==.
    return [
        f"{key}: {la.get(key, absent)!r} != {lb.get(key, absent)!r}"
        for key in sorted(la.keys() | lb.keys())
        if json.dumps(la.get(key, absent)) != json.dumps(lb.get(key, absent))
    ]


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
