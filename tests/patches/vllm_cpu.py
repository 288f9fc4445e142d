"""The child pytest's plugin (`-p vllm_cpu`, test_in_tree.py): the tree under test first on
`sys.path`, on the CPU. The steps themselves are `vllm_fork_testkit.vllm_tree`'s, which this
folder's conftest uses too.
"""

from __future__ import annotations

import os
from pathlib import Path

from vllm_fork_testkit.vllm_tree import TREE_ENV, ensure_tree, import_on_cpu, tree_path

__all__ = ["TREE_ENV", "ensure_tree", "import_on_cpu", "tree_path"]


def pytest_configure(config) -> None:
    """As a plugin, in the child pytest: the parent made the tree and names it."""
    import_on_cpu(Path(os.environ[TREE_ENV]))
