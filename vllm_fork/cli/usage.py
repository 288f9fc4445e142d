"""Arguments that cannot be mistaken: `--help` on every task, `-v/-q`, and usage errors that exit 2.

invoke 3.0 takes `--help` (or any option) given where a task still waits for a
positional value as that value (pyinvoke/invoke#982): `invoke ops.publish --help`
published into a folder named `--help`. And it exits 1 on a usage error, as a
failure does. So:

- `guard(program)` makes the running invoke program print a task's help for
  `-h`/`--help` anywhere among its arguments (before a `--`), and turn invoke's
  own usage errors (an unknown option, a missing value) into exit status 2;
- `CliTask`, the class of every task, refuses a value that starts with `-` (a
  path, a remote, a version is never one: `./-x` names such a file) with exit
  status 2, and adds `-v/--verbose` and `-q/--quiet` (the log level, core/log.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import invoke
from invoke import Exit, Program, Task
from invoke.exceptions import ParseError
from invoke.parser import Argument

from vllm_fork.cli.exit import user_errors
from vllm_fork.core import log
from vllm_fork.core.errors import UsageError

__all__ = ["CliTask", "UsageError", "guard", "task"]

HELP_FLAGS = ("-h", "--help")
#: Added to every task: name -> (short flag, help).
LEVEL_FLAGS = {
    "verbose": ("v", "more detail on stderr"),
    "quiet": ("q", "only warnings and errors on stderr"),
}


def guard(program: Program) -> None:
    """Make `program` (invoke's, running now) treat `--help` and usage errors as described above."""
    parse_tasks = program.parse_tasks

    def parse_tasks_strictly() -> None:
        program.parser = program._make_parser()
        name = _task_asking_for_help(program)
        if name is not None:
            program.print_task_help(name)
            raise Exit(code=0)
        try:
            parse_tasks()
        except ParseError as exc:
            hint = "`invoke --list` lists the tasks; `invoke <task> --help` shows a task's options"
            raise Exit(f"error: {exc}\n({hint})", code=UsageError.exit_code) from None

    program.parse_tasks = parse_tasks_strictly  # type: ignore[method-assign]


def _task_asking_for_help(program: Program) -> str | None:
    """The task whose arguments hold `-h`/`--help`, or None."""
    contexts = program.parser.contexts
    current = None
    for token in program.core.unparsed:
        if token == "--":
            break
        if token in contexts:
            current = token
        elif token in HELP_FLAGS and current is not None:
            return current
    return None


class CliTask(Task):
    """A task with `-v/-q`, whose values never start with `-`, and whose errors are messages."""

    def argspec(self, body: Callable) -> inspect.Signature:
        sig = super().argspec(body)
        levels = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=False) for n in LEVEL_FLAGS]
        return sig.replace(parameters=[*sig.parameters.values(), *levels])

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Argument]:
        args = super().get_arguments(ignore_unknown_help)
        for arg in args:
            # invoke picks a short flag from any character of the name, '-' too: `--` would be one.
            arg.names = tuple(n for n in arg.names if len(n) > 1 or n.isalnum())
        taken = {n for a in args for n in a.names if a.name not in LEVEL_FLAGS}
        for arg in args:
            if arg.name in LEVEL_FLAGS:
                short, arg.help = LEVEL_FLAGS[arg.name]
                arg.names = (arg.name, short) if short not in taken else (arg.name,)
        return args

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        verbose, quiet = kwargs.pop("verbose", False), kwargs.pop("quiet", False)
        with user_errors():
            if verbose and quiet:
                raise UsageError("-v/--verbose and -q/--quiet exclude each other")
            for name, value in kwargs.items():
                for item in value if isinstance(value, list) else [value]:
                    check_value(name, item)
            if verbose or quiet:
                log.set_level(log.VERBOSE if verbose else log.QUIET)
        return super().__call__(*args, **kwargs)


def task(*args: Any, **kwargs: Any) -> Any:
    """invoke's `@task`, making a CliTask (or the `klass` given, a CliTask subclass)."""
    kwargs.setdefault("klass", CliTask)
    return invoke.task(*args, **kwargs)


def check_value(name: str, value: object) -> None:
    """A UsageError for a value that starts with `-`: an option given where a value was due."""
    if isinstance(value, str) and value.startswith("-"):
        flag = "--" + name.strip("_").replace("_", "-")
        raise UsageError(
            f"{flag} got {value!r}, which looks like an option, not a value. "
            f"For a path that starts with '-', write ./{value}; for help, `invoke <task> --help`."
        )
