"""The ops key's properties on small real git trees."""

from __future__ import annotations

import pytest
from support.buildtrees import commit, fork_root, make_tree

from vllm_fork.core.errors import ForkError
from vllm_fork.ops.inputs import load_params, parse_inputs
from vllm_fork.ops.key import compute_key, patches_touching_inputs


@pytest.fixture
def root(tmp_path):
    return fork_root(tmp_path / "fork")


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "tree")


def test_python_only_patch_keeps_upstreams_key(root, tree):
    upstream = compute_key(tree, "HEAD", root)
    commit(tree, {"vllm/config/multimodal.py": "mm_processor_cache_gb = 16\n", "docs/index.md": "# more\n"}, "py")
    assert compute_key(tree, "HEAD", root).key == upstream.key


@pytest.mark.parametrize(
    "path, text",
    [
        ("csrc/ops.cu", "// changed kernel\n"),
        ("CMakeLists.txt", "project(vllm)\nadd_definitions(-DX)\n"),
        ("csrc/new_kernel.cu", "// new\n"),
        ("cmake/utils.cmake", "# changed\n"),
        ("requirements/build/cuda.txt", "torch==2.14.1\n"),
        ("vllm/envs.py", "MAX_JOBS = 4\n"),
    ],
)
def test_patch_touching_compiled_inputs_changes_the_key(root, tree, path, text):
    upstream = compute_key(tree, "HEAD", root)
    commit(tree, {path: text}, "touch")
    assert compute_key(tree, "HEAD", root).key != upstream.key


def test_only_the_build_system_table_of_pyproject_counts(root, tree):
    upstream = compute_key(tree, "HEAD", root).key
    commit(
        tree,
        {
            "pyproject.toml": '[build-system]\nrequires = ["torch == 2.14.0"]\n\n[project]\nname = "vllm"\ndescription = "y"\n'
        },
        "meta",
    )
    assert compute_key(tree, "HEAD", root).key == upstream
    commit(
        tree, {"pyproject.toml": '[build-system]\nrequires = ["torch == 2.15.0"]\n\n[project]\nname = "vllm"\n'}, "bs"
    )
    assert compute_key(tree, "HEAD", root).key != upstream


def test_build_parameters_change_the_key(root, tree):
    default = compute_key(tree, "HEAD", root).key
    arch = load_params(root, environ={"TORCH_CUDA_ARCH_LIST": "9.0"})
    assert arch["cuda_arch_list"] == "9.0"
    assert compute_key(tree, "HEAD", root, params=arch).key != default


def test_key_is_the_same_on_every_machine(tmp_path, root):
    """Same content committed by other people at other times in other places: same key."""
    a = make_tree(tmp_path / "a", author="Alice", date="2026-01-01T00:00:00+0000")
    b = make_tree(tmp_path / "elsewhere" / "b", author="Bob", date="2030-06-06T12:00:00+0200")
    assert compute_key(a, "HEAD", root).key == compute_key(b, "HEAD", root).key
    assert compute_key(a, "HEAD", root).commit != compute_key(b, "HEAD", root).commit


def test_patches_touching_inputs_names_them(root, tree):
    commit(tree, {"vllm/config/multimodal.py": "x = 1\n"}, "python only")
    commit(tree, {"csrc/ops.cu": "// k2\n", "vllm/__init__.py": "# hi\n"}, "kernel change")
    commit(
        tree,
        {
            "pyproject.toml": '[build-system]\nrequires = ["torch == 2.14.0"]\n\n[project]\nname = "vllm"\ndescription = "z"\n'
        },
        "metadata only",
    )
    touches = patches_touching_inputs(tree, "refs/fork/upstream", "HEAD", root)
    assert [(t.index, t.subject, t.paths) for t in touches] == [(2, "kernel change", ["csrc/ops.cu"])]


def test_inputs_list_rejects_paths_outside_the_tree():
    with pytest.raises(ForkError, match="plain relative path"):
        parse_inputs("../etc/passwd  # no\n")
    entries = parse_inputs("csrc/  # sources\npyproject.toml:[build-system]  # table\n")
    assert entries[0].is_dir and entries[0].covers("csrc/a/b.cu") and not entries[0].covers("csrcx")
    assert entries[1].table == "build-system" and entries[1].path == "pyproject.toml"
