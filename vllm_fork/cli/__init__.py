"""The invoke tasks, one module per task group; tasks.py only assembles the collection."""

import os
import signal
import sys

# invoke turns off writing .pyc files (to keep tasks.py's folder clean), so every command
# would compile the whole package again; its modules are cached as any module is, unless
# the user asked Python not to.
if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
    sys.dont_write_bytecode = False

from invoke.main import program  # noqa: E402 (after the setting above, which its imports obey)

from vllm_fork.cli.usage import guard  # noqa: E402

# Like any Unix tool in a pipeline: `invoke export | head -1` ends quietly when the
# reader goes away, instead of a BrokenPipeError traceback.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)

# `--help` on every task and usage errors that exit 2 (see usage.py for why this is needed).
guard(program)
