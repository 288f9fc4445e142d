"""Resident vs `--offload-towers` in vLLM's engine: memory and request latency.

One run, one GPU, the patched vLLM Python tree (on the GPU test machine:
`bash .gpu/run.sh python3 benchmarks/engine_offload.py --out-dir DIR`). A
Qwen3-VL checkpoint with a full-size 8B vision tower is made on the spot
(`vllm_fork_testkit/vlm_checkpoint.py`, dummy weights); each mode runs in its own
process (`python -m vllm_fork_testkit.engine_probe`). Reports weights on the GPU, KV cache
capacity, pinned host bytes, RSS, and the latency of a one-image request
(2223 image tokens, a new image each time): first token (`max_tokens=1`)
and total (`max_tokens=16`), median over the repeats. The same run then
times the tower alone (`benchmarks/tower_streaming.py`: one 2223-token
encode resident, streamed and through the UVA offloader, the H2D floor), so
the engine figures and the encode figures come from one command on one
machine.

Writes `engine_offload.json` and `engine_offload.md` into `--out-dir`.

`--smoke` (no GPU needed, about 20 s on the CPU) runs for real what can
run without one: the argument handling, the checkpoint (made and read back, and
the probe's 2223-token latency request through its processor), the tower
benchmark's own `--smoke` (a tiny tower resident and streamed on the CPU, in a
child process), and the report written from what ran. The engine probes need
CUDA: they are not run, the report says so in every engine figure's cell
("not run (needs CUDA)") and lists the command each would have run.
tests/patches/test_engine_offload_smoke.py runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vllm_fork.core.fs import write_atomic
from vllm_fork_testkit import engine_probe
from vllm_fork_testkit.compile_caches import compile_cache_env
from vllm_fork_testkit.kernels import kernels_sentence

ROOT = Path(__file__).resolve().parents[1]


MiB = 1 << 20
#: Each mode: the probe's --mode and its flags. Bare: eager. "+compiled": vLLM's defaults
#: (the decoder compiled, its CUDA graphs), what users run. "+graphs": those and vLLM's
#: encoder CUDA graphs.
PROBE_MODES = {
    "resident": ("resident", []),
    "streamed": ("streamed", []),
    "resident+compiled": ("resident", ["--cudagraphs"]),
    "streamed+compiled": ("streamed", ["--cudagraphs"]),
    "resident+graphs": ("resident", ["--encoder-cudagraphs"]),
    "streamed+graphs": ("streamed", ["--encoder-cudagraphs"]),
}
#: The resident and streamed engines each summary compares, eager and as users run them.
PAIRS = {"eager": ("resident", "streamed"), "vLLM's defaults": ("resident+compiled", "streamed+compiled")}
MODES = ("resident", "streamed")  # the default --modes
NOT_RUN = "not run (needs CUDA)"
LATENCY_TOKENS = 2223  # the probe's latency request: one image of this many tokens
SMALL_TOKENS = 256  # and a small one, where an encode is bound by the host's time


def probe_command(checkpoint: Path, mode: str, repeats: int, out: Path) -> list[str]:
    """The engine probe's command line for one mode (one engine per process)."""
    probe_mode, flags = PROBE_MODES[mode]
    options = [
        "--requests",
        "0",
        "--latency-repeats",
        str(repeats),
        "--latency-tokens",
        f"{SMALL_TOKENS},{LATENCY_TOKENS}",
    ]
    return engine_probe.command(checkpoint, probe_mode, out, *flags, *options)


def probe(checkpoint: Path, mode: str, repeats: int, workdir: Path) -> dict:
    """One engine; it compiles into caches of its own, so its start-up time is a fresh start's
    whichever mode ran before (with patch 6's compile key a streamed engine would otherwise load the
    resident engine's compile)."""
    out = workdir / f"{mode}.json"
    env = {**os.environ, **compile_cache_env(workdir / f"caches-{mode}")}
    subprocess.run(probe_command(checkpoint, mode, repeats, out), check=True, env=env)
    return {**json.loads(out.read_text()), "own_compile_caches": True}


def tower_alone(repeats: int, workdir: Path, smoke: bool = False) -> dict:
    """The tower-only encode figures (`benchmarks/tower_streaming.py`), in a child process;
    with `smoke`, its own --smoke (a tiny tower on the CPU, no timings)."""
    out = workdir / "tower_streaming.json"
    options = ["--smoke"] if smoke else ["--iters", str(repeats)]
    by = "benchmarks/engine_offload.py" + (" --smoke" if smoke else "")
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "tower_streaming.py"),
            "--out",
            str(out),
            *options,
            "--command",
            f"python3 benchmarks/tower_streaming.py {' '.join(options)} (run by {by})",
        ],
        check=True,
    )
    return json.loads(out.read_text())


def checkpoint_facts(checkpoint: Path) -> dict:
    """What the engine would load, read back from the checkpoint made on the spot: its
    config as transformers reads it, and the probe's latency request through its processor
    (image tokens in the prompt: the tower's input size the latency figures are for)."""
    from transformers import AutoConfig, AutoProcessor

    from vllm_fork_testkit.engine_probe import image_prompt
    from vllm_fork_testkit.vlm_checkpoint import family_of

    family = family_of(checkpoint)
    config = AutoConfig.from_pretrained(checkpoint)
    vision, text = config.vision_config, config.get_text_config()
    request = image_prompt([LATENCY_TOKENS], seed=1000, family=family)  # the probe's first latency request
    processor = AutoProcessor.from_pretrained(checkpoint)
    batch = processor(text=[request["prompt"]], images=request["multi_modal_data"]["image"], return_tensors="pt")
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    return {
        "family": family,
        "architectures": config.architectures,
        "files": sorted(p.name for p in checkpoint.iterdir()),
        "vision": {"depth": vision.depth, "hidden_size": vision.hidden_size, "out_hidden_size": vision.out_hidden_size},
        "text": {"layers": text.num_hidden_layers, "hidden_size": text.hidden_size},
        "latency_request_image_tokens": int((batch["input_ids"] == pad).sum()),
    }


def latency_ms(result: dict, max_tokens: int, tokens: int = LATENCY_TOKENS) -> float | None:
    """The median latency of the requests with an image of `tokens` (older results: 2223 only)."""
    times = [
        r["seconds"]
        for r in result["latency"]
        if r["max_tokens"] == max_tokens and r.get("tokens", LATENCY_TOKENS) == tokens
    ]
    return statistics.median(times) * 1000 if times else None


def summarize(results: dict) -> dict:
    rows = {}
    for mode, r in results.items():
        rows[mode] = {
            "weights_on_gpu_mib": r["weights_bytes"] / MiB,
            "kv_cache_mib": r["kv_cache_bytes"] / MiB,
            "num_gpu_blocks": r["num_gpu_blocks"],
            "tower_host_mib": r["streamer_host_bytes"] / MiB,
            "pinning": r["streamer_pinning"],
            "caching_allocator_pinned_mib": r["caching_allocator_pinned_bytes"] / MiB,
            "rss_after_load_mib": r["rss_after_load_bytes"] / MiB,
            "peak_rss_mib": r["peak_rss_bytes"] / MiB,
            "first_token_ms": latency_ms(r, 1),
            "total_16_tokens_ms": latency_ms(r, 16),
            "first_token_small_ms": latency_ms(r, 1, SMALL_TOKENS),
            "startup_s": r["startup_s"],
            "standins": r.get("standins"),
            "vllm_version": r.get("vllm_version"),
        }
    summary: dict = {"rows": rows, "pairs": {}}
    if "streamed+graphs" in rows and ("streamed+compiled" in rows or "streamed" in rows):
        summary["encoder_graphs"] = encoder_graphs_summary(rows)
    for name, (resident_mode, streamed_mode) in PAIRS.items():
        if resident_mode in rows and streamed_mode in rows:
            tower_mib = results[resident_mode]["tower_param_bytes"] / MiB
            summary["tower_mib"] = tower_mib
            summary["pairs"][name] = pair_summary(rows[resident_mode], rows[streamed_mode], tower_mib)
    return summary


def pair_summary(resident: dict, streamed: dict, tower_mib: float) -> dict:
    """What streaming the tower changes against the same engine with it resident."""
    return {
        "weights_saved_mib": resident["weights_on_gpu_mib"] - streamed["weights_on_gpu_mib"],
        "kv_cache_gained_mib": streamed["kv_cache_mib"] - resident["kv_cache_mib"],
        "host_pinned_over_tower": (
            streamed["tower_host_mib"]
            + streamed["caching_allocator_pinned_mib"]
            - resident["caching_allocator_pinned_mib"]
        )
        / tower_mib,
        "rss_growth_over_tower": (streamed["rss_after_load_mib"] - resident["rss_after_load_mib"]) / tower_mib,
        "first_token_small_streamed_over_resident": streamed["first_token_small_ms"] / resident["first_token_small_ms"]
        if streamed.get("first_token_small_ms") and resident.get("first_token_small_ms")
        else None,
        "first_token_streamed_over_resident": streamed["first_token_ms"] / resident["first_token_ms"],
        "total_streamed_over_resident": streamed["total_16_tokens_ms"] / resident["total_16_tokens_ms"],
        "startup_s_added": streamed["startup_s"] - resident["startup_s"],
    }


def encoder_graphs_summary(rows: dict) -> dict:
    """What turning on encoder CUDA graphs does to a streamed engine: start-up, KV cache
    (the graphs' memory), first-token latency for a small and a large image; and against
    a resident engine with graphs where one ran. The baseline is the streamed engine with
    vLLM's defaults where it ran (the same compiled decoder: only the encoder graphs
    differ), else the eager one."""
    baseline = "streamed+compiled" if "streamed+compiled" in rows else "streamed"
    eager, graphs = rows[baseline], rows["streamed+graphs"]

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    found = {
        "baseline": baseline,
        "startup_s_added": graphs["startup_s"] - eager["startup_s"],
        # In blocks: vLLM sizes the KV cache again after capturing the graphs (its extensible
        # KV cache), so the memory it found available before capture does not show their cost.
        "kv_cache_blocks_change": graphs["num_gpu_blocks"] - eager["num_gpu_blocks"],
        "kv_cache_blocks_ratio": graphs["num_gpu_blocks"] / eager["num_gpu_blocks"],
        "first_token_small_graphs_over_eager": ratio(graphs["first_token_small_ms"], eager["first_token_small_ms"]),
        "first_token_graphs_over_eager": ratio(graphs["first_token_ms"], eager["first_token_ms"]),
    }
    if "resident+graphs" in rows:
        resident = rows["resident+graphs"]
        found["first_token_small_over_resident_graphs"] = ratio(
            graphs["first_token_small_ms"], resident["first_token_small_ms"]
        )
        found["first_token_over_resident_graphs"] = ratio(graphs["first_token_ms"], resident["first_token_ms"])
    return found


def markdown(report: dict) -> str:
    if report.get("smoke"):
        return smoke_markdown(report)
    s = report["summary"]
    rows = s["rows"]
    first = next(iter(rows.values()))
    version = f"vLLM {first['vllm_version']}. " if first.get("vllm_version") else ""
    kernels = version + kernels_sentence(first.get("standins") is not False)
    tower = f" ({s['tower_mib']:.0f} MiB bf16)" if "tower_mib" in s else ""
    lines = [
        "# Resident vs `--offload-towers` in vLLM's engine",
        "",
        f"`{report['command']}` ({report['when']}, {report['gpu']}). {kernels} Qwen3-VL checkpoint"
        f" made on the spot: full-size 8B vision tower{tower}, 2-layer 4096-wide text model, dummy"
        f" weights. Latency: one request, one new image of {SMALL_TOKENS} or {LATENCY_TOKENS} tokens,"
        f" median of {report['repeats']}. Bare: eager. `+compiled`: vLLM's defaults (the decoder compiled,"
        " its CUDA graphs). `+graphs`: those and vLLM's encoder CUDA graphs."
        + (
            " Each engine compiled into caches of its own: start-up is a fresh start's."
            if all(r.get("own_compile_caches") for r in report["results"].values())
            else ""
        ),
        "",
        # vLLM's "Available KV cache memory" (before CUDA graphs are captured) and the blocks
        # it allocated after capture.
        "| | weights on GPU | KV cache: available (blocks) | tower in host RAM | pinned (caching allocator)"
        f" | RSS after load | start-up | first token ({SMALL_TOKENS}) | first token | 16 tokens |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} ms"

    for mode, r in rows.items():
        lines.append(
            f"| {mode} | {r['weights_on_gpu_mib']:.0f} MiB | {r['kv_cache_mib']:.0f} MiB"
            f" ({r['num_gpu_blocks']} blocks) | {r['tower_host_mib']:.0f} MiB"
            f" {'/'.join(r['pinning'])} | {r['caching_allocator_pinned_mib']:.0f} MiB"
            f" | {r['rss_after_load_mib']:.0f} MiB | {r['startup_s']:.0f} s"
            f" | {ms(r.get('first_token_small_ms'))} | {ms(r['first_token_ms'])} | {ms(r['total_16_tokens_ms'])} |"
        )
    lines.append("")

    def x(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}x"

    for name, p in s.get("pairs", {}).items():
        lines += [
            f"- {name[0].upper()}{name[1:]}, streamed against resident: GPU weights {-p['weights_saved_mib']:+.0f} MiB,"
            f" KV cache {p['kv_cache_gained_mib']:+.0f} MiB (tower {s['tower_mib']:.0f} MiB); pinned for the"
            f" tower {p['host_pinned_over_tower']:.3f}x the tower, RSS growth {p['rss_growth_over_tower']:.3f}x;"
            f" first token {x(p.get('first_token_small_streamed_over_resident'))} ({SMALL_TOKENS}-token image)"
            f" and {x(p['first_token_streamed_over_resident'])} ({LATENCY_TOKENS}), 16 tokens"
            f" {x(p['total_streamed_over_resident'])}; start-up {p['startup_s_added']:+.0f} s.",
        ]
    if "encoder_graphs" in s:
        g = s["encoder_graphs"]
        lines += [
            f"- Encoder CUDA graphs on a streamed engine (against `{g['baseline']}`): start-up {g['startup_s_added']:+.0f} s, KV cache"
            f" {g['kv_cache_blocks_change']:+d} blocks ({x(g['kv_cache_blocks_ratio'])}); first token"
            f" {x(g['first_token_small_graphs_over_eager'])}"
            f" ({SMALL_TOKENS}-token image) and {x(g['first_token_graphs_over_eager'])} ({LATENCY_TOKENS})"
            " of it"
            + (
                f"; against a resident engine with graphs {x(g['first_token_small_over_resident_graphs'])}"
                f" and {x(g['first_token_over_resident_graphs'])}."
                if "first_token_over_resident_graphs" in g
                else "."
            ),
        ]
    lines.append("")
    return "\n".join(lines + tower_section(report))


def tower_section(report: dict) -> list[str]:
    if not report.get("tower_alone"):
        return []
    from tower_streaming import render_markdown

    # The tower benchmark's own table, its title one level down.
    return ["#" + render_markdown(report["tower_alone"])]


def smoke_markdown(report: dict) -> str:
    """A --smoke run's report: the engine table's cells are the engine's, none of which ran."""
    c = report["checkpoint"]
    lines = [
        "# Resident vs `--offload-towers` in vLLM's engine",
        "",
        f"`{report['command']}` ({report['when']}; CPU: a --smoke run, no engine figures and no"
        " timing claims). Qwen3-VL checkpoint made on the spot: full-size 8B vision tower"
        f" (depth {c['vision']['depth']}, hidden {c['vision']['hidden_size']}), {c['text']['layers']}-layer"
        f" {c['text']['hidden_size']}-wide text model, dummy weights.",
        "",
        "| | weights on GPU | KV cache | tower in host RAM | pinned (caching allocator)"
        " | RSS after load | first token | 16 tokens |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {mode} |" + f" {NOT_RUN} |" * 7 for mode in report["results"]]
    lines += [
        "",
        f"- GPU weights saved; KV cache gained: {NOT_RUN}.",
        f"- Host RAM pinned for the tower; RSS growth: {NOT_RUN}.",
        f"- Latency streamed / resident: {NOT_RUN}.",
        "",
        "Run on the CPU, for real:",
        "",
        *(f"- {what}: {how}" for what, how in report["ran"].items()),
        "",
        "Needs a GPU, not run:",
        "",
        *(f"- {what}: {why}" for what, why in report["not_run"].items()),
        "",
    ]
    return "\n".join(lines + tower_section(report))


def smoke_report(args: argparse.Namespace, command: str) -> dict:
    """What runs without a GPU: the checkpoint, the tower benchmark's smoke, the report."""
    from vllm_fork_testkit.vllm_tree import let_torchvision_import_without_its_ops
    from vllm_fork_testkit.vlm_checkpoint import make_checkpoint

    # transformers' image processors import torchvision: PyPI's, next to a CPU torch, imports
    # only with its two op schemas declared (as tests/patches does).
    let_torchvision_import_without_its_ops()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        checkpoint = make_checkpoint("qwen3_vl", workdir / "qwen3-vl")
        facts = checkpoint_facts(checkpoint)
        commands = {
            m: shlex.join(probe_command(Path("CHECKPOINT"), m, args.repeats, Path(f"OUT/{m}.json"))[1:])
            for m in args.mode_list
        }
        tower = tower_alone(args.repeats, workdir, smoke=True)
    tower_results = tower["results"]
    return {
        "command": command,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "smoke": True,
        "gpu": None,
        "repeats": args.repeats,
        "checkpoint": facts,
        "results": dict.fromkeys(args.mode_list, NOT_RUN),
        "summary": NOT_RUN,
        "ran": {
            "arguments": f"--repeats {args.repeats}, --out-dir {args.out_dir}",
            "checkpoint": f"made by vllm_fork_testkit.vlm_checkpoint ({len(facts['files'])} files), read back by"
            f" transformers as {', '.join(facts['architectures'])}; the probe's latency request (an image of"
            f" {LATENCY_TOKENS} tokens asked) has {facts['latency_request_image_tokens']} image tokens",
            "tower benchmark": "benchmarks/tower_streaming.py --smoke: a tiny tower resident and streamed,"
            f" bit-identical: {tower_results['streamed']['bit_identical_to_resident']}",
            "report": "this JSON and Markdown, from what ran",
        },
        "not_run": {
            **{f"engine probe ({m})": f"{NOT_RUN}: python {commands[m]}" for m in args.mode_list},
            "tower benchmark's UVA mode and H2D floor": tower_results["uva"]["skipped"],
            "timings": "none: a --smoke run makes no timing claims",
        },
        "tower_alone": tower,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated, of {', '.join(PROBE_MODES)} (each its own engine process)",
    )
    parser.add_argument("--command", help="the command to record (default: argv)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="no GPU: the checkpoint, the tower benchmark's smoke and the report; the engine not run",
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    args.mode_list = [m for m in args.modes.split(",") if m]
    if not args.mode_list or not set(args.mode_list) <= set(PROBE_MODES):
        parser.error(f"--modes: a comma-separated subset of {','.join(PROBE_MODES)}")
    command = args.command or shlex.join(["python3", *sys.argv])
    if args.smoke:
        report = smoke_report(args, command)
        write_report(args.out_dir, report)
        return
    import torch

    if not torch.cuda.is_available():
        sys.exit("engine_offload.py needs a CUDA GPU (--smoke runs the parts that run on the CPU)")

    from vllm_fork_testkit.vlm_checkpoint import make_checkpoint

    def report(results: dict, tower: dict | None) -> dict:
        return {
            "command": command,
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "gpu": torch.cuda.get_device_name(),
            "repeats": args.repeats,
            "results": results,
            "summary": summarize(results),
            "tower_alone": tower,
        }

    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        checkpoint = make_checkpoint("qwen3_vl", workdir / "qwen3-vl")
        for mode in args.mode_list:
            results[mode] = probe(checkpoint, mode, args.repeats, workdir)
            for key in engine_probe.COMPARISON_RECORDS:  # the engine tests', not the benchmark's
                results[mode].pop(key, None)
            # After each engine: a run cut short by the device's time limit keeps what it measured.
            write_report(args.out_dir, report(results, None))
        tower = tower_alone(max(args.repeats, 10), workdir)
    write_report(args.out_dir, report(results, tower))


def write_report(out_dir: Path, report: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "engine_offload.json", json.dumps(report, indent=1))
    write_atomic(out_dir / "engine_offload.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
