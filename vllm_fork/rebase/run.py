"""`invoke rebase`: the patch queue onto a new upstream, patch by patch, resumable.

start -> (classify each patch in build/vllm) -> finish, or stop at a conflict.
While stopped, `continue_` picks up after the user's resolution and `abort`
puts the tree, `patches/` and the pin back exactly as they were. Nothing in
`patches/` or the pin is written before every patch has applied.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from vllm_fork.core.errors import ForkError
from vllm_fork.core.fs import write_atomic
from vllm_fork.core.git import (
    dirty_paths,
    git,
    git_output_without_hints,
    is_tool_cache,
    operation_in_progress,
    out,
    rev,
)
from vllm_fork.core.paths import REPO_ROOT, default_tree
from vllm_fork.queue.apply import APPLIED_MARK, UPSTREAM_REF, ensure_clean, prepare_tree
from vllm_fork.queue.carry import drop_reason, upstream_status
from vllm_fork.queue.patchfile import parse_patch
from vllm_fork.queue.series import read_series
from vllm_fork.rebase.blame import PYPI_NOTE, fetch_history
from vllm_fork.rebase.classify import CONFLICT, DROPPED, RESOLVED, SKIPPED, THREE_WAY, PatchResult, classify
from vllm_fork.rebase.contentloss import content_loss
from vllm_fork.rebase.finish import finish
from vllm_fork.rebase.report import conflict_report, survey_report
from vllm_fork.rebase.state import (
    CHECKS,
    ORIG_REF,
    Options,
    Outcome,
    RebaseState,
    clear,
    in_progress,
    restore_originals,
    save_originals,
    state_dir,
    write_report,
)
from vllm_fork.rebase.survey import Survey, survey
from vllm_fork.rebase.target import commit_of, pin_to_dict, resolve_target
from vllm_fork.upstream.pin import Pin, load_pin
from vllm_fork.upstream.sources import Upstream, ensure_upstream, upstream_repo

#: Where `invoke rebase --survey` writes its report (outside build/rebase/, which a stopped rebase owns).
SURVEY_REPORT = "rebase-survey.md"


def _gitdir(tree: Path) -> Path:
    return Path(out(tree, "rev-parse", "--absolute-git-dir"))


def _root_preflight(root: Path, replace_branch: bool, branch: str) -> None:
    """The fork checkout must be able to take the result: a git repo, queue and pin committed."""
    if git(root, "rev-parse", "--git-dir", check=False).returncode != 0:
        raise ForkError(f"{root} is not a git checkout: the rebase commits its result on a branch")
    dirty = out(root, "status", "--porcelain", "--", "patches", "upstream.toml")
    if dirty:
        raise ForkError(
            "patches/ or upstream.toml has uncommitted changes:\n"
            + "\n".join(f"  {ln}" for ln in dirty.splitlines())
            + "\nCommit or stash them first: the rebase rewrites both on a new branch."
        )
    if branch and rev(root, f"refs/heads/{branch}") and not replace_branch:
        raise ForkError(
            f"branch {branch} already exists. Delete it (`git branch -D {branch}`) or pass "
            "--replace-branch to rebuild it (the bot does)."
        )


def _tree_snapshot(tree: Path, tag: str) -> dict:
    if not (tree / ".git").exists():
        return {"existed": False}
    mark = _gitdir(tree) / APPLIED_MARK
    branch = git(tree, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
    head = rev(tree, "HEAD")
    if head:
        git(tree, "update-ref", ORIG_REF, head)
    return {
        "existed": True,
        "head": head,
        "branch": branch,
        "upstream_ref": rev(tree, UPSTREAM_REF),
        "new_tag": tag,
        "new_tag_was": rev(tree, f"refs/tags/{tag}") if tag else None,
        "mark": mark.read_text() if mark.exists() else None,
    }


def _restore_tree(tree: Path, orig: dict) -> None:
    if not orig.get("existed"):
        shutil.rmtree(tree, ignore_errors=True)
        return
    if operation_in_progress(tree):
        git(tree, "am", "--abort", check=False)
    head, branch = orig["head"], orig["branch"]
    if head and branch:
        git(tree, "checkout", "--quiet", "--force", "-B", branch, head)
    elif head:
        git(tree, "checkout", "--quiet", "--force", "--detach", head)
    git(tree, "clean", "-fdxq")
    if orig["upstream_ref"]:
        git(tree, "update-ref", UPSTREAM_REF, orig["upstream_ref"])
    else:
        git(tree, "update-ref", "-d", UPSTREAM_REF, check=False)
    tag = orig.get("new_tag")
    if tag:
        if orig["new_tag_was"]:
            git(tree, "tag", "--force", tag, orig["new_tag_was"])
        else:
            git(tree, "tag", "-d", tag, check=False)
    mark = _gitdir(tree) / APPLIED_MARK
    if orig["mark"] is None:
        mark.unlink(missing_ok=True)
    else:
        mark.write_text(orig["mark"])
    git(tree, "update-ref", "-d", ORIG_REF, check=False)


def _seed_preimages(tree: Path, old_commit: str, patches: list[Path]) -> None:
    """Write the blobs the old queue produces on the old upstream into the tree's object store.

    `git am --3way` needs each patch's preimage blobs; a patch that follows another
    on the same file has a preimage only the old queue ever made. No checkout needed:
    the queue is applied to a scratch index.
    """
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        git(tree, "read-tree", old_commit, env=env)
        for patch in patches:
            if git(tree, "apply", "--cached", str(patch), env=env, check=False).returncode != 0:
                break  # the old queue itself is broken here; `invoke check` says so


def forecast(
    patches: list[Path], old_pin: Pin, new_pin: Pin, old_up: Upstream, new_up: Upstream, remote: str | None
) -> Survey:
    """The survey of `patches` on the new upstream, with upstream blame where the source has history."""
    blame_from, note = None, PYPI_NOTE.format(to=new_pin.commit if not new_pin.tag else new_pin.version)
    if new_up.source == "git":
        why = fetch_history(new_up.repo, remote or old_pin.git_remote, old_pin, new_pin)
        if why:
            note = f"Upstream blame: unavailable ({why})."
        else:
            blame_from = new_up.repo
    return survey(patches, new_up.repo, old_up.commit, new_up.commit, new_pin.version, blame_from, note)


def _target(root: Path, to: str | None, latest: bool, source: str | None) -> tuple[Pin, str, list[Path], Pin]:
    """The pinned release, the source, the queue (every patch parsed) and the release to move to."""
    old_pin = load_pin(root)
    source = source or old_pin.source
    patches = read_series(root / "patches")
    for patch in patches:
        parse_patch(patch)
    return old_pin, source, patches, resolve_target(old_pin, to, latest, source)


def _upstreams(old_pin: Pin, new_pin: Pin, source: str, remote: str | None) -> tuple[Upstream, Upstream, Pin]:
    """Both upstream trees, and the new pin with its commit filled in."""
    old_up = ensure_upstream(old_pin, source, remote)
    new_up = ensure_upstream(new_pin, source, remote)
    return old_up, new_up, new_pin.with_changes(commit=commit_of(new_pin, new_up))


def survey_only(
    root: Path = REPO_ROOT,
    to: str | None = None,
    latest: bool = False,
    source: str | None = None,
    remote: str | None = None,
) -> tuple[Survey, str, Path]:
    """`invoke rebase --survey`: the forecast alone. Writes only build/rebase-survey.md."""
    old_pin, source, patches, new_pin = _target(root, to, latest, source)
    old_up, new_up, new_pin = _upstreams(old_pin, new_pin, source, remote)
    result = forecast(patches, old_pin, new_pin, old_up, new_up, remote)
    result.from_version, result.to_version = old_pin.version, new_pin.version
    text = survey_report(result, old_pin, new_pin, source, old_up.commit, new_up.commit)
    path = root / "build" / SURVEY_REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode())
    return result, text, path


def start(
    root: Path = REPO_ROOT,
    to: str | None = None,
    latest: bool = False,
    source: str | None = None,
    remote: str | None = None,
    options: Options | None = None,
) -> Outcome:
    options = options or Options()
    if in_progress(root):
        state = RebaseState.load(root)
        where = (
            "its check or tests, which failed: fix them in build/vllm"
            if state.stage == CHECKS
            else f"{state.queue[state.next_index]}: resolve it"
        )
        raise ForkError(
            f"a rebase onto {state.new_pin['version']} is stopped at {where} and run "
            "`invoke rebase --continue`, or `invoke rebase --abort`"
        )
    old_pin, source, patches, new_pin = _target(root, to, latest, source)
    options.branch = options.branch or f"rebase/{new_pin.version}"
    _root_preflight(root, options.replace_branch, options.branch if options.commit else "")
    tree = default_tree(root)
    ensure_clean(tree, force=False)

    old_up, new_up, new_pin = _upstreams(old_pin, new_pin, source, remote)
    if new_up.commit == old_up.commit:
        raise ForkError(
            f"upstream {new_pin.version} is the commit already pinned ({old_pin.version}): nothing to rebase"
        )

    state_dir(root).mkdir(parents=True, exist_ok=True)
    save_originals(root)
    state = RebaseState(
        old_pin=pin_to_dict(old_pin),
        new_pin=pin_to_dict(new_pin),
        source=source,
        remote=remote,
        tree=str(tree),
        old_upstream=old_up.commit,
        new_upstream=new_up.commit,
        orig=_tree_snapshot(tree, new_pin.tag),
        queue=[p.name for p in patches],
        options=options,
    )
    state.orig["root_head"] = out(root, "rev-parse", "HEAD")
    state.save(root)
    try:
        state.forecast = forecast(state.queue_paths(root), old_pin, new_pin, old_up, new_up, remote).to_dict()
        state.save(root)
    except BaseException:
        abort(root)
        raise
    try:
        if not (tree / ".git").exists():
            tree.mkdir(parents=True, exist_ok=True)
            git(tree, "init", "-q")
        if rev(tree, old_up.commit) is None:
            git(tree, "fetch", "--quiet", "--no-tags", str(old_up.repo), old_up.commit)
        _seed_preimages(tree, old_up.commit, state.queue_paths(root))
        prepare_tree(tree, new_up, new_pin.tag, force=True)
    except BaseException:
        abort(root)
        raise
    return _run_queue(root, state)


def _dropped_by_status(state: RebaseState, patch: Path) -> PatchResult | None:
    """The patch's Upstream-Status says upstream has it by now: it leaves the queue unapplied."""
    parsed = parse_patch(patch)
    try:
        status = upstream_status(parsed)
    except ValueError:
        return None  # malformed: `invoke check` says so; the patch is carried
    repo = upstream_repo() if state.source == "git" else None  # the history a commit condition needs
    drops, why = drop_reason(status, state.new_pin["version"], state.new_upstream, repo)
    if not drops:
        return None
    return PatchResult(patch.name, parsed.subject, DROPPED, notes=[why])


def _run_queue(root: Path, state: RebaseState) -> Outcome:
    tree = Path(state.tree)
    queue = state.queue_paths(root)
    while state.next_index < len(queue):
        patch = queue[state.next_index]
        state.stopped_head = out(tree, "rev-parse", "HEAD")
        dropped = _dropped_by_status(state, patch)
        if dropped is not None:
            state.results.append(dropped)
            state.next_index += 1
            state.save(root)
            continue
        result, failure = classify(tree, patch)
        if result.outcome == THREE_WAY:
            result.lost = content_loss(tree, parse_patch(patch), state.stopped_head, out(tree, "rev-parse", "HEAD"))
        if result.outcome == CONFLICT:
            state.results = [r for r in state.results if r.name != result.name] + [result]
            state.save(root)
            assert failure is not None, "classify returns git's failure with every conflict"
            report = conflict_report(state, failure, root)
            path = write_report(root, report)
            return Outcome(False, report, path, state, stopped_at="conflict")
        state.results.append(result)
        state.next_index += 1
        state.save(root)
    return finish(root, state)


def _continue_after_checks(root: Path, state: RebaseState) -> Outcome:
    """Stopped because the check or the tests failed: the user fixed the tree; export and run both again."""
    tree = Path(state.tree)
    op = operation_in_progress(tree)
    if op:
        raise ForkError(
            f"a `git {op}` is stopped half-way in {tree}: finish it (`git {op} --continue`) or "
            f"undo it (`git {op} --abort`) there, then `invoke rebase --continue`"
        )
    # Work left uncommitted would be tested but not exported: the queue must hold what passed.
    dirty = [p for p in dirty_paths(tree) if not is_tool_cache(p)]
    if dirty:
        raise ForkError(
            f"{tree} has changes not in any commit:"
            + "".join(f"\n  {p}" for p in dirty[:10])
            + "\nThe queue is exported from the commits. Fold them into the patch's commit (`git commit -a "
            "--fixup=<commit>` then `git rebase -i --autosquash refs/fork/upstream`, or `git commit -a --amend` "
            "for the last patch), or drop them (`git checkout -- .`), then `invoke rebase --continue`."
        )
    state.stage = ""
    return finish(root, state)


def continue_(root: Path = REPO_ROOT, accept_failing_tests: bool = False) -> Outcome:
    """After the user resolved the stopped patch (and staged it, or committed it), or fixed what
    failed the check or the tests: go on. `accept_failing_tests` commits even if they fail again."""
    state = RebaseState.load(root)
    if accept_failing_tests:
        state.options.accept_failing_tests = True
        state.save(root)
    if state.stage == CHECKS:
        return _continue_after_checks(root, state)
    tree = Path(state.tree)
    stopped = state.results[-1] if state.results and state.results[-1].outcome == CONFLICT else None
    if stopped is None:
        raise ForkError("the rebase is not stopped at a conflict; run `invoke rebase --abort` to end it")
    if operation_in_progress(tree) == "am":
        unmerged = out(tree, "diff", "--name-only", "--diff-filter=U")
        if unmerged:
            raise ForkError(
                f"files in {tree} still have unresolved conflicts:\n"
                + "\n".join(f"  {p}" for p in unmerged.splitlines())
                + "\nEdit them, `git add` them, then run `invoke rebase --continue` again."
            )
        proc = git(tree, "am", "--continue", check=False)
        if proc.returncode != 0:
            said = "\n".join(git_output_without_hints(proc.stdout + proc.stderr))
            raise ForkError(
                f"`git am --continue` in {tree} failed:\n{said}\n"
                "Stage the resolved files (`git add`), or `git am --skip` in the tree to drop the "
                "patch; then `invoke rebase --continue`. Or `invoke rebase --abort`."
            )
    head = out(tree, "rev-parse", "HEAD")
    if head == state.stopped_head:
        stopped.outcome = SKIPPED
        stopped.notes.append("the patch was skipped while resolving its conflict: it is no longer in the queue")
    else:
        count = int(out(tree, "rev-list", "--count", f"{state.stopped_head}..HEAD"))
        if count != 1 or rev(tree, "HEAD^") != state.stopped_head:
            raise ForkError(
                f"expected one commit on top of {state.stopped_head[:12]} in {tree} for the resolved "
                f"patch, found {count}. Squash them (`git reset --soft {state.stopped_head[:12]}` and "
                "commit), then `invoke rebase --continue`."
            )
        stopped.outcome = RESOLVED
        stopped.notes.append("conflict resolved by hand: review the resolution")
        resolved = [p for p in state.queue_paths(root) if p.name == stopped.name][0]
        stopped.lost = content_loss(tree, parse_patch(resolved), state.stopped_head, head)
    state.next_index += 1
    state.save(root)
    return _run_queue(root, state)


def abort(root: Path = REPO_ROOT) -> list[str]:
    """Put the tree, patches/ and the pin back exactly as before the rebase; end it."""
    state = RebaseState.load(root)
    _restore_tree(Path(state.tree), state.orig)
    restored = restore_originals(root)
    clear(root, keep_report=False)
    return restored


__all__ = ["Outcome", "Options", "PatchResult", "start", "continue_", "abort", "survey_only", "forecast"]
