"""vLLM's own pre-commit hooks on each patch (`invoke check --upstream`), on the real release."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.series import read_series
from vllm_fork.queue.upstream_checks import check_queue, format_table
from vllm_fork.upstream.pin import load_pin
from vllm_fork.upstream.sources import ensure_upstream
from vllm_fork_testkit.vllm_tree import ensure_tree

pytestmark = pytest.mark.slow

PATCHES = read_series(REPO_ROOT / "patches")


def test_the_queue_is_clean_under_vllms_own_hooks() -> None:
    result = check_mod.review(upstream=True)
    hook_problems = [p for p in result.problems if p.kind is check_mod.Kind.UPSTREAM]
    assert not hook_problems, "\n".join(p.message for p in hook_problems)
    assert [r.patch for r in result.hooks] == [p.name for p in PATCHES]
    ran = {hook for r in result.hooks for hook in r.ran}
    # The hooks the issue names all ran on some patch's files.
    assert {"ruff-check", "ruff-format", "typos", "mypy", "check-torch-cuda-call", "check-spdx-header"} <= ran
    table = format_table(result.hooks)
    assert all(p.name[:60] in table for p in PATCHES)


def test_the_task_prints_the_table_and_passes() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "check", "--upstream"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| patch | files |" in proc.stdout and "check: ok" in proc.stdout


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def broken_first_patch(tmp_path: Path) -> tuple[Path, str]:
    """A clone of the applied tree at upstream + patch 1, patch 1 changed to call
    torch.cuda.synchronize() and to leave a line ruff format rewrites, in a file it touches."""
    applied = ensure_tree()
    base = ensure_upstream(load_pin(REPO_ROOT), None).commit
    first = _git(applied, "rev-list", "--reverse", f"{base}..HEAD").split()[0]
    clone = tmp_path / "tree"
    subprocess.run(["git", "clone", "-q", "--shared", str(applied), str(clone)], check=True)
    _git(clone, "checkout", "-q", "-b", "broken", first)
    target = "vllm/model_executor/offloader/prefetch.py"
    assert target in _git(clone, "show", "--name-only", "--format=", "HEAD").split()
    path = clone / target
    path.write_text(path.read_text() + "\n\ndef _wait_for_copies():\n    torch.cuda.synchronize()\n    x = [1,2]\n")
    _git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-a", "--amend", "--no-edit")
    return clone, base


def test_an_introduced_violation_names_patch_file_and_check(
    broken_first_patch: tuple[Path, str], tmp_path: Path
) -> None:
    clone, base = broken_first_patch
    name = PATCHES[0].name
    (result,) = check_queue(clone, base, [name], cache=tmp_path / "cache")
    found = {(f.check, f.file.split(":")[0]) for f in result.findings}
    target = "vllm/model_executor/offloader/prefetch.py"
    assert ("check-torch-cuda-call", target) in found
    assert ("ruff-format", target) in found
    message = next(str(f) for f in result.findings if f.check == "check-torch-cuda-call")
    assert message.startswith(f"{name}: {target}:") and "check-torch-cuda-call" in message
    # A second run is answered from the cache, with the same findings.
    (again,) = check_queue(clone, base, [name], cache=tmp_path / "cache")
    assert again.findings == result.findings
