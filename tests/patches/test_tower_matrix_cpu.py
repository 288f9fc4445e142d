"""The tower matrix on the CPU: every family's tiny tower, resident vs streamed.

For each family in vllm_fork_testkit/tower_families/: build the tiny tower the way
its vLLM model does, encode real-shaped inputs through the model's own
`_process_image_input` (or audio equivalent), then wrap the same towers with
the prefetch offloader (`offload_towers=True`, as `_mark_tower_model` does)
and check that 3 encodes are bit-identical to the resident one, that every
streamed parameter rests in the arena between encodes, and that `device`
properties report what they reported before.

A family the streamer refuses must be refused at wrap time with a ValueError
naming the reason; `REFUSED` records which and why. A family whose streamed
output is known to differ (`TowerFamily.differs`, a patch issue) is a strict
xfail: it fails once the patch makes it bit-identical. The full-size run of
the same registry on the GPU is tests/gpu/test_tower_matrix.py; its configs
are checked here by building every full-size tower on the meta device, and
the benchmark's recovery from a family that kills its process by a child
process that kills itself on purpose.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vllm_fork_testkit import tower_families as tf

pytestmark = [
    pytest.mark.skip_global_cleanup,
    # On a CUDA platform vLLM registers its ViT attention op for CUDA only;
    # tests/gpu/test_tower_matrix.py runs the same families there.
    pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only: ViT attention op is CUDA-only here"),
]

REFUSED: dict[str, str] = {
    # family name -> a substring of the ValueError raised at wrap time
}


def _param(family: tf.TowerFamily):
    marks = []
    skip = family.cpu_skip or family.missing()
    if skip:
        marks.append(pytest.mark.skip(reason=skip))
    if family.slow_on_cpu:
        marks.append(pytest.mark.slow)
    if family.differs:
        marks.append(pytest.mark.xfail(strict=True, raises=tf.NotBitIdentical, reason=family.differs))
    return pytest.param(family, id=family.name, marks=marks)


@pytest.fixture(scope="module")
def vllm_state():
    with tf.cpu_shims(), tf.vllm_context("gloo") as config:
        yield config


@pytest.mark.parametrize("family", [_param(f) for f in tf.FAMILIES])
def test_tiny_tower_streams_bit_identically(vllm_state, family: tf.TowerFamily):
    from vllm.model_executor.offloader import PrefetchOffloader

    cpu = torch.device("cpu")
    host = tf.build_family(family, tf.TINY, cpu, torch.float32)
    towers = tf.towers_of(family, host)
    inputs = tf.make_inputs(family, host, tf.TINY, cpu, torch.float32)
    reference = tf.encode(family, host, inputs)
    assert reference and all(torch.isfinite(t).all() for t in reference)
    # Resident encodes repeat exactly (eval mode, no dropout): a streamed
    # difference is the streamer's.
    assert tf.bit_identical(tf.encode(family, host, inputs), reference)
    # The matrix builds the streamed host again from the same seed: a second build
    # must encode the same, or a streamed difference would be the harness's.
    rebuilt = tf.build_family(family, tf.TINY, cpu, torch.float32)
    assert tf.bit_identical(tf.encode(family, rebuilt, inputs), reference)
    del rebuilt
    devices = tf.device_properties(host, towers)

    offloader = PrefetchOffloader(group_size=0, num_in_group=1, prefetch_step=1, offload_towers=True)
    if family.name in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[family.name]):
            for name, tower in towers.items():
                offloader.wrap_tower(tower, prefix=name)
        return
    for name, tower in towers.items():
        offloader.wrap_tower(tower, prefix=name)
    offloader.post_init()
    streamer = offloader.tower_streamer
    assert streamer is not None
    streamed_params = {id(p) for t in streamer.towers for u in t.units for p in (pl.param for pl in u.places)}
    # The whole of every tower is streamed but token-embedding tables, which stay resident
    # (read at every decoding step; Phi-3-vision marks its `embed_tokens` as a tower), and
    # the units too small to stream (under 1/64 of a block), which the streamer reports.
    streamable = {id(p): p for t in towers.values() for p in tf.streamable_parameters(t)}
    assert streamed_params <= streamable.keys()
    kept = sum(p.nbytes for i, p in streamable.items() if i not in streamed_params)
    assert kept == sum(streamer.kept_resident.values())

    for _ in range(3):
        # One model encode, as vLLM's runner makes each `embed_multimodal` call.
        with streamer.encode():
            streamed = tf.encode(family, host, inputs)
        tf.check_bit_identical(streamed, reference)
        assert all(u.is_packed() for t in streamer.towers for u in t.units)
        assert all(t.in_flight_units == [] for t in streamer.towers)
    assert tf.device_properties(host, towers) == devices


def _buildable(family: tf.TowerFamily):
    missing = family.missing()
    return pytest.param(family, id=family.name, marks=[pytest.mark.skip(reason=missing)] if missing else [])


@pytest.mark.parametrize("family", [_buildable(f) for f in tf.FAMILIES])
def test_full_size_towers_build(vllm_state, family: tf.TowerFamily):
    """The GPU matrix's full-size configs build (on the meta device: shapes only)."""
    host = tf.build_on_meta(family, tf.FULL)
    params = [p for tower in tf.towers_of(family, host).values() for p in tower.parameters()]
    # Built under the loader's default device and dtype, as vLLM builds them.
    assert params and all(p.device.type == "meta" for p in params)
    assert sum(p.numel() for p in params) > 10_000_000  # a released tower, not a tiny one


BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "tower_matrix.py"


@pytest.mark.slow
def test_matrix_records_a_family_that_kills_its_process_and_runs_the_rest(vllm_tree: Path, tmp_path: Path):
    """benchmarks/tower_matrix.py: a family whose process dies (on the GPU, a device-side assert)
    is an error row with the child's last lines; a new child runs the families after it."""
    env = {**os.environ, "VLLM_FORK_TREE": str(vllm_tree), "TOWER_MATRIX_CRASH_IN": "qwen2_vl"}
    env["PYTHONPATH"] = str(BENCHMARK.parents[1])  # this checkout's packages, not an older installed copy
    command = [sys.executable, str(BENCHMARK), "--size", tf.TINY, "--device", "cpu"]
    command += ["--families", "llava,qwen2_vl,idefics3", "--repeats", "1", "--out-dir", str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]

    rows = json.loads((tmp_path / "tower_matrix.json").read_text())["rows"]
    assert [(row["family"], row["status"]) for row in rows] == [
        ("llava", "streams"),
        ("qwen2_vl", "error"),
        ("idefics3", "streams"),
    ]
    killed = rows[1]
    assert killed["error"].startswith("the process was killed by SIGKILL while running this family")
    assert "[tower-matrix] TOWER_MATRIX_CRASH_IN=qwen2_vl: killing this process" in killed["log_tail"]
    table = (tmp_path / "tower_matrix.md").read_text()
    assert "| qwen2_vl | visual | 0.0 | error: the process was killed by SIGKILL" in table
    assert "2 of 3 families stream bit-identically" in table
    assert "Kernels: vLLM's own as installed, no stand-ins" in table  # no VLLM_GPU_STANDINS here
