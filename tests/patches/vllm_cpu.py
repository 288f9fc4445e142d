"""The child pytest's plugin (`-p vllm_cpu`): the tree under test first on `sys.path`, on the
CPU; and `run_in_tree`, which starts that child (test_in_tree.py, test_prefixes.py). The steps themselves are `vllm_fork_testkit.vllm_tree`'s, which this
folder's conftest uses too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from vllm_fork_testkit.vllm_tree import TREE_ENV, ensure_tree, import_on_cpu, tree_path

__all__ = ["TREE_ENV", "ensure_tree", "import_on_cpu", "tree_path"]


def pytest_configure(config) -> None:
    """As a plugin, in the child pytest: the parent made the tree and names it."""
    import_on_cpu(Path(os.environ[TREE_ENV]))


def run_in_tree(tree: Path, modules: list[str], junit: Path) -> tuple[ET.Element, str]:
    """Run vLLM-tree test `modules` of `tree` in one child pytest (one torch + vLLM import),
    with this module as its plugin; its JUnit XML root and the tail of its output."""
    here = str(Path(__file__).parent)
    env = {
        **os.environ,
        TREE_ENV: str(tree),
        "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
    }
    # --noconftest: vLLM's tests/conftest.py needs its whole test stack; these modules need none of it.
    # -p no:cacheprovider: write nothing into the tree under test. -p vllm_cpu: the tree first on sys.path, on the CPU.
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "--noconftest", "-p", "no:cacheprovider", "-p", "vllm_cpu"]
    run = subprocess.run([*argv, f"--junitxml={junit}", *modules], cwd=tree, env=env, capture_output=True, text=True)
    output = (run.stdout + run.stderr)[-8000:]
    assert junit.is_file(), f"the child pytest wrote no report (exit {run.returncode}):\n{output}"
    return ET.parse(junit).getroot(), output


def failed_cases(cases: list[ET.Element]) -> list[str | None]:
    """The names of the JUnit test cases that failed or erred."""
    return [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
