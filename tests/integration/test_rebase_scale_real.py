"""A fork-sized queue (the real patches + 100 generated ones) surveyed for a real release hop.

The survey must name every patch that will fail before anything is resolved (here
the four generated to conflict with vLLM 0.32.0, besides the real patches that already
conflict there, as a survey of the real queue alone says), forecast the 3-way merges and the
drop-after patches, say that blame needs the git source, and change nothing; the
rebase then stops at the first conflict with that whole forecast at the top.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from vllm_fork.core.git import out
from vllm_fork.queue import apply as queue
from vllm_fork.queue.export import export
from vllm_fork.rebase import run as rebase
from vllm_fork.rebase.classify import CONFLICT, DROPPED, THREE_WAY
from vllm_fork.rebase.state import Options
from vllm_fork.rebase.target import resolve_target
from vllm_fork.upstream.pin import load_pin
from vllm_fork.upstream.sources import ensure_upstream
from vllm_fork_testkit.fork_copy import commit_all, queue_checkout
from vllm_fork_testkit.scale_queue import generate

TARGET = "0.32.0"
pytestmark = pytest.mark.slow


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((root / "patches").iterdir()) + [root / "upstream.toml"]:
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_survey_of_a_fork_sized_queue_reports_every_failure_at_once(tmp_path):
    root = queue_checkout(tmp_path / "fork")
    real = len((root / "patches" / "series").read_text().split())
    tree = root / "build" / "vllm"
    queue.apply(root)
    # The real queue alone on the target: its own patches that need a hand there (the ones
    # that met the pinned release's changes).
    alone, _, _ = rebase.survey_only(root, to=TARGET)
    real_conflicts = sorted(f.subject for f in alone.forecasts if f.outcome == CONFLICT)
    real_need_hand = len(alone.failing())
    pin = load_pin(root)
    old_up = ensure_upstream(pin)
    new_up = ensure_upstream(resolve_target(pin, TARGET, False, pin.source))
    generated = generate(tree, old_up.commit, new_up.commit, old_up.repo)
    names = export(tree, root)
    commit_all(root, "the generated queue")
    assert len(names) == real + 100
    before, head = digest(root), out(tree, "rev-parse", "HEAD")

    survey, text, _ = rebase.survey_only(root, to=TARGET)

    by_subject = {f.subject: f for f in survey.forecasts}
    assert len(survey.forecasts) == real + 100
    assert sorted(f.subject for f in survey.forecasts if f.outcome == CONFLICT) == sorted(
        generated.subjects["conflict"] + real_conflicts
    )
    assert all(by_subject[s].outcome == DROPPED for s in generated.subjects["dropped"])
    assert all(by_subject[s].notes[0].startswith("Upstream-Status: drop-after") for s in generated.subjects["dropped"])
    assert sum(by_subject[s].outcome == THREE_WAY for s in generated.subjects["3-way"]) >= 3
    assert f"{4 + real_need_hand} patch(es) will need a hand" in text and "unknown with the pypi source" in text
    assert digest(root) == before and out(tree, "rev-parse", "HEAD") == head

    outcome = rebase.start(root, to=TARGET, options=Options(run_tests=False))
    assert not outcome.done
    head_of_report = outcome.report.split("## Conflict")[0]
    assert all(s in head_of_report for s in generated.subjects["conflict"])
    rebase.abort(root)
    assert digest(root) == before and out(tree, "rev-parse", "HEAD") == head
