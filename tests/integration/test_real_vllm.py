"""The queue on the real vLLM sdist (downloaded once into the shared cache)."""

from __future__ import annotations

import shutil
import subprocess
import tarfile

import pytest

from vllm_fork.core.paths import REPO_ROOT
from vllm_fork.queue import apply as queue
from vllm_fork.queue import check as check_mod
from vllm_fork.queue.export import export as export_queue
from vllm_fork.upstream.download import fetch
from vllm_fork.upstream.pin import load_pin
from vllm_fork.upstream.sources import ensure_upstream

pytestmark = pytest.mark.slow

#: The upstream commit the deterministic import of each release's sdist yields on every machine.
IMPORTED = {
    "0.33.0": "24696b911470aefe13d0de56f80eea5fad8a5f33",
    "0.34.0": "63b739f46a3b51cdf1348060c5006adf3d4c1a4a",
}


@pytest.fixture(scope="module")
def pin():
    return load_pin(REPO_ROOT)


@pytest.fixture
def fork_copy(tmp_path):
    """This repository's pin and patches, in a scratch checkout."""
    root = tmp_path / "fork"
    root.mkdir()
    shutil.copy(REPO_ROOT / "upstream.toml", root)
    shutil.copytree(REPO_ROOT / "patches", root / "patches")
    return root


def test_import_is_exactly_the_sdist_and_the_same_everywhere(pin):
    up = ensure_upstream(pin, "pypi")
    assert up.commit == IMPORTED[pin.version], "a new pin: add its imported commit to IMPORTED"
    sdist = fetch("vllm", pin.sdist.filename, pin.sdist.sha256)
    with tarfile.open(sdist) as tar:
        shipped = sorted(m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile() or m.issym())
    tracked = subprocess.run(
        ["git", "-C", str(up.repo), "ls-tree", "-r", "--name-only", up.commit],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert sorted(tracked) == shipped
    # Shipped although the sdist's own .gitignore matches them.
    for path in ("vllm/vllm_flash_attn/.gitkeep", "vllm/model_executor/kernels/linear/mxfp4/rdna3_hip.py"):
        assert path in tracked


def test_real_series_applies_checks_and_round_trips(fork_copy):
    head = queue.apply(fork_copy)
    tree = fork_copy / "build" / "vllm"
    subjects = subprocess.run(
        ["git", "-C", str(tree), "log", "--format=%s", "refs/fork/upstream..HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert len(subjects) == len((fork_copy / "patches" / "series").read_text().split())
    assert "default=16" in (tree / "vllm" / "config" / "multimodal.py").read_text()
    before = {p.name: p.read_bytes() for p in (fork_copy / "patches").iterdir()}
    assert queue.apply(fork_copy) == head
    export_queue(tree=tree, root=fork_copy)
    assert {p.name: p.read_bytes() for p in (fork_copy / "patches").iterdir()} == before
    assert check_mod.check(fork_copy) == []
