"""Run these tests against the patched vLLM Python tree, on the CPU.

The tree is `$VLLM_FORK_TREE` (default: `build/vllm`, made by `invoke apply`);
it goes first on `sys.path`, so its `vllm` package is the one imported. The
runtime dependencies are in `requirements/vllm-cpu-tests.txt`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_TREE = Path(os.environ.get("VLLM_FORK_TREE", REPO_ROOT / "build" / "vllm"))

if not (VLLM_TREE / "vllm" / "__init__.py").is_file():
    raise RuntimeError(
        f"No vLLM tree at {VLLM_TREE}: run `invoke apply` first, or point "
        "VLLM_FORK_TREE at a patched vLLM source tree."
    )

# vLLM picks its platform at import: no CUDA here, and the tree is not built.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(VLLM_TREE))


def _let_torchvision_import_without_its_ops() -> None:
    """Make PyPI's torchvision importable next to the CPU torch wheel.

    transformers' Qwen2-VL image processor (imported by vLLM's Qwen3-VL) needs
    torchvision's Python transforms. PyPI only has CUDA builds of torchvision,
    whose compiled ops cannot load next to CPU torch; torchvision then still
    registers fake kernels for `torchvision::nms` / `qnms` and fails at
    import. Declaring those two schemas lets it import; the ops stay
    unimplemented, and nothing here calls them.
    """
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    import torch

    libs = list(Path(spec.submodule_search_locations[0]).glob("_C*.so"))
    try:
        for lib in libs:
            torch.ops.load_library(str(lib))
        if libs:
            return
    except OSError:
        pass
    schema = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
    for op in ("nms", "qnms"):
        with contextlib.suppress(RuntimeError):  # already defined
            torch.library.define(f"torchvision::{op}", schema)


_let_torchvision_import_without_its_ops()
