"""`invoke rebase` of the real patch queue across real vLLM releases from the package index.

The hop goes from the pinned release (upstream.toml) to the release just before it on
the index and back to the pinned one: both directions of a real release hop. Going
down, the patches that met the pinned release's changes conflict and are dropped as a
user would (`git am --skip`, `invoke rebase --continue`); the rest are checked against
what git itself says. A patch that applies there but imports a module only the pinned
release has stops the rebase at its check, which names the module; going down anyway is
accepted (`--accept-failing-tests`), and on the way back the check passes again. Both
ends are fixed, so a newer vLLM release does not change the test.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_fork.core.git import git
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.series import read_series
from vllm_fork.rebase import run as rebase
from vllm_fork.rebase.classify import CLEAN, DROPPED, SKIPPED, THREE_WAY
from vllm_fork.rebase.state import CHECKS, Options
from vllm_fork.rebase.target import release_versions
from vllm_fork.upstream.pin import load_pin
from vllm_fork.upstream.pkgindex import list_files
from vllm_fork_testkit.fork_copy import queue_checkout

REPO = REPO_ROOT
pytestmark = pytest.mark.slow


def strict_outcomes(tree: Path, upstream: str, patches: list[Path]) -> list[str]:
    """What plain git says, patch by patch on a scratch index: applies strictly, reverses, or neither."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        git(tree, "read-tree", upstream, env=env)
        said = []
        for p in patches:
            if git(tree, "apply", "--cached", "--check", str(p), env=env, check=False).returncode == 0:
                git(tree, "apply", "--cached", str(p), env=env)
                said.append(CLEAN)
            elif git(tree, "apply", "--cached", "--check", "--reverse", str(p), env=env, check=False).returncode == 0:
                said.append(DROPPED)
            else:
                said.append(THREE_WAY)  # the rebase then needs a 3-way merge (or stops)
                break
        return said


def test_real_release_hop_and_back(tmp_path):
    # Both ends are pinned: the fork's release and the one just before it, so a newer vLLM
    # on the index changes nothing here.
    files = list_files("vllm")
    pin = load_pin(REPO)
    previous = str([v for v in release_versions(files) if v < Version(pin.version)][-1])
    root = queue_checkout(tmp_path / "fork")
    queue.apply(root)
    original_pin = (root / "upstream.toml").read_bytes()
    patches = read_series(root / "patches")
    tree = root / "build" / "vllm"

    # Down: the patches that met the pinned release's changes (0.34.0's renames) conflict on
    # the release before it. Each stop is real git's; the user drops the patch (`git am
    # --skip`) and continues, as with a patch upstream no longer needs.
    step = rebase.start(root, to=previous, options=Options(run_tests=False))
    conflicts, accepted = 0, []
    while not step.done:
        if step.stopped_at == CHECKS:
            # Applied, but the tree needs what only the pinned release has: the check says
            # which module, and the tests are not what stopped it (they do not run here).
            assert not accepted and step.check_problems
            assert all("which does not exist at this point" in p for p in step.check_problems), step.check_problems
            accepted = step.check_problems
            step = rebase.continue_(root, accept_failing_tests=True)
            continue
        assert "## Conflict" in step.report and "invoke rebase --continue" in step.report
        assert "git am --continue" not in step.report  # our commands only
        conflicts += 1
        git(tree, "am", "--skip")
        step = rebase.continue_(root)
    assert conflicts + len(accepted) >= 1
    said = strict_outcomes(tree, step.state.new_upstream, patches)
    got = {r.name: r.outcome for r in step.state.results}
    first_stop = next((i for i, r in enumerate(step.state.results) if r.outcome == SKIPPED), len(patches))
    for i, what in enumerate(said[:first_stop]):  # before the first stop, what git said
        assert got[patches[i].name] == what if what != THREE_WAY else got[patches[i].name] in (THREE_WAY, DROPPED)
    assert load_pin(root).version == previous and f"vllm-{previous}.tar.gz" in step.report
    assert "## Compiled inputs" in step.report
    assert [p.message for p in check_mod.check(root)] == accepted  # what was accepted, nothing else

    # Back to the pinned release, seeding its ops artifact (its official wheel is cached).
    up = rebase.start(root, to=pin.version, options=Options(run_tests=False, seed=True))
    assert up.done and load_pin(root).version == pin.version and up.check_problems == []
    # The two releases differ in csrc/: the artifact is made from the official wheel.
    assert "**Changed**" in up.report and "Seeded by this rebase" in up.report
    index = json.loads((root / "ops-cache" / "index.json").read_text())
    assert any(e["provenance"]["upstream"]["version"] == pin.version for e in index["artifacts"].values())
    assert all(r.outcome in (CLEAN, THREE_WAY) for r in up.state.results)
    assert (root / "upstream.toml").read_bytes() == original_pin  # same release, same pin, byte for byte
