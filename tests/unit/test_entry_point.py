"""The fork's tasks are reachable from inside vLLM's tree, where plain `invoke` finds vLLM's vllm/tasks.py."""

from __future__ import annotations

import os
import subprocess
import sys

from vllm_fork.core.paths import REPO_ROOT


def test_the_fork_tasks_run_from_a_folder_holding_another_tasks_py_and_a_logging_module(tmp_path):
    # As build/vllm/vllm/config: vLLM's tasks.py above, its config/logging.py beside.
    (tmp_path / "tasks.py").write_text("raise SystemExit('vLLM tasks.py was loaded')\n")
    here = tmp_path / "config"
    here.mkdir()
    (here / "logging.py").write_text("raise SystemExit('vLLM logging.py shadowed the standard one')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "vllm_fork.cli", "--list"], cwd=here, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    for task in ("apply", "build", "verify", "status"):
        assert task in proc.stdout
