"""Run these tests against the patched vLLM Python tree, on the CPU.

The tree is `$VLLM_FORK_TREE`, else `build/vllm` -- made here with the real
`apply` (the patch queue on the pinned upstream) when it does not exist yet.
After changing patches/, run `invoke apply` (or delete build/vllm) so these
tests see the change. The tree goes first on `sys.path`, so its `vllm` package
is the one imported. Runtime dependencies: `requirements/vllm-cpu-tests.txt`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _vllm_tree() -> Path:
    if "VLLM_FORK_TREE" in os.environ:
        tree = Path(os.environ["VLLM_FORK_TREE"])
    else:
        tree = REPO_ROOT / "build" / "vllm"
        if not tree.exists():
            from vllm_fork.queue.apply import apply

            apply(REPO_ROOT)
    if not (tree / "vllm" / "__init__.py").is_file():
        raise RuntimeError(
            f"No vLLM package under {tree}: point VLLM_FORK_TREE at a patched "
            "vLLM source tree, or unset it to use build/vllm (`invoke apply`)."
        )
    return tree


VLLM_TREE = _vllm_tree()

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


def pytest_report_header(config) -> str:
    return f"vLLM tree under test: {VLLM_TREE}"
