"""What every invoke task shares: a ForkError becomes a message and exit status 1."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from invoke import Exit

from vllm_fork.core.errors import ForkError


@contextmanager
def user_errors():
    """Print a ForkError as the user-facing message (no traceback) and exit 1."""
    try:
        yield
    except ForkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise Exit(code=1) from None


def run_or_exit(fn, *args, **kwargs):
    with user_errors():
        return fn(*args, **kwargs)
