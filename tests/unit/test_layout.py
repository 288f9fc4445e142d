"""The package layout holds: each package imports only lower layers, at module top, public names only."""

import ast

from vllm_fork.core.paths import REPO_ROOT

#: Highest first: a package may import itself and those after it (README, Layout).
LAYERS = ["cli", "rebase", "image", "wheel", "ops", "queue", "upstream", "core"]
PACKAGE = REPO_ROOT / "vllm_fork"


def imports():
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        inner = {
            id(node)
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(fn)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield path.relative_to(PACKAGE), node, id(node) in inner


def test_every_module_lives_in_a_layer_package():
    stray = [p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE and p.parent.name not in LAYERS]
    assert not stray and {p.name for p in PACKAGE.glob("*.py")} == {"__init__.py"}


def test_imports_go_down_the_layers_only():
    upward = []
    for rel, node, _ in imports():
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm_fork."):
            here, there = rel.parts[0], node.module.split(".")[1]
            if LAYERS.index(there) < LAYERS.index(here):
                upward.append(f"{rel}: {node.module}")
    assert upward == []


def test_no_imports_inside_functions_and_no_private_names_across_modules():
    inner = [f"{rel}:{node.lineno}" for rel, node, is_inner in imports() if is_inner]
    private = [
        f"{rel}: {alias.name}"
        for rel, node, _ in imports()
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm_fork")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert inner == [] and private == []


def test_every_module_says_its_job():
    missing = [
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert missing == []
