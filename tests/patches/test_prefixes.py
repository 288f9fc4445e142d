"""Every prefix of the queue passes its own in-tree tests, on the CPU.

vLLM asks that each patch of a series apply, import and pass its tests on its own; `invoke
check` proves the first two statically for every prefix. This runs the third: for each
patch *i*, the tree at upstream + patches 1..*i* (the applied tree's commit *i*, checked out
in a scratch worktree) and, in one child pytest, the in-tree test modules that patches
1..*i* add or change, as that prefix has them. A patch whose tests need a later patch, or
whose code breaks an earlier patch's tests, fails here by name.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from vllm_cpu import failed_cases, run_in_tree

from vllm_fork.queue.series import read_series

REPO = Path(__file__).resolve().parents[2]
PATCHES = read_series(REPO / "patches")
# A test module of the vLLM tree: tests/**/test_*.py.
TEST_MODULE = re.compile(r"^diff --git a/\S+ b/(tests/\S*/test_[^/\s]+\.py)$", re.M)


def in_tree_tests_through(index: int) -> list[str]:
    """The in-tree test modules patches 1..index add or change."""
    found: set[str] = set()
    for patch in PATCHES[:index]:
        found.update(TEST_MODULE.findall(patch.read_text()))
    return sorted(found)


@pytest.fixture(scope="module")
def prefix_tree(vllm_tree: Path, tmp_path_factory) -> Path:
    """A scratch clone of the applied tree (its objects shared, nothing registered in it),
    checked out at each prefix in turn."""
    path = tmp_path_factory.mktemp("prefix") / "tree"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(vllm_tree), str(path)], check=True)
    return path


@pytest.mark.parametrize("index", range(1, len(PATCHES) + 1), ids=[p.name[:60] for p in PATCHES])
def test_prefix_passes_its_own_tests(vllm_tree: Path, prefix_tree: Path, index: int, tmp_path: Path) -> None:
    modules = in_tree_tests_through(index)
    if not modules:
        pytest.skip("no in-tree test module up to this patch")
    commit = f"HEAD~{len(PATCHES) - index}"
    subprocess.run(
        ["git", "-C", str(prefix_tree), "checkout", "-q", "--force", "--detach", _rev(vllm_tree, commit)], check=True
    )
    root, output = run_in_tree(prefix_tree, modules, tmp_path / "report.xml")
    cases = list(root.iter("testcase"))
    failed = failed_cases(cases)
    assert cases and not failed, f"prefix through {PATCHES[index - 1].name}: {failed or 'no test ran'}\n{output}"


def _rev(tree: Path, rev: str) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", rev], check=True, capture_output=True, text=True
    ).stdout.strip()
