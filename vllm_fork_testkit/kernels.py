"""Which kernels a GPU figure came from, said the same way in every report: vLLM's own (the
installed wheel) or the stand-in harness's pure-torch ones (../shared/gpu/standins.py, which
`VLLM_GPU_STANDINS=1` announces)."""

from __future__ import annotations

import os

STANDINS_ENV = "VLLM_GPU_STANDINS"


def uses_standins() -> bool:
    """Whether this process runs on the stand-in harness."""
    return os.environ.get(STANDINS_ENV) == "1"


def kernels_sentence(standins: bool, torch_version: str | None = None) -> str:
    """`Kernels: ...`, the first caveat of a report's figures."""
    which = (
        "vLLM's Python tree with pure-torch stand-ins for its compiled extensions "
        "(../shared/gpu; no FlashAttention, so compute is slower than in production)"
        if standins
        else "vLLM's own as installed, no stand-ins (FlashAttention where vLLM picks it)"
    )
    return f"Kernels: {which}" + (f", torch {torch_version}." if torch_version else ".")
