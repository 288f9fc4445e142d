"""The fast route's fallback, end to end on the real tree (slow; runs in CI).

A scratch fork whose series is the real one plus a patch that adds a requirement:
`invoke build` (route auto) must say it falls back and why, build with vLLM's
precompiled route, and the wheel's METADATA must carry the new requirement; the
wheel must pass `verify`.
"""

from __future__ import annotations

import zipfile
from collections import Counter

import pytest
from support.buildtrees import fork_root
from support.forkrepo import sh

from vllm_fork.core.paths import default_tree
from vllm_fork.ops.seed import official_wheel
from vllm_fork.queue import apply as queue
from vllm_fork.queue.export import export as export_queue
from vllm_fork.upstream.pin import load_pin
from vllm_fork.wheel import provenance
from vllm_fork.wheel.build import build
from vllm_fork.wheel.verify import verify

pytestmark = pytest.mark.slow

ADDED = "xxhash >= 3.5.0  # the fork's own dependency\n"


def test_a_requirements_patch_falls_back_to_the_precompiled_route(tmp_path, capfd):
    root = fork_root(tmp_path / "fork", with_index=True)
    real_series = (root / "patches" / "series").read_text().split()
    queue.apply(root=root)
    tree = default_tree(root)
    with open(tree / "requirements" / "common.txt", "a") as fh:
        fh.write(ADDED)
    sh(
        tree,
        "git",
        "-c",
        "user.name=Fork Dev",
        "-c",
        "user.email=dev@fork.example",
        "commit",
        "-qam",
        "[Deps] Require xxhash",
    )
    names = export_queue(tree, root)
    assert names[:-1] == real_series and names[-1].startswith(f"{len(real_series) + 1:04d}-")
    capfd.readouterr()

    result = build(root=root, route="auto")  # applies the exported series again, then builds

    err = capfd.readouterr().err
    assert "the fast route falls back to vLLM's precompiled route" in err
    assert "requirements/common.txt: packaging metadata or requirements" in err
    record = result.record
    assert record["route"] == "precompiled" and record["cache"] == "hit"
    assert record["fallback_reasons"] == ["requirements/common.txt: packaging metadata or requirements"]
    assert record["changes_requirements"] is True
    assert [p["name"] for p in record["series"]["patches"]] == names

    version = record["version"]
    with zipfile.ZipFile(result.wheel) as zf:
        ours = zf.read(f"vllm-{version}.dist-info/METADATA").decode()
    pin = load_pin(root)
    with zipfile.ZipFile(official_wheel(pin)) as zf:
        theirs = zf.read(f"vllm-{pin.version}.dist-info/METADATA").decode()
    added = Counter(ours.splitlines()) - Counter(theirs.splitlines())
    removed = Counter(theirs.splitlines()) - Counter(ours.splitlines())
    assert added == Counter([f"Version: {version}", "Requires-Dist: xxhash>=3.5.0"])
    assert removed == Counter([f"Version: {pin.version}"])

    report = verify(result.wheel, root)
    assert report.problems == [], report.problems
    assert provenance.read(result.wheel)["wheel"]["sha256"] == record["wheel"]["sha256"]
