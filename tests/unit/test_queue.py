"""apply / export / check / status on small real git repositories."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from support.forkrepo import TAG, sh

from vllm_fork.core.errors import ForkError
from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.export import export as export_queue
from vllm_fork.queue.status import status_report

WHY = "Users need this because the default is wrong for production deployments."


def add_two_patches(fork):
    queue.apply(fork.root)
    fork.commit_in_tree("mini/config.py", "OPTION_3 = 3\n", "OPTION_3 = 30\n", "Raise option 3", WHY)
    fork.commit_in_tree("mini/engine.py", "x * 2", "x * 3", "[Engine] Triple instead of double", WHY)
    return export_queue(tree=fork.tree, root=fork.root)


def test_export_writes_series_in_commit_order(fork):
    names = add_two_patches(fork)
    assert names == ["0001-Raise-option-3.patch", "0002-Engine-Triple-instead-of-double.patch"]
    assert (fork.patches / "series").read_text() == "".join(n + "\n" for n in names)
    text = (fork.patches / names[1]).read_text()
    # No churn: zero commit id, no version signature, no diffstat, no numbering.
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [PATCH] [Engine] Triple instead of double" in text
    assert not text.rstrip().endswith(sh(fork.root, "git", "--version").split()[-1])
    assert " files changed" not in text and " file changed" not in text


def test_apply_then_export_is_byte_identical(fork):
    add_two_patches(fork)
    before = fork.snapshot()
    queue.apply(fork.root)
    export_queue(tree=fork.tree, root=fork.root)
    assert fork.snapshot() == before
    # The bracketed subject survives git am (it is not a [PATCH] tag).
    assert sh(fork.tree, "git", "log", "-1", "--format=%s") == "[Engine] Triple instead of double"


def test_two_independent_applies_give_the_same_head(fork, tmp_path, monkeypatch):
    add_two_patches(fork)
    head1 = queue.apply(fork.root)
    other = fork.clone(tmp_path / "other-clone")
    monkeypatch.setenv("VLLM_FORK_CACHE", str(tmp_path / "other-cache"))
    head2 = queue.apply(other.root)
    assert head1 == head2
    assert sh(other.tree, "git", "rev-parse", "refs/fork/upstream") == sh(
        fork.remote, "git", "rev-parse", f"{TAG}^{{commit}}"
    )


def test_export_removes_patches_that_left_the_series(fork):
    add_two_patches(fork)
    sh(fork.tree, "git", "reset", "-q", "--hard", "HEAD~1")
    names = export_queue(tree=fork.tree, root=fork.root)
    assert names == ["0001-Raise-option-3.patch"]
    assert sorted(p.name for p in fork.patches.iterdir()) == ["0001-Raise-option-3.patch", "series"]


def test_apply_refuses_a_dirty_tree_and_force_discards(fork):
    add_two_patches(fork)
    (fork.tree / "mini" / "engine.py").write_text("edited by hand\n")
    (fork.tree / "new_file.py").write_text("x = 1\n")
    with pytest.raises(ForkError) as err:
        queue.apply(fork.root)
    assert "mini/engine.py" in str(err.value) and "new_file.py" in str(err.value)
    assert "--force" in str(err.value)
    assert (fork.tree / "mini" / "engine.py").read_text() == "edited by hand\n"
    queue.apply(fork.root, force=True)
    assert "x * 3" in (fork.tree / "mini" / "engine.py").read_text()
    assert not (fork.tree / "new_file.py").exists()


def test_apply_refuses_to_drop_unexported_commits(fork):
    add_two_patches(fork)
    fork.commit_in_tree("mini/engine.py", "x * 3", "x * 4", "Quadruple", WHY)
    with pytest.raises(ForkError, match="not exported"):
        queue.apply(fork.root)
    assert "x * 4" in (fork.tree / "mini" / "engine.py").read_text()


def conflicting_fork(fork):
    """A queue whose second patch no longer matches upstream (edited by hand)."""
    names = add_two_patches(fork)
    path = fork.patches / names[1]
    path.write_text(path.read_text().replace("-    return x * 2", "-    return x * 5"))
    return names


def test_conflict_names_patch_file_hunk_and_next_steps(fork):
    names = conflicting_fork(fork)
    before = fork.snapshot()
    with pytest.raises(queue.PatchConflict) as err:
        queue.apply(fork.root)
    message = str(err.value)
    assert names[1] in message and "(2 of 2)" in message
    assert "mini/engine.py" in message and "@@ -1,2 +1,2 @@" in message
    assert "invoke apply --continue" in message and "git am --continue" not in message and "invoke export" in message
    assert "invoke apply --abort" in message
    # The first patch is applied, the tree is stopped at the second, patches/ untouched.
    assert sh(fork.tree, "git", "log", "-1", "--format=%s") == "Raise option 3"
    assert fork.snapshot() == before
    queue.abort(fork.tree)
    with pytest.raises(ForkError, match="nothing to abort"):
        queue.abort(fork.tree)


def test_three_way_conflict_leaves_markers_and_continue_finishes(fork):
    # "Triple" is written against upstream; "Seven", placed before it, edits the same line.
    queue.apply(fork.root)
    fork.commit_in_tree("mini/engine.py", "x * 2", "x * 3", "Triple", WHY)
    triple = (fork.patches / export_queue(tree=fork.tree, root=fork.root)[0]).read_text()
    sh(fork.tree, "git", "reset", "-q", "--hard", "refs/fork/upstream")
    fork.commit_in_tree("mini/engine.py", "x * 2", "x * 7", "Seven", WHY)
    export_queue(tree=fork.tree, root=fork.root)
    (fork.patches / "0002-Triple.patch").write_text(triple)
    with open(fork.patches / "series", "a") as series:
        series.write("0002-Triple.patch\n")
    with pytest.raises(queue.PatchConflict) as err:
        queue.apply(fork.root, three_way=True)
    assert "0002-Triple.patch (2 of 2)" in str(err.value)
    assert "even with a 3-way merge" in str(err.value) and "mini/engine.py" in str(err.value)
    engine = (fork.tree / "mini" / "engine.py").read_text()
    assert "<<<<<<<" in engine and ">>>>>>>" in engine
    (fork.tree / "mini" / "engine.py").write_text("def run(x):\n    return x * 21\n")
    sh(fork.tree, "git", "add", "mini/engine.py")
    queue.continue_am(fork.tree)
    names = export_queue(tree=fork.tree, root=fork.root)
    assert names == ["0001-Seven.patch", "0002-Triple.patch"]
    assert "+    return x * 21" in (fork.patches / names[1]).read_text()
    assert check_mod.check(fork.root) == []


def test_check_passes_on_a_sound_queue(fork):
    add_two_patches(fork)
    assert check_mod.check(fork.root) == []


def test_check_reports_every_problem_at_once(fork):
    names = add_two_patches(fork)
    p = fork.patches
    (p / "0003-empty.patch").write_text("")
    (p / "0004-corrupt.patch").write_text("not a patch at all\n")
    (p / "0005-unlisted.patch").write_text((p / names[0]).read_text())
    nobody = (p / names[1]).read_text().replace(WHY, "")
    (p / "0006-no-body.patch").write_text(nobody.replace("Triple instead", "Again"))
    stale = (p / names[0]).read_text().replace("OPTION_3 = 3", "OPTION_3 = 99")
    (p / "0007-stale.patch").write_text(stale)
    (p / "series").write_text(
        "\n".join(
            [
                names[0],
                names[1],
                names[0],
                "../outside.patch",
                "0008-missing.patch",
                "0003-empty.patch",
                "0004-corrupt.patch",
                "0006-no-body.patch",
                "0007-stale.patch",
            ]
        )
        + "\n"
    )
    before = fork.snapshot()
    found = check_mod.check(fork.root)
    problems = "\n".join(p.message for p in found)
    Kind = check_mod.Kind
    kinds = {(p.kind, p.patch) for p in found}
    assert {(Kind.UNREADABLE, "0003-empty.patch"), (Kind.UNREADABLE, "0004-corrupt.patch")} <= kinds
    assert {(Kind.MESSAGE, "0006-no-body.patch"), (Kind.APPLY, "0007-stale.patch")} <= kinds
    # An unreadable patch is not applied; no export is tried while the series is broken.
    assert not {(Kind.APPLY, "0003-empty.patch"), (Kind.APPLY, "0004-corrupt.patch")} & kinds
    assert Kind.EXPORT not in {p.kind for p in found}
    assert f"{names[0]} is listed twice" in problems
    assert "'../outside.patch' is not a file directly inside patches/" in problems
    assert "0008-missing.patch is listed but patches/0008-missing.patch does not exist" in problems
    assert "patches/0005-unlisted.patch is not listed" in problems
    assert "0003-empty.patch: the file is empty" in problems
    assert "0004-corrupt.patch: does not start with a 'From <commit>' line" in problems
    assert "0006-no-body.patch: the commit message has no body" in problems
    assert "0007-stale.patch" in problems and "does not apply cleanly" in problems
    assert "mini/config.py" in problems
    assert fork.snapshot() == before


def test_check_catches_a_patch_not_in_exported_form(fork):
    names = add_two_patches(fork)
    path = fork.patches / names[0]
    path.write_text(path.read_text() + "-- \n2.39.5\n\n")
    problems = check_mod.check(fork.root)
    assert problems == [
        check_mod.Problem(
            check_mod.Kind.EXPORT,
            names[0],
            f"{names[0]}: not in exported form (apply + export changes its bytes); run `invoke apply && invoke export`",
        )
    ]


@pytest.mark.parametrize(
    "series, expected",
    [
        ("0001-missing.patch\n", "0001-missing.patch is listed but"),
        ("/etc/passwd\n", "not a file directly inside patches/"),
    ],
)
def test_apply_rejects_a_bad_series_without_touching_the_tree(fork, series, expected):
    add_two_patches(fork)
    head = sh(fork.tree, "git", "rev-parse", "HEAD")
    (fork.patches / "series").write_text(series)
    for extra in fork.patches.glob("*.patch"):
        extra.unlink()
    with pytest.raises(ForkError, match=expected):
        queue.apply(fork.root, force=True)
    assert sh(fork.tree, "git", "rev-parse", "HEAD") == head


def test_apply_rejects_a_corrupt_patch_before_touching_the_tree(fork):
    names = add_two_patches(fork)
    head = sh(fork.tree, "git", "rev-parse", "HEAD")
    (fork.patches / names[1]).write_text("From 0000 Mon Sep 17 00:00:00 2001\nSubject: x\n\nno diff\n")
    with pytest.raises(ForkError, match="holds no diff"):
        queue.apply(fork.root, force=True)
    assert sh(fork.tree, "git", "rev-parse", "HEAD") == head


def test_status_lists_pin_and_touched_files(fork):
    add_two_patches(fork)
    report = status_report(fork.root)
    assert "upstream: vLLM 1.0.0 (tag v1.0.0" in report
    assert "source:   git" in report
    assert "0002-Engine-Triple-instead-of-double.patch" in report
    assert "[Engine] Triple instead of double" in report
    assert "mini/engine.py" in report


def test_tool_caches_in_the_tree_never_block_apply_or_build(fork):
    from vllm_fork.wheel.build import tree_commits

    add_two_patches(fork)
    # What a linter, pytest and Python leave behind while someone resolves a patch.
    for rel in (".ruff_cache/0.6/123", "mini/__pycache__/engine.cpython-311.pyc", ".pytest_cache/v/x", "stray.pyc"):
        (fork.tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (fork.tree / rel).write_text("cache\n")
    tree_commits(fork.tree)  # build: no refusal
    queue.apply(fork.root)  # apply: no refusal, and a clean tree after
    assert sh(fork.tree, "git", "status", "--porcelain", "--ignored") == ""
    # Real work still blocks, and the message says how to get past it.
    (fork.tree / "mini" / "engine.py").write_text("edited\n")
    with pytest.raises(ForkError) as err:
        tree_commits(fork.tree)
    assert "mini/engine.py" in str(err.value) and f"git -C {fork.tree} add -A" in str(err.value)
    assert "`invoke apply --force`" in str(err.value)


def test_apply_force_ends_a_stopped_am_whose_files_were_edited(fork, tmp_path):
    names = add_two_patches(fork)
    # A third patch that does not apply (patch 2 again): `git am` stops there.
    shutil.copy(fork.patches / names[1], fork.patches / "0003-again.patch")
    (fork.patches / "series").write_text(f"{names[0]}\n{names[1]}\n0003-again.patch\n")
    with pytest.raises(queue.PatchConflict):
        queue.apply(fork.root)
    # The user edits files by hand: `git am --abort` now refuses (shown on a copy of the tree).
    (fork.tree / "mini" / "engine.py").write_text("edited by hand\n")
    (fork.tree / "mini" / "config.py").write_text("edited by hand\n")
    shutil.copytree(fork.tree, tmp_path / "copy", symlinks=True)
    assert subprocess.run(["git", "-C", str(tmp_path / "copy"), "am", "--abort"], capture_output=True).returncode != 0
    (fork.patches / "0003-again.patch").unlink()
    (fork.patches / "series").write_text(f"{names[0]}\n{names[1]}\n")

    head = queue.apply(fork.root, force=True)

    assert not (fork.tree / ".git" / "rebase-apply").exists()
    assert sh(fork.tree, "git", "status", "--porcelain") == "" and sh(fork.tree, "git", "rev-parse", "HEAD") == head
    assert sh(fork.tree, "git", "log", "--format=%s", "refs/fork/upstream..HEAD").splitlines() == [
        "[Engine] Triple instead of double",
        "Raise option 3",
    ]
    with pytest.raises(ForkError, match="no stopped `git am`"):
        queue.abort(root=fork.root)
