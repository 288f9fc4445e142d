"""The invoke layer: every task is registered, and flags read as documented."""

from __future__ import annotations

import subprocess
import sys

from vllm_fork.core.paths import REPO_ROOT


def invoke(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return proc.stdout


def test_every_documented_task_is_registered():
    listed = invoke("--list")
    for name in (
        "apply",
        "export",
        "check",
        "status",
        "build",
        "verify",
        "ops.key",
        "ops.seed",
        "ops.publish",
        "docker",
        "rebase",
    ):
        assert f"  {name} " in listed or f"  {name}\n" in listed, name
        assert f"invoke {name}" in (REPO_ROOT / "README.md").read_text(), f"README lacks `invoke {name}`"


def test_apply_takes_git_s_own_3way_spelling():
    assert "--3way, --three-way" in invoke("apply", "--help")
