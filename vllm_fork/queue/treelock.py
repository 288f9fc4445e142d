"""One writer at a time in build/vllm, and recovery from a writer that died.

`locked(tree, step)` takes an exclusive `flock` on `build/.vllm.lock` (beside the
tree, so `git clean` never removes it; the kernel drops it when its holder dies,
so it can never be stale). A second `invoke build` in the same clone waits for it.

While held, it keeps a journal, `build/.vllm.step`, naming the step that runs
(apply, build, rebase). The step removes it when it ends, normally or with an
error the user must act on. A journal found on entry means the previous holder
was killed (kill -9, power loss) in the middle of that step. A step names itself
`apply` only once it has checked that the tree holds no work of the user's
(`mark_step`); a journal saying `apply` means the tree holds only what the tool
itself was doing, so the next apply remakes it without asking. Recovery, always:

- git's own lock files (`.git/index.lock`, `HEAD.lock`, ref locks) are removed:
  git never cleans up after a killed git, and no git of ours can be running;
- a half-finished `git am` the tool started is dropped (`git am --quit` keeps
  nothing; the next apply checks out upstream again and re-applies the series).

Stale git locks are removed on entry even without a journal (a killed `git status`
during a build leaves `index.lock` too): under our lock no git of the tool runs in
the tree, so a lock there belongs to a dead process.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vllm_fork.core import log
from vllm_fork.core.errors import StepCutShort
from vllm_fork.core.fs import write_atomic
from vllm_fork.core.git import git, lock_files

#: The process's held tree locks (path -> depth): `build` holds it and calls `apply`.
_held: dict[Path, int] = {}
#: What the outermost holder recovered, handed to the first inner step (a build's apply).
_recovered: dict[Path, Unfinished | None] = {}
#: Trees an apply began remaking while this process holds the lock (`mark_step(tree, "apply")`).
_remade: set[Path] = set()


def lock_path(tree: Path) -> Path:
    return tree.parent / f".{tree.name}.lock"


def journal_path(tree: Path) -> Path:
    return tree.parent / f".{tree.name}.step"


@dataclass(frozen=True)
class Unfinished:
    """What the journal says about a step that never finished."""

    step: str
    pid: int


def mark_step(tree: Path, step: str) -> None:
    """Name the step the journal records from here on (only while holding `locked`)."""
    tree = Path(tree).resolve()
    if step == "apply":
        _remade.add(tree)
    write_atomic(journal_path(tree), json.dumps({"step": step, "pid": os.getpid()}).encode())


def interrupted_step(tree: Path) -> Unfinished | None:
    """The step a killed process left unfinished in `tree`, if any (read under the lock)."""
    path = journal_path(tree)
    try:
        data = json.loads(path.read_text())
        return Unfinished(str(data["step"]), int(data["pid"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        # A journal cut short by the kill still says: a step was interrupted.
        return Unfinished("unknown", 0)


def remove_stale_git_locks(tree: Path) -> list[Path]:
    """Delete git's lock files in `tree` (only call while holding `locked`)."""
    removed = []
    for path in lock_files(tree / ".git"):
        path.unlink(missing_ok=True)
        removed.append(path)
    if removed:
        names = ", ".join(str(p.relative_to(tree)) for p in removed)
        log.warning(f"{tree}: removed git lock file(s) a killed process left: {names}")
    return removed


def drop_stopped_am(tree: Path) -> None:
    """End a stopped `git am` whatever its state: `--abort` restores, `--quit` (if that fails) just forgets it."""
    gitdir = tree / ".git"
    if not (gitdir / "rebase-apply").exists():
        return
    if git(tree, "am", "--abort", check=False).returncode != 0:
        # --abort refuses when a file it would reset was edited since; the caller
        # checks the tree out again with --force, so forgetting the session is enough.
        git(tree, "am", "--quit", check=False)
    if (gitdir / "rebase-apply").exists():
        # Still there (a session git no longer understands): remove it as --quit would.
        shutil.rmtree(gitdir / "rebase-apply", ignore_errors=True)


def recover(tree: Path) -> Unfinished | None:
    """Undo what a killed step left in `tree`; return what the journal said (None: nothing was interrupted)."""
    remove_stale_git_locks(tree)
    step = interrupted_step(tree)
    if step is None:
        return None
    log.warning(
        f"{tree}: the previous `{step.step}` (pid {step.pid}) was interrupted; "
        "recovering: its half-applied queue is dropped and the step runs again"
    )
    if (tree / ".git").is_dir():
        drop_stopped_am(tree)
    return step


@contextmanager
def locked(tree: Path, step: str) -> Iterator[Unfinished | None]:
    """Hold build/vllm's lock for `step`, recovering first from a killed holder.

    Yields what an interrupted previous step left (None when the last step ended
    normally). Re-entrant in one process: the outer holder's journal stays, and
    what the outer holder recovered is yielded to the first inner step (a build's
    apply), which is the one that must redo it.
    """
    tree = Path(tree).resolve()
    if tree in _held:
        # The outer step (a build) runs this one (its apply): the journal names the inner
        # step while it runs, so a kill in it is recovered as that step.
        outer = interrupted_step(tree)
        _held[tree] += 1
        mark_step(tree, step)
        try:
            yield _recovered.pop(tree, None)
        finally:
            _held[tree] -= 1
        # Only on success: a step cut short keeps its own journal for the next run.
        if outer is not None:
            mark_step(tree, outer.step)
        return
    made_parent = not tree.parent.exists()
    tree.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path(tree), "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(f"waiting for another invoke task that holds {lock_path(tree)} ...")
            fcntl.flock(fh, fcntl.LOCK_EX)
        _held[tree] = 1
        try:
            previous = recover(tree)
            _recovered[tree] = previous
            mark_step(tree, step)
            yield previous
            _end_journal(tree, step, previous)
        except BaseException as exc:
            # An error the user acts on (a conflict, a refusal) ends the step: the tree
            # is as the message says. Only a kill, which runs no code, leaves the journal.
            # Ctrl-C, and a step cut short by a git it ran dying half-way, are like a
            # kill: the journal stays and the next run recovers.
            if not isinstance(exc, (KeyboardInterrupt, StepCutShort)):
                _end_journal(tree, step, previous)
                if made_parent and not tree.exists():
                    _remove_made_parent(tree)
            raise
        finally:
            del _held[tree]
            _recovered.pop(tree, None)
            _remade.discard(tree)
            fcntl.flock(fh, fcntl.LOCK_UN)


def _remove_made_parent(tree: Path) -> None:
    """A first step that failed before making the tree (an unwritable cache, say) leaves no `build/`.

    Only this process made the folder, and only its lock file is in it.
    """
    lock_path(tree).unlink(missing_ok=True)
    try:
        tree.parent.rmdir()
    except OSError:
        pass  # something else is there now: it stays


def _end_journal(tree: Path, step: str, previous: Unfinished | None) -> None:
    """Remove the journal, unless a killed apply's half-made tree is still there to redo.

    A step that never remade the tree (a `build --no-apply` that refused, an `apply --abort`
    with nothing to abort) leaves the killed apply's journal for the next apply. A rebase
    takes the tree over, so its own steps always end the journal.
    """
    if previous is not None and previous.step == "apply" and tree not in _remade and not step.startswith("rebase"):
        mark_step(tree, "apply")
        return
    journal_path(tree).unlink(missing_ok=True)


__all__ = [
    "locked",
    "mark_step",
    "recover",
    "interrupted_step",
    "remove_stale_git_locks",
    "drop_stopped_am",
    "lock_path",
]
