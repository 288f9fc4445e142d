"""The invoke tasks, one module per task group; tasks.py only assembles the collection."""

import signal

from invoke.main import program

from vllm_fork.cli.usage import guard

# Like any Unix tool in a pipeline: `invoke export | head -1` ends quietly when the
# reader goes away, instead of a BrokenPipeError traceback.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)

# `--help` on every task and usage errors that exit 2 (see usage.py for why this is needed).
guard(program)
