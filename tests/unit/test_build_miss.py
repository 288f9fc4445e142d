"""A cache miss (a patch touched compiled inputs) without a CUDA toolkit stops with a useful error."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.buildtrees import commit, fork_root, make_tree

from vllm_fork.core.errors import ForkError
from vllm_fork.queue.export import export as export_queue
from vllm_fork.wheel import build as build_mod
from vllm_fork.wheel.precompiled import cuda_toolkit


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file below `folder` with its bytes, read now (not a lazy listing)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_miss_without_toolkit_names_the_patches_and_ways_forward(tmp_path, cache, monkeypatch):
    root = fork_root(tmp_path / "fork")
    tree = make_tree(root / "build" / "vllm")
    commit(tree, {"vllm/config/multimodal.py": "mm_processor_cache_gb = 16\n"}, "python only")
    commit(tree, {"csrc/ops.cu": "// faster kernel\n", "CMakeLists.txt": "project(vllm2)\n"}, "kernel change")
    assert export_queue(tree, root) == ["0001-python-only.patch", "0002-kernel-change.patch"]
    # No toolkit: no nvcc on PATH, no CUDA_HOME.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert cuda_toolkit() is None
    before = files_under(root / "ops-cache")
    with pytest.raises(ForkError) as err:
        build_mod.build(root=root, apply=False, out_dir=tmp_path / "dist")
    message = str(err.value)
    assert "0002-kernel-change.patch" in message and "csrc/ops.cu" in message and "CMakeLists.txt" in message
    assert "0001-python-only.patch" not in message
    for way in ("CUDA host", "Docker", "remote"):
        assert way in message
    assert not (tmp_path / "dist").exists()
    assert files_under(root / "ops-cache") == before, "a failed build must leave ops-cache as it was"


def test_toolkit_is_found_from_cuda_home(tmp_path):
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    assert cuda_toolkit({"CUDA_HOME": str(tmp_path / "cuda"), "PATH": "/usr/bin"}) == tmp_path / "cuda"
    assert cuda_toolkit({"PATH": str(nvcc.parent)}) == tmp_path / "cuda"
    assert cuda_toolkit({"PATH": "/nonexistent"}) is None
