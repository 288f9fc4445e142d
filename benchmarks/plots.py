"""The pictures of the README, drawn from the committed results (no measuring here).

    python benchmarks/plots.py [--results benchmarks/results] [--out-dir benchmarks/results]

Writes, from the JSON each benchmark committed:
- build_routes.png   bench_build.py: `invoke build` and its routes, in seconds;
- tower_matrix.png   tower_matrix.py: streamed / resident and streamed / max(resident, copy
                     time) per tower family;
- tower_pipeline.png tower_pipeline.py: eager streamed encodes over max(resident, copy time)
                     against the encode's size, per tower and lookahead;
- tower_graph.png    tower_graph.py: the same in encoder CUDA graphs;
- serve_load.png     serve_load.py: `vllm serve` resident against `--offload-towers` on one
                     memory budget, output throughput and p99 TTFT against the offered load.
`--smoke` draws the same pictures into `--out-dir` (CI: every picture still draws from the
results' current format).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = 1.10  # the bound for a streamed encode, over max(resident, copy time)
TOWER_COLORS = {"2B": "tab:blue", "8B": "tab:orange"}
LOOKAHEAD_MARKERS = {1: "v", 2: "o", 3: "^"}
SIZE_TICKS = [64, 256, 1024, 2223, 4096, 9000]


def kernels(gpu: str, standins: bool | None, vit_attention: str | None = None) -> str:
    """Where a picture's figures came from, as its results say: the card, and the built wheel's
    kernels or the stand-ins (results from before they said so were the stand-ins')."""
    if standins is not False:
        return f"{gpu}, vLLM's Python tree with pure-torch stand-in kernels (not the real wheel)"
    attention = (
        "vLLM's default ViT attention (FlashAttention on Hopper)"
        if vit_attention in (None, "default")
        else f"{vit_attention} ViT attention"
    )
    return f"{gpu}, the built wheel with vLLM's kernels, {attention}"


def load(results: Path, name: str) -> Any:
    return json.loads((results / name).read_text())


def save(fig: plt.Figure, path: Path) -> None:
    # No software version in the file: the same results draw the same bytes.
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


def plot_build(results: Path, out: Path) -> None:
    build = load(results, "build.json")
    bars = [
        ("fast route (patched members only)", build["fast_route_s"]),
        ("vLLM's precompiled route (setup.py)", build["precompiled_route_s"]),
        ("invoke build, warm (apply + key + route)", build["build_warm_s"]),
        ("invoke build, fresh clone, warm cache", build["build_fresh_clone_warm_cache_s"]),
    ]
    fig, ax = plt.subplots(figsize=(8, 2.8))
    labels, seconds = zip(*bars)
    colors = ["tab:green", "tab:red", "tab:green", "tab:green"]
    ax.barh(labels, seconds, color=colors)
    for y, s in enumerate(seconds):
        ax.text(s + 0.8, y, f"{s:.1f} s", va="center")
    ax.invert_yaxis()
    ax.set_xlim(0, max(seconds) * 1.15)
    ax.set_xlabel("seconds (2-core machine)")
    ax.set_title(f"The patched wheel without a CUDA compile: fast route {build['precompiled_over_fast']:.0f}x faster")
    save(fig, out / "build_routes.png")


def plot_tower_matrix(results: Path, out: Path) -> None:
    report = load(results, "tower_matrix/tower_matrix.json")
    rows = [r for r in report["rows"] if r.get("streamed_encode_s")]
    for r in rows:
        r["over_resident"] = r["streamed_encode_s"] / r["resident_encode_s"]
        r["over_bound"] = r["streamed_encode_s"] / max(r["resident_encode_s"], r["h2d_floor_s"])
    rows.sort(key=lambda r: r["over_bound"])
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(rows) + 1.5))
    ys = range(len(rows))
    ax.barh(ys, [r["over_bound"] for r in rows], color="tab:blue", label="streamed / max(resident, copy time)")
    ax.scatter([r["over_resident"] for r in rows], ys, color="black", s=12, zorder=3, label="streamed / resident")
    ax.axvline(TARGET, color="tab:red", linestyle="--", linewidth=1, label=f"{TARGET:.2f}")
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_yticks(list(ys), [r["family"] for r in rows], fontsize=7)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlim(0, max(max(r["over_resident"], r["over_bound"]) for r in rows) * 1.05)
    ax.set_xlabel("ratio (lower is better)")
    identical = sum(bool(r["bit_identical"]) for r in rows)
    ax.set_title(
        f"Every tower family vLLM builds, streamed at full size: {identical} of {len(rows)} bit-identical\n"
        f"{kernels(report['device'], report.get('standins'))}",
        fontsize=9,
    )
    ax.legend(loc="lower right", fontsize=8)
    save(fig, out / "tower_matrix.png")


def scatter_by_size(ax: plt.Axes, points: list[tuple[str, int, int, float]]) -> None:
    """points: (tower, lookahead, tokens, ratio) drawn against the encode's size in tokens."""
    for tower, color in TOWER_COLORS.items():
        for lookahead, marker in LOOKAHEAD_MARKERS.items():
            mine = [(tokens, ratio) for t, la, tokens, ratio in points if t == tower and la == lookahead]
            if mine:
                xs, ys = zip(*mine)
                ax.scatter(
                    xs, ys, color=color, marker=marker, s=28, alpha=0.8, label=f"{tower} tower, lookahead {lookahead}"
                )
    ax.axhline(TARGET, color="tab:red", linestyle="--", linewidth=1)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    # The matrix's image sizes, as plain numbers: a reader looks up "my 1024-token images".
    ax.set_xticks(SIZE_TICKS, [str(n) for n in SIZE_TICKS])
    ax.minorticks_off()
    ax.set_xlabel("tokens per encode (log scale)")
    ax.set_ylabel("streamed / max(resident, copy time)")
    ax.margins(y=0.08)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the points, never over them


def plot_tower_pipeline(results: Path, out: Path) -> None:
    report = load(results, "tower_pipeline/tower_pipeline.json")
    points = [
        (r["tower"], r["lookahead"], r["tokens"], r["streamed_over_max_resident_floor"])
        for r in report["rows"]
        if r.get("status") == "ok"
    ]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    scatter_by_size(ax, points)
    machine = report["machine"]
    where = kernels(machine["gpu"], machine.get("vllm_gpu_standins"), report["settings"].get("vit_attention"))
    ax.set_title(f"Eager encodes, Qwen3-VL towers\n{where}", fontsize=9)
    save(fig, out / "tower_pipeline.png")


def plot_tower_graph(results: Path, out: Path) -> None:
    report = load(results, "tower_graph/tower_graph.json")
    points = [
        (row["tower"], int(lookahead), row["tokens"], streamed["over_max_resident_floor"])
        for tower in report["towers"].values()
        for row in tower["rows"]
        for lookahead, streamed in row.get("streamed", {}).items()
        if streamed.get("over_max_resident_floor") is not None
    ]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    scatter_by_size(ax, points)
    machine = report["machine"]
    where = kernels(machine["gpu"], machine.get("vllm_gpu_standins"), report.get("vit_attention"))
    ax.set_title(f"Encoder CUDA graphs, Qwen3-VL towers\n{where}", fontsize=9)
    save(fig, out / "tower_graph.png")


MODE_STYLES = {"resident": ("tab:blue", "o"), "streamed": ("tab:orange", "s")}


def plot_serve_load(results: Path, out: Path) -> None:
    draw_serve_load(load(results, "serve_load/serve_load_8B_utilization.json"), out / "serve_load.png")


def draw_serve_load(report: dict, path: Path) -> None:
    """One serve_load.py report: throughput and p99 TTFT against the offered load, both modes
    (serve_load.py draws its own run with this too)."""
    budget = report["memory"].split("(")[-1].split(" GiB")[0]  # "... (24 GiB of the card)"
    if report["config"] == "utilization":
        memory = f"{budget} GiB engine budget (--gpu-memory-utilization)"
    else:
        memory = f"KV cache fixed at {budget} GiB (--kv-cache-memory-bytes)"
    fig, (tput, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, (color, marker) in MODE_STYLES.items():
        points = sorted((p["max_concurrency"], p) for p in report["points"] if p["mode"] == mode)
        if not points:
            continue
        xs = [c for c, _ in points]
        kv = report["servers"].get(mode, {}).get("kv_cache_tokens")
        label = mode if kv is None else f"{mode} (KV cache {kv:,} tokens)"
        tput.plot(xs, [p["output_throughput"] for _, p in points], color=color, marker=marker, label=label)
        ttft.plot(xs, [p["p99_ttft_ms"] / 1000 for _, p in points], color=color, marker=marker, label=label)
    for ax in (tput, ttft):
        ax.set_xscale("log", base=2)
        concurrencies = sorted({p["max_concurrency"] for p in report["points"]})
        ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
        ax.minorticks_off()
        ax.set_xlabel("offered load: concurrent requests (--max-concurrency)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    tput.set_ylabel("output tokens / s")
    ttft.set_ylabel("p99 time to first token (s)")
    tput.legend(fontsize=8, loc="lower right")
    fig.suptitle(
        f"vllm serve + vllm bench serve, Qwen3-VL-{report['shape']} shape, {memory},"
        f" resident vs --offload-towers\n{report['gpu']}, vLLM {report['vllm']}"
        f" (the built wheel{'s' if ', ' in report['vllm'] else ''})",
        fontsize=9,
    )
    save(fig, path)


PLOTS = [plot_build, plot_tower_matrix, plot_tower_pipeline, plot_tower_graph, plot_serve_load]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the committed JSON results are")
    parser.add_argument("--out-dir", type=Path, default=None, help="where the PNGs go (default: --results)")
    parser.add_argument("--smoke", action="store_true", help="draw every picture; requires --out-dir")
    args = parser.parse_args(argv)
    if args.smoke and args.out_dir is None:
        parser.error("--smoke draws into --out-dir, never over the committed pictures")
    out = args.out_dir or args.results
    out.mkdir(parents=True, exist_ok=True)
    for plot in PLOTS:
        plot(args.results, out)
    print(f"plots.py: {len(PLOTS)} pictures in {out}")


if __name__ == "__main__":
    main()
