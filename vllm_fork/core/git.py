"""The git layer: `git` with an environment that makes results identical on every machine,
and the named operations the queue uses, each flag explained once (after Electron's
script/lib/git.py).

User and system git config are ignored (a user's `format.signature`,
`diff.renames` or `am.threeWay` must not change a patch or a commit id), and
commits made by the tooling carry a fixed committer and date.

Plain subprocesses, not GitPython: importing it costs every command more than its in-Python
ref reads save on apply, export or check (benchmarks/results/git_layer.json).
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


#: git's lock files in a git dir that a killed git leaves behind (refs/**/*.lock too).
LOCK_FILES = ("index.lock", "HEAD.lock", "ORIG_HEAD.lock", "config.lock", "packed-refs.lock", "shallow.lock")


def lock_files(gitdir: Path) -> list[Path]:
    """The lock files in `gitdir` (a work tree's .git or a bare repository).

    Only stale when the caller knows no git runs on it now (it holds the fork's own lock).
    """
    if not gitdir.is_dir():
        return []
    found = [gitdir / name for name in LOCK_FILES if (gitdir / name).exists()]
    refs = gitdir / "refs"
    if refs.is_dir():
        found += sorted(refs.rglob("*.lock"))
    return found


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
    """The commit `ref` names, or None when there is none."""
    # --verify: exactly one object or fail; --quiet: failing says nothing; ^{commit}: a tag peels to its commit.
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    return proc.stdout.strip() or None


def is_repo(path: Path) -> bool:
    return (path / ".git").exists() or (path / "HEAD").is_file() and (path / "objects").is_dir()


#: What tools leave in a work tree without being asked (linters, test runners, the interpreter):
#: never work of the user's, so it never blocks an apply or a build, and `git clean` may drop it.
TOOL_CACHE_DIRS = frozenset({"__pycache__", ".ruff_cache", ".pytest_cache", ".mypy_cache"})


def is_tool_cache(path: str) -> bool:
    """Whether a path `git status` lists is (inside) a tool cache, or Python bytecode."""
    parts = path.rstrip("/").split("/")
    return bool(TOOL_CACHE_DIRS.intersection(parts)) or path.endswith((".pyc", ".pyo"))


def dirty_paths(tree: Path) -> list[str]:
    """Uncommitted changes in a work tree, untracked files included."""
    # --porcelain: the stable "XY path" format; --untracked-files=normal: new files count, listed by folder.
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


#: Lines of git's own output that tell the user to run git's commands: the report gives ours.
_GIT_HINTS = (
    "hint:",
    "Patch failed at",  # git numbers the patch within its own run, not in the series
    "When you have resolved this problem",
    "If you prefer to skip this patch",
    "To restore the original branch",
    "Use 'git am --show-current-patch",
    "You might want to use 'git am",
)


def git_output_without_hints(output: str) -> list[str]:
    """git's output with its "run `git am --continue`"-style advice dropped (the report says what to run)."""
    return [ln for ln in output.strip().splitlines() if not ln.lstrip().startswith(_GIT_HINTS)]


#: `git format-patch` flags that keep exported patches free of churn (after Electron).
FORMAT_PATCH_FLAGS = (
    "--zero-commit",  # From 0000...: no commit id, which changes on every apply
    "--no-signature",  # no "-- \n<git version>" trailer, which changes with git
    "--no-stat",  # no diffstat: it only restates the diff
    "--no-numbered",  # [PATCH], never [PATCH n/m]: inserting a patch renames no other
    "--full-index",  # full blob ids, so `git am --3way` can always find the preimage
    "--no-encode-email-headers",  # UTF-8 subjects stay readable in the file
    "--find-renames",  # a moved file is a rename, not a delete and an add
    "--subject-prefix=PATCH",  # whatever format.subjectPrefix says elsewhere
    "--filename-max-length=100",  # the same file names on every git version
)


def am(repo: Path, patches: list[Path], three_way: bool = False) -> subprocess.CompletedProcess:
    """Apply mail-format patches onto HEAD as commits; the caller reads a failure from the
    result. A `git am` killed by a signal raises: no patch failed, the step was cut short."""
    return _not_killed(
        repo,
        git(
            repo,
            "am",
            "--quiet",
            # --3way: fall back to a merge with the preimage blobs the patch names (a rebase);
            # --no-3way: apply exactly or stop (apply, check).
            "--3way" if three_way else "--no-3way",
            "--keep-cr",  # keep CRs at line ends: patches to CRLF files apply as written
            "--keep-non-patch",  # strip only "[PATCH]" from subjects, keep "[Engine] ..."
            *map(str, patches),
            check=False,
        ),
    )


def am_continue(repo: Path) -> subprocess.CompletedProcess:
    """Commit the resolved, staged patch and apply the rest; the caller reads a failure
    (a kill raises, as in `am`)."""
    return _not_killed(repo, git(repo, "am", "--continue", check=False))


def _not_killed(repo: Path, proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    if proc.returncode < 0:
        raise GitError(f"`git am` in {repo} was killed by signal {-proc.returncode} half-way through the queue")
    return proc


def am_skip(repo: Path) -> None:
    """Drop the stopped patch (it has nothing left to commit) and apply the rest."""
    git(repo, "am", "--skip")


def am_abort(repo: Path, check: bool = True) -> None:
    """Give up a stopped `git am`: HEAD and the work tree go back to where it started."""
    git(repo, "am", "--abort", check=check)


def format_patch(repo: Path, revisions: str, dest: Path) -> list[str]:
    """Write each commit of `revisions` into `dest` as a patch file; their names, in order."""
    proc = git(repo, "format-patch", *FORMAT_PATCH_FLAGS, "-o", str(dest), revisions)
    return [Path(line).name for line in proc.stdout.splitlines() if line.strip()]


def fast_import(repo: Path, stream: bytes) -> None:
    """Load a `git fast-import` stream (objects, commits and refs) into `repo`."""
    git(
        repo,
        # A local cache: light compression and no delta search import twice as fast;
        # object ids (and so commit ids) do not depend on how objects are packed.
        "-c",
        "pack.compression=1",
        "fast-import",
        "--quiet",
        "--depth=0",
        input=stream,
        text=False,
    )
