"""A copy of this repository's tracked files (a real git repo) with the real patched wheel in dist/.

Made the way a user's checkout gets it: `invoke apply` and `invoke build` (fast route, the
shared cache), so the image tests ship the wheel and record the build really writes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from vllm_fork.core.git import git
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue import apply as queue
from vllm_fork.wheel.build import build


def copy_repository(dest: Path) -> Path:
    files = [f for f in git(REPO_ROOT, "ls-files", "-z").stdout.split("\0") if f]
    for name in files:
        src = REPO_ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "copy")
    return dest


def queue_checkout(dest: Path) -> Path:
    """A git checkout (branch main, one commit) holding this repository's queue, pin and ops cache:
    what the rebase tests change; the shared cache is reused."""
    dest.mkdir()
    shutil.copytree(REPO_ROOT / "patches", dest / "patches")
    shutil.copy2(REPO_ROOT / "upstream.toml", dest / "upstream.toml")
    shutil.copytree(REPO_ROOT / "ops-cache", dest / "ops-cache")
    (dest / ".gitignore").write_text("/build/\n")
    commit_all(dest, "fork", init=True)
    return dest


def commit_all(root: Path, message: str, init: bool = False) -> None:
    if init:
        git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)


def fork_with_wheel(dest: Path):
    """The copy, its patched tree and the BuildResult of the real fast-route build."""
    root = copy_repository(dest)
    queue.apply(root=root)
    return root, build(root=root, apply=False, route="fast")
