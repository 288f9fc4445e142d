"""benchmarks/engine_offload.py --smoke: what the engine benchmark can run without a GPU.

For real: its arguments, the Qwen3-VL checkpoint (vllm_fork_testkit.vlm_checkpoint, read
back by transformers, the probe's latency request through its processor), the tower
benchmark's own --smoke in a child process (against the patched tree), and the JSON and
Markdown. vLLM's engine needs CUDA: no engine figure is made up, each of its cells says
"not run (needs CUDA)" and the report names the probe commands that did not run. The report
writing from real probe results is checked on the committed GPU run: it renders as committed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_tower_pipeline_smoke import CPU_ONLY, REPO, benchmark_module, run_on_cpu

BENCHMARK = REPO / "benchmarks" / "engine_offload.py"
NOT_RUN = "not run (needs CUDA)"

pytestmark = [CPU_ONLY]


@pytest.fixture(scope="module")
def smoke_run(vllm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("engine_offload")
    run_on_cpu(BENCHMARK, vllm_tree, "--out-dir", str(out), "--repeats", "3")
    return json.loads((out / "engine_offload.json").read_text()), (out / "engine_offload.md").read_text()


def test_the_checkpoint_is_made_and_read_back(smoke_run):
    report, markdown = smoke_run
    assert report["smoke"] is True and report["gpu"] is None and report["repeats"] == 3
    checkpoint = report["checkpoint"]
    assert checkpoint["family"] == "qwen3_vl"
    assert checkpoint["architectures"] == ["Qwen3VLForConditionalGeneration"]
    assert {"config.json", "tokenizer.json", "processor_config.json"} <= set(checkpoint["files"])
    # The full-size 8B tower the engine would load, and the text model as wide as its output.
    assert checkpoint["vision"] == {"depth": 27, "hidden_size": 1152, "out_hidden_size": 4096}
    assert checkpoint["text"] == {"layers": 2, "hidden_size": 4096}
    # The probe's latency request asks for 2223 tokens; image_of_tokens' grid gives about that.
    assert abs(checkpoint["latency_request_image_tokens"] - 2223) <= 0.02 * 2223
    assert "full-size 8B vision tower (depth 27, hidden 1152), 2-layer 4096-wide text model" in markdown


def test_the_engine_is_not_run_and_says_so_in_every_engine_cell(smoke_run):
    report, markdown = smoke_run
    assert report["results"] == {"resident": NOT_RUN, "streamed": NOT_RUN}
    assert report["summary"] == NOT_RUN
    for mode in ("resident", "streamed"):
        assert f"| {mode} |" + f" {NOT_RUN} |" * 7 in markdown
        command = report["not_run"][f"engine probe ({mode})"]
        assert command.startswith(f"{NOT_RUN}: python -m vllm_fork_testkit.engine_probe CHECKPOINT --mode {mode}")
        assert "--latency-repeats 3" in command and command in markdown
    assert "Needs a GPU, not run:" in markdown and "Run on the CPU, for real:" in markdown
    assert " ms " not in markdown and "MiB |" not in markdown.split("## Vision tower")[0]


def test_the_tower_benchmark_smoke_runs_inside_it(smoke_run):
    report, markdown = smoke_run
    tower = report["tower_alone"]
    assert tower["smoke"] is True
    assert (
        tower["command"]
        == "python3 benchmarks/tower_streaming.py --smoke (run by benchmarks/engine_offload.py --smoke)"
    )
    assert tower["results"]["streamed"]["bit_identical_to_resident"] is True
    assert tower["results"]["uva"]["skipped"] == "skipped: needs CUDA"
    assert report["not_run"]["tower benchmark's UVA mode and H2D floor"] == "skipped: needs CUDA"
    # The tower benchmark's own Markdown, a level down, after the engine's.
    assert markdown.index("# Resident vs") < markdown.index("## Vision tower encode: resident vs streamed vs UVA")
    assert "| uva | skipped: needs CUDA |" in markdown


def test_the_committed_gpu_run_reports_as_committed():
    """The report written from real probe results (the committed H200 run's JSON): the same
    summary and, byte for byte, the same Markdown."""
    results = REPO / "benchmarks" / "results" / "engine_offload"
    report = json.loads((results / "engine_offload.json").read_text())
    engine_offload = benchmark_module("engine_offload")
    sys.path.insert(0, str(REPO / "benchmarks"))  # its Markdown imports tower_streaming by name
    try:
        assert engine_offload.summarize(report["results"]) == report["summary"]
        assert engine_offload.markdown(report) == (results / "engine_offload.md").read_text()
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
        for name in ("engine_offload", "tower_streaming"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("script", "options", "message"),
    [
        ("engine_offload.py", ["--out-dir", "OUT", "--repeats", "0"], "--repeats must be at least 1"),
        ("engine_offload.py", ["--out-dir", "OUT"], "engine_offload.py needs a CUDA GPU (--smoke runs"),
        ("tower_streaming.py", ["--out", "OUT/r.json", "--iters", "0"], "--iters must be at least 1"),
        ("tower_streaming.py", ["--out", "OUT/r.json"], "tower_streaming.py needs a CUDA GPU (--smoke runs"),
    ],
)
def test_without_smoke_or_with_bad_arguments_they_stop_with_a_reason(
    script: str, options: list[str], message: str, tmp_path: Path
):
    """A full run on a machine without CUDA, or nonsense arguments: a clear message, no output."""
    options = [o.replace("OUT", str(tmp_path)) for o in options]
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *options],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []
