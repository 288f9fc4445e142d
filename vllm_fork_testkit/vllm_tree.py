"""The patched vLLM tree, imported on the CPU: where it is, and how to make it importable.

Used by tests/patches (its conftest, and `vllm_cpu.py`, the plugin of the child pytest that
runs the tree's own tests) and by the benchmarks' `--smoke` runs. Importing this module has
no side effects.

Two stand-ins make vLLM's CPU platform usable with PyPI's wheels, each minimal and explicit:
torchvision's two op schemas, and an answer to the triton-cpu check (vLLM >= 0.34). Each
fails loudly if upstream changes what it answers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from vllm_fork.core.paths import REPO_ROOT, default_tree

TREE_ENV = "VLLM_FORK_TREE"


def tree_path() -> Path:
    """`$VLLM_FORK_TREE`, else `build/vllm` (which may not exist yet)."""
    return Path(os.environ[TREE_ENV]) if TREE_ENV in os.environ else default_tree()


def ensure_tree() -> Path:
    """`$VLLM_FORK_TREE`, else `build/vllm`, made with the real `apply` when missing."""
    tree = tree_path()
    if TREE_ENV not in os.environ and not tree.exists():
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
    let_children_import_the_tree(tree)
    let_torchvision_import_without_its_ops()
    let_config_checks_pass_without_triton_cpu()


#: Holds the `sitecustomize` that gives vLLM's child processes the torchvision stand-in.
CHILD_SITE = Path(__file__).resolve().parent / "child_site"


def let_children_import_the_tree(tree: Path) -> None:
    """The Python processes vLLM starts itself import `tree` too, with the same stand-in.

    vLLM inspects a model class in a child `python -m vllm.model_executor.models.registry`
    and caches the answer in its user cache: without this the child imports no vLLM at all,
    and the tests passed only where an earlier run had left that answer behind.
    """
    entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    wanted = [str(tree), str(CHILD_SITE)]
    os.environ["PYTHONPATH"] = os.pathsep.join([*wanted, *(e for e in entries if e not in wanted)])


#: The check vLLM's CPU platform makes since 0.34.0 (0.33.0 only warned). Its
#: `check_and_update_config`, run by every `VllmConfig`, refuses x86 without
#: triton-cpu, which vLLM's CPU CI installs from GitHub releases
#: (requirements/cpu.txt): PyPI does not carry it.
TRITON_CPU_CHECK = 'raise RuntimeError("vLLM on x86 CPUs requires Triton (triton-cpu).")'


class TritonCpuCheckChanged(RuntimeError):
    """vLLM's CPU platform no longer makes the check the stand-in answers."""


def let_config_checks_pass_without_triton_cpu() -> None:
    """Answer the CPU platform's triton-cpu check, and only it.

    The patches' CPU tests build configs and run towers with torch ops; none
    runs vLLM's CPU model runner or a Triton kernel. While (and only while)
    `CpuPlatform.check_and_update_config` runs, `vllm.triton_utils.HAS_TRITON`
    reads True, so the check passes; every other reader sees the real value
    (False here). If the check is no longer in that method, or HAS_TRITON is
    no longer where it reads it, this raises `TritonCpuCheckChanged` rather
    than guess: look at the new check and adapt this function.
    """
    import inspect

    import vllm.triton_utils
    from vllm.platforms.cpu import CpuPlatform

    method = CpuPlatform.__dict__["check_and_update_config"]
    original = getattr(method, "__func__", None)
    if getattr(original, "_triton_cpu_stand_in", False):
        return
    source = inspect.getsource(original) if original else ""
    if TRITON_CPU_CHECK not in source:
        from vllm import __version__

        if __version__.startswith("0.33."):
            return  # 0.33.0 warned instead of refusing: nothing to answer
        raise TritonCpuCheckChanged(
            f"vLLM {__version__}'s CpuPlatform.check_and_update_config no longer contains\n"
            f"  {TRITON_CPU_CHECK}\n"
            "tests/patches/vllm_cpu.py answers exactly that check: read the new one "
            "(vllm/platforms/cpu.py) and adapt let_config_checks_pass_without_triton_cpu()."
        )
    if "from vllm.triton_utils import HAS_TRITON" not in source or not hasattr(vllm.triton_utils, "HAS_TRITON"):
        raise TritonCpuCheckChanged(
            "CpuPlatform.check_and_update_config no longer reads vllm.triton_utils.HAS_TRITON: "
            "adapt let_config_checks_pass_without_triton_cpu() in tests/patches/vllm_cpu.py."
        )

    def check_and_update_config(cls, vllm_config):
        real = vllm.triton_utils.HAS_TRITON
        vllm.triton_utils.HAS_TRITON = True
        try:
            return original(cls, vllm_config)
        finally:
            vllm.triton_utils.HAS_TRITON = real

    check_and_update_config._triton_cpu_stand_in = True  # type: ignore[attr-defined]
    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)


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
