"""`invoke rebase` of the real patch queue across real vLLM releases from the package index.

The hop goes from the pinned release (upstream.toml) to the release just before it on
the index and back to the pinned one: both directions of a real release hop, each
checked against what git itself says about every patch. Both ends are fixed, so a
newer vLLM release does not change the test.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from packaging.version import Version
from support.fork_copy import queue_checkout
from support.known_queue import unexpected

from vllm_fork.core.git import git
from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.series import read_series
from vllm_fork.rebase import run as rebase
from vllm_fork.rebase.classify import CLEAN, DROPPED, THREE_WAY
from vllm_fork.rebase.state import Options
from vllm_fork.rebase.target import release_versions
from vllm_fork.upstream.pin import load_pin
from vllm_fork.upstream.pkgindex import list_files
from vllm_fork.upstream.sources import ensure_upstream

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
    original = {p.name: p.read_bytes() for p in (root / "patches").iterdir()}
    original_pin = (root / "upstream.toml").read_bytes()
    patches = read_series(root / "patches")

    # The known finding in the real queue (support/known_queue.py) would stop the hop at the check.
    accept = Options(run_tests=False, accept_failing_tests=True)
    down = rebase.start(root, to=previous, options=accept)
    assert down.done, down.report
    new_up = ensure_upstream(load_pin(root)).commit
    said = strict_outcomes(root / "build" / "vllm", new_up, patches)
    got = [r.outcome for r in down.state.results]
    for i, what in enumerate(said):  # the last strict failure needed a 3-way merge
        assert got[i] == what if what != THREE_WAY else got[i] in (THREE_WAY, DROPPED)
    for r in down.state.results:  # the report's table says, per patch, what git did
        row = next(ln for ln in down.report.splitlines() if f"`{r.name}`" in ln and ln.startswith("| "))
        assert {"clean": "| clean |", "3-way": "| 3-way merge |", "dropped": "| dropped: already upstream |"}[
            r.outcome
        ] in row
    assert load_pin(root).version == previous and f"vllm-{previous}.tar.gz" in down.report
    assert "## Compiled inputs" in down.report and unexpected(check_mod.check(root)) == []

    # Back to the pinned release, seeding its ops artifact (its official wheel is cached).
    up = rebase.start(root, to=pin.version, options=Options(run_tests=False, seed=True, accept_failing_tests=True))
    assert up.done and load_pin(root).version == pin.version
    # 0.32.0 and 0.33.0 differ in csrc/: the artifact is made from the official wheel.
    assert "**Changed**" in up.report and "Seeded by this rebase" in up.report
    index = json.loads((root / "ops-cache" / "index.json").read_text())
    assert any(e["provenance"]["upstream"]["version"] == pin.version for e in index["artifacts"].values())
    if all(r.outcome == CLEAN for r in down.state.results + up.state.results):
        # A clean round trip gives back the queue byte for byte.
        assert {p.name: p.read_bytes() for p in (root / "patches").iterdir()} == original
    assert (root / "upstream.toml").read_bytes() == original_pin  # same release, same pin, byte for byte
