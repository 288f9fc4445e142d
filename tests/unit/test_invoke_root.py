"""Plain `invoke` under a fork's build/ runs the fork's tasks (the line scripts/setup.sh installs)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from vllm_fork.core.invoke_root import PTH_LINE, PTH_NAME, fork_root_above, search_from_fork_root

INVOKE = Path(sys.executable).parent / "invoke"


def a_fork(tmp_path: Path) -> Path:
    """A fork's root with vLLM's tree under build/, which has a tasks.py of its own."""
    root = tmp_path / "fork"
    (root / "patches").mkdir(parents=True)
    (root / "upstream.toml").write_text("")
    (root / "tasks.py").write_text(
        "from invoke import task\n\n\n@task\ndef where(c):\n    '''The fork's task.'''\n    print('the fork')\n"
    )
    tree = root / "build" / "vllm" / "vllm"
    (tree / "config").mkdir(parents=True)
    (tree / "tasks.py").write_text("raise SystemExit('vLLM tasks.py was loaded')\n")
    return root


def test_the_virtualenv_holds_the_line_scripts_setup_sh_writes():
    assert (Path(sysconfig.get_path("purelib")) / PTH_NAME).read_text() == PTH_LINE


def test_invoke_in_vllms_tree_runs_the_forks_tasks(tmp_path):
    root = a_fork(tmp_path)
    proc = subprocess.run(
        [str(INVOKE), "where"], cwd=root / "build" / "vllm" / "vllm" / "config", capture_output=True, text=True
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "the fork\n", "")


def test_a_search_root_or_collection_given_by_the_user_stands(tmp_path):
    root = a_fork(tmp_path)
    proc = subprocess.run(
        [str(INVOKE), "--search-root", str(root / "build" / "vllm" / "vllm"), "--list"],
        cwd=root / "build" / "vllm",
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "vLLM tasks.py was loaded" in proc.stderr


@pytest.mark.parametrize(
    "argv",
    [["python", "-m", "pytest"], ["/x/invoke", "-c", "other"], ["/x/inv", "--search-root=/y", "check"], []],
)
def test_only_a_plain_invoke_is_redirected(tmp_path, monkeypatch, argv):
    root = a_fork(tmp_path)
    monkeypatch.chdir(root / "build" / "vllm")
    before = list(argv)
    search_from_fork_root(argv)
    assert argv == before


def test_the_root_is_found_only_under_a_forks_build(tmp_path):
    root = a_fork(tmp_path)
    assert fork_root_above(root / "build" / "vllm" / "vllm" / "config") == root
    assert fork_root_above(root / "build") is None  # build/ itself: invoke finds the fork's tasks.py
    assert fork_root_above(root / "patches") is None
    (root / "upstream.toml").unlink()  # another project's build/ is left alone
    assert fork_root_above(root / "build" / "vllm") is None
