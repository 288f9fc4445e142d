"""Import the patched vLLM tree on the CPU: where the tree is, and how to make it importable.

Used two ways: by this folder's conftest.py (a session fixture, before the first
test), and as a pytest plugin (`-p vllm_cpu`) by the child pytest that runs the
tree's own tests (test_in_tree.py). Importing this module has no side effects.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TREE_ENV = "VLLM_FORK_TREE"


def tree_path() -> Path:
    """`$VLLM_FORK_TREE`, else `build/vllm` (which may not exist yet)."""
    if TREE_ENV in os.environ:
        return Path(os.environ[TREE_ENV])
    return REPO_ROOT / "build" / "vllm"


def ensure_tree() -> Path:
    """The tree under test, made with the real `apply` when `build/vllm` is missing."""
    tree = tree_path()
    if TREE_ENV not in os.environ and not tree.exists():
        from vllm_fork.queue.apply import apply

        apply(REPO_ROOT)
    if not (tree / "vllm" / "__init__.py").is_file():
        raise RuntimeError(
            f"No vLLM package under {tree}: point {TREE_ENV} at a patched "
            "vLLM source tree, or unset it to use build/vllm (`invoke apply`)."
        )
    return tree


def import_on_cpu(tree: Path) -> None:
    """Put the tree first on `sys.path` (its `vllm` is the one imported), on the CPU platform."""
    # vLLM picks its platform at import: no CUDA here, and the tree is not built.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    if str(tree) not in sys.path:
        sys.path.insert(0, str(tree))
    let_torchvision_import_without_its_ops()


def let_torchvision_import_without_its_ops() -> None:
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


def pytest_configure(config) -> None:
    """As a plugin (`-p vllm_cpu`), in the child pytest: the parent made the tree and names it."""
    import_on_cpu(Path(os.environ[TREE_ENV]))
