"""Where things live: the repository, the patched tree, and the download cache."""

from __future__ import annotations

import os
from pathlib import Path

#: The fork's repository root (vllm_fork/core/paths.py sits two levels under it).
REPO_ROOT = Path(__file__).resolve().parents[2]

#: Overrides the cache directory (downloads, the imported upstream, ops artifacts).
CACHE_ENV = "VLLM_FORK_CACHE"


def cache_dir() -> Path:
    """The cache directory, outside the clone so a fresh clone reuses downloads."""
    env = os.environ.get(CACHE_ENV)
    if env:
        path = Path(env).expanduser()
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        path = base / "vllm-fork"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_subdir(name: str) -> Path:
    """A directory of the cache (downloads, ops, pylayer, ...), made if missing."""
    path = cache_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def patches_dir(root: Path = REPO_ROOT) -> Path:
    return root / "patches"


def default_tree(root: Path = REPO_ROOT) -> Path:
    """The patched vLLM tree that `invoke apply` makes (git-ignored)."""
    return root / "build" / "vllm"
