"""The patched vLLM tree, imported on the CPU: what the benchmarks' `--smoke` runs use.

The same steps as tests/patches/vllm_cpu.py (which that folder's conftest and child pytest load
as a plugin), for code outside tests/.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from vllm_fork.core.paths import REPO_ROOT, default_tree

TREE_ENV = "VLLM_FORK_TREE"


def ensure_tree() -> Path:
    """`$VLLM_FORK_TREE`, else `build/vllm`, made with the real `apply` when missing."""
    if TREE_ENV in os.environ:
        tree = Path(os.environ[TREE_ENV])
    else:
        tree = default_tree()
        if not tree.exists():
            from vllm_fork.queue.apply import apply

            apply(REPO_ROOT)
    if not (tree / "vllm" / "__init__.py").is_file():
        raise SystemExit(f"No vLLM package under {tree}: run `invoke apply`, or point {TREE_ENV} at a patched tree.")
    return tree


def import_on_cpu(tree: Path) -> None:
    """Make `tree`'s `vllm` the one imported, on the CPU platform (the tree is not built)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    # The tree's vllm must shadow an installed one: first on the import path, as PYTHONPATH would.
    if str(tree) not in sys.path:
        sys.path.insert(0, str(tree))
    let_torchvision_import_without_its_ops()


def let_torchvision_import_without_its_ops() -> None:
    """PyPI's torchvision (CUDA builds only) next to CPU torch: its compiled ops cannot load, and
    it then fails at import registering fake kernels for `nms` / `qnms`. Declaring those two
    schemas lets it import (transformers' Qwen2-VL image processor needs its Python transforms);
    nothing here calls them."""
    import contextlib
    import importlib.util

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
