"""Sudden death and hostile trees in build/vllm: every re-run recovers with no manual step.

Each test asserts the exit status, an actionable message (no traceback) and that
nothing was lost: patches/, the pin and the index hash the same before and after.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from support import faults
from support.forkrepo import sh

from vllm_fork.core.errors import ForkError
from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.export import export as export_queue
from vllm_fork.queue.treelock import journal_path, lock_path

WHY = "Users need this because the default is wrong for production deployments."


def series_of(fork, count: int) -> str:
    """`count` patches in patches/ (one option each); returns the applied HEAD."""
    queue.apply(fork.root)
    for i in range(count):
        fork.commit_in_tree("mini/config.py", f"OPTION_{i} = {i}\n", f"OPTION_{i} = {i + 100}\n", f"Option {i}", WHY)
    export_queue(tree=fork.tree, root=fork.root)
    return queue.apply(fork.root)


def kill_points(tree):
    """Points inside an apply: the lock taken, checkout (index.lock), git am at several patches, timed points."""
    gitdir = tree / ".git"
    points = [
        ("journal written", faults.exists(journal_path(tree))),
        ("index.lock held", faults.exists(gitdir / "index.lock")),
        ("am started", faults.exists(gitdir / "rebase-apply")),
    ]
    points += [(f"am at patch {n}", faults.am_at(tree, n)) for n in (2, 5, 9, 14, 20)]
    points += [(f"after {d}s", _after(d)) for d in (0.0, 0.2, 0.35, 0.5)]
    return points


def _after(delay):
    deadline = []

    def ready():
        if not deadline:
            deadline.append(time.monotonic() + delay)
        return time.monotonic() >= deadline[0]

    return ready


def test_a_git_killed_alone_half_way_is_recovered_by_the_next_apply(fork):
    """The apply lives on and fails: its `git checkout` died with the index locked
    (OOM-killed, or a Ctrl-C it took while the apply ignored it); the tree is half
    checked out, and only the apply's own work, so the next apply makes it again."""
    head = series_of(fork, 24)
    before = faults.precious(fork.root)
    cut_short = 0
    for _ in range(5):
        proc = faults.start("apply-force", fork.root)
        # In the remake, not in `--force`'s listing of what it discards (a `git status` there
        # holds the index lock too, and a git killed there changed nothing).
        index_lock = faults.exists(fork.tree / ".git" / "index.lock")
        remaking = faults.journal_says(journal_path(fork.tree), "apply")
        while proc.poll() is None and not (remaking() and index_lock()):
            time.sleep(0.001)
        killed = faults.kill_children(proc, "git")
        _, stderr = proc.communicate(timeout=60)
        if killed and proc.returncode != 0:
            cut_short += 1
            faults.assert_actionable(stderr, "is half-made; the next `invoke apply` makes it again")
            assert journal_path(fork.tree).exists()  # the next run knows the tree is its own
        again = faults.run("apply", fork.root)  # no --force, no manual step
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == head
        assert not journal_path(fork.tree).exists()
        assert faults.precious(fork.root) == before
    assert cut_short >= 1, "no git was caught with the index locked"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_apply_killed_at_many_points_is_recovered_by_the_next_apply(fork, sig):
    head = series_of(fork, 24)
    before = faults.precious(fork.root)
    killed = []
    for name, point in kill_points(fork.tree):
        proc = faults.start("apply-force", fork.root)
        if faults.kill_when(proc, point, sig):
            killed.append(name)
        again = faults.run("apply", fork.root)  # no --force, no manual step
        assert again.returncode == 0, f"after a kill at {name}:\n{again.stderr}"
        faults.assert_actionable(again.stderr)
        assert again.stdout.strip() == head
        assert not journal_path(fork.tree).exists()
        assert faults.precious(fork.root) == before
    assert len(killed) >= 6, f"only {killed} were reached before the apply ended"


def test_a_stale_index_lock_does_not_stop_apply(fork):
    head = series_of(fork, 2)
    (fork.tree / ".git" / "index.lock").write_bytes(b"")  # as a killed `git status` leaves it
    (fork.tree / ".git" / "refs" / "heads" / "patched.lock").write_bytes(b"")
    assert queue.apply(fork.root) == head
    assert not (fork.tree / ".git" / "index.lock").exists()


def test_head_on_upstream_or_inside_the_queue_is_not_unexported_work(fork):
    head = series_of(fork, 3)
    sh(fork.tree, "git", "reset", "-q", "--hard", "HEAD~2")  # where an interrupted apply stops
    assert queue.apply(fork.root) == head
    sh(fork.tree, "git", "reset", "-q", "--hard", queue.UPSTREAM_REF)
    assert queue.apply(fork.root) == head


def test_a_journal_left_by_a_killed_apply_means_its_half_done_am_is_redone(fork):
    head = series_of(fork, 3)
    sh(fork.tree, "git", "reset", "-q", "--hard", queue.UPSTREAM_REF)
    # A git am stopped half-way with an edited file, as a kill in the middle leaves it.
    patches = sorted(str(p) for p in fork.patches.glob("*.patch"))
    sh(fork.tree, "git", "am", "-q", patches[0])
    proc = subprocess.run(["git", "-C", str(fork.tree), "am", "-q", patches[0]], capture_output=True)
    assert proc.returncode != 0 and (fork.tree / ".git" / "rebase-apply").exists()
    (fork.tree / "mini" / "config.py").write_text("half written")
    journal_path(fork.tree).write_text(json.dumps({"step": "apply", "pid": 1}))
    assert queue.apply(fork.root) == head
    assert not (fork.tree / ".git" / "rebase-apply").exists()


def test_without_a_journal_a_stopped_am_is_still_refused(fork):
    series_of(fork, 2)
    sh(fork.tree, "git", "reset", "-q", "--hard", queue.UPSTREAM_REF)
    (fork.tree / "mini" / "config.py").write_text("my own work\n")
    with pytest.raises(ForkError, match="uncommitted changes") as err:
        queue.apply(fork.root)
    assert "mini/config.py" in str(err.value) and "--force" in str(err.value)
    assert (fork.tree / "mini" / "config.py").read_text() == "my own work\n"


def test_force_discards_a_stopped_am_even_after_an_edited_file(fork):
    head = series_of(fork, 2)
    patches = sorted(fork.patches.glob("*.patch"))
    # Stop a `git am` on its second patch, then edit the file the first one touched.
    sh(fork.tree, "git", "reset", "-q", "--hard", queue.UPSTREAM_REF)
    proc = subprocess.run(
        ["git", "-C", str(fork.tree), "am", "-q", str(patches[0]), str(patches[0])], capture_output=True
    )
    assert proc.returncode != 0
    (fork.tree / "mini" / "config.py").write_text("edited while stopped\n")
    assert subprocess.run(["git", "-C", str(fork.tree), "am", "--abort"], capture_output=True).returncode != 0
    assert queue.apply(fork.root, force=True) == head
    assert not (fork.tree / ".git" / "rebase-apply").exists()


def test_ignored_work_in_the_tree_is_refused_without_force(fork):
    head = series_of(fork, 1)
    built = fork.tree / "mini" / "_C.so"  # git-ignored by upstream's .gitignore
    built.write_bytes(b"\x7fELF compiled for an hour")
    with pytest.raises(ForkError, match="git-ignored") as err:
        queue.apply(fork.root)
    assert "mini/_C.so" in str(err.value)
    assert built.read_bytes() == b"\x7fELF compiled for an hour"
    assert queue.apply(fork.root, force=True) == head
    assert not built.exists()


def test_two_applies_in_one_clone_take_turns(fork):
    head = series_of(fork, 12)
    procs = [faults.start("apply-force", fork.root) for _ in range(3)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    for out, err, code in results:
        assert code == 0, err
        assert out.strip() == head
    assert lock_path(fork.tree).exists()


def test_abort_after_a_kill_removes_the_stale_lock(fork):
    series_of(fork, 2)
    sh(fork.tree, "git", "reset", "-q", "--hard", queue.UPSTREAM_REF)
    patches = sorted(str(p) for p in fork.patches.glob("*.patch"))
    subprocess.run(["git", "-C", str(fork.tree), "am", "-q", patches[0], patches[0]], capture_output=True)
    (fork.tree / ".git" / "index.lock").write_bytes(b"")
    result = faults.run("abort", fork.root)
    assert result.returncode == 0, result.stderr
    assert not (fork.tree / ".git" / "rebase-apply").exists()


# -- odd patch contents --


def test_a_crlf_copy_of_a_patch_is_reported_by_check_and_refused_by_apply(fork):
    series_of(fork, 1)
    patch = next(fork.patches.glob("*.patch"))
    patch.write_bytes(patch.read_bytes().replace(b"\n", b"\r\n"))
    before = faults.precious(fork.root)
    problems = [p.message for p in check_mod.check(fork.root, source="git")]
    assert any("CRLF" in p and patch.name in p for p in problems), problems
    with pytest.raises(ForkError, match="CRLF"):
        queue.apply(fork.root, force=True)
    assert faults.precious(fork.root) == before


def test_a_latin1_file_survives_export_check_and_apply(fork):
    queue.apply(fork.root)
    latin1 = "# Grüße, café\nNAME = 'Müller'\n".encode("latin-1")
    (fork.tree / "mini" / "names.py").write_bytes(latin1)
    sh(fork.tree, "git", "add", "-A")
    sh(fork.tree, "git", "commit", "-q", "-m", "Add latin-1 names\n\n" + WHY)
    export_queue(tree=fork.tree, root=fork.root)
    assert check_mod.check(fork.root, source="git") == []
    queue.apply(fork.root, force=True)
    assert (fork.tree / "mini" / "names.py").read_bytes() == latin1


@pytest.mark.slow
def test_apply_killed_at_every_30ms_step_is_recovered_by_the_next_plain_apply(fork):
    head = series_of(fork, 24)
    before = faults.precious(fork.root)
    seconds = faults.seconds_to_finish("apply", fork.root)
    killed = []
    for delay in faults.KILL_GRID:
        proc = faults.start("apply", fork.root)
        if faults.kill_after(proc, delay):
            killed.append(delay)
        again = faults.run("apply", fork.root)
        assert again.returncode == 0, f"after a kill at {delay}s:\n{again.stderr}"
        faults.assert_actionable(again.stderr)
        assert again.stdout.strip() == head
        assert not journal_path(fork.tree).exists()
        assert not (fork.tree / ".git" / "rebase-apply").exists()
        assert sh(fork.tree, "git", "status", "--porcelain") == ""
        assert faults.precious(fork.root) == before
    expected = faults.kills_expected(faults.KILL_GRID, seconds)
    assert len(killed) >= expected, f"an apply of {seconds:.2f}s ended before the kills: {killed}"
