"""The patched tree: pinned upstream + the series through `git am` (apply, continue, abort).

`apply` makes `build/vllm`, a git repository whose ref ``refs/fork/upstream``
(and the release tag) is the upstream commit and whose branch ``patched`` holds
one commit per patch. Every commit carries the patch's author and date and a
fixed committer identity and date, so HEAD is the same on every machine.
`queue.export` turns those commits back into ``patches/`` byte for byte.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core import log
from vllm_fork.core.errors import ForkError, GitError, StepCutShort
from vllm_fork.core.git import am as git_am
from vllm_fork.core.git import (
    dirty_paths,
    git,
    git_output_without_hints,
    is_tool_cache,
    operation_in_progress,
    out,
    rev,
)
from vllm_fork.core.paths import REBASE_STATE, REPO_ROOT, default_tree
from vllm_fork.core.paths import patches_dir as default_patches_dir
from vllm_fork.queue.patchfile import hunk_patch, parse_patch
from vllm_fork.queue.series import read_series
from vllm_fork.queue.treelock import drop_stopped_am, locked, mark_step
from vllm_fork.upstream.pin import Pin, load_pin
from vllm_fork.upstream.sources import Upstream, ensure_upstream

__all__ = ["apply", "abort", "continue_am", "prepare_tree", "default_tree"]

UPSTREAM_REF = "refs/fork/upstream"
BRANCH = "patched"
#: Recorded after a successful apply: HEAD moving away from it means unexported commits.
APPLIED_MARK = "vllm-fork-applied"


@dataclass
class PatchFailure:
    """A patch `git am` stopped on: which, where, and what git said."""

    patch: Path
    index: int
    total: int
    conflicts: dict[str, list[str]]  # file -> hunk headers that do not apply
    git_output: str


class PatchConflict(ForkError):
    """A patch of the series does not apply: names the patch, the files and hunks, and the next steps."""

    def __init__(self, failure: PatchFailure, tree: Path, three_way: bool, upstream_name: str):
        self.failure = failure
        lines = [
            f"patch {failure.patch.name} ({failure.index} of {failure.total}) does not apply "
            f"to {upstream_name}{' even with a 3-way merge' if three_way else ''}.",
            "Conflicting files and hunks:",
        ]
        for path, hunks in failure.conflicts.items():
            lines.append(f"  {path}")
            lines.extend(f"      {h}" for h in hunks)
        if not failure.conflicts:
            lines.append("  (git gave no file; its output follows)")
        lines.append("git said:")
        lines.extend(f"  {ln}" for ln in git_output_without_hints(failure.git_output)[-12:])
        resolve = (
            "edit the conflict markers"
            if three_way
            else "re-run with `invoke apply --force --3way` for conflict markers, or apply the hunks by hand"
        )
        lines += [
            "",
            f"Next steps, in {tree}:",
            f"  1. {resolve}; `git am --show-current-patch=diff` shows the patch",
            "  2. `git add <files>` there, then `invoke apply --continue` (the remaining patches follow)",
            "  3. `invoke export` to write the resolved queue back to patches/, then `invoke check`",
            "Or `invoke apply --abort` to drop the half-applied queue (patches/ is untouched).",
        ]
        super().__init__("\n".join(lines))


def _gitdir(tree: Path) -> Path:
    return Path(out(tree, "rev-parse", "--absolute-git-dir"))


def _unexported_commits(tree: Path) -> list[str]:
    """Commits on the patched branch made after the last apply (not yet exported)."""
    mark = _gitdir(tree) / APPLIED_MARK
    head = rev(tree, "HEAD")
    if not mark.exists() or head == mark.read_text().strip():
        return []
    if head is None:  # an orphan branch, say: not the state apply left, so apply refuses, as it did
        return ["HEAD names no commit"]
    base = mark.read_text().strip()
    if rev(tree, base) is None:
        return [head]
    # HEAD on upstream or part-way up the applied queue (an apply cut short) holds
    # nothing new: only commits that are not in the applied queue are work.
    if git(tree, "merge-base", "--is-ancestor", "HEAD", base, check=False).returncode == 0:
        return []
    return out(tree, "log", "--format=%h %s", f"{base}..HEAD").splitlines() or [head]


def is_usable_repo(tree: Path) -> bool:
    """Whether `tree/.git` is a repository git reads as the tree's own.

    A `git init` killed half-way leaves a `.git` git does not take for a repository; git
    then walks up and would run in the fork's own clone around `build/`.
    """
    proc = git(tree, "rev-parse", "--absolute-git-dir", check=False)
    return proc.returncode == 0 and Path(proc.stdout.strip()).resolve() == (tree / ".git").resolve()


def _listed(paths: list[str]) -> str:
    shown = "".join(f"\n      {p}" for p in paths[:10])
    return shown + (f"\n      ... and {len(paths) - 10} more" if len(paths) > 10 else "")


def ignored_work(tree: Path) -> list[str]:
    """Git-ignored files in the tree (a locally built `.so`, a venv) that `git clean -fdx` would delete.

    Tool caches are not work: importing the tree (the CPU tests do) makes `__pycache__`, a
    linter or pytest run there makes `.ruff_cache` or `.pytest_cache`.
    """
    listed = git(tree, "status", "--porcelain", "--ignored=traditional", "--untracked-files=normal").stdout
    return [line[3:] for line in listed.splitlines() if line.startswith("!! ") and not is_tool_cache(line[3:])]


def work_in_tree(tree: Path) -> list[str]:
    """What `apply` would discard in `tree`: a stopped git operation, edits, ignored files, unexported commits."""
    if not (tree / ".git").exists():
        return []
    problems = []
    op = operation_in_progress(tree)
    if op:
        problems.append(f"a `git {op}` is stopped half-way")
    dirty = [p for p in dirty_paths(tree) if not is_tool_cache(p)]
    if dirty:
        problems.append(f"uncommitted changes:{_listed(dirty)}")
    ignored = ignored_work(tree)
    if ignored:
        problems.append(f"git-ignored files (apply starts from a clean checkout: `git clean -fdx`):{_listed(ignored)}")
    commits = _unexported_commits(tree)
    if commits:
        problems.append("commits not exported to patches/:" + "".join(f"\n      {c}" for c in commits[:10]))
    return problems


def fork_rebase_stopped(tree: Path) -> bool:
    """Whether `invoke rebase` is stopped on `tree` (its state in build/rebase, beside build/vllm)."""
    return (tree.parent / "rebase" / REBASE_STATE).exists()


def rebase_stopped(tree: Path) -> bool:
    """Whether `tree` is stopped in a rebase: `invoke rebase`'s or git's own."""
    return fork_rebase_stopped(tree) or ((tree / ".git").exists() and operation_in_progress(tree) == "rebase")


def ensure_clean(tree: Path, force: bool) -> None:
    """Refuse to touch a tree holding work that `apply` would discard; with `force`, name it first."""
    problems = work_in_tree(tree)
    if not problems:
        return
    listed = "\n".join(f"  - {p}" for p in problems)
    if force:
        log.warning(f"--force: discarding from {tree}:\n{listed}\n(`git -C {tree} reflog` still finds the commits)")
        return
    if rebase_stopped(tree):
        next_step = (
            "A `git rebase` is stopped there: finish it with `invoke rebase --continue`, or drop it with "
            "`invoke rebase --abort`; or `invoke apply --force` to discard it all."
        )
    else:
        next_step = (
            "Commit it and run `invoke export` to keep it, `invoke apply --abort` to end a stopped"
            " `git am`, or `invoke apply --force` to discard it."
        )
    raise ForkError(f"{tree} holds work that `invoke apply` would discard:\n{listed}\n{next_step}")


def prepare_tree(tree: Path, upstream: Upstream, tag: str, force: bool = False, borrow_objects: bool = False) -> None:
    """Check out the upstream commit on branch `patched` in `tree` (created if needed).

    `borrow_objects` points the tree at the cache repo's objects (as `git clone
    --shared` does) instead of copying them: for scratch trees only, since such a
    tree breaks if the cache is wiped.
    """
    if not force:
        ensure_clean(tree, force)
    if not (tree / ".git").exists():
        tree.mkdir(parents=True, exist_ok=True)
        git(tree, "init", "-q")
    elif operation_in_progress(tree):
        drop_stopped_am(tree)  # --abort, or --quit when an edited file makes --abort refuse
        git(tree, "rebase", "--abort", check=False)
        left = operation_in_progress(tree)
        if left:
            gitdir = _gitdir(tree)
            raise ForkError(
                f"could not end the stopped `git {left}` in {tree} (`git am --abort` and `--quit` both failed). "
                f"Remove its state by hand: `rm -rf {gitdir / 'rebase-apply'} {gitdir / 'rebase-merge'}`, then run "
                "the same command again."
            )
    if borrow_objects:
        alternates = _gitdir(tree) / "objects" / "info" / "alternates"
        alternates.parent.mkdir(parents=True, exist_ok=True)
        alternates.write_text(f"{upstream.repo / 'objects'}\n")
    if rev(tree, upstream.commit) is None:
        git(tree, "fetch", "--quiet", "--no-tags", str(upstream.repo), upstream.commit)
    git(tree, "update-ref", UPSTREAM_REF, upstream.commit)
    if tag:  # a pin on a bare commit has no tag
        git(tree, "tag", "--force", tag, upstream.commit)
    git(tree, "checkout", "--quiet", "--force", "-B", BRANCH, upstream.commit)
    git(tree, "clean", "-fdxq")


def am(tree: Path, patches: list[Path], three_way: bool = False) -> PatchFailure | None:
    """`git am` the patches onto HEAD; on failure stop there and describe it."""
    if not patches:
        return None
    proc = git_am(tree, patches, three_way)
    if proc.returncode == 0:
        return None
    applying = _gitdir(tree) / "rebase-apply" / "next"
    index = int(applying.read_text()) if applying.exists() else 1
    patch = patches[index - 1]
    output = proc.stdout + proc.stderr
    # HEAD is still the commit before the failing patch: test each hunk against it.
    conflicts = conflicts_at(tree, out(tree, "rev-parse", "HEAD"), patch)
    if three_way:
        for path in out(tree, "diff", "--name-only", "--diff-filter=U").splitlines():
            conflicts.setdefault(path, ["(3-way merge left conflict markers in the file)"])
    return PatchFailure(patch, index, len(patches), conflicts, output)


def conflicts_at(tree: Path, commit: str, patch: Path) -> dict[str, list[str]]:
    """Hunks of `patch` that do not apply to `commit`, checked in a scratch index."""
    try:
        parsed = parse_patch(patch)
    except ForkError:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        git(tree, "read-tree", commit, env=env)
        conflicts: dict[str, list[str]] = {}
        for diff in parsed.files:
            for hunk in diff.hunks:
                check = git(
                    tree,
                    "apply",
                    "--cached",
                    "--check",
                    "-",
                    input=hunk_patch(diff, hunk),
                    env=env,
                    check=False,
                    text=False,
                )
                if check.returncode != 0:
                    conflicts.setdefault(diff.path, []).append(hunk[0])
        return conflicts


def mark_applied(tree: Path) -> str:
    """Record HEAD as applied and exported: moving away from it means unexported commits."""
    head = out(tree, "rev-parse", "HEAD")
    (_gitdir(tree) / APPLIED_MARK).write_text(head + "\n")
    return head


def apply(
    root: Path = REPO_ROOT,
    tree: Path | None = None,
    source: str | None = None,
    force: bool = False,
    three_way: bool = False,
    remote: str | None = None,
    pin: Pin | None = None,
) -> str:
    """Make the patched tree; return its HEAD. Raises PatchConflict on a failing patch."""
    root = root.resolve()  # patch paths are handed to git running inside the tree
    tree = (tree or default_tree(root)).resolve()
    pin = pin or load_pin(root)
    patches = read_series(default_patches_dir(root))
    for patch in patches:
        parse_patch(patch)  # a corrupt or empty file fails here, before the tree is touched
    with locked(tree, "apply-check") as unfinished:
        # A killed apply (alone or in a build) left only its own half-done work: redo it.
        # Any other step killed (a build's packaging, a check of the tree) made nothing here.
        redo = unfinished is not None and unfinished.step == "apply"
        if (tree / ".git").exists() and not is_usable_repo(tree):
            if not redo:
                raise ForkError(
                    f"{tree / '.git'} is not a git repository git can read. build/vllm is made by "
                    f"`invoke apply`; move it away (`mv {tree} {tree}.broken`) and run the same command again."
                )
            log.warning(f"{tree}: the interrupted apply left no usable git repository; making it again")
            shutil.rmtree(tree)
        if not redo:  # a killed apply's half-made tree is the tool's own: nothing to name
            ensure_clean(tree, force)
        # From here the tree holds no work of the user's: a kill leaves only the apply's own.
        mark_step(tree, "apply")
        upstream = ensure_upstream(pin, source, remote)
        try:
            prepare_tree(tree, upstream, pin.tag, force=True)
            failure = am(tree, patches, three_way)
        except GitError as exc:
            # From here the tree holds only this apply's work: a git that died half-way
            # (killed alone, or by a Ctrl-C this process never saw) leaves it half-made.
            raise StepCutShort(f"{exc}\n{tree} is half-made; the next `invoke apply` makes it again.") from exc
        if failure:
            raise PatchConflict(failure, tree, three_way, pin.tag)
        return mark_applied(tree)


def refuse_during_fork_rebase(tree: Path, what: str) -> None:
    """`invoke rebase` owns a `git am` it stopped: ending it with `apply`'s own verbs would lose its state."""
    if fork_rebase_stopped(tree):
        raise ForkError(
            f"the `git am` stopped in {tree} belongs to `invoke rebase`, not to `invoke apply {what}`: "
            "resolve it and run `invoke rebase --continue`, or `invoke rebase --abort` to put everything back."
        )


def continue_am(tree: Path) -> str:
    """After the user resolved and staged a stopped patch: apply the rest."""
    refuse_during_fork_rebase(tree, "--continue")
    with locked(tree, "apply-continue"):
        if operation_in_progress(tree) != "am":
            raise ForkError(f"no stopped `git am` in {tree}: nothing to continue")
        proc = git(tree, "am", "--continue", check=False)
        if proc.returncode != 0:
            raise ForkError(
                f"`git am --continue` in {tree} stopped again:\n{(proc.stdout + proc.stderr).strip()}\n"
                "Resolve, `git add`, and continue again; or `invoke apply --abort`."
            )
        return mark_applied(tree)


def abort(tree: Path | None = None, root: Path = REPO_ROOT) -> None:
    """Drop a stopped `git am`: the tree goes back to where the am started."""
    tree = tree or default_tree(root)
    refuse_during_fork_rebase(tree, "--abort")
    with locked(tree, "apply-abort"):  # removes the git locks a killed process left
        if not (tree / ".git").exists() or operation_in_progress(tree) != "am":
            raise ForkError(f"no stopped `git am` in {tree}: nothing to abort")
        drop_stopped_am(tree)
        git(tree, "checkout", "--quiet", "--force", "HEAD")
        mark_applied(tree)
