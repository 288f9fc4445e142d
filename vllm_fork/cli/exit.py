"""What every invoke task shares: a ForkError becomes its message on stderr and its exit status."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from invoke import Exit

from vllm_fork.core.errors import ForkError


@contextmanager
def user_errors():
    """Print a ForkError as the user-facing message (no traceback) and exit with its exit_code."""
    try:
        yield
    except ForkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise Exit(code=exc.exit_code) from None


def run_or_exit(fn, *args, **kwargs):
    with user_errors():
        return fn(*args, **kwargs)
