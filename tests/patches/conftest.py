"""Run these tests against the patched vLLM Python tree, on the CPU.

The tree is `$VLLM_FORK_TREE`, else `build/vllm` -- made with the real `apply`
(the patch queue on the pinned upstream) by a session fixture before the first
test here, never at collection. After changing patches/, run `invoke apply`
(or delete build/vllm) so these tests see the change. Runtime dependencies:
`requirements/vllm-cpu-tests.txt`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_fork_testkit.vllm_tree import ensure_tree, import_on_cpu, tree_path


@pytest.fixture(scope="session", autouse=True)
def vllm_tree() -> Path:
    """The patched tree, made if missing and first on `sys.path`."""
    tree = ensure_tree()
    import_on_cpu(tree)
    return tree


def pytest_report_header(config) -> str:
    return f"vLLM tree under test: {tree_path()}"
