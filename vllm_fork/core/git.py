"""Running git with an environment that makes results identical on every machine.

User and system git config are ignored (a user's `format.signature`,
`diff.renames` or `am.threeWay` must not change a patch or a commit id), and
commits made by the tooling carry a fixed committer and date.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from vllm_fork.core.errors import GitError

#: Identity and time for every commit the tooling makes (upstream import, git am).
FIXED_NAME = "vllm-fork"
FIXED_EMAIL = "vllm-fork@localhost"
FIXED_DATE = "1970-01-01T00:00:00+0000"


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIT_") or k in ("GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS")
    }
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_COMMITTER_NAME=FIXED_NAME,
        GIT_COMMITTER_EMAIL=FIXED_EMAIL,
        GIT_COMMITTER_DATE=FIXED_DATE,
        GIT_AUTHOR_NAME=FIXED_NAME,
        GIT_AUTHOR_EMAIL=FIXED_EMAIL,
        GIT_AUTHOR_DATE=FIXED_DATE,
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
        TZ="UTC",
    )
    if extra:
        env.update(extra)
    return env


def git(
    repo: Path | str | None,
    *args: str,
    check: bool = True,
    input: bytes | str | None = None,
    env: dict[str, str] | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess:
    """Run `git -C repo args...`; raise GitError with git's output on failure."""
    cmd = ["git"]
    if repo is not None:
        cmd += ["-C", str(repo)]
    cmd += list(args)
    proc = subprocess.run(
        cmd,
        input=input,
        capture_output=True,
        text=text,
        # Output may hold file content in any encoding (a latin-1 source file): keep its bytes.
        errors="surrogateescape" if text else None,
        env=git_env(env),
        check=False,
    )
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise GitError(f"`{' '.join(cmd)}` failed ({proc.returncode}):\n{err.strip()}")
    return proc


def out(repo: Path | str | None, *args: str) -> str:
    return git(repo, *args).stdout.strip()


def rev(repo: Path | str, ref: str) -> str | None:
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    return proc.stdout.strip() or None


def is_repo(path: Path) -> bool:
    return (path / ".git").exists() or (path / "HEAD").is_file() and (path / "objects").is_dir()


def dirty_paths(tree: Path) -> list[str]:
    """Uncommitted changes in a work tree, untracked files included."""
    status = git(tree, "status", "--porcelain", "--untracked-files=normal").stdout
    return [line[3:] for line in status.splitlines() if line.strip()]


def operation_in_progress(tree: Path) -> str | None:
    """'am' or 'rebase' when one is stopped half-way in `tree`."""
    gitdir = Path(out(tree, "rev-parse", "--absolute-git-dir"))
    if (gitdir / "rebase-apply" / "applying").exists():
        return "am"
    if (gitdir / "rebase-apply").exists() or (gitdir / "rebase-merge").exists():
        return "rebase"
    return None
