"""Small real vLLM-shaped git trees and fork roots for the build tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.forkrepo import sh, write_files
from support.scratch import module_scratch
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue import apply as queue

VLLM_LIKE = {
    "CMakeLists.txt": "project(vllm)\n",
    "csrc/ops.cu": "// kernel\n",
    "cmake/utils.cmake": "# utils\n",
    "setup.py": "from setuptools import setup\nsetup()\n",
    "pyproject.toml": '[build-system]\nrequires = ["torch == 2.14.0"]\n\n[project]\nname = "vllm"\ndescription = "x"\n',
    "requirements/build/cuda.txt": "torch==2.14.0\nsetuptools\n",
    "requirements/common.txt": "numpy\n",
    "vllm/__init__.py": "",
    "vllm/envs.py": "MAX_JOBS = None\n",
    "vllm/config/multimodal.py": "mm_processor_cache_gb = 4\n",
    "docs/index.md": "# docs\n",
}


def make_tree(
    path: Path, files: dict[str, str] | None = None, author: str = "Up Stream", date: str = "2026-01-01T00:00:00+0000"
) -> Path:
    """A git repo whose first commit is `refs/fork/upstream`, on branch `patched`."""
    path.mkdir(parents=True)
    sh(path, "git", "init", "-q", "-b", "patched")
    write_files(path, files or VLLM_LIKE)
    sh(path, "git", "add", "-A")
    sh(path, "git", "-c", f"user.name={author}", "commit", "-qm", "upstream", f"--date={date}")
    sh(path, "git", "update-ref", "refs/fork/upstream", "HEAD")
    return path


def commit(tree: Path, files: dict[str, str], subject: str) -> str:
    write_files(tree, files)
    sh(tree, "git", "add", "-A")
    sh(tree, "git", "commit", "-qm", subject)
    return sh(tree, "git", "rev-parse", "HEAD")


def fork_root(path: Path, with_index: bool = False) -> Path:
    """A fork checkout's files the build reads: the pin, patches/, ops-cache/ (index empty unless asked)."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO_ROOT / "upstream.toml", path / "upstream.toml")
    shutil.copytree(REPO_ROOT / "patches", path / "patches")
    (path / "ops-cache").mkdir()
    for name in ("compiled-inputs.txt", "build-params.toml") + (("index.json",) if with_index else ()):
        shutil.copy2(REPO_ROOT / "ops-cache" / name, path / "ops-cache" / name)
    return path


@contextmanager
def applied_fork_root(factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """A fork root with the ops index and its queue applied (the real release), for a module."""
    with module_scratch(factory, name) as tmp:
        root = fork_root(tmp / "fork", with_index=True)
        queue.apply(root=root)
        yield root
