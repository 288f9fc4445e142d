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
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vllm_fork.core.fs import write_atomic

ROOT = Path(__file__).resolve().parents[1]


MiB = 1 << 20


def probe(checkpoint: Path, mode: str, repeats: int, workdir: Path) -> dict:
    out = workdir / f"{mode}.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_fork_testkit.engine_probe",
            str(checkpoint),
            "--mode",
            mode,
            "--requests",
            "0",
            "--latency-repeats",
            str(repeats),
            "--out",
            str(out),
        ],
        check=True,
    )
    return json.loads(out.read_text())


def tower_alone(repeats: int, workdir: Path) -> dict:
    """The tower-only encode figures (`benchmarks/tower_streaming.py`), in a child process."""
    out = workdir / "tower_streaming.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "tower_streaming.py"),
            "--out",
            str(out),
            "--iters",
            str(repeats),
            "--command",
            f"python3 benchmarks/tower_streaming.py --iters {repeats} (run by benchmarks/engine_offload.py)",
        ],
        check=True,
    )
    return json.loads(out.read_text())


def latency_ms(result: dict, max_tokens: int) -> float:
    times = [r["seconds"] for r in result["latency"] if r["max_tokens"] == max_tokens]
    return statistics.median(times) * 1000


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
            "startup_s": r["startup_s"],
        }
    resident, streamed = rows["resident"], rows["streamed"]
    tower_mib = results["resident"]["tower_param_bytes"] / MiB
    return {
        "tower_mib": tower_mib,
        "rows": rows,
        "weights_saved_mib": resident["weights_on_gpu_mib"] - streamed["weights_on_gpu_mib"],
        "kv_cache_gained_mib": streamed["kv_cache_mib"] - resident["kv_cache_mib"],
        "host_pinned_over_tower": (
            streamed["tower_host_mib"]
            + streamed["caching_allocator_pinned_mib"]
            - resident["caching_allocator_pinned_mib"]
        )
        / tower_mib,
        "rss_growth_over_tower": (streamed["rss_after_load_mib"] - resident["rss_after_load_mib"]) / tower_mib,
        "first_token_streamed_over_resident": streamed["first_token_ms"] / resident["first_token_ms"],
        "total_streamed_over_resident": streamed["total_16_tokens_ms"] / resident["total_16_tokens_ms"],
    }


def markdown(report: dict) -> str:
    s = report["summary"]
    lines = [
        "# Resident vs `--offload-towers` in vLLM's engine",
        "",
        f"`{report['command']}` ({report['when']}, {report['gpu']}; vLLM's Python tree"
        " with stand-ins for its compiled kernels). Qwen3-VL checkpoint made on the spot:"
        f" full-size 8B vision tower ({s['tower_mib']:.0f} MiB bf16), 2-layer 4096-wide"
        " text model, dummy weights. Latency: one request, one new 2223-token image,"
        f" median of {report['repeats']}.",
        "",
        "| | weights on GPU | KV cache | tower in host RAM | pinned (caching allocator)"
        " | RSS after load | first token | 16 tokens |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode, r in s["rows"].items():
        lines.append(
            f"| {mode} | {r['weights_on_gpu_mib']:.0f} MiB | {r['kv_cache_mib']:.0f} MiB"
            f" ({r['num_gpu_blocks']} blocks) | {r['tower_host_mib']:.0f} MiB"
            f" {'/'.join(r['pinning'])} | {r['caching_allocator_pinned_mib']:.0f} MiB"
            f" | {r['rss_after_load_mib']:.0f} MiB | {r['first_token_ms']:.1f} ms"
            f" | {r['total_16_tokens_ms']:.1f} ms |"
        )
    lines += [
        "",
        f"- GPU weights saved: {s['weights_saved_mib']:.0f} MiB; KV cache gained:"
        f" {s['kv_cache_gained_mib']:.0f} MiB (tower {s['tower_mib']:.0f} MiB).",
        f"- Host RAM: pinned for the tower {s['host_pinned_over_tower']:.3f}x the tower;"
        f" RSS growth {s['rss_growth_over_tower']:.3f}x the tower.",
        f"- Latency streamed / resident: first token {s['first_token_streamed_over_resident']:.3f}x,"
        f" 16 tokens {s['total_streamed_over_resident']:.3f}x.",
        "",
    ]
    if report.get("tower_alone"):
        from tower_streaming import render_markdown

        # The tower benchmark's own table, its title one level down.
        lines.append("#" + render_markdown(report["tower_alone"]))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--command", help="the command to record (default: argv)")
    args = parser.parse_args()
    import torch

    from vllm_fork_testkit.vlm_checkpoint import make_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        checkpoint = make_checkpoint("qwen3_vl", workdir / "qwen3-vl")
        results = {m: probe(checkpoint, m, args.repeats, workdir) for m in ("resident", "streamed")}
        tower = tower_alone(max(args.repeats, 10), workdir)
    for r in results.values():
        r.pop("compared", None)
    report = {
        "command": args.command or shlex.join(["python3", *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name(),
        "repeats": args.repeats,
        "results": results,
        "summary": summarize(results),
        "tower_alone": tower,
    }
    write_atomic(args.out_dir / "engine_offload.json", json.dumps(report, indent=1))
    write_atomic(args.out_dir / "engine_offload.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
