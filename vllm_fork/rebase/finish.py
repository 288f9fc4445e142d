"""The end of a rebase that applied every patch: export, pin, check, tests, report, commit.

Order matters for --abort: everything here that can fail runs while the saved
originals still exist, and the state is cleared only after the commit.

The check and the tests are a gate: when either fails, nothing is committed,
`patches/`, the pin and the other files written here go back to what was saved,
and the state stays (stage CHECKS), so `invoke rebase --continue` exports the
tree again and re-runs both, and `--abort` restores everything. Only
`--accept-failing-tests` commits past a failure, and the report and the commit
message then say so and list what failed.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from vllm_fork.core import log
from vllm_fork.core.errors import ForkError
from vllm_fork.core.git import FIXED_EMAIL, git, out
from vllm_fork.image.dockerfile import retarget_base
from vllm_fork.ops.changes import changed_compiled_inputs
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.export import export
from vllm_fork.rebase.classify import DROPPED, SKIPPED
from vllm_fork.rebase.refresh import diff_change
from vllm_fork.rebase.report import Checks, success_report
from vllm_fork.rebase.state import (
    CHECKS,
    ORIG_REF,
    SAVED,
    Outcome,
    RebaseState,
    clear,
    new_pin_of,
    old_pin_of,
    originals_changed,
    restore_originals,
    state_dir,
    write_report,
)
from vllm_fork.rebase.testrun import TestRun, run_tests
from vllm_fork.upstream.pin import save_pin
from vllm_fork.wheel.build import seed_cache

DEFAULT_TESTS = f"{shlex.quote(sys.executable)} -m pytest -q -rfE -m 'not slow' -p no:cacheprovider"
BOT_NAME = "vllm-fork rebase"


def _user_git(root: Path, *args: str) -> subprocess.CompletedProcess:
    """git as the user runs it (their identity, today's date): this commit is theirs, not the tool's."""
    env = dict(os.environ)
    has_identity = subprocess.run(
        ["git", "-C", str(root), "config", "user.email"], capture_output=True, text=True
    ).stdout.strip()
    if not has_identity and "GIT_AUTHOR_EMAIL" not in env:
        env.update(
            GIT_AUTHOR_NAME=BOT_NAME,
            GIT_AUTHOR_EMAIL=FIXED_EMAIL,
            GIT_COMMITTER_NAME=BOT_NAME,
            GIT_COMMITTER_EMAIL=FIXED_EMAIL,
        )
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise ForkError(f"`git {' '.join(args)}` in {root} failed:\n{(proc.stdout + proc.stderr).strip()}")
    return proc


def commit_on_branch(root: Path, branch: str, message: str) -> str:
    """Commit patches/ and the pin on `branch` (made at HEAD, replacing any old one); never on main."""
    if branch in ("main", "master") or not branch.startswith("rebase/"):
        raise ForkError(f"refusing to commit a rebase on {branch!r}: it goes on a rebase/<version> branch")
    before = out(root, "rev-parse", "--abbrev-ref", "HEAD")
    _user_git(root, "checkout", "--quiet", "-B", branch)
    try:
        paths = ["patches", "upstream.toml"] + [
            p for p in ("Dockerfile", "ops-cache/index.json") if (root / p).exists()
        ]
        _user_git(root, "add", "-A", "--", *paths)
        msg = Path(out(root, "rev-parse", "--absolute-git-dir")) / "VLLM_FORK_REBASE_MSG"
        msg.write_text(message)
        _user_git(root, "commit", "--quiet", "--cleanup=verbatim", "-F", str(msg), "--", *paths)
        msg.unlink()
    except ForkError:
        _user_git(root, "checkout", "--quiet", before)
        raise
    return out(root, "rev-parse", "HEAD")


def _seed_if_needed(root: Path, tree: Path, state: RebaseState) -> str:
    """With --seed: make the new release's ops artifact from its official wheel."""
    if not state.options.seed:
        return ""
    entry, _, seconds = seed_cache(root, tree)
    return f"key {entry.key[:16]}… → {entry.file} ({seconds:.1f} s)"


def _stop_at_checks(root: Path, state: RebaseState) -> None:
    """Nothing lands: the queue, the pin and the rest go back; the state stays for --continue."""
    restore_originals(root)
    state.stage = CHECKS
    state.save(root)


def finish(root: Path, state: RebaseState) -> Outcome:
    changed = originals_changed(root)
    if changed:
        raise ForkError(
            "patches/ or upstream.toml changed while the rebase was stopped:\n"
            + "\n".join(f"  {c}" for c in changed)
            + "\nThe rebase would overwrite that. Save the edits elsewhere and `invoke rebase --abort`, "
            "or put the files back and `invoke rebase --continue`."
        )
    started = time.monotonic()
    tree = Path(state.tree)
    names = iter(export(tree, root))
    for r in state.results:
        if r.outcome not in (DROPPED, SKIPPED):
            r.new_name = next(names, "")
            if r.new_name:
                r.diff_change = diff_change(state_dir(root) / SAVED / "patches" / r.name, root / "patches" / r.new_name)
    new_pin = new_pin_of(state)
    save_pin(new_pin, root)
    # The image's base follows the pin: upstream's vllm-openai image of the new release.
    retarget_base(root / "Dockerfile", old_pin_of(state).tag, new_pin.tag)
    compiled, compiled_source = changed_compiled_inputs(tree, state.old_upstream, state.new_upstream, root)
    seeded = _seed_if_needed(root, tree, state) if compiled else ""
    try:
        log.info("check: `invoke check` on the rebased queue")
        problems = [p.message for p in check_mod.check(root, source=state.source)]
        cmd = state.options.tests_cmd or DEFAULT_TESTS
        tests = run_tests(root, cmd) if state.options.run_tests else TestRun(cmd, None, "--skip-tests")
    except BaseException:
        # Cut short (Ctrl-C in the tests, a check that could not run): as after a failure, so
        # --continue runs them again and --abort restores.
        _stop_at_checks(root, state)
        raise
    gate_failed = bool(problems) or tests.failed
    checks = Checks(
        problems,
        tests,
        compiled,
        compiled_source,
        time.monotonic() - started,
        seeded,
        accepted=gate_failed and state.options.accept_failing_tests,
    )
    report = success_report(state, old_pin_of(state), new_pin, checks)
    if gate_failed and not state.options.accept_failing_tests:
        _stop_at_checks(root, state)
        return Outcome(False, report, write_report(root, report), state, stopped_at=CHECKS, check_problems=problems)
    path = write_report(root, report)
    branch = commit = ""
    if state.options.commit:
        branch = state.options.branch
        title = f"Rebase the patch queue onto vLLM {new_pin.version} (from {old_pin_of(state).version})"
        if checks.accepted:
            title += ", checks failing"
        commit = commit_on_branch(root, branch, f"{title}\n\n{report}")
    clear(root, keep_report=True)
    git(tree, "update-ref", "-d", ORIG_REF, check=False)
    return Outcome(True, report, path, state, branch, commit, check_problems=problems)
