"""A rebase never lands a queue whose check or tests fail: it stops uncommitted, names the
failures, re-runs them on --continue, and commits past them only when told to (recorded)."""

from __future__ import annotations

import sys

import pytest
from invoke import Exit
from support.rebase_world import config_py, isolate, sh, two_patch_world

from vllm_fork.cli.rebase import CHECKS_EXIT, _print_outcome
from vllm_fork.rebase import run as rebase
from vllm_fork.rebase.state import CHECKS, Options, in_progress
from vllm_fork.rebase.testrun import failing_tests, run_tests
from vllm_fork.upstream.pin import load_pin

#: The fork's own test of its patch: option 5 must be ours (70 or 50), whatever upstream did.
FORK_TEST = """
from pathlib import Path

TREE = Path(__file__).resolve().parents[1] / "build" / "vllm"


def test_option_five_is_ours():
    assert "OPTION_5 = 70" in (TREE / "mini" / "config.py").read_text()


def test_run_triples():
    assert "x * 3" in (TREE / "mini" / "engine.py").read_text()
"""


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def world_with_tests(tmp_path, conflicting: bool = True):
    """Two patches (option 5 is 50) and a fork test that only a resolution making it 70 passes;
    release 1.1.0 conflicts with patch 1 (or, not `conflicting`, changes only the README)."""
    w = two_patch_world(tmp_path)
    (w.root / "tests").mkdir()
    (w.root / "tests" / "test_fork.py").write_text(FORK_TEST)
    sh(w.root, "git", "add", "-A")
    sh(w.root, "git", "commit", "-qm", "the fork's tests")
    if conflicting:
        w.release("1.1.0", {"mini/config.py": config_py({5: "OPTION_5 = 7\n"})})
    else:
        w.release("1.1.0", {"README.md": "mini, faster\n"})
    return w


def opts() -> Options:
    return Options(tests_cmd=f"{sys.executable} -m pytest -q -p no:cacheprovider tests")


def resolve_keeping_upstream(w) -> None:
    """A wrong resolution: upstream's 7 wins, the patch's intent (70) is lost; git cannot tell."""
    assert not rebase.start(w.root, to="1.1.0", options=opts()).done
    (w.tree / "mini" / "config.py").write_text(config_py({5: "OPTION_5 = 7\n", 6: "OPTION_6 = 6  # ours\n"}))
    sh(w.tree, "git", "add", "-A")


def root_state(w) -> dict:
    return {
        "patches": {p.name: p.read_bytes() for p in w.patches.iterdir()},
        "pin": (w.root / "upstream.toml").read_bytes(),
        "dockerfile": (w.root / "Dockerfile").read_bytes(),
        "head": sh(w.root, "git", "rev-parse", "HEAD"),
        "branches": sh(w.root, "git", "branch", "--list"),
    }


def test_failing_tests_stop_the_rebase_uncommitted_then_a_fix_lands_it(tmp_path, capsys):
    w = world_with_tests(tmp_path)
    before = root_state(w)
    resolve_keeping_upstream(w)

    out = rebase.continue_(w.root)

    assert not out.done and out.stopped_at == CHECKS and in_progress(w.root)
    assert "stopped, the check or the tests failed" in out.report.splitlines()[0]
    assert "`FAILED tests/test_fork.py::test_option_five_is_ours - AssertionError" in out.report
    assert "test_run_triples" not in out.report
    assert "invoke rebase --continue" in out.report and "--accept-failing-tests" in out.report
    assert root_state(w) == before  # nothing committed, nothing left rewritten
    # The test step's progress was shown as it ran.
    err = capsys.readouterr().err
    assert "tests: running `" in err and "1 failed, 1 passed" in err and "tests: exit status 1 after" in err
    with pytest.raises(Exit) as stop:
        _print_outcome(out)
    assert stop.value.code == CHECKS_EXIT

    # Without a fix the next --continue runs them again and stops again.
    again = rebase.continue_(w.root)
    assert not again.done and "test_option_five_is_ours" in again.report and root_state(w) == before

    # Uncommitted fixes are refused: the queue is exported from the commits.
    (w.tree / "mini" / "config.py").write_text(config_py({5: "OPTION_5 = 70\n", 6: "OPTION_6 = 6  # ours\n"}))
    with pytest.raises(rebase.ForkError, match=r"changes not in any commit:\n  mini/config.py"):
        rebase.continue_(w.root)
    # The fix folded into patch 1's commit, as the report says.
    sh(w.tree, "git", "commit", "-qa", "--fixup=HEAD~1")
    sh(w.tree, "git", "-c", "sequence.editor=true", "rebase", "-q", "-i", "--autosquash", "refs/fork/upstream")

    done = rebase.continue_(w.root)

    assert done.done and done.commit and not in_progress(w.root)
    assert sh(w.root, "git", "rev-parse", "--abbrev-ref", "HEAD") == "rebase/1.1.0"
    assert load_pin(w.root).version == "1.1.0"
    assert "OPTION_5 = 70" in next(w.patches.glob("0001-*")).read_text()
    assert "- tests (`" in done.report and "passed" in done.report and "Stopped" not in done.report


def test_accept_failing_tests_commits_and_records_the_failures(tmp_path):
    w = world_with_tests(tmp_path)
    resolve_keeping_upstream(w)
    assert not rebase.continue_(w.root).done

    out = rebase.continue_(w.root, accept_failing_tests=True)

    assert out.done and out.commit
    message = sh(w.root, "git", "log", "-1", "--format=%B")
    assert message.startswith("Rebase the patch queue onto vLLM 1.1.0 (from 1.0.0), checks failing")
    assert "## Committed with failures (`--accept-failing-tests`)" in message
    assert "FAILED tests/test_fork.py::test_option_five_is_ours" in message


def test_abort_from_the_stopped_tests_restores_everything_byte_for_byte(tmp_path):
    # A conflict-free start gates too: the fork's test wants 70, the patch says 50.
    w = world_with_tests(tmp_path, conflicting=False)
    before = w.snapshot()

    out = rebase.start(w.root, to="1.1.0", options=opts())

    assert not out.done and out.stopped_at == CHECKS
    assert "FAILED tests/test_fork.py::test_option_five_is_ours" in out.report
    rebase.abort(w.root)
    assert w.snapshot() == before and not in_progress(w.root)


def test_check_problems_gate_the_same_way(tmp_path):
    w = world_with_tests(tmp_path)
    (w.root / "tests" / "test_fork.py").unlink()  # no tests: only the check can fail
    (w.root / "tests" / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    resolve_keeping_upstream(w)
    # The resolution uses a name nothing defines: the tree after patch 1 does not stand.
    (w.tree / "mini" / "config.py").write_text(config_py({5: "OPTION_5 = BASE * 10\n"}))
    sh(w.tree, "git", "add", "-A")

    out = rebase.continue_(w.root)

    assert not out.done and out.stopped_at == CHECKS
    assert "`invoke check`: **1 problem(s)**" in out.report
    assert "mini/config.py:6: undefined name 'BASE'" in out.report
    assert len(out.check_problems) == 1 and "undefined name 'BASE'" in out.check_problems[0]
    # Accepted, the problems stay on the outcome (and in the committed report).
    accepted = rebase.continue_(w.root, accept_failing_tests=True)
    assert accepted.done and accepted.check_problems == out.check_problems


def test_failing_tests_are_read_from_pytests_short_summary(tmp_path, capsys):
    output = (
        "..F.E\n=== short test summary info ===\n"
        "FAILED tests/a.py::test_x - KeyError: 'bypass'\nERROR tests/b.py::test_y\n"
        "FAILED tests/a.py::test_x - KeyError: 'bypass'\n1 failed, 1 error\n"
    )
    assert failing_tests(output) == ["FAILED tests/a.py::test_x - KeyError: 'bypass'", "ERROR tests/b.py::test_y"]
    (tmp_path / "tests").mkdir()
    run = run_tests(tmp_path, "echo ok; exit 4")
    assert (run.rc, run.failed, run.summary, run.failures) == (4, True, "ok", [])
