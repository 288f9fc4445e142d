"""Compile caches of one engine's own: vLLM's (`VLLM_CACHE_ROOT`), Inductor's and Triton's
under one directory, so that an engine loads only what it, or an engine deliberately given
the same directory, compiled. The GPU tests compare engines that each compile; the engine
benchmark's start-up times are fresh starts."""

from __future__ import annotations

from pathlib import Path


def compile_cache_env(root: Path) -> dict[str, str]:
    """The environment variables that put an engine's compile caches under `root`."""
    return {
        "VLLM_CACHE_ROOT": str(root / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
    }
