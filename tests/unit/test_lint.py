"""CI enforces the style: ruff's lint and format checks pass on the whole tree (config in pyproject.toml)."""

import subprocess
import sys

from vllm_fork.core.paths import REPO_ROOT


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=REPO_ROOT, capture_output=True, text=True)


def test_ruff_check_is_clean():
    proc = ruff("check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_leaves_nothing_to_change():
    proc = ruff("format", "--check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr
