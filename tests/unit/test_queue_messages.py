"""Messages that name what they must: a garbled patch's file and line, what `apply --force`
drops, the next command during a stopped rebase, and what `invoke status` shows of the tree."""

from __future__ import annotations

import subprocess

import pytest
from support.forkrepo import sh

from vllm_fork.core.errors import ForkError
from vllm_fork.queue import apply as queue
from vllm_fork.queue.export import export as export_queue
from vllm_fork.queue.status import status_report, tree_state
from vllm_fork.rebase.state import STATE, state_dir

WHY = "Users need this because the default is wrong for production deployments."


def two_patches(fork) -> list:
    queue.apply(fork.root)
    for i in range(2):
        fork.commit_in_tree("mini/config.py", "", f"OPTION_{i} = {i}\n", f"Option {i}", WHY)
    export_queue(tree=fork.tree, root=fork.root)
    queue.apply(fork.root)
    return sorted(fork.patches.glob("*.patch"))


def hunk_body_line(patch) -> int:
    """The 1-based number of the first line after the first hunk header."""
    lines = patch.read_text().split("\n")
    return next(i for i, line in enumerate(lines) if line.startswith("@@")) + 2


def test_a_garbled_line_in_a_patch_is_named_by_file_and_line(fork):
    patch = two_patches(fork)[1]
    head = sh(fork.tree, "git", "rev-parse", "HEAD")
    lines = patch.read_text().split("\n")
    number = hunk_body_line(patch)
    lines.insert(number - 1, "garbage an editor left")
    patch.write_text("\n".join(lines))
    with pytest.raises(ForkError) as err:
        queue.apply(fork.root)
    message = str(err.value)
    assert f"patches/{patch.name} line {number}:" in message and "is not a diff line" in message
    assert "hint:" not in message and "invoke export" in message
    assert sh(fork.tree, "git", "rev-parse", "HEAD") == head  # refused before the tree was touched


def test_a_hunk_cut_short_is_named_by_file_and_line(fork):
    patch = two_patches(fork)[0]
    lines = patch.read_text().rstrip("\n").split("\n")
    patch.write_text("\n".join(lines[:-1]) + "\n")  # the hunk's last line gone
    with pytest.raises(ForkError, match=rf"patches/{patch.name} line \d+: the hunk ends 0 old / 1 new line"):
        queue.apply(fork.root)


def test_apply_force_names_the_commits_and_edits_it_drops(fork, capfd):
    two_patches(fork)
    fork.commit_in_tree("mini/engine.py", "", "EXTRA = 1\n", "Never exported", WHY)
    (fork.tree / "mini" / "config.py").write_text("edited, not committed\n")
    capfd.readouterr()
    queue.apply(fork.root, force=True)
    err = capfd.readouterr().err
    assert "--force: discarding" in err and "Never exported" in err and "mini/config.py" in err


def test_apply_during_a_stopped_rebase_names_rebase_continue_and_abort(fork):
    patches = two_patches(fork)
    sh(fork.tree, "git", "reset", "-q", "--hard", queue.UPSTREAM_REF)
    stopped = subprocess.run(
        ["git", "-C", str(fork.tree), "am", "-q", str(patches[0]), str(patches[0])], capture_output=True
    )
    assert stopped.returncode != 0
    state_dir(fork.root).mkdir(parents=True)
    (state_dir(fork.root) / STATE).write_text("{}")  # `invoke rebase` stopped on this patch
    with pytest.raises(ForkError) as err:
        queue.apply(fork.root)
    assert "invoke rebase --continue" in str(err.value) and "invoke rebase --abort" in str(err.value)
    assert "invoke apply --abort" not in str(err.value)
    for end in (queue.abort, queue.continue_am):
        with pytest.raises(ForkError, match="belongs to `invoke rebase`"):
            end(fork.tree)
    assert (fork.tree / ".git" / "rebase-apply").exists()  # the rebase's stopped am is left to it


def test_status_shows_edits_unexported_commits_and_a_stopped_am(fork):
    patches = two_patches(fork)
    assert tree_state(fork.tree, fork.root).lines() == []
    assert "clean: it holds patches/ exactly" in status_report(fork.root)
    fork.commit_in_tree("mini/engine.py", "", "EXTRA = 1\n", "Never exported", WHY)
    (fork.tree / "mini" / "config.py").write_text("edited\n")
    report = status_report(fork.root)
    assert "uncommitted changes (1): mini/config.py" in report
    assert "commits not in patches/" in report and "Never exported" in report
    sh(fork.tree, "git", "checkout", "-q", "--", ".")
    sh(fork.tree, "git", "reset", "-q", "--hard", queue.UPSTREAM_REF)
    subprocess.run(["git", "-C", str(fork.tree), "am", "-q", str(patches[0]), str(patches[0])], capture_output=True)
    assert "a `git am` is stopped" in status_report(fork.root)
