"""The queue tasks: apply, export, check, status."""

from __future__ import annotations

import sys

from invoke import Exit

from vllm_fork.cli import jsonout
from vllm_fork.cli.exit import run_or_exit as _run
from vllm_fork.cli.usage import CliTask, task
from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.export import export as export_queue
from vllm_fork.queue.report import format_report
from vllm_fork.queue.status import format_status
from vllm_fork.queue.status import status as queue_status
from vllm_fork.queue.upstream_checks import format_table


class ApplyTask(CliTask):
    """`--3way` as git spells it, besides invoke's own `--three-way`."""

    def get_arguments(self, ignore_unknown_help=None):
        args = super().get_arguments(ignore_unknown_help)
        for arg in args:
            if arg.name == "three_way":
                arg.names = (*arg.names, "3way")
        return args


@task(
    klass=ApplyTask,
    help={
        "source": "where upstream comes from: pypi (default from upstream.toml) or git",
        "remote": "git remote URL or path for --source git (default: upstream.toml)",
        "force": "discard uncommitted or unexported work in build/vllm",
        "three_way": "fall back to a 3-way merge when a patch does not apply",
        "abort": "drop a stopped `git am` in build/vllm",
        "continue_": "after resolving and staging a stopped patch, apply the rest",
    },
)
def apply(c, source=None, remote=None, force=False, three_way=False, abort=False, continue_=False):
    """Make build/vllm: the pinned upstream plus every patch in patches/series."""
    if abort:
        _run(queue.abort)
        print("aborted: build/vllm is back where the stopped `git am` started; patches/ is untouched")
        return
    if continue_:
        head = _run(queue.continue_am, queue.default_tree())
    else:
        head = _run(queue.apply, source=source, force=force, three_way=three_way, remote=remote)
    print(f"build/vllm at {head}")


@task
def export(c):
    """Write the commits above upstream in build/vllm back to patches/ and the series."""
    names = _run(export_queue)
    print(f"exported {len(names)} patch(es) to patches/")
    for name in names:
        print(f"  {name}")


@task(
    help={
        "source": "pypi or git (default from upstream.toml)",
        "report": "first print each patch's added lines (code, tests, docs), upstream private names, "
        "message and policy verdict, as Markdown tables",
        "json": "print the result as JSON (schema: vllm_fork/cli/schemas/check.schema.json), the report included",
        "upstream": "also run vLLM's own pre-commit hooks (ruff, typos, mypy, tools/pre_commit/) on each "
        "patch's files as the tree stands after it, and print the per-patch table",
    }
)
def check(c, source=None, report=False, json_=False, upstream=False):
    """CI gate: series/files agree, every patch applies strictly, export round-trips, messages say why, policy."""
    result = _run(check_mod.review, source=source, upstream=upstream)
    if json_:
        jsonout.emit("check", jsonout.check_document(result))
    elif report:
        print(format_report(result.reports, result.patches, result.policy))
        print()
    if upstream and not json_:
        print("vLLM's pre-commit hooks, findings per patch:")
        print(format_table(result.hooks))
        print()
    if result.problems:
        print(f"check: {len(result.problems)} problem(s)", file=sys.stderr)
        for problem in result.problems:
            print(f"  - {problem.message}", file=sys.stderr)
        raise Exit(code=1)
    if not json_:
        print("check: ok")


@task(
    help={
        "source": "pypi or git (default from upstream.toml)",
        "json": "print it as JSON (schema: vllm_fork/cli/schemas/status.schema.json)",
    }
)
def status(c, source=None, json_=False):
    """The pin, the source, and each patch with the files it touches."""
    found = _run(queue_status, source=source)
    if json_:
        jsonout.emit("status", jsonout.status_document(found))
    else:
        print(format_status(found))
