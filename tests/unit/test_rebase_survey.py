"""The rebase forecast, upstream blame, Upstream-Status, content loss and refreshed/changed, on small real repos."""

from __future__ import annotations

import pytest
from support.rebase_world import BASE_FILES, config_py, isolate, make_world, sh, two_patch_world, write_files

from vllm_fork.core.paths import cache_dir
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.export import export
from vllm_fork.queue.status import status_report
from vllm_fork.rebase import run as rebase
from vllm_fork.rebase.refresh import CHANGED, REFRESHED, UNCHANGED
from vllm_fork.rebase.report import git_output_without_hints
from vllm_fork.rebase.state import Options
from vllm_fork.upstream.pin import load_pin


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def opts(**kw) -> Options:
    return Options(run_tests=False, **kw)


def upstream_commit(w, files: dict[str, str], subject: str, delete: tuple[str, ...] = ()) -> str:
    """One commit on the remote's main, as upstream developers make them."""
    write_files(w.remote, files)
    for path in delete:
        sh(w.remote, "git", "rm", "-q", path)
    sh(w.remote, "git", "add", "-A")
    sh(w.remote, "git", "commit", "-qm", subject)
    return sh(w.remote, "git", "rev-parse", "HEAD")


def five_patch_world(tmp_path):
    """Patches: config OPTION_5 (clean), engine run() (conflict), config OPTION_30 (3-way),
    README (already upstream), setup.py (target gone), and one on top of run()'s patch."""
    w = make_world(tmp_path)
    w.add_patch(
        "mini/config.py", "OPTION_5 = 5\n", "OPTION_5 = 50\n", "Raise option 5", "Production needs ten times it."
    )
    w.add_patch(
        "mini/engine.py", "return x * 2", "return x * 3", "Triple in run()", "Our batches need a factor of three."
    )
    w.add_patch(
        "mini/config.py", "OPTION_30 = 30\n", "OPTION_30 = 300\n", "Raise option 30", "The pool needs it raised."
    )
    w.add_patch("README.md", "mini\n", "mini, the fork\n", "Name the fork", "Readers must know which build this is.")
    w.add_patch(
        "setup.py", "name='mini'", "name='mini-fork'", "Name the package", "Wheels must not clash with upstream's."
    )
    w.add_patch(
        "mini/engine.py", "return x * 3", "return x * 3  # tuned", "Mark the factor", "Says the factor is tuned."
    )
    return w


def test_survey_reports_every_outcome_at_once_with_blame_and_changes_nothing(tmp_path):
    w = five_patch_world(tmp_path)
    upstream_commit(w, {"README.md": "mini, the fork\n"}, "Name the fork upstream too")
    upstream_commit(w, {"mini/config.py": config_py({28: "OPTION_28 = 2800\n"})}, "Tune option 28")
    upstream_commit(
        w, {"mini/engine.py": BASE_FILES["mini/engine.py"].replace("x * 2", "x * 4")}, "Quadruple run() for speed"
    )
    upstream_commit(w, {"pyproject.toml": "[project]\nname = 'mini'\n"}, "Move to pyproject", delete=("setup.py",))
    upstream_commit(w, {"csrc/ops.cu": "// kernel v2\n"}, "Faster kernel")
    sh(w.remote, "git", "tag", "-a", "v1.1.0", "-m", "1.1.0")
    before = w.snapshot()

    survey, text, path = rebase.survey_only(w.root, to="1.1.0")

    got = [(f.subject, f.outcome) for f in survey.forecasts]
    assert got == [
        ("Raise option 5", "clean"),
        ("Triple in run()", "conflict"),
        ("Raise option 30", "3-way"),
        ("Name the fork", "dropped"),
        ("Name the package", "target gone"),
        ("Mark the factor", "conflict"),
    ]
    conflict = survey.forecasts[1]
    assert list(conflict.files) == ["mini/engine.py"] and conflict.files["mini/engine.py"][0].startswith("@@ -1,")
    # Blame names the upstream commit that touched the conflicting lines, and only it.
    assert any("Quadruple run() for speed" in b for b in conflict.blame)
    assert not any("Tune option 28" in b or "Faster kernel" in b for b in conflict.blame)
    assert any("Tune option 28" in b for b in survey.forecasts[2].blame)
    # The last patch depends on the conflicting one: tried alone too, and said so.
    assert survey.forecasts[5].alone == "conflict" and survey.forecasts[1].alone == ""
    assert "alone on the new upstream: conflict" in text
    assert "3 patch(es) will need a hand" in text and "## Upstream blame" in text
    assert path == w.root / "build" / "rebase-survey.md" and path.read_text() == text
    # Nothing changed: the queue, the pin, the tree; the cache gains nothing on a second survey.
    assert w.snapshot() == before
    objects = sh(cache_dir() / "upstream" / "vllm.git", "git", "count-objects", "-v")
    refs = sh(cache_dir() / "upstream" / "vllm.git", "git", "for-each-ref")
    rebase.survey_only(w.root, to="1.1.0")
    assert sh(cache_dir() / "upstream" / "vllm.git", "git", "count-objects", "-v") == objects
    assert sh(cache_dir() / "upstream" / "vllm.git", "git", "for-each-ref") == refs


def test_rebase_onto_a_commit_of_main_with_forecast_blame_content_loss_and_changed(tmp_path):
    """The git source, several commits after the tag on main, one conflicting with a patch."""
    w = two_patch_world(tmp_path)
    upstream_commit(w, {"README.md": "mini, nightly\n"}, "Docs: nightly")
    upstream_commit(
        w,
        {"mini/engine.py": "def run(x):\n    check(x)\n    return x * 4\n\n\ndef stop():\n    return None\n"},
        "Check inputs and quadruple run()",
    )
    upstream_commit(w, {"mini/config.py": config_py({3: "OPTION_3 = 33\n"})}, "Raise option 3")
    target = upstream_commit(w, {"csrc/ops.cu": "// kernel v3\n"}, "Kernel v3")

    out = rebase.start(w.root, to=target, source="git", options=opts())

    assert not out.done
    assert [(r.subject, r.outcome) for r in out.state.results] == [
        ("Raise option 5 to 50", "3-way"),
        ("Triple in run()", "conflict"),
    ]
    report = out.report
    assert report.index("## Forecast") < report.index("## Conflict")
    assert "Check inputs and quadruple run()" in report.split("## Upstream blame")[1]
    assert "Raise option 3" in report.split("## Upstream blame")[1]  # the 3-way hunk's neighbour
    # Resolve by hand, dropping upstream's check(x): the content-loss check must say so.
    (w.tree / "mini" / "engine.py").write_text("def run(x):\n    return x * 3\n\n\ndef stop():\n    return None\n")
    sh(w.tree, "git", "add", "-A")

    out = rebase.continue_(w.root)

    assert out.done
    results = out.state.results
    assert [r.outcome for r in results] == ["3-way", "resolved by hand"]
    assert results[1].lost and "check(x)" in results[1].lost[0]
    assert "## Upstream content loss" in out.report and "`check(x)`" in out.report
    # The forecast is updated: what each patch came to, beside what was forecast.
    assert "| 2 | `" in out.report and "| **conflict** | conflict, resolved by hand |" in out.report
    # Refreshed (context moved) vs changed (the resolution changed a line the reviewer must read).
    assert [r.diff_change for r in results] == [REFRESHED, CHANGED]
    pin = load_pin(w.root)
    assert pin.commit == target and pin.tag == ""
    assert check_mod.check(w.root) == []


def test_changed_patch_is_marked_changed(tmp_path):
    w = two_patch_world(tmp_path)
    w.release("1.1.0", {"mini/engine.py": BASE_FILES["mini/engine.py"].replace("x * 2", "x * 4")})
    out = rebase.start(w.root, to="1.1.0", options=opts())
    (w.tree / "mini" / "engine.py").write_text(BASE_FILES["mini/engine.py"].replace("x * 2", "x * 5"))
    sh(w.tree, "git", "add", "-A")
    out = rebase.continue_(w.root)
    assert [r.diff_change for r in out.state.results] == [UNCHANGED, CHANGED]
    assert "1 changed" in out.report and "- changed: `0002-" in out.report


def reword_last(w, message: str) -> None:
    sh(w.tree, "git", "commit", "-q", "--amend", "-m", message)
    export(w.tree, w.root)


def test_upstream_status_trailer_checked_by_gits_rule_and_shown(tmp_path):
    w = two_patch_world(tmp_path)
    subject = "Triple in run()"
    why = "Our batches need a factor of three to keep the GPU busy."
    reword_last(w, f"{subject}\n\n{why}\n\nUpstream-Status: submitted https://github.com/vllm-project/vllm/pull/1\n")
    assert check_mod.check(w.root) == []
    status = status_report(w.root)
    assert "Upstream-Status: submitted https://github.com/vllm-project/vllm/pull/1" in status
    assert "Upstream-Status: carry (no Upstream-Status trailer)" in status

    reword_last(w, f"{subject}\n\nUpstream-Status: carry\n\n{why}\n")  # not the last paragraph: not a trailer
    problems = [p.message for p in check_mod.check(w.root)]
    assert len(problems) == 1 and "not a trailer" in problems[0] and "last paragraph" in problems[0]

    reword_last(w, f"{subject}\n\n{why}\n\nUpstream-Status: someday\n")
    assert any("unknown status 'someday'" in p.message for p in check_mod.check(w.root))
    reword_last(w, f"{subject}\n\n{why}\n\nUpstream-Status: submitted soon\n")
    assert any("needs the URL" in p.message for p in check_mod.check(w.root))
    reword_last(w, f"{subject}\n\n{why}\n\nUpstream-Status: drop-after soon\n")
    assert any("release version" in p.message for p in check_mod.check(w.root))


def test_drop_after_drops_the_patch_with_its_reason(tmp_path):
    w = two_patch_world(tmp_path)
    why = "Our batches need a factor of three to keep the GPU busy."
    reword_last(w, f"Triple in run()\n\n{why}\n\nUpstream-Status: drop-after 1.1.0\n")
    sh(w.root, "git", "commit", "-qam", "status")
    # Upstream 1.1.0 fixed it its own way: the patch would conflict, but it is dropped first.
    w.release("1.1.0", {"mini/engine.py": BASE_FILES["mini/engine.py"].replace("x * 2", "x * 4")})

    survey, text, _ = rebase.survey_only(w.root, to="1.1.0")
    assert [f.outcome for f in survey.forecasts] == ["clean", "dropped"]
    out = rebase.start(w.root, to="1.1.0", options=opts())

    assert out.done and [r.outcome for r in out.state.results] == ["clean", "dropped"]
    reason = "Upstream-Status: drop-after 1.1.0, and the new upstream is 1.1.0"
    assert reason in out.state.results[1].notes and reason in out.report.split("## Dropped patches")[1]
    assert len(list(w.patches.glob("*.patch"))) == 1


def test_drop_after_a_commit_holds_once_upstream_contains_it(tmp_path):
    w = two_patch_world(tmp_path)
    fix = upstream_commit(w, {"README.md": "mini, fixed\n"}, "The fix the fork carried")
    why = "Our batches need a factor of three to keep the GPU busy."
    reword_last(w, f"Triple in run()\n\n{why}\n\nUpstream-Status: drop-after {fix}\n")
    sh(w.root, "git", "commit", "-qam", "status")
    assert check_mod.check(w.root) == []
    later = upstream_commit(w, {"csrc/ops.cu": "// kernel v9\n"}, "Later work")

    survey, _, _ = rebase.survey_only(w.root, to=later, source="git")

    assert [f.outcome for f in survey.forecasts] == ["clean", "dropped"]
    assert f"an ancestor of the new upstream {later[:12]}" in survey.forecasts[1].notes[0]


def test_a_target_an_earlier_failing_patch_creates_is_a_follow_on_not_an_upstream_deletion(tmp_path):
    w = make_world(tmp_path)
    # Patch 1 triples run(), raises option 20 and creates mini/streams.py; patch 2 edits that
    # new file and option 21 (whose context is patch 1's option 20).
    write_files(w.tree, {"mini/streams.py": "def ring():\n    return 3\n"})
    (w.tree / "mini" / "config.py").write_text(config_py({20: "OPTION_20 = 200\n"}))
    (w.tree / "mini" / "engine.py").write_text(BASE_FILES["mini/engine.py"].replace("x * 2", "x * 3"))
    sh(w.tree, "git", "add", "-A")
    sh(w.tree, "git", "commit", "-qm", "Stream through a ring\n\nThe pool needs a ring of copy streams.\n")
    (w.tree / "mini" / "config.py").write_text(config_py({20: "OPTION_20 = 200\n", 21: "OPTION_21 = 210\n"}))
    w.add_patch("mini/streams.py", "return 3", "return 4", "Four slots", "Three slots starve the largest unit.")
    # Upstream changes run() (patch 1 conflicts, so its new file is missing for patch 2) and option 35.
    w.release(
        "1.1.0",
        {
            "mini/engine.py": BASE_FILES["mini/engine.py"].replace("x * 2", "x * 4"),
            "mini/config.py": config_py({35: "OPTION_35 = 3500\n"}),
        },
    )
    first, second = sorted(p.name for p in w.patches.glob("*.patch"))

    survey, text, _ = rebase.survey_only(w.root, to="1.1.0")

    assert [f.outcome for f in survey.forecasts] == ["conflict", "follows"]
    follow = survey.forecasts[1]
    assert follow.notes[0] == (
        f"depends on patch 1 (`{first}`), which conflicts: `mini/streams.py` is a file that patch creates, "
        "not one upstream deleted or moved"
    )
    # With patch 1's new file and its option 20 merged into upstream's config, patch 2 applies.
    assert follow.alone == "clean" and follow.notes[1].endswith("this patch: clean")
    assert "upstream deleted or moved `" not in text and "target file gone" not in text
    assert f"2. **Four slots** (`{second}`): **depends on an earlier failing patch**" in text
    # One id per upstream in the header: the pin's commit, as in the pin.
    pin = load_pin(w.root)
    assert f"(`v1.0.0`, {pin.commit[:12]})" in text


def test_the_conflict_report_gives_only_our_commands(tmp_path):
    w = two_patch_world(tmp_path)
    w.release("1.1.0", {"mini/config.py": config_py({5: "OPTION_5 = 7\n"})})

    out = rebase.start(w.root, to="1.1.0", options=opts())

    assert not out.done and "git said:" in out.report and "error: Failed to merge in the changes." in out.report
    # git's own advice (its patch numbering, `git am --continue`) is left out; ours is there.
    assert "git am --continue" not in out.report and "Patch failed at" not in out.report
    assert "hint:" not in out.report and "`invoke rebase --continue`" in out.report
    rebase.abort(w.root)
    # What git prints without --quiet (git 2.39), as the 0.34.0 move's report quoted it.
    said = (
        "Applying: [Offload] Stream towers\nUsing index info to reconstruct a base tree...\n"
        "CONFLICT (content): Merge conflict in vllm/config/model.py\nerror: Failed to merge in the changes.\n"
        "hint: Use 'git am --show-current-patch=diff' to see the failed patch\n"
        "Patch failed at 0001 [Offload] Stream towers\n"
        'When you have resolved this problem, run "git am --continue".\n'
        'If you prefer to skip this patch, run "git am --skip" instead.\n'
        'To restore the original branch and stop patching, run "git am --abort".\n'
    )
    assert git_output_without_hints(said) == [
        "Applying: [Offload] Stream towers",
        "Using index info to reconstruct a base tree...",
        "CONFLICT (content): Merge conflict in vllm/config/model.py",
        "error: Failed to merge in the changes.",
    ]
