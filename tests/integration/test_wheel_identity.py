"""A wheel's name comes from what is in it: a lying pin or an unexported commit fails at build or verify (slow).

The three cases of issue 57 on the real release: the pin's version changed alone; the
version, tag and sdist name changed together (the sdist is found by its sha256);
`build --no-apply` on a tree holding a commit `patches/` lacks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.buildtrees import applied_fork_root
from support.forkrepo import sh

from vllm_fork.core.errors import ConfigError, ForkError
from vllm_fork.core.paths import default_tree
from vllm_fork.queue.export import TreeQueue
from vllm_fork.wheel import build as build_mod
from vllm_fork.wheel import provenance
from vllm_fork.wheel.build import build
from vllm_fork.wheel.verify import verify
from vllm_fork.wheel.version import series_id

pytestmark = pytest.mark.slow

PIN = "upstream.toml"


@pytest.fixture(scope="module")
def real_root(tmp_path_factory) -> Iterator[Path]:
    with applied_fork_root(tmp_path_factory, "identity") as root:
        yield root


@pytest.fixture
def pin_text(real_root) -> Iterator[str]:
    text = (real_root / PIN).read_text()
    yield text
    (real_root / PIN).write_text(text)


@pytest.fixture
def unexported(real_root) -> Iterator[Path]:
    """build/vllm with one commit above the applied queue, changing a file no patch touches."""
    tree = default_tree(real_root)
    build(root=real_root, route="fast")  # applies: the tree is the queue
    logger = tree / "vllm" / "logger.py"
    logger.write_text(logger.read_text() + "\nUNEXPORTED = True\n")
    sh(tree, "git", "commit", "-qam", "Log: an edit never exported")
    yield tree
    sh(tree, "git", "reset", "-q", "--hard", "HEAD~1")


def test_a_clean_build_passes_verify_and_records_the_fork_commit(real_root):
    result = build(root=real_root, route="fast")
    assert result.record["series"]["unexported"] == [] and "fork" in result.record
    assert set(result.record["fork"]) == {"commit", "clean", "changed"}
    report = verify(result.wheel, real_root)
    assert report.problems == [], report.problems
    assert any("recomputed from patches/" in c for c in report.checks), report.checks
    again = build(root=real_root, route="fast", apply=False)  # the tree as apply left it is patches/
    assert again.wheel == result.wheel and again.record["series"]["unexported"] == []


def test_a_version_changed_alone_in_the_pin_is_refused(real_root, pin_text):
    (real_root / PIN).write_text(pin_text.replace('version = "0.34.0"', 'version = "9.9.9"'))
    with pytest.raises(ConfigError) as err:
        build(root=real_root, route="fast")
    assert 'version = "9.9.9"' in str(err.value) and "PKG-INFO says 0.34.0" in str(err.value)
    assert not list((real_root / "dist").glob("vllm-9.9.9*"))


def test_version_tag_and_sdist_name_changed_together_are_refused(real_root, pin_text):
    lied = pin_text.replace("0.34.0", "0.35.0")
    assert 'tag = "v0.35.0"' in lied and "vllm-0.35.0.tar.gz" in lied
    (real_root / PIN).write_text(lied)
    with pytest.raises(ConfigError) as err:
        build(root=real_root, route="fast")
    message = str(err.value)
    assert "PKG-INFO says 0.34.0" in message and "vllm/_version.py says 0.34.0" in message
    assert 'tag = "v0.35.0"' in message
    assert not list((real_root / "dist").glob("vllm-0.35.0*"))


def test_no_apply_on_an_unexported_commit_is_refused_and_names_it(real_root, unexported):
    head = sh(unexported, "git", "rev-parse", "--short", "HEAD")
    with pytest.raises(ForkError) as err:
        build(root=real_root, route="fast", apply=False)
    assert f"{head} Log: an edit never exported" in str(err.value) and "--allow-unexported" in str(err.value)


def test_allowed_unexported_commits_make_a_dirty_wheel_that_says_so(real_root, unexported):
    result = build(root=real_root, route="fast", apply=False, allow_unexported=True)
    record = result.record
    assert re.fullmatch(r"0\.34\.0\+fork\.[0-9a-f]{8}\.dirty", record["version"]), record["version"]
    assert record["version"] in result.wheel.name
    assert record["series"]["label"] != series_id(real_root).label + ".dirty"  # the tree's own series
    assert [c.split(" ", 1)[1] for c in record["series"]["unexported"]] == ["Log: an edit never exported"]
    assert any(p["path"] == "vllm/logger.py" for p in record["patched_files"])
    report = verify(result.wheel, real_root)
    assert report.problems == [], report.problems


def test_verify_fails_a_wheel_labelled_with_the_queue_but_holding_an_unexported_commit(
    real_root, unexported, monkeypatch
):
    """The wheel the old build made: the queue's label and patch list over a tree holding more."""
    monkeypatch.setattr(
        build_mod,
        "build_series",
        lambda tree, root, allowed, log, applied: (series_id(root), TreeQueue(series_id(root).patches)),
    )
    lying = build(root=real_root, route="fast", apply=False)
    assert lying.record["version"].endswith(series_id(real_root).label)
    report = verify(lying.wheel, real_root)
    assert any("vllm/logger.py" in p and "recomputed from patches/" in p for p in report.problems), report.problems


def test_verify_fails_a_wheel_whose_label_is_not_its_series(real_root, tmp_path):
    result = build(root=real_root, route="fast")
    record = provenance.read(result.wheel)
    record["series"]["patches"] = record["series"]["patches"][:-1]  # a record claiming one patch fewer
    copy = tmp_path / result.wheel.name
    copy.write_bytes(result.wheel.read_bytes())
    provenance.write(copy, record)
    problems = verify(copy, real_root).problems
    assert any("is not the label of the series" in p for p in problems), problems
