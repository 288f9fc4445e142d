"""`invoke rebase` on small real upstreams: one test per outcome git can have."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.rebase_world import (
    BASE_FILES,
    config_py,
    file_index,
    isolate,
    make_world,
    sdist_bytes,
    sh,
    two_patch_world,
)

from vllm_fork.core.errors import ForkError
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue import check as check_mod
from vllm_fork.rebase import run as rebase
from vllm_fork.rebase.state import Options, in_progress
from vllm_fork.upstream.pin import load_pin

REPO = REPO_ROOT


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    isolate(tmp_path, monkeypatch)


def opts(**kw) -> Options:
    return Options(run_tests=False, **kw)


def outcomes(outcome) -> list[tuple[str, str]]:
    return [(r.subject, r.outcome) for r in outcome.state.results]


def test_clean_bump_updates_pin_exports_and_commits_on_a_branch(tmp_path):
    w = two_patch_world(tmp_path)
    before = {p.name: p.read_bytes() for p in w.patches.iterdir()}
    new = w.release("1.1.0", {"README.md": "mini, now faster\n", "csrc/ops.cu": "// kernel v2\n"})

    out = rebase.start(w.root, to="1.1.0", options=opts())

    assert out.done and outcomes(out) == [("Raise option 5 to 50", "clean"), ("Triple in run()", "clean")]
    pin = load_pin(w.root)
    assert (pin.version, pin.tag, pin.commit) == ("1.1.0", "v1.1.0", new)
    assert {p.name: p.read_bytes() for p in w.patches.iterdir()} == before  # untouched files: same bytes
    assert sh(w.root, "git", "rev-parse", "--abbrev-ref", "HEAD") == "rebase/1.1.0"
    assert sh(w.root, "git", "status", "--porcelain") == ""
    assert sh(w.root, "git", "show", "main:upstream.toml") != (w.root / "upstream.toml").read_text()
    # The image's base follows the pin; the old release's digest is dropped, not reused.
    dockerfile = sh(w.root, "git", "show", "HEAD:Dockerfile")
    assert "ARG VLLM_BASE_TAG=v1.1.0" in dockerfile and "ARG VLLM_BASE_DIGEST=\n" in dockerfile + "\n"
    message = sh(w.root, "git", "log", "-1", "--format=%B")
    assert message.startswith("Rebase the patch queue onto vLLM 1.1.0 (from 1.0.0)")
    assert "| 1 | Raise option 5 to 50" in out.report and "| clean |" in out.report
    assert "**Changed**" in out.report and "`csrc/ops.cu`" in out.report
    # Not seeded (no --seed): the report says how, and never that this rebase seeded.
    assert "with `invoke ops.seed` on this branch (or rebase with `--seed`)" in out.report
    assert "Seeded by this rebase" not in out.report
    assert "`invoke check`: ok" in out.report
    assert not in_progress(w.root) and (w.root / "build" / "rebase" / "report.md").read_text() == out.report
    assert check_mod.check(w.root) == []


def test_three_way_merge_is_classified_and_flagged_for_the_eye(tmp_path):
    w = two_patch_world(tmp_path)
    # OPTION_3 sits inside patch 1's context: a strict apply fails, a 3-way merge succeeds.
    w.release("1.1.0", {"mini/config.py": config_py({3: "OPTION_3 = 33\n"})})

    out = rebase.start(w.root, to="v1.1.0", options=opts())

    assert outcomes(out) == [("Raise option 5 to 50", "3-way"), ("Triple in run()", "clean")]
    first = out.state.results[0]
    assert first.by_eye and "mini/config.py" in first.by_eye[0]
    assert (
        "## Check by eye" in out.report and "hunk `@@ -3,7 +3,7 @@`: upstream changed line(s) 4 around it" in out.report
    )
    assert "Unchanged" in out.report  # no compiled input moved
    text = (w.root / "build" / "vllm" / "mini" / "config.py").read_text()
    assert "OPTION_3 = 33\n" in text and "OPTION_5 = 50\n" in text
    # The refreshed patch now applies strictly: the new queue passes the CI gate.
    assert check_mod.check(w.root) == []
    assert "OPTION_3 = 33" in (w.patches / out.state.results[0].new_name).read_text()


def test_patch_already_upstream_is_dropped_and_recorded(tmp_path):
    w = two_patch_world(tmp_path)
    engine = BASE_FILES["mini/engine.py"].replace("x * 2", "x * 3")
    w.release("1.1.0", {"mini/engine.py": engine})

    out = rebase.start(w.root, to="1.1.0", options=opts())

    assert outcomes(out) == [("Raise option 5 to 50", "clean"), ("Triple in run()", "dropped")]
    assert (w.patches / "series").read_text().splitlines() == [out.state.results[0].new_name]
    assert sorted(p.name for p in w.patches.glob("*.patch")) == [out.state.results[0].new_name]
    assert "## Dropped patches" in out.report and "Triple in run()" in out.report.split("## Dropped patches")[1]
    assert check_mod.check(w.root) == []


def test_partly_upstream_patch_warns_of_lost_content(tmp_path):
    w = make_world(tmp_path)
    w.add_patch(
        "mini/engine.py",
        "    return x * 2\n\n\ndef stop():\n    return None\n",
        "    return x * 3\n\n\ndef stop():\n    return 0\n",
        "Triple and stop with 0",
        "Two production fixes that go together in our deployment.",
    )
    w.release("1.1.0", {"mini/engine.py": "def run(x):\n    return x * 3\n\n\ndef stop():\n    return None\n"})

    out = rebase.start(w.root, to="1.1.0", options=opts())

    assert outcomes(out) == [("Triple and stop with 0", "3-way")]
    assert "upstream already had part of it: 2 of 4 changed lines remain" in out.report


def test_conflict_stops_then_continue_finishes(tmp_path):
    w = two_patch_world(tmp_path)
    w.release("1.1.0", {"mini/config.py": config_py({5: "OPTION_5 = 7\n"})})
    main_patches = {p.name: p.read_bytes() for p in w.patches.iterdir()}
    main_pin = (w.root / "upstream.toml").read_bytes()

    out = rebase.start(w.root, to="1.1.0", options=opts())

    assert not out.done and outcomes(out) == [("Raise option 5 to 50", "conflict")]
    assert "mini/config.py" in out.report and "@@ -3,7 +3,7 @@" in out.report
    assert "invoke rebase --continue" in out.report
    assert {p.name: p.read_bytes() for p in w.patches.iterdir()} == main_patches
    assert (w.root / "upstream.toml").read_bytes() == main_pin
    conflicted = (w.tree / "mini" / "config.py").read_text()
    assert "<<<<<<<" in conflicted and ">>>>>>>" in conflicted
    with pytest.raises(ForkError, match="unresolved conflicts"):
        rebase.continue_(w.root)

    (w.tree / "mini" / "config.py").write_text(config_py({5: "OPTION_5 = 70\n"}))
    sh(w.tree, "git", "add", "mini/config.py")
    # --continue from a fresh process: the state lives on disk.
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from pathlib import Path; from vllm_fork.rebase import run as rebase; "
            f"o = rebase.continue_(Path({str(w.root)!r})); print(o.done, [r.outcome for r in o.state.results])",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**__import__("os").environ},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True ['resolved by hand', 'clean']"
    assert load_pin(w.root).version == "1.1.0"
    assert "OPTION_5 = 70" in (w.patches / sorted(w.patches.glob("0001-*"))[0].name).read_text()
    assert sh(w.root, "git", "rev-parse", "--abbrev-ref", "HEAD") == "rebase/1.1.0"
    assert check_mod.check(w.root) == []


def test_conflict_then_abort_loses_nothing_byte_for_byte(tmp_path):
    w = two_patch_world(tmp_path)
    w.release(
        "1.1.0",
        {
            "mini/config.py": config_py({5: "OPTION_5 = 7\n"}),
            "mini/engine.py": BASE_FILES["mini/engine.py"].replace("x * 2", "x * 4"),
        },
    )
    before = w.snapshot()

    out = rebase.start(w.root, to="1.1.0", options=opts())
    assert not out.done and in_progress(w.root)
    assert w.snapshot() != before

    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from pathlib import Path; from vllm_fork.rebase import run as rebase; rebase.abort(Path({str(w.root)!r}))",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert w.snapshot() == before
    assert not (w.root / "build" / "rebase").exists()
    with pytest.raises(ForkError, match="no rebase in progress"):
        rebase.abort(w.root)


def test_second_conflict_after_continue_stops_again(tmp_path):
    w = two_patch_world(tmp_path)
    w.release(
        "1.1.0",
        {
            "mini/config.py": config_py({5: "OPTION_5 = 7\n"}),
            "mini/engine.py": BASE_FILES["mini/engine.py"].replace("x * 2", "x * 4"),
        },
    )
    out = rebase.start(w.root, to="1.1.0", options=opts())
    (w.tree / "mini" / "config.py").write_text(config_py({5: "OPTION_5 = 70\n"}))
    sh(w.tree, "git", "add", "-A")
    out = rebase.continue_(w.root)
    assert not out.done and outcomes(out) == [
        ("Raise option 5 to 50", "resolved by hand"),
        ("Triple in run()", "conflict"),
    ]
    assert "mini/engine.py" in out.report
    sh(w.tree, "git", "am", "--skip")  # the user decides upstream's x * 4 wins
    out = rebase.continue_(w.root)
    assert out.done and outcomes(out)[1] == ("Triple in run()", "skipped by hand")
    assert len(list(w.patches.glob("*.patch"))) == 1


def test_refuses_dirty_queue_and_unexported_tree_work(tmp_path):
    w = two_patch_world(tmp_path)
    w.release("1.1.0", {"README.md": "x\n"})
    (w.root / "upstream.toml").write_text((w.root / "upstream.toml").read_text() + "\n")
    with pytest.raises(ForkError, match="uncommitted changes"):
        rebase.start(w.root, to="1.1.0", options=opts())
    sh(w.root, "git", "checkout", "upstream.toml")
    (w.tree / "README.md").write_text("local edit\n")
    with pytest.raises(ForkError, match="would discard"):
        rebase.start(w.root, to="1.1.0", options=opts())
    assert not in_progress(w.root)


def test_rebase_to_a_bare_commit_with_the_git_source(tmp_path):
    w = two_patch_world(tmp_path)
    sh(w.remote, "git", "commit", "-q", "--allow-empty", "-m", "unreleased work")
    (w.remote / "README.md").write_text("nightly\n")
    sh(w.remote, "git", "commit", "-qam", "nightly")
    commit = sh(w.remote, "git", "rev-parse", "HEAD")
    out = rebase.start(w.root, to=commit, source="git", options=opts())
    pin = load_pin(w.root)
    assert out.done and pin.commit == commit and pin.tag == "" and pin.version == f"git-{commit[:12]}"
    assert check_mod.check(w.root) == []


def test_latest_from_a_package_index_with_small_sdists(tmp_path, monkeypatch):
    """The pypi source: sdists and wheels on a (file://) index; pin sha256s come from it."""
    w = two_patch_world(tmp_path)  # patches made on the git v1.0.0; same files as the sdist below
    v1 = sdist_bytes("1.0.0", BASE_FILES)
    v11 = sdist_bytes("1.1.0", {**BASE_FILES, "mini/config.py": config_py({3: "OPTION_3 = 33\n"})})
    url = file_index(
        tmp_path / "index",
        {
            "vllm-1.0.0.tar.gz": v1,
            "vllm-1.1.0.tar.gz": v11,
            "vllm-1.2.0rc1.tar.gz": v11,
            "vllm-1.1.0-cp38-abi3-manylinux_2_28_x86_64.whl": b"wheel",
        },
    )
    monkeypatch.setenv("PIP_INDEX_URL", url)
    import hashlib

    from vllm_fork.upstream.pin import Artifact, save_pin

    pin = load_pin(w.root)
    save_pin(
        pin.with_changes(source="pypi", sdist=Artifact("vllm-1.0.0.tar.gz", hashlib.sha256(v1).hexdigest())), w.root
    )
    sh(w.root, "git", "commit", "-qam", "use the pypi source")

    out = rebase.start(w.root, latest=True, options=opts())

    assert out.done and outcomes(out) == [("Raise option 5 to 50", "3-way"), ("Triple in run()", "clean")]
    new = load_pin(w.root)
    assert new.version == "1.1.0" and new.source == "pypi"
    assert new.sdist.sha256 == hashlib.sha256(v11).hexdigest()
    assert new.wheel.filename == "vllm-1.1.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert new.wheel.sha256 == hashlib.sha256(b"wheel").hexdigest()
    assert check_mod.check(w.root) == []


def _bot(*args: str) -> int:
    import importlib.util

    spec = importlib.util.spec_from_file_location("rebase_bot", REPO / "scripts" / "rebase_bot.py")
    bot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bot)
    return bot.main(list(args))


def test_bot_pauses_rebases_and_aborts_on_conflict_without_github(tmp_path, monkeypatch):
    monkeypatch.delenv("GH_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    w = two_patch_world(tmp_path)
    w.release("1.1.0", {"mini/config.py": config_py({5: "OPTION_5 = 7\n"})})
    before = w.snapshot()
    (w.root / ".rebase-bot-pause").write_text("holding for the 1.1 regression\n")
    assert _bot("--root", str(w.root), "--to", "1.1.0", "--skip-tests") == 0
    (w.root / ".rebase-bot-pause").unlink()
    assert w.snapshot() == before

    assert _bot("--root", str(w.root), "--to", "1.1.0", "--skip-tests") == 2  # conflict
    assert w.snapshot() == before and not in_progress(w.root)
    assert "stopped at a conflict" in (w.root / "build" / "rebase-bot-report.md").read_text()

    w.release("1.2.0", {"mini/config.py": config_py({5: "OPTION_5 = 5\n", 30: "OPTION_30 = 0\n"})})
    assert _bot("--root", str(w.root), "--to", "1.2.0", "--skip-tests") == 0
    assert sh(w.root, "git", "rev-parse", "--abbrev-ref", "HEAD") == "rebase/1.2.0"
    assert load_pin(w.root).version == "1.2.0"
    # A rerun (the next schedule) rebuilds the same branch rather than failing on it.
    sh(w.root, "git", "checkout", "-q", "main")
    assert _bot("--root", str(w.root), "--to", "1.2.0", "--skip-tests") == 0
