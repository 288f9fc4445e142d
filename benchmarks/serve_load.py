"""What `--offload-towers` buys under load: `vllm serve` resident against streamed, driven by
vLLM's own load generator (`vllm bench serve`, its multimodal random dataset).

    python3 benchmarks/serve_load.py --out-dir DIR [--config utilization|kv] [--shape 8B|2B]

One GPU, vLLM installed (on this project's machines: `bash benchmarks/gpu/run.sh serveload`,
the built wheel). A Qwen3-VL checkpoint of the shape's full-size text and vision configs is
made on the spot (`vllm_fork_testkit/vlm_checkpoint.py`; its tokenizer is trained on the spot
and covers the model's first few hundred ids; `load_format="dummy"`). Two servers run side by
side on the card, each on the same memory budget, with vLLM's defaults otherwise
(torch.compile, CUDA graphs; one compile cache, which the streamed server loads):

- `--config utilization`: `--gpu-memory-utilization` set so that each engine's total is the
  shape's budget (24 GiB for 8B): the streamed server's KV cache is larger;
- `--config kv`: `--kv-cache-memory-bytes` the same for both (default: what the resident
  server got in the last `utilization` run on this machine): the memory the streamed server
  leaves free on the GPU.

At each point of a sweep of concurrencies (`vllm bench serve --max-concurrency C` with all
requests queued at once, the same dataset and seed for both servers, one point after the
other, alternating servers) it records vLLM's own figures (request and output-token
throughput, TTFT, TPOT and ITL percentiles, failures), the server's (running and waiting
requests and KV cache use at their peaks, preemptions, from `/metrics`), and what the engine
process holds (GPU memory peak, pinned host bytes, bytes the tower streamer copied, from a
probe plugin inside it: `vllm_fork_testkit/serve_probe.py`) and the processes' RSS. After the
last point, a fixed set of requests (images of several sizes, one text-only), one at a time
at temperature 0: their token ids must be the same from both servers.

Writes `serve_load_<shape>_<config>.json` and `.md` into `--out-dir` after every point (a run cut
short keeps what it measured) and, at the end, its picture (`.png`, where matplotlib is
installed); `--smoke` writes the checkpoint and the commands, runs nothing (no GPU needed).
Without `--budget-s` every point runs (a device call here has 600 s: run.sh passes one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fork.core.fs import write_atomic
from vllm_fork_testkit import serve_probe
from vllm_fork_testkit.vlm_checkpoint import VISION, VISION_QWEN3_2B, image_data_url, image_of_tokens, make_checkpoint

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30
MiB = 1 << 20
MODES = ("resident", "streamed")
STREAMED_FLAGS = ["--offload-backend", "prefetch", "--offload-towers"]


@dataclass(frozen=True)
class Shape:
    """A published Qwen3-VL checkpoint's dimensions (text and vision configs) and the memory
    budget the benchmark gives it."""

    text: dict
    vision: dict
    budget_gib: float
    concurrencies: tuple[int, ...]

    @property
    def kv_bytes_per_token(self) -> int:
        t = self.text
        return t["num_hidden_layers"] * 2 * t["num_key_value_heads"] * t["head_dim"] * 2  # K and V, bf16


#: Qwen3-VL-8B-Instruct's and Qwen3-VL-2B-Instruct's config.json (text_config; vision_config is
#: vlm_checkpoint's VISION and VISION_QWEN3_2B).
SHAPES = {
    "8B": Shape(
        text={
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 262144,
            "tie_word_embeddings": False,
        },
        vision=VISION,
        budget_gib=24,
        concurrencies=(8, 24, 48, 96),
    ),
    "2B": Shape(
        text={
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 262144,
            "tie_word_embeddings": True,
        },
        vision=VISION_QWEN3_2B,
        budget_gib=12,
        concurrencies=(8, 32, 96),
    ),
}

#: Server options beyond vLLM's defaults: dummy weights, a context that holds every request
#: here, and at most two images per prompt (what the dataset sends; vLLM sizes its encoder
#: profile from it).
SERVE_OPTIONS = [
    "--load-format", "dummy",
    "--max-model-len", "8192",
    "--seed", "0",
    "--limit-mm-per-prompt", '{"image": 2, "video": 0}',
]  # fmt: skip

#: `vllm bench serve`'s dataset: 0, 1 or 2 images a request (a third of the requests
#: text-only), of three sizes (64, 384 and 1024 image tokens), 96-160 text tokens and
#: 384-640 output tokens (EOS ignored).
DATASET = [
    "--backend", "openai-chat",
    "--endpoint", "/v1/chat/completions",
    "--dataset-name", "random-mm",
    "--random-input-len", "128",
    "--random-output-len", "512",
    "--random-range-ratio", "0.25",
    "--random-mm-base-items-per-request", "1",
    "--random-mm-num-mm-items-range-ratio", "1",
    "--random-mm-limit-mm-per-prompt", '{"image": 2, "video": 0}',
    "--random-mm-bucket-config", "{(256, 256, 1): 0.4, (512, 768, 1): 0.35, (1024, 1024, 1): 0.25}",
    "--ignore-eos",
    "--temperature", "0",
    "--percentile-metrics", "ttft,tpot,itl,e2el",
    "--metric-percentiles", "50,90,99",
    "--disable-tqdm",
]  # fmt: skip
#: vLLM bench serve's figures kept per point (the rest are per-request lists).
BENCH_FIGURES = (
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "output_throughput", "total_token_throughput", "max_concurrent_requests",
    "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_ttft_ms",
    "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "mean_tpot_ms",
    "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms",
)  # fmt: skip
#: The requests compared between the servers after the sweep: image sizes in tokens (0: text only).
COMPARED_IMAGES = (64, 256, 1024, 0, 2223, 512, 128, 768)
COMPARED_MAX_TOKENS = 32


def prompts_at(concurrency: int) -> int:
    """Requests at one point: a few rounds of the concurrency, so the point reaches its
    steady state without running for minutes."""
    return max(32, 3 * concurrency) if concurrency < 48 else max(120, 2 * concurrency)


def bench_argv(port: int, concurrency: int, seed: int, result_dir: Path, name: str) -> list[str]:
    """`vllm bench serve`'s arguments for one point (after `vllm bench serve`)."""
    return [
        "--host", "127.0.0.1", "--port", str(port),
        *DATASET,
        "--seed", str(seed),
        "--num-prompts", str(prompts_at(concurrency)),
        "--max-concurrency", str(concurrency),
        "--request-rate", "inf",
        "--save-result", "--save-detailed",
        "--result-dir", str(result_dir), "--result-filename", name,
    ]  # fmt: skip


def serve_argv(checkpoint: Path, port: int, mode: str, memory: list[str]) -> list[str]:
    """`vllm serve`'s arguments (after `vllm serve`)."""
    flags = STREAMED_FLAGS if mode == "streamed" else []
    return [str(checkpoint), "--host", "127.0.0.1", "--port", str(port), *SERVE_OPTIONS, *memory, *flags]


def utilization_for(budget_bytes: int, total_bytes: int) -> float:
    """The `--gpu-memory-utilization` whose share of the card is `budget_bytes` (vLLM takes
    `utilization x total` as the engine's whole budget), rounded down."""
    if budget_bytes >= total_bytes:
        raise ValueError(f"a budget of {budget_bytes / GiB:.1f} GiB does not fit a card of {total_bytes / GiB:.1f} GiB")
    return int(budget_bytes / total_bytes * 10000) / 10000


def write_checkpoint(shape: Shape, directory: Path) -> Path:
    """The shape's checkpoint: make_checkpoint's tokenizer and processor, with the shape's
    full text and vision configs."""
    make_checkpoint("qwen3_vl", directory, max_position_embeddings=shape.text["max_position_embeddings"])
    config_file = directory / "config.json"
    config = json.loads(config_file.read_text())
    config["text_config"].update(shape.text)
    config["vision_config"] = {**shape.vision, "initializer_range": 0.02}
    config["tie_word_embeddings"] = shape.text["tie_word_embeddings"]
    config_file.write_text(json.dumps(config, indent=2))
    return directory


# -- reading the server -------------------------------------------------------------------

LOG_FIGURES = {
    "kv_cache_tokens": (re.compile(r"KV cache size: ([\d,]+) tokens"), lambda s: int(s.replace(",", ""))),
    "available_kv_gib": (re.compile(r"Available KV cache memory: ([\d.]+) GiB"), float),
    "weights_gib": (re.compile(r"Model loading took ([\d.]+) GiB memory"), float),
    "init_engine_s": (re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"), float),
    "streamed_tower_gib": (
        re.compile(r"Streaming tower '\w+' from host memory \([^)]*\): \d+ units, ([\d.]+) GiB"),
        float,
    ),
}


def log_figures(text: str) -> dict:
    """The server log's figures (LOG_FIGURES; absent ones left out), and whether its compiled
    graph came from the compile cache."""
    found = {}
    for name, (pattern, convert) in LOG_FIGURES.items():
        matches = pattern.findall(text)
        if matches:  # the last: vLLM's extensible KV cache settles its size after warmup
            found[name] = convert(matches[-1])
    found["compile_loaded_from_cache"] = "Directly load" in text
    return found


METRIC_LINE = re.compile(r"^([a-zA-Z_:]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$")


def metric_values(text: str) -> dict[str, float]:
    """Prometheus text: each sample's value summed over its labels, by name."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = METRIC_LINE.match(line)
        if match and match.group(3) != "NaN":
            values[match.group(1)] = values.get(match.group(1), 0.0) + float(match.group(3))
    return values


def metric_label(text: str, name: str, label: str) -> str | None:
    match = re.search(rf'^{re.escape(name)}\{{[^}}]*\b{label}="([^"]*)"', text, re.M)
    return match.group(1) if match else None


def gpu_memory() -> tuple[int, int, str]:
    """The card's used and total bytes and its name (nvidia-smi, which holds no CUDA context)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used,memory.total,name", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[0]
    used, total, name = (part.strip() for part in out.split(",", 2))
    return int(used) * MiB, int(total) * MiB, name


def probe_samples(directory: Path) -> list[dict]:
    samples = []
    for path in directory.glob("probe-*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                samples.append({"pid": int(path.stem.split("-")[1]), **json.loads(line)})
            except ValueError:
                continue  # a line cut short by a read during its write
    return samples


def engine_window(samples: list[dict], since: float, token: str) -> dict:
    """The engine process's figures over a point: peaks since the point's reset, last values."""
    engine = [s for s in samples if "reserved" in s and s["t"] >= since and s.get("reset") == token]
    if not engine:
        return {}
    first, last = engine[0], engine[-1]
    figures = {
        "gpu_peak_allocated_bytes": max(s["peak_allocated"] for s in engine),
        "gpu_peak_reserved_bytes": max(s["peak_reserved"] for s in engine),
        "pinned_bytes": last["pinned"],
        "pinned_peak_bytes": max(s["pinned"] for s in engine),
        "engine_rss_peak_bytes": max(s["rss"] for s in engine),
    }
    if "tower_copied" in last:
        figures["tower_copied_bytes"] = last["tower_copied"] - first["tower_copied"]
        figures["tower_host_bytes"] = last["tower_host"]
    return figures


@dataclass
class Server:
    mode: str
    process: subprocess.Popen
    port: int
    log: Path
    probe_dir: Path
    argv: list[str]
    started_s: float = 0.0
    gpu_bytes: int = 0  # the card's memory this server took at start (nvidia-smi, before and after)
    facts: dict = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 10) -> str:
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as response:
            return response.read().decode()

    def post(self, path: str, body: dict, timeout: float = 120) -> dict:
        request = urllib.request.Request(
            self.base_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def rss(self) -> dict[str, int]:
        import psutil

        figures = {}
        api = psutil.Process(self.process.pid)
        for proc in [api, *api.children(recursive=True)]:
            try:
                figures[f"{proc.name()}:{proc.pid}"] = proc.memory_info().rss
            except psutil.Error:
                pass
        return figures

    def reset_peaks(self) -> tuple[float, str]:
        token = f"{time.time():.6f}"
        write_atomic(self.probe_dir / "reset", token)
        time.sleep(1.2)  # two probe intervals: the engine has read it
        return time.time(), token


def stop_on_sigterm() -> None:
    """`timeout` sends SIGTERM: leave through the servers' cleanup, as on Ctrl-C."""

    def leave(signum, frame):
        raise SystemExit(f"serve_load: signal {signum}, stopping the servers")

    signal.signal(signal.SIGTERM, leave)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(cache_root: Path, probe_dir: Path) -> dict[str, str]:
    path = [str(serve_probe.plugin_path(probe_dir / "plugin")), str(ROOT)]
    env = dict(os.environ)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
            "VLLM_LOGGING_LEVEL": "INFO",
            serve_probe.DIR_ENV: str(probe_dir),
            # One compile cache for both servers: the streamed one loads the resident one's.
            "VLLM_CACHE_ROOT": str(cache_root / "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": str(cache_root / "inductor"),
            "TRITON_CACHE_DIR": str(cache_root / "triton"),
        }
    )
    return env


@contextmanager
def vllm_serve(mode: str, checkpoint: Path, memory: list[str], workdir: Path, cache_root: Path, timeout: float = 400):
    """Start `vllm serve` (resident or streamed) and yield it once healthy; stop it after."""
    port = free_port()
    probe_dir = workdir / f"probe-{mode}"
    probe_dir.mkdir(parents=True, exist_ok=True)
    argv = serve_argv(checkpoint, port, mode, memory)
    log = workdir / f"serve-{mode}.log"
    used_before = gpu_memory()[0]
    started = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_env(cache_root, probe_dir),
            start_new_session=True,
        )
    server = Server(mode, process, port, log, probe_dir, argv)
    # Each server leads a session of its own (its engine core dies with it): if this process is
    # killed without its cleanup, run.sh ends the sessions named here.
    with open(workdir / "servers.pids", "a") as pids:
        pids.write(f"{process.pid}\n")
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"vllm serve ({mode}) exited {process.returncode}:\n{log.read_text()[-4000:]}")
            try:
                server.get("/health", timeout=2)
                break
            except OSError:
                pass
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"vllm serve ({mode}) not healthy in {timeout:.0f} s:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        server.started_s = time.monotonic() - started
        time.sleep(2)  # the engine settles (its last frees) before the card is read
        server.gpu_bytes = gpu_memory()[0] - used_before
        metrics = server.get("/metrics")
        blocks = metric_label(metrics, "vllm:cache_config_info", "num_gpu_blocks")
        block_size = metric_label(metrics, "vllm:cache_config_info", "block_size")
        extensible = metric_label(metrics, "vllm:cache_config_info", "enable_extensible_kv_cache")
        server.facts = {
            "argv": ["vllm", "serve", *argv],
            "start_s": round(server.started_s, 1),
            "gpu_bytes_at_start": server.gpu_bytes,
            "num_gpu_blocks": int(blocks) if blocks and blocks.isdigit() else None,
            "block_size": int(block_size) if block_size and block_size.isdigit() else None,
            "extensible_kv_cache": extensible,
            **log_figures(log.read_text(errors="replace")),
        }
        yield server
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class MetricsWatch:
    """/metrics read every half second while a point runs: the gauges' peaks and the
    preemptions counted during it."""

    GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")

    def __init__(self, server: Server):
        self.server = server
        self.peaks = dict.fromkeys(self.GAUGES, 0.0)
        self.gpu_used_peak = 0
        self.stop = threading.Event()
        self.first = self.last = {}
        self.thread = threading.Thread(target=self.run, daemon=True)

    def read(self) -> dict[str, float]:
        values = metric_values(self.server.get("/metrics"))
        for gauge in self.GAUGES:
            self.peaks[gauge] = max(self.peaks[gauge], values.get(gauge, 0.0))
        return values

    def run(self) -> None:
        while not self.stop.wait(0.5):
            try:
                self.last = self.read()
                self.gpu_used_peak = max(self.gpu_used_peak, gpu_memory()[0])
            except (OSError, subprocess.CalledProcessError):
                pass

    def __enter__(self) -> MetricsWatch:
        self.first = self.last = self.read()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self.last = self.read()

    def figures(self) -> dict:
        def counted(name: str) -> float:
            return self.last.get(name, 0.0) - self.first.get(name, 0.0)

        return {
            "peak_running": int(self.peaks["vllm:num_requests_running"]),
            "peak_waiting": int(self.peaks["vllm:num_requests_waiting"]),
            "peak_kv_cache_usage": round(self.peaks["vllm:kv_cache_usage_perc"], 4),
            "preemptions": int(counted("vllm:num_preemptions_total")),
            "prompt_tokens": int(counted("vllm:prompt_tokens_total")),
            "card_used_peak_bytes": self.gpu_used_peak,
        }


def run_bench(argv: list[str]) -> dict:
    """`vllm bench serve ARGV`, in this process: vLLM's own parser and entry point (what the
    CLI subcommand runs), without a new interpreter's import time at every point."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    return main(parser.parse_args(argv))


def bench_point(server: Server, concurrency: int, seed: int, workdir: Path) -> dict:
    name = f"bench-{server.mode}-c{concurrency}.json"
    argv = bench_argv(server.port, concurrency, seed, workdir, name)
    since, token = server.reset_peaks()
    with MetricsWatch(server) as watch:
        started = time.monotonic()
        run_bench(argv)
        wall = time.monotonic() - started
    time.sleep(1.0)  # the probe's last sample of the point
    raw = json.loads((workdir / name).read_text())
    (workdir / name).unlink()  # per-request lists: the figures below are what is kept
    errors = sorted({e for e in raw.get("errors", []) if e})
    return {
        "mode": server.mode,
        "max_concurrency": concurrency,
        "num_prompts": prompts_at(concurrency),
        "seed": seed,
        "bench_argv": ["vllm", "bench", "serve", *argv],
        "wall_s": round(wall, 1),
        **{k: raw.get(k) for k in BENCH_FIGURES},
        "errors": errors[:5],
        "server": {
            **watch.figures(),
            **engine_window(probe_samples(server.probe_dir), since, token),
            "rss_bytes": server.rss(),
        },
    }


def compared_requests(server: Server) -> list[dict]:
    """The fixed requests, one at a time, temperature 0: token ids and prompt lengths."""
    replies = []
    for seed, tokens in enumerate(COMPARED_IMAGES):
        content: list[dict] = [{"type": "text", "text": "Describe the picture in one sentence."}]
        if tokens:
            url = image_data_url(image_of_tokens(tokens, seed=100 + seed, smooth=True))
            content.insert(0, {"type": "image_url", "image_url": {"url": url}})
        body = {
            "model": server.argv[0],
            "messages": [{"role": "user", "content": content}],
            "max_tokens": COMPARED_MAX_TOKENS,
            "temperature": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        started = time.monotonic()
        try:
            reply = server.post("/v1/chat/completions", body)
            choice = reply["choices"][0]
            replies.append(
                {
                    "image_tokens": tokens,
                    "prompt_tokens": reply["usage"]["prompt_tokens"],
                    "token_ids": choice.get("token_ids"),
                    "seconds": round(time.monotonic() - started, 3),
                }
            )
        except (OSError, KeyError, ValueError) as error:
            replies.append({"image_tokens": tokens, "error": repr(error)})
    return replies


def compare(replies: dict[str, list[dict]]) -> dict:
    """Whether both servers gave the same tokens for every compared request."""
    resident, streamed = replies.get("resident"), replies.get("streamed")
    if not resident or not streamed:
        return {"equal": None, "requests": 0}
    same = [
        a.get("token_ids") is not None and a.get("token_ids") == b.get("token_ids") for a, b in zip(resident, streamed)
    ]
    return {"equal": all(same) and len(same) == len(COMPARED_IMAGES), "requests": len(same), "equal_each": same}


# -- the report ---------------------------------------------------------------------------


def summary(report: dict) -> dict:
    """Per concurrency, streamed over resident: throughput, p99 TTFT, KV tokens."""
    by = {(p["mode"], p["max_concurrency"]): p for p in report["points"]}
    rows = []
    for c in sorted({c for _, c in by}):
        r, s = by.get(("resident", c)), by.get(("streamed", c))
        if r and s and r.get("output_throughput") and s.get("output_throughput"):
            rows.append(
                {
                    "max_concurrency": c,
                    "output_throughput_ratio": round(s["output_throughput"] / r["output_throughput"], 3),
                    "p99_ttft_ratio": round(s["p99_ttft_ms"] / r["p99_ttft_ms"], 3) if r["p99_ttft_ms"] else None,
                }
            )
    servers = report["servers"]
    out: dict = {"points": rows}
    if all(servers.get(m, {}).get("kv_cache_tokens") for m in MODES):
        out["kv_cache_tokens_ratio"] = round(
            servers["streamed"]["kv_cache_tokens"] / servers["resident"]["kv_cache_tokens"], 3
        )
    if all(servers.get(m, {}).get("gpu_bytes_at_start") for m in MODES):
        out["gpu_freed_bytes"] = servers["resident"]["gpu_bytes_at_start"] - servers["streamed"]["gpu_bytes_at_start"]
    return out


def markdown(report: dict) -> str:
    s = report["summary"]
    lines = [
        f"# `vllm serve` under load: resident vs `--offload-towers` ({report['config']})",
        "",
        f"Qwen3-VL-{report['shape']} shape (full-size text and vision configs, dummy weights), {report['memory']},",
        f"{report['gpu']}, vLLM {report['vllm']} (the built wheel{'s' if ', ' in report['vllm'] else ''}"
        f"{': `' + report['wheel'] + '`' if report.get('wheel') else ''})."
        " `vllm bench serve`, random-mm dataset"
        " (0-2 images of 64/384/1024 tokens, 96-160 text tokens, 384-640 output tokens), all requests queued"
        " at once under `--max-concurrency`.",
        "",
        "| server | KV cache tokens | GPU blocks | card memory at start | weights | start |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode in MODES:
        f = report["servers"].get(mode)
        if f:
            lines.append(
                f"| {mode} | {f.get('kv_cache_tokens', '?'):,} | {f.get('num_gpu_blocks') or '?'}"
                f" | {f['gpu_bytes_at_start'] / GiB:.2f} GiB | {f.get('weights_gib', '?')} GiB | {f['start_s']} s |"
            )
    lines += [
        "",
        "| concurrency | server | req/s | output tok/s | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) | peak running |"
        " preemptions | failed | engine's torch reserved, peak | pinned (caching allocator) | tower copied (passes) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in sorted(report["points"], key=lambda p: (p["max_concurrency"], p["mode"])):
        v = p["server"]
        copied, tower = v.get("tower_copied_bytes"), v.get("tower_host_bytes")
        passes = "-" if copied is None else f"{copied / GiB:.1f} GiB ({copied / tower:.0f})"
        lines.append(
            f"| {p['max_concurrency']} | {p['mode']} | {p['request_throughput']:.2f} | {p['output_throughput']:.0f}"
            f" | {p['median_ttft_ms']:.0f} / {p['p99_ttft_ms']:.0f} | {p['median_tpot_ms']:.1f} / {p['p99_tpot_ms']:.1f}"
            f" | {v['peak_running']} | {v['preemptions']} | {p['failed']}"
            f" | {v.get('gpu_peak_reserved_bytes', 0) / GiB:.2f} GiB | {v.get('pinned_bytes', 0) / MiB:.0f} MiB"
            f" | {passes} |"
        )
    lines += [
        "",
        "The engine's torch reserved peak leaves out vLLM's extensible KV cache (mapped outside torch's"
        " allocator; with `--kv-cache-memory-bytes` the cache is in it). Pinned: PyTorch's caching host"
        " allocator (vLLM's staging buffers); the streamed tower's host copy is pinned apart from it and is in"
        " the engine's RSS. Tower passes: bytes copied over the tower's bytes.",
        "",
    ]
    for row in s["points"]:
        lines.append(
            f"- concurrency {row['max_concurrency']}: streamed output throughput {row['output_throughput_ratio']:.3f}x"
            f" resident, p99 TTFT {row['p99_ttft_ratio']}x."
        )
    if "kv_cache_tokens_ratio" in s:
        lines.append(f"- KV cache: streamed {s['kv_cache_tokens_ratio']:.3f}x resident's tokens.")
    if "gpu_freed_bytes" in s:
        lines.append(f"- The streamed server took {s['gpu_freed_bytes'] / GiB:.2f} GiB less of the card at start.")
    if report.get("skipped_concurrencies"):
        skipped = ", ".join(map(str, report["skipped_concurrencies"]))
        lines.append(f"- Not run: concurrencies {skipped} (they would not have ended within `--budget-s`).")
    eq = report.get("compared", {})
    if eq.get("equal") is not None:
        verdict = "the same token ids" if eq["equal"] else f"different tokens ({eq['equal_each']})"
        lines.append(f"- {eq['requests']} requests one at a time after the sweep, temperature 0: {verdict}.")
    runs = report.get("runs") or [{"command": report["command"]}]
    lines += ["", "Command" + ("s" if len(runs) > 1 else "") + ":"]
    for run in runs:
        ran = f" (concurrencies {', '.join(map(str, run['concurrencies']))}" if "concurrencies" in run else ""
        if ran and run.get("wheel"):
            ran += f"; `{run['wheel']}`"
        if ran and run.get("compared_equal") is not None:
            ran += "; then the same token ids one at a time" if run["compared_equal"] else "; then different tokens"
        lines.append(f"- `{run['command']}`{ran + ')' if ran else ''}")
    lines.append("")
    return "\n".join(lines)


def write_report(out_dir: Path, report: dict) -> None:
    report["summary"] = summary(report)
    name = f"serve_load_{report['shape']}_{report['config']}"
    write_atomic(out_dir / f"{name}.json", json.dumps(report, indent=1) + "\n")
    write_atomic(out_dir / f"{name}.md", markdown(report))


def draw(out_dir: Path, report: dict) -> None:
    """The run's picture beside its report, as the README shows the committed one."""
    try:
        from plots import draw_serve_load
    except ImportError as error:  # matplotlib is the fork's dependency, not vLLM's
        print(f"serve_load: no picture ({error}); `python benchmarks/plots.py` draws the committed results")
        return
    path = out_dir / f"serve_load_{report['shape']}_{report['config']}.png"
    draw_serve_load(report, path)
    print(f"serve_load: picture {path}", flush=True)


def merge(reports: list[dict]) -> dict:
    """One report from runs of the same shape and configuration, each with servers of its own
    (a call of this project's device takes part of a sweep): the first run's servers, every
    run's points, each run's command, servers and concurrencies under `runs`."""
    first = reports[0]
    if any(
        (r["shape"], r["config"], r["memory"]) != (first["shape"], first["config"], first["memory"]) for r in reports
    ):
        raise ValueError("serve_load: merge runs of one shape, configuration and memory budget only")
    merged = {**first, "points": [p for r in reports for p in r["points"]]}
    merged["runs"] = [
        {
            "command": r["command"],
            "concurrencies": sorted({p["max_concurrency"] for p in r["points"]}),
            "servers": r["servers"],
            "vllm": r["vllm"],
            "wheel": r.get("wheel"),
            "compared_equal": r.get("compared", {}).get("equal"),
        }
        for r in reports
    ]
    # The check after the heaviest point is the one that answers for the sweep.
    checked = [r for r in reports if r.get("compared", {}).get("equal") is not None]
    if checked:
        merged["compared"] = max(checked, key=lambda r: max(p["max_concurrency"] for p in r["points"]))["compared"]
    merged["vllm"] = ", ".join(dict.fromkeys(r["vllm"] for r in reports))
    merged.pop("wheel", None)  # each run names its own
    merged.pop("skipped_concurrencies", None)
    return merged


# -- the run ------------------------------------------------------------------------------


def memory_flags(args: argparse.Namespace, shape: Shape, total: int, state: Path) -> tuple[list[str], str]:
    """The servers' memory flags and the report's words for them."""
    if args.config == "utilization":
        util = utilization_for(int(shape.budget_gib * GiB), total)
        return [
            "--gpu-memory-utilization",
            str(util),
        ], f"`--gpu-memory-utilization {util}` ({shape.budget_gib:g} GiB of the card)"
    kv = args.kv_cache_memory_bytes
    if kv is None:
        previous = state / f"kv-{args.shape}.txt"
        if not previous.exists():
            raise SystemExit(
                f"serve_load.py: --config kv needs --kv-cache-memory-bytes (no {previous} from a utilization run)"
            )
        kv = int(previous.read_text())
    # vLLM sizes nothing from the utilization then, but checks at start that the card has it free:
    # the budget's, which two servers side by side have.
    util = utilization_for(int(shape.budget_gib * GiB), total)
    flags = ["--kv-cache-memory-bytes", str(kv), "--gpu-memory-utilization", str(util)]
    return flags, f"`--kv-cache-memory-bytes {kv}` ({kv / GiB:.2f} GiB) for both"


def vllm_version() -> str:
    from importlib.metadata import version

    return version("vllm")


def sweep(args: argparse.Namespace, report: dict, servers: dict[str, Server], started: float) -> None:
    concurrencies = args.concurrencies or SHAPES[args.shape].concurrencies
    last_pair = 0.0
    for index, concurrency in enumerate(concurrencies):
        elapsed = time.monotonic() - started
        # The next pair takes about as long as the last, scaled by its output tokens.
        estimate = last_pair * prompts_at(concurrency) / prompts_at(concurrencies[index - 1]) if index else 0
        if args.budget_s is not None and elapsed + estimate > args.budget_s - 45:
            report["skipped_concurrencies"] = list(concurrencies[index:])
            print(f"serve_load: budget: skipping concurrencies {concurrencies[index:]}", flush=True)
            break
        pair_started = time.monotonic()
        for mode in MODES:
            try:
                point = bench_point(servers[mode], concurrency, args.seed + index, args.workdir)
            except Exception as error:  # the other points still run; the report names it
                report.setdefault("point_errors", []).append(f"{mode} c={concurrency}: {error!r}")
                print(f"serve_load: {mode} c={concurrency} failed: {error!r}", flush=True)
                continue
            report["points"].append(point)
            print(
                f"serve_load: {mode} c={concurrency}: {point['output_throughput']:.0f} tok/s,"
                f" p99 TTFT {point['p99_ttft_ms']:.0f} ms, failed {point['failed']}, {point['server']}",
                flush=True,
            )
            write_report(args.out_dir, report)
        last_pair = time.monotonic() - pair_started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--config", choices=("utilization", "kv"), default="utilization")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="8B")
    parser.add_argument("--concurrencies", type=lambda s: tuple(int(c) for c in s.split(",")), default=None)
    parser.add_argument("--kv-cache-memory-bytes", type=int, default=None, help="--config kv: both servers' KV cache")
    parser.add_argument("--seed", type=int, default=0, help="the first point's dataset seed (one more per point)")
    parser.add_argument(
        "--budget-s", type=float, default=None, help="skip the points that would not end in it (default: run all)"
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/serve-load"), help="checkpoint, logs, caches")
    parser.add_argument("--no-compare", action="store_true", help="skip the fixed requests after the sweep")
    parser.add_argument("--smoke", action="store_true", help="write the checkpoint and the commands only")
    args = parser.parse_args(argv)
    if args.smoke:  # transformers' Qwen processors import torchvision, whose ops a CPU torch may lack
        from vllm_fork_testkit.vllm_tree import let_torchvision_import_without_its_ops

        let_torchvision_import_without_its_ops()
    started = time.monotonic()
    shape = SHAPES[args.shape]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = write_checkpoint(shape, args.workdir / f"qwen3-vl-{args.shape}")
    total = gpu_memory()[1] if not args.smoke else 80 * GiB
    memory, words = memory_flags(args, shape, total, args.workdir)
    report: dict = {
        "benchmark": "serve_load",
        "command": shlex.join(["python3", "benchmarks/serve_load.py", *(argv if argv is not None else sys.argv[1:])]),
        "config": args.config,
        "shape": args.shape,
        "memory": words,
        "serve_options": SERVE_OPTIONS + memory,
        "dataset": DATASET,
        "points": [],
        "servers": {},
    }
    if args.smoke:
        report.update(gpu="not run (--smoke)", vllm="not run", standins=None)
        report["commands"] = {m: ["vllm", "serve", *serve_argv(checkpoint, 8000, m, memory)] for m in MODES}
        report["bench_argv"] = ["vllm", "bench", "serve", *bench_argv(8000, 8, args.seed, args.workdir, "x.json")]
        write_report(args.out_dir, report)
        return
    report.update(gpu=gpu_memory()[2], vllm=vllm_version(), standins=False)
    stop_on_sigterm()
    cache_root = args.workdir / "compile-cache"
    pids = args.workdir / "servers.pids"
    pids.unlink(missing_ok=True)
    with ExitStack() as stack:
        stack.callback(pids.unlink, missing_ok=True)  # runs last: the servers stopped
        servers: dict[str, Server] = {}
        for mode in MODES:  # resident first: it compiles, the streamed server loads its compile
            servers[mode] = stack.enter_context(vllm_serve(mode, checkpoint, memory, args.workdir, cache_root))
            report["servers"][mode] = servers[mode].facts
            print(f"serve_load: {mode} server up: {servers[mode].facts}", flush=True)
        if args.config == "utilization" and "kv_cache_tokens" in report["servers"]["resident"]:
            kv = report["servers"]["resident"]["kv_cache_tokens"] * shape.kv_bytes_per_token
            write_atomic(args.workdir / f"kv-{args.shape}.txt", str(kv))
        write_report(args.out_dir, report)
        for mode in MODES:  # vLLM's lazy first-use work (kernels, the tower's ring), not measured
            run_bench(bench_argv(servers[mode].port, 16, 999, args.workdir, "warmup.json"))
        sweep(args, report, servers, started)
        if not args.no_compare:
            replies = {mode: compared_requests(servers[mode]) for mode in MODES}
            report["compared"] = {**compare(replies), "replies": replies}
        for mode in MODES:
            report["servers"][mode]["rss_bytes_end"] = servers[mode].rss()
            report["servers"][mode]["health_end"] = servers[mode].get("/health") == ""
        write_report(args.out_dir, report)
    if report["points"]:
        draw(args.out_dir, report)
    print(markdown(report))


if __name__ == "__main__":
    main()
