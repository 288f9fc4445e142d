"""The tasks end quietly when their reader goes away, like any tool in a pipeline."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVOKE = Path(sys.executable).with_name("invoke")


def test_a_closed_pipe_ends_a_task_without_a_traceback():
    process = subprocess.Popen([str(INVOKE), "status"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the task writes
    _, stderr = process.communicate(timeout=120)
    assert b"Traceback" not in stderr and b"BrokenPipeError" not in stderr
    assert process.returncode == -signal.SIGPIPE
