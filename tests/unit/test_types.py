"""CI enforces the types: mypy, configured in pyproject.toml ([tool.mypy]), is clean on vllm_fork/."""

import subprocess
import sys

from vllm_fork.core.paths import REPO_ROOT


def mypy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=REPO_ROOT, capture_output=True, text=True)


def test_mypy_is_clean_on_the_package():
    proc = mypy()  # the files and settings come from pyproject.toml
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_with_this_configuration_reports_a_wrong_type(tmp_path):
    """The gate is live: the same settings reject a call with the wrong type into the package."""
    probe = tmp_path / "probe.py"
    probe.write_text("from vllm_fork.core.fs import sha256_file\n\nsha256_file(42)\n")
    proc = mypy(str(probe))
    assert proc.returncode == 1 and "arg-type" in proc.stdout, proc.stdout + proc.stderr
