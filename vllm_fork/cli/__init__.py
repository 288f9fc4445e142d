"""The invoke tasks, one module per task group; tasks.py only assembles the collection."""

import signal

# Like any Unix tool in a pipeline: `invoke export | head -1` ends quietly when the
# reader goes away, instead of a BrokenPipeError traceback.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
