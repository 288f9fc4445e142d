"""What the fast route handles, and what sends the build to vLLM's precompiled route."""

from __future__ import annotations

import pytest
from support.buildtrees import commit, make_tree

from vllm_fork.wheel.fast import blockers


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "tree")


def test_python_and_docs_changes_are_handled(tree):
    commit(
        tree, {"vllm/config/multimodal.py": "x = 16\n", "vllm/new_module.py": "y = 1\n", "docs/index.md": "# d\n"}, "p"
    )
    (tree / "vllm" / "__init__.py").unlink()
    commit(tree, {}, "delete a module")
    assert blockers(tree, "refs/fork/upstream", "HEAD") == []


@pytest.mark.parametrize(
    "path, reason",
    [
        ("requirements/common.txt", "requirements"),
        ("pyproject.toml", "packaging metadata"),
        ("README.md", "packaging metadata"),
        ("vllm/data/table.json", "non-Python"),
        ("vllm/third_party/deep_gemm/patched.py", "vendored"),
        ("vllm/vllm_flash_attn/extra.py", "vendored"),
        ("vllm/odd.dir/mod.py", "package"),
    ],
)
def test_other_changes_block_the_fast_route_with_a_reason(tree, path, reason):
    commit(tree, {path: "changed = True\n"}, "change")
    found = blockers(tree, "refs/fork/upstream", "HEAD")
    assert len(found) == 1 and found[0].startswith(path) and reason in found[0]


def test_a_symlink_in_the_package_blocks(tree):
    (tree / "vllm" / "link.py").symlink_to("__init__.py")
    commit(tree, {}, "symlink")
    assert any("not a regular file" in b for b in blockers(tree, "refs/fork/upstream", "HEAD"))
