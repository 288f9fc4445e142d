"""What every invoke task shares: a ForkError becomes its message on stderr and its exit status."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from invoke import Exit

from vllm_fork.core.errors import ForkError, Interrupted, disk_full
from vllm_fork.core.fs import is_disk_full


@contextmanager
def user_errors():
    """Print a ForkError as the user-facing message (no traceback) and exit with its exit_code."""
    try:
        try:
            yield
        except OSError as exc:
            # A full disk can strike any write; every writer removes its temp file, so
            # saying so (not a traceback) is all that is left to do.
            if is_disk_full(exc):
                raise disk_full(exc, "a file") from None
            raise
        except KeyboardInterrupt:
            raise Interrupted(
                "interrupted. Nothing half-written was kept; the next run of the same command "
                "recovers what the interrupted step left (stale git locks, a half-applied queue)."
            ) from None
    except ForkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise Exit(code=exc.exit_code) from None


def run_or_exit(fn, *args, **kwargs):
    with user_errors():
        return fn(*args, **kwargs)
