"""What a new machine has: empty user caches, and vLLM's child processes that must import the
tree under test on their own (the root conftest and `vllm_tree.import_on_cpu` see to both).

Before them, five tests of test_compile_cache_key.py failed on a machine with an empty
`~/.cache/vllm`: vLLM inspects a model class in a child `python -m
vllm.model_executor.models.registry`, which found no `vllm` to import, and only a cached
answer left by an earlier run hid that.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.usercaches import USER_CACHES


def test_the_user_caches_are_this_sessions_own():
    roots = {Path(os.environ[variable]).parent for variable in USER_CACHES}
    assert len(roots) == 1, f"the user caches are spread over {roots}"
    (root,) = roots
    assert root.name.startswith("vllm-fork-test-caches-"), f"the user caches are under {root}"


def test_a_child_python_imports_the_tree_under_test(vllm_tree):
    """As vLLM's registry inspection starts it: the same interpreter and environment, no more."""
    code = "import torchvision, vllm.model_executor.models.registry as r; print(r.__file__)"
    run = subprocess.run([sys.executable, "-c", code], env=os.environ.copy(), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert Path(run.stdout.strip()).is_relative_to(vllm_tree)
