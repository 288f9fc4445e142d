"""Shared fixtures (isolated caches, small real git repositories built per test) and the kinds of test.

Each folder is a kind, and its tests carry that kind's marker (`-m unit`, `-m integration`, ...):
unit (small git repos, fast), integration (the real vLLM release, slow), patches (the vLLM
changes on the CPU), gpu (CUDA; skipped without it). Helpers live in `support/`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support.forkrepo import ForkRepo, make_upstream_repo
from support.usercaches import isolate_user_caches

SESSION_CACHES = isolate_user_caches()


def pytest_unconfigure(config):
    shutil.rmtree(SESSION_CACHES, ignore_errors=True)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private download/upstream cache, so tests never share state."""
    path = tmp_path / "cache"
    monkeypatch.setenv("VLLM_FORK_CACHE", str(path))
    return path


@pytest.fixture
def upstream_remote(tmp_path) -> Path:
    return make_upstream_repo(tmp_path / "upstream-remote")


@pytest.fixture
def fork(tmp_path, cache, upstream_remote) -> ForkRepo:
    """A fork checkout whose pin points at a local git remote."""
    return ForkRepo.create(tmp_path / "fork", upstream_remote)


@pytest.fixture(scope="session")
def real_cache() -> Path:
    """The shared cache holding the real vLLM downloads (fetched once, reused)."""
    from vllm_fork.core.paths import cache_dir

    return cache_dir()


TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "integration", "patches", "gpu")


def pytest_collection_modifyitems(config, items):
    for item in items:
        kind = item.path.relative_to(TESTS).parts[0]
        if kind in KINDS:
            item.add_marker(kind)
    # GPU tests need CUDA; they run on the H200 machine, never here or in CI.
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs CUDA (run on the GPU machine: see ../shared/gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")
