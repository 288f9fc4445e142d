"""What the GPU tests share: this folder on sys.path, the checkpoints made on the spot, results.

Checkpoints (vllm_fork_testkit/vlm_checkpoint.py) are made once per session and family, when a test
first asks for one; figures go to `$VLLM_FORK_RESULTS` (engine_runs.record).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


class Checkpoints(dict):
    """family -> checkpoint directory, made when first looked up."""

    def __init__(self, factory: pytest.TempPathFactory):
        super().__init__()
        self.factory = factory

    def __missing__(self, family: str) -> Path:
        from vllm_fork_testkit.vlm_checkpoint import make_checkpoint

        self[family] = make_checkpoint(family, self.factory.mktemp(family))
        return self[family]


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> Checkpoints:
    return Checkpoints(tmp_path_factory)
