"""The patches' own tests, as they live in the patched vLLM tree, run on the CPU.

Each patch carries its tests where upstream keeps them
(e.g. `tests/model_executor/offloader/` in the vLLM tree). One child pytest runs the
modules below over the tree under test (conftest.py makes it before the first
test), with `vllm_cpu` as its plugin and without vLLM's own conftest; each
module then passes or fails here on the child's report. The tests that need
CUDA skip themselves and run on the GPU machine (`tests/gpu`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from vllm_cpu import failed_cases, run_in_tree

IN_TREE = [
    "tests/config/test_mm_processor_cache_shm.py",
    "tests/kernels/attention/test_mm_encoder_sdpa_host_cu_seqlens.py",
    "tests/model_executor/test_kernel_warmup_minimax_m3.py",
    "tests/model_executor/offloader/test_offload_towers_option.py",
    "tests/model_executor/offloader/test_prefetch.py",
    "tests/model_executor/offloader/test_tower_streaming.py",
    "tests/model_executor/offloader/test_tower_streaming_qwen3_vl.py",
    "tests/model_executor/offloader/test_tower_units.py",
    "tests/model_executor/offloader/test_wrap_tower.py",
]


@pytest.fixture(scope="module")
def child_report(vllm_tree: Path, tmp_path_factory) -> tuple[ET.Element, str]:
    """Run every module in one child pytest (one torch + vLLM import); its JUnit XML and its output."""
    return run_in_tree(vllm_tree, IN_TREE, tmp_path_factory.mktemp("in-tree") / "report.xml")


@pytest.mark.parametrize("module", IN_TREE)
def test_in_tree(child_report, module: str) -> None:
    root, output = child_report
    dotted = module.removesuffix(".py").replace("/", ".")
    cases = [case for case in root.iter("testcase") if case.get("classname", "").startswith(dotted)]
    assert cases, f"no test of {module} ran:\n{output}"
    failed = failed_cases(cases)
    assert not failed, f"{module}: {failed} failed:\n{output}"
