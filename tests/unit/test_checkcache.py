"""`invoke check`'s cache: a result is reused only while its inputs are byte-for-byte the same."""

from __future__ import annotations

import json
import shutil

from support.forkrepo import sh

from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue import checkcache
from vllm_fork.queue.export import export as export_queue

WHY = "The engine needs this for production; the default does not serve our traffic."


def messages(fork) -> list[str]:
    return [p.message for p in check_mod.check(fork.root)]


def two_patches(fork) -> list[str]:
    queue.apply(fork.root)
    fork.commit_in_tree("mini/engine.py", "return x * 2", "return x * 3", "Triple in run()", WHY)
    fork.commit_in_tree("mini/config.py", "", "OPTION_99 = 99\n", "Add option 99", WHY)
    return export_queue(tree=fork.tree, root=fork.root)


def amend_last_patch(fork, old: str, new: str) -> None:
    """Change the last patch as a developer would: edit, amend the commit, export."""
    target = fork.tree / "mini" / "config.py"
    target.write_text(target.read_text().replace(old, new))
    sh(fork.tree, "git", "commit", "-q", "-a", "--amend", "--no-edit")
    export_queue(tree=fork.tree, root=fork.root)


def memo_keys(cache) -> set[str]:
    (memo,) = (cache / checkcache.CACHE_NAME).glob("memo-*.json")
    return set(json.loads(memo.read_text()))


def test_an_unchanged_queue_is_not_applied_again(fork):
    two_patches(fork)
    check_tree = fork.root / "build" / ".check-tree"
    assert messages(fork) == []
    assert check_tree.is_dir()

    shutil.rmtree(check_tree)
    assert messages(fork) == []
    assert not check_tree.exists()  # the stored result was used: nothing applied


def test_a_changed_patch_invalidates_the_stored_result(fork):
    names = two_patches(fork)
    assert messages(fork) == []

    # The same patch, now using a name nothing defines: the stored "ok" must not be reused.
    amend_last_patch(fork, "OPTION_99 = 99", "OPTION_99 = undefined_helper()")
    assert messages(fork) == [f"{names[1]}: mini/config.py:41: undefined name 'undefined_helper'"]

    # And back: the first result is found again, the same as computed.
    amend_last_patch(fork, "OPTION_99 = undefined_helper()", "OPTION_99 = 99")
    assert messages(fork) == []


def test_a_corrupt_cache_file_is_a_miss(fork, cache):
    two_patches(fork)
    assert messages(fork) == []
    for stored in (cache / checkcache.CACHE_NAME).glob("*.json"):
        stored.write_text('{"half": ')
    assert messages(fork) == []


def test_a_changed_patch_reanalyses_only_the_files_whose_text_changed(fork, cache):
    two_patches(fork)
    assert messages(fork) == []
    before = memo_keys(cache)

    amend_last_patch(fork, "OPTION_99 = 99", "OPTION_99 = 98")
    assert messages(fork) == []

    added = memo_keys(cache) - before
    config = (fork.root / "build" / ".check-tree" / "mini" / "config.py").read_text()
    assert config.endswith("OPTION_99 = 98\n")
    # Only the new text of mini/config.py was analysed; patch 1's engine.py was not read again.
    assert added and {key.split(":")[1] for key in added} == {checkcache.text_digest(config)}


def test_the_analysis_version_follows_the_code(fork, monkeypatch, tmp_path):
    code = tmp_path / "queue"
    shutil.copytree(checkcache._QUEUE_CODE, code)
    monkeypatch.setattr(checkcache, "_QUEUE_CODE", code)
    checkcache.analysis_version.cache_clear()
    first = checkcache.analysis_version()
    with (code / "selfcontained.py").open("a") as fh:
        fh.write("\n# changed\n")
    checkcache.analysis_version.cache_clear()
    try:
        assert checkcache.analysis_version() != first
    finally:
        checkcache.analysis_version.cache_clear()


def test_a_stored_review_is_the_review_computed(fork):
    queue.apply(fork.root)
    fork.commit_in_tree(
        "mini/engine.py", "def run(x):", "from mini import config\n\n\ndef run(x):", "Read the config", WHY
    )
    fork.commit_in_tree("mini/engine.py", "return x * 2", "return x * config._scale + helper()", "Scale", "short")
    names = export_queue(tree=fork.tree, root=fork.root)
    exception = f'[[exception]]\npatch = "{names[0]}"\nlimit = "signed_off_by"\nreason = "test"\n'
    (fork.patches / "policy.toml").write_text("[limits]\nsigned_off_by = true\n\n" + exception)
    fresh = check_mod.review(fork.root)
    shutil.rmtree(fork.root / "build" / ".check-tree")
    stored = check_mod.review(fork.root)
    assert not (fork.root / "build" / ".check-tree").exists()  # read from the cache, not computed
    assert {p.kind for p in fresh.problems} == {check_mod.Kind.MESSAGE, check_mod.Kind.PREFIX, check_mod.Kind.POLICY}
    assert [u.qualified for u in fresh.reports[1].private or []] == ["mini.config._scale"]
    assert fresh.reports[0].excused and fresh.reports[1].breaches
    assert stored.problems == fresh.problems and stored.reports == fresh.reports
    assert stored.policy == fresh.policy and [p.path for p in stored.patches] == [p.path for p in fresh.patches]
