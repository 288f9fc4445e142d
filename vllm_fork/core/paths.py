"""Where things live: the repository, the patched tree, and the download cache."""

from __future__ import annotations

import os
from pathlib import Path

from vllm_fork.core.errors import ConfigError

#: The fork's repository root (vllm_fork/core/paths.py sits two levels under it).
REPO_ROOT = Path(__file__).resolve().parents[2]

#: Overrides the cache directory (downloads, the imported upstream, ops artifacts).
CACHE_ENV = "VLLM_FORK_CACHE"


def cache_location() -> Path:
    """Where the cache directory is (not made)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vllm-fork"


def cache_dir() -> Path:
    """The cache directory, outside the clone so a fresh clone reuses downloads."""
    path = cache_location()
    _make_dir(path, f"the cache directory (${CACHE_ENV} or ~/.cache/vllm-fork)")
    return path


def _make_dir(path: Path, what: str) -> None:
    """mkdir -p, or a ConfigError saying which path is in the way (a file, not a directory)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(
            f"{what} {path} cannot be made: it, or a directory above it, is a file. "
            f"Point {CACHE_ENV} at a directory (or unset it), or move that file away."
        ) from None
    except OSError as exc:  # read-only, no permission
        raise ConfigError(
            f"{what} {path} cannot be made: {exc.strerror}. Point {CACHE_ENV} at a writable directory "
            "(or unset it), then run the same command again."
        ) from None


def cache_subdir(name: str) -> Path:
    """A directory of the cache (downloads, ops, pylayer, ...), made if missing."""
    path = cache_dir() / name
    _make_dir(path, f"the cache's {name} directory")
    return path


def patches_dir(root: Path = REPO_ROOT) -> Path:
    return root / "patches"


def default_tree(root: Path = REPO_ROOT) -> Path:
    """The patched vLLM tree that `invoke apply` makes (git-ignored)."""
    return root / "build" / "vllm"


#: The file a stopped `invoke rebase` keeps its state in, in build/rebase beside build/vllm
#: (here, below both the queue and the rebase, so that apply can see a stopped rebase).
REBASE_STATE = "state.json"


def rebase_state_dir(root: Path = REPO_ROOT) -> Path:
    return root / "build" / "rebase"
