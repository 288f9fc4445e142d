"""The user caches of vLLM, torch, Triton and Hugging Face, empty for each test session."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: The user caches that vLLM, torch, Triton and Hugging Face read and write, each pointed at an
#: empty directory of this session's: a test must pass on a machine where no earlier run left
#: anything there (model-info inspections, compiled kernels, downloaded files). The tool's own
#: download cache ($VLLM_FORK_CACHE, hash-checked) stays shared, so the real release is
#: downloaded once.
USER_CACHES = {
    "VLLM_CACHE_ROOT": "vllm",
    "VLLM_CONFIG_ROOT": "vllm-config",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "TORCH_HOME": "torch",
    "HF_HOME": "huggingface",
    "MPLCONFIGDIR": "matplotlib",
}


def isolate_user_caches() -> Path:
    """Point every cache of USER_CACHES at a new, empty directory; return its root."""
    from vllm_fork.core.paths import cache_dir

    os.environ["VLLM_FORK_CACHE"] = str(cache_dir())  # resolved before XDG_CACHE_HOME moves
    root = Path(tempfile.mkdtemp(prefix="vllm-fork-test-caches-"))
    for variable, name in USER_CACHES.items():
        os.environ[variable] = str(root / name)
    os.environ["XDG_CACHE_HOME"] = str(root / "xdg")
    return root
