"""What every invoke task shares: a ForkError becomes its message on stderr and its exit status."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from invoke import Exit

from vllm_fork.core.errors import ForkError, Interrupted, file_access
from vllm_fork.core.paths import cache_location


@contextmanager
def user_errors():
    """Print a ForkError as the user-facing message (no traceback) and exit with its exit_code."""
    try:
        try:
            yield
        except OSError as exc:
            # A full disk, a read-only mount or a permission can strike any write; every
            # writer removes its temp file, so saying which path and why is what is left to do.
            raise file_access(exc, str(cache_location())) from None
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
