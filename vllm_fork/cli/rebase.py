"""`invoke rebase`: the patch queue onto a new vLLM release (see docs/rebase.md)."""

from __future__ import annotations

import sys

from invoke import Exit

from vllm_fork.cli import jsonout
from vllm_fork.cli.exit import user_errors
from vllm_fork.cli.usage import UsageError, task
from vllm_fork.core.paths import default_tree
from vllm_fork.queue.treelock import locked
from vllm_fork.rebase import run as rebase_mod
from vllm_fork.rebase.state import CHECKS, Options

#: Exit status when the rebase stopped at a conflict (distinct from errors, for the bot).
CONFLICT_EXIT = 2
#: Exit status when every patch applied but `invoke check` or the tests failed: nothing was committed.
CHECKS_EXIT = 3


def _print_outcome(outcome: rebase_mod.Outcome) -> None:
    print(outcome.report)
    print(f"report: {outcome.report_path}")
    if outcome.done:
        if outcome.commit:
            print(f"committed {outcome.commit[:12]} on branch {outcome.branch}")
        return
    if outcome.stopped_at == CHECKS:
        print(
            "error: the check or the tests failed (listed above): nothing was committed. Fix them in "
            "build/vllm and run `invoke rebase --continue`, or `invoke rebase --abort`.",
            file=sys.stderr,
        )
        raise Exit(code=CHECKS_EXIT)
    raise Exit(code=CONFLICT_EXIT)


# Long options only: invoke's automatic short flags gave --accept-failing-tests the flag `--`
# (every letter before its first dash was taken).
@task(
    auto_shortflags=False,
    help={
        "to": "a release version (X.Y.Z), its tag (vX.Y.Z) or, with --source git, a full commit id",
        "latest": "the newest vLLM release on the package index",
        "continue_": "after resolving and staging the stopped patch in build/vllm: go on",
        "abort": "put build/vllm, patches/ and upstream.toml back exactly as before",
        "source": "pypi or git (default from upstream.toml)",
        "remote": "git remote URL or path for --source git",
        "skip_tests": "do not run the test suite after the rebase",
        "accept_failing_tests": "commit even though `invoke check` or the tests failed (the report and the "
        "commit message list the failures); without it a failure stops the rebase uncommitted",
        "tests_cmd": "the test command to run (default: pytest -m 'not slow')",
        "no_commit": "leave the result uncommitted in the checkout instead of on rebase/<version>",
        "replace_branch": "rebuild rebase/<version> if it already exists (the bot does)",
        "seed": "when the compiled inputs changed, seed the ops cache from the new release's official wheel",
        "survey": "only forecast every patch on the new upstream (changes nothing; report in build/rebase-survey.md)",
        "json": "with --survey: print the forecast as JSON (schema: vllm_fork/cli/schemas/rebase-survey.schema.json)",
    },
)
def rebase(
    c,
    to=None,
    latest=False,
    continue_=False,
    abort=False,
    source=None,
    remote=None,
    skip_tests=False,
    tests_cmd=None,
    no_commit=False,
    replace_branch=False,
    seed=False,
    survey=False,
    accept_failing_tests=False,
    json_=False,
):
    """Rebase patches/ onto a new upstream (forecast first); classify every patch; commit on rebase/<version>."""
    with user_errors():
        if json_ and not survey:
            raise UsageError("--json goes with --survey (the forecast); a rebase itself reports in build/")
        # A rebase killed half-way leaves git's lock files in build/vllm; taking the tree's
        # lock removes them (and waits for a build running there). The lock is not held while
        # the rebase runs: its test command may run builds of its own.
        with locked(default_tree(), "rebase-recover"):
            pass
        if abort:
            with locked(default_tree(), "rebase-abort"):
                restored = rebase_mod.abort()
            print(
                "rebase aborted: build/vllm, patches/ and upstream.toml are as they were"
                + (f" (restored {', '.join(restored)})" if restored else "")
            )
            return
        if survey:
            result, text, path = rebase_mod.survey_only(to=to, latest=latest, source=source, remote=remote)
            if json_:
                jsonout.emit("rebase-survey", jsonout.survey_document(result, path))
            else:
                print(text)
                print(f"report: {path}")
            if result.failing():
                raise Exit(code=CONFLICT_EXIT)
            return
        if continue_:
            outcome = rebase_mod.continue_(accept_failing_tests=accept_failing_tests)
        else:
            options = Options(
                run_tests=not skip_tests,
                tests_cmd=tests_cmd or "",
                commit=not no_commit,
                replace_branch=replace_branch,
                seed=seed,
                accept_failing_tests=accept_failing_tests,
            )
            outcome = rebase_mod.start(to=to, latest=latest, source=source, remote=remote, options=options)
    _print_outcome(outcome)
