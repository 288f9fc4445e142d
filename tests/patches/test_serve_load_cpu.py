"""benchmarks/serve_load.py on the CPU: what its GPU run depends on, checked for real first.

vLLM's own parsers read every command the benchmark would run (`vllm bench serve` per point,
`vllm serve` per mode), vLLM's own random-mm dataset samples the intended mix from the
checkpoint's tokenizer, vLLM's config loader reads the 8B- and 2B-shaped checkpoints with the
published dimensions, vLLM's plugin loader starts the probe in a fresh process, and the report
renders from a report of the format the run writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_tower_pipeline_smoke import CPU_ONLY, REPO, benchmark_module

from vllm_fork_testkit import serve_probe

pytestmark = [CPU_ONLY]
serve_load = benchmark_module("serve_load")


@pytest.fixture(scope="module")
def checkpoint(vllm_tree, tmp_path_factory) -> Path:
    return serve_load.write_checkpoint(serve_load.SHAPES["8B"], tmp_path_factory.mktemp("ck8b"))


def bench_args(argv: list[str]):
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    return parser.parse_args(argv)


def test_a_point_parses_as_vllm_bench_serve_and_samples_the_intended_mix(checkpoint, tmp_path):
    from transformers import AutoTokenizer
    from vllm.benchmarks.datasets import get_samples

    args = bench_args(serve_load.bench_argv(8123, 48, 5, tmp_path, "p.json"))
    assert (args.port, args.max_concurrency, args.num_prompts, args.seed) == (8123, 48, 120, 5)
    assert args.dataset_name == "random-mm" and args.backend == "openai-chat" and args.temperature == 0
    assert args.random_mm_bucket_config == {(256, 256, 1): 0.4, (512, 768, 1): 0.35, (1024, 1024, 1): 0.25}
    assert args.request_rate == float("inf") and args.ignore_eos and args.save_detailed
    args.num_prompts = 30
    samples = get_samples(args, AutoTokenizer.from_pretrained(checkpoint))
    images = [len(s.multi_modal_data or []) for s in samples]
    assert len(samples) == 30 and set(images) == {0, 1, 2}  # text-only requests among them
    assert all(384 <= s.expected_output_len <= 640 for s in samples)
    # The text part (the server counts the images); decoding and re-encoding random ids moves it a little.
    assert all(88 <= s.prompt_len <= 176 for s in samples)
    again = get_samples(args, AutoTokenizer.from_pretrained(checkpoint))
    assert [s.prompt for s in again] == [s.prompt for s in samples]  # the same seed, the same requests


def engine_args(parser, argv: list[str]):
    """What `vllm serve ARGV` hands the engine (the checkpoint is its positional model_tag)."""
    from vllm.engine.arg_utils import EngineArgs

    args = parser.parse_args(argv)
    args.model = args.model_tag
    return EngineArgs.from_cli_args(args)


def test_the_servers_commands_parse_as_vllm_serve(checkpoint):
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    for mode in serve_load.MODES:
        argv = serve_load.serve_argv(checkpoint, 8000, mode, ["--gpu-memory-utilization", "0.3015"])
        engine = engine_args(parser, argv)
        assert engine.offload_towers is (mode == "streamed")
        assert engine.load_format == "dummy" and engine.gpu_memory_utilization == 0.3015
        assert engine.limit_mm_per_prompt == {"image": 2, "video": 0}
    argv = serve_load.serve_argv(checkpoint, 1, "streamed", ["--kv-cache-memory-bytes", "5000"])
    assert engine_args(parser, argv).kv_cache_memory_bytes == 5000


@pytest.mark.parametrize("shape", sorted(serve_load.SHAPES))
def test_the_checkpoints_have_the_published_dimensions(shape, vllm_tree, tmp_path):
    from vllm.transformers_utils.config import get_config

    spec = serve_load.SHAPES[shape]
    config = get_config(str(serve_load.write_checkpoint(spec, tmp_path / shape)), trust_remote_code=False)
    text, vision = config.get_text_config(), config.vision_config
    for key, value in spec.text.items():
        assert getattr(text, key) == value, key
    assert (vision.depth, vision.hidden_size, vision.out_hidden_size) == (
        spec.vision["depth"],
        spec.vision["hidden_size"],
        text.hidden_size,
    )
    assert spec.kv_bytes_per_token == {"8B": 147456, "2B": 114688}[shape]


def test_utilization_is_the_budgets_share_of_the_card():
    GiB = serve_load.GiB
    util = serve_load.utilization_for(24 * GiB, 81559 * serve_load.MiB)  # an H100's nvidia-smi total
    assert util == 0.3013 and util * 81559 * serve_load.MiB <= 24 * GiB
    with pytest.raises(ValueError):
        serve_load.utilization_for(100 * GiB, 80 * GiB)


def test_the_probe_starts_as_a_vllm_plugin_in_a_fresh_process(vllm_tree, tmp_path):
    """vLLM's plugin loader finds the probe through the .dist-info alone; it samples every
    interval and takes a reset token once."""
    probe = tmp_path / "probe"
    path = serve_probe.plugin_path(probe / "plugin")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(path), str(vllm_tree), str(REPO)]),
        "VLLM_TARGET_DEVICE": "cpu",
        serve_probe.DIR_ENV: str(probe),
        serve_probe.INTERVAL_ENV: "0.05",
    }
    script = "from vllm.plugins import load_general_plugins; import time; load_general_plugins(); time.sleep(1.0)"
    (probe / "reset").write_text("token-1")
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    samples = serve_load.probe_samples(probe)
    assert len(samples) >= 5 and all(s["rss"] > 0 and s["reset"] == "token-1" for s in samples)
    assert "reserved" not in samples[0]  # no CUDA in that process: RSS alone
    assert serve_load.engine_window(samples, 0, "token-1") == {}


def test_the_servers_figures_are_read_from_vllms_log_and_metrics():
    log = "\n".join(
        [
            "INFO 12-06 [gpu_model_runner.py:442] Model loading took 15.22 GiB memory and 3.1 seconds",
            "INFO 12-06 [offloader] Streaming tower 'visual' from host memory (pinned, registered): 31 units,"
            " 1.07 GiB in total, largest unit 0.04 GiB; on the GPU from its first encode, a ring of 3 slots of 40.0 MiB.",
            "INFO 12-06 [gpu_worker.py:796] Available KV cache memory: 5.31 GiB",
            "INFO 12-06 [kv_cache_utils.py:1169] GPU KV cache size: 38,656 tokens, Maximum concurrency for 8,192"
            " tokens per request: 4.72x",
            "INFO 12-06 [core.py:452] init engine (profile, create kv cache, warmup model) took 41.20 s (compilation: 3.1 s)",
            "INFO 12-06 Directly load AOT compilation from path /tmp/x",
        ]
    )
    assert serve_load.log_figures(log) == {
        "kv_cache_tokens": 38656,
        "available_kv_gib": 5.31,
        "weights_gib": 15.22,
        "init_engine_s": 41.2,
        "streamed_tower_gib": 1.07,
        "compile_loaded_from_cache": True,
    }
    metrics = "\n".join(
        [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            'vllm:num_requests_running{engine="0",model_name="/tmp/ck"} 12.0',
            'vllm:num_preemptions_total{engine="0",model_name="/tmp/ck"} 3.0',
            'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="2416"} 1.0',
            'vllm:kv_cache_usage_perc{engine="0",model_name="/tmp/ck"} NaN',
        ]
    )
    assert serve_load.metric_values(metrics)["vllm:num_requests_running"] == 12.0
    assert serve_load.metric_values(metrics)["vllm:num_preemptions_total"] == 3.0
    assert "vllm:kv_cache_usage_perc" not in serve_load.metric_values(metrics)
    assert serve_load.metric_label(metrics, "vllm:cache_config_info", "num_gpu_blocks") == "2416"


def fake_point(mode: str, concurrency: int, throughput: float, p99_ttft: float) -> dict:
    figures = dict.fromkeys(serve_load.BENCH_FIGURES, 1.0)
    figures.update(output_throughput=throughput, p99_ttft_ms=p99_ttft, failed=0)
    server = {
        "peak_running": concurrency,
        "preemptions": 0,
        "gpu_peak_reserved_bytes": 3 << 30,
        "pinned_bytes": 1 << 30,
    }
    return {"mode": mode, "max_concurrency": concurrency, **figures, "server": server}


def fake_report() -> dict:
    server = {"kv_cache_tokens": 1000, "num_gpu_blocks": 62, "gpu_bytes_at_start": 24 << 30, "start_s": 50.0}
    return {
        "config": "utilization",
        "shape": "8B",
        "memory": "`--gpu-memory-utilization 0.3013`",
        "gpu": "NVIDIA H100 80GB HBM3",
        "vllm": "0.34.0+fork.0e829d00",
        "command": "python3 benchmarks/serve_load.py --out-dir x",
        "servers": {
            "resident": server,
            "streamed": {**server, "kv_cache_tokens": 1250, "gpu_bytes_at_start": 23 << 30},
        },
        "points": [
            fake_point("resident", 8, 1000, 200),
            fake_point("streamed", 8, 990, 210),
            fake_point("resident", 48, 2000, 9000),
            fake_point("streamed", 48, 2400, 6000),
        ],
        "compared": {"equal": True, "requests": 8, "equal_each": [True] * 8},
    }


def test_the_report_and_its_picture_render_from_a_run_of_the_written_format(tmp_path):
    report = fake_report()
    serve_load.write_report(tmp_path, report)
    written = json.loads((tmp_path / "serve_load_8B_utilization.json").read_text())
    assert written["summary"]["points"][1] == {
        "max_concurrency": 48,
        "output_throughput_ratio": 1.2,
        "p99_ttft_ratio": 0.667,
    }
    assert written["summary"]["kv_cache_tokens_ratio"] == 1.25 and written["summary"]["gpu_freed_bytes"] == 1 << 30
    markdown = (tmp_path / "serve_load_8B_utilization.md").read_text()
    assert "| 48 | streamed | 1.00 | 2400 |" in markdown and "8 requests one at a time" in markdown
    plots = benchmark_module("plots")
    results = tmp_path / "results"
    (results / "serve_load").mkdir(parents=True)
    (results / "serve_load" / "serve_load_8B_utilization.json").write_text(json.dumps(written))
    plots.plot_serve_load(results, tmp_path)
    assert (tmp_path / "serve_load.png").stat().st_size > 10_000


def test_the_smoke_run_writes_the_commands(vllm_tree, tmp_path):
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "serve_load.py"), "--smoke", "--out-dir", str(tmp_path / "out"),
         "--workdir", str(tmp_path / "work")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "serve_load_8B_utilization.json").read_text())
    assert report["commands"]["streamed"][-2:] == ["prefetch", "--offload-towers"]
    assert report["bench_argv"][:3] == ["vllm", "bench", "serve"]
    assert time.monotonic() - started < 300


def test_a_run_draws_its_own_picture_beside_its_report(tmp_path, capsys):
    """The committed fixed-KV run (real figures, the other configuration's title) drawn as the
    run itself draws it at its end."""
    benchmark_module("plots")  # what `python3 benchmarks/serve_load.py` finds beside itself
    report = json.loads((REPO / "benchmarks/results/serve_load/serve_load_8B_kv.json").read_text())
    serve_load.draw(tmp_path, report)
    assert (tmp_path / "serve_load_8B_kv.png").stat().st_size > 10_000
    assert f"picture {tmp_path / 'serve_load_8B_kv.png'}" in capsys.readouterr().out


def test_runs_of_two_wheels_merge_with_each_runs_wheel_and_the_heaviest_check():
    # The committed 8B report: concurrencies 8-48 on one wheel, 96 on another, each run
    # with servers of its own and a check of the same requests one at a time after it.
    committed = json.loads((REPO / "benchmarks/results/serve_load/serve_load_8B_utilization.json").read_text())
    runs = []
    for run in committed["runs"]:
        r = {k: v for k, v in committed.items() if k not in ("runs", "summary", "compared")}
        r.update(command=run["command"], servers=run["servers"], vllm=run["vllm"], wheel=run["wheel"])
        r["points"] = [p for p in committed["points"] if p["max_concurrency"] in run["concurrencies"]]
        r["compared"] = {**committed["compared"], "equal": run["compared_equal"], "marker": run["wheel"]}
        runs.append(r)
    assert len({r["wheel"] for r in runs}) == 2

    merged = serve_load.merge(runs)

    assert [r["wheel"] for r in merged["runs"]] == [r["wheel"] for r in runs]
    assert merged["compared"]["marker"] == runs[-1]["wheel"]  # the check after the heaviest point
    assert merged["vllm"] == ", ".join(r["vllm"] for r in runs) and "wheel" not in merged
    text = serve_load.markdown({**merged, "summary": serve_load.summary(merged)})
    assert "(the built wheels)" in text
    for r in runs:
        assert f"; `{r['wheel']}`; then the same token ids one at a time)" in text
