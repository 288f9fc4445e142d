"""Streamed towers inside a CUDA graph: resident vs streamed encodes, both captured (issue 11).

The small encodes stream at 1.14-1.42x resident because they are bound by the host: the
copy of each unit is issued only when the host reaches the unit before it, and each unit
adds the streamer's host time (benchmarks/tower_host_time.py). A CUDA graph of the encode
takes the host out: vLLM captures encoders with `cudagraph_mm_encoder`, and a streamed
encode captured the same way replays its unit copies into the ring it captured, in the
graph's memory pool.

For each single-image case of tower_pipeline.py on the 2B- and 8B-sized Qwen3-VL towers
(built as vLLM builds them, random bf16 weights), this captures one graph of the tower's
forward with the encoder metadata vLLM's graph path passes (`prepare_encoder_metadata`),
resident and streamed (vLLM's `PrefetchOffloader(offload_towers=True)`, lookahead 1), and
times their replays interleaved (CUDA events; medians), with the H2D floor of the same run.
One image is one attention sequence, so `cu_seqlens` is None and the SDPA wrapper needs no
host split sizes (with them it refuses a capture: patch 0003). Per case: resident and
streamed replay times, streamed / max(resident, floor), and whether the streamed replay
equals the resident replay and the eager resident encode bit for bit.

    python3 benchmarks/tower_graph.py --out-dir DIR

writes tower_graph.json and tower_graph.md there. `--smoke` runs the same code on the CPU
with tiny towers and no graphs (the eager encodes stand in for the replays; no timing
claims); tests/patches/test_tower_pipeline_smoke.py runs it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import encode_bench as eb  # noqa: E402
import tower_pipeline as tp  # noqa: E402

from vllm_fork.core.fs import write_atomic  # noqa: E402

MiB = 1 << 20
SINGLE_TOKENS = (64, 256, 1024, 2223)
LOOKAHEAD = 1


def metadata(module: torch.nn.Module, grid: tp.Grid) -> dict[str, Any]:
    """The encoder metadata of one image, as vLLM's graph path passes it; one sequence."""
    md = dict(module.prepare_encoder_metadata([list(grid)]))
    md["cu_seqlens"] = None
    return md


def replayer(run: Callable[[], torch.Tensor], device: torch.device) -> Callable[[], torch.Tensor]:
    """A function that replays a CUDA graph of `run` (captured after one eager run, as
    vLLM's encoder graph manager does); on the CPU, `run` itself."""
    if device.type != "cuda":
        return run
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        run()  # kernels chosen, workspaces made, the streamer's unit order learned
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = run()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    replay.graph = graph  # type: ignore[attr-defined]  # keeps the graph alive with the function
    return replay


def measure_tower(tower: str, setup: tp.Setup) -> dict[str, Any]:
    """Every single-image case on one tower: eager resident, graphs resident and streamed."""
    resident = tp.build_tower(setup, tower)
    streamed_module = tp.build_tower(setup, tower)  # same seed, same weights
    offloader = tp.stream(streamed_module, LOOKAHEAD)
    streamed = offloader.tower_streamer.towers[0]
    floor = tp.h2d_floor(streamed, setup)
    floor_ms = floor["bulk_pinned"]["median_ms"]
    vision = setup.vision(tower)
    inputs = tp.Inputs(setup, vision["in_channels"] * vision["temporal_patch_size"] * vision["patch_size"] ** 2)
    rows = []
    for tokens in SINGLE_TOKENS:
        case = next(c for c in tp.SINGLE if c.name == f"image-{tokens}")
        (grid,) = setup.grids(case.encodes[0])
        x = inputs((grid,))

        def encode(module: torch.nn.Module, md: dict[str, Any], x: torch.Tensor = x) -> Callable[[], torch.Tensor]:
            def run() -> torch.Tensor:
                with torch.inference_mode():
                    return module(x, None, encoder_metadata=dict(md))

            return run

        with torch.inference_mode():
            eager = resident(x, [list(grid)])
        runs = {
            "resident": replayer(encode(resident, metadata(resident, grid)), setup.device),
            "streamed": replayer(encode(streamed_module, metadata(streamed_module, grid)), setup.device),
        }
        timed = eb.time_interleaved(runs, setup.device, setup.repeats)
        r_ms, s_ms = timed["resident"][0].median_ms, timed["streamed"][0].median_ms
        rows.append(
            {
                "tower": tower,
                "case": case.name,
                "description": case.description,
                "tokens": setup.tokens(case),
                "resident_graph": timed["resident"][0].as_dict(),
                "streamed_graph": timed["streamed"][0].as_dict(),
                "floor_ms": floor_ms,
                "streamed_over_max_resident_floor": s_ms / max(r_ms, floor_ms),
                "bound": "copy" if floor_ms > r_ms else "compute",
                "streamed_h2d_gb_per_s": eb.gb_per_s(floor["bytes"], s_ms),
                "bit_identical_to_resident_graph": torch.equal(timed["streamed"][2], timed["resident"][2]),
                "resident_graph_equals_eager": torch.equal(timed["resident"][2], eager),
            }
        )
        del runs, timed
        eb.release_memory(setup.device)
    result = {
        "params_mib": tp.param_bytes(resident) / MiB,
        "units": len(streamed.units),
        "h2d": floor,
        "rows": rows,
    }
    del resident, streamed_module, offloader, streamed
    eb.release_memory(setup.device)
    return result


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Streamed towers in a CUDA graph (issue 11)",
        "",
        f"Command: `{report['command']}`",
        "",
        f"{report['machine']['device']}, torch {report['machine']['torch']}; {report['when']}; "
        f"{report['wall_s']:.1f} s; lookahead {report['lookahead']}.",
        "",
        "Both encodes captured as CUDA graphs (after one eager run) and replayed interleaved; "
        "times are medians of CUDA-event-timed replays. Ratio = streamed / max(resident, H2D floor)."
        + (
            " Smoke run: tiny towers, eager encodes on the CPU, no graphs: no timing claims." if report["smoke"] else ""
        ),
        "",
        "| tower | input | resident graph (ms) | streamed graph (ms) | H2D floor (ms) | ratio | bound "
        "| streamed H2D (GB/s) | bit-identical (to the resident graph; resident graph = eager) |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for tower, data in report["towers"].items():
        for r in data["rows"]:
            lines.append(
                f"| {tower} | {r['description']} | {r['resident_graph']['median_ms']:.2f} | "
                f"{r['streamed_graph']['median_ms']:.2f} | {r['floor_ms']:.2f} | "
                f"**{r['streamed_over_max_resident_floor']:.2f}** | {r['bound']} | "
                f"{r['streamed_h2d_gb_per_s']:.1f} | {'yes' if r['bit_identical_to_resident_graph'] else 'NO'}; "
                f"{'yes' if r['resident_graph_equals_eager'] else 'no'} |"
            )
    rows = [r for data in report["towers"].values() for r in data["rows"]]
    within = sum(r["streamed_over_max_resident_floor"] <= 1.10 for r in rows)
    lines += ["", f"Within 1.10x of max(resident, floor): {within} of {len(rows)}."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true", help="tiny towers on the CPU, no graphs")
    parser.add_argument("--towers", default=",".join(tp.TOWERS))
    parser.add_argument("--target-ms", type=float, default=400.0)
    parser.add_argument("--copy-iters", type=int, default=20)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.smoke:
        sys.path.insert(0, str(REPO / "tests" / "patches"))
        from vllm_cpu import ensure_tree, import_on_cpu

        import_on_cpu(ensure_tree())
        torch.set_num_threads(1)
        setup = tp.Setup(torch.device("cpu"), torch.float32, True, eb.Repeats(1, 0.0, 1, 1), copy_iters=2)
    else:
        if not torch.cuda.is_available():
            sys.exit("tower_graph.py needs a CUDA GPU (--smoke runs the code paths on the CPU)")
        repeats = eb.Repeats(2, args.target_ms, 10, 60)
        setup = tp.Setup(torch.device("cuda"), torch.bfloat16, False, repeats, args.copy_iters)
    start = time.monotonic()
    report: dict[str, Any] = {
        "command": shlex.join(["python3", *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": eb.machine(setup.device),
        "smoke": setup.smoke,
        "lookahead": LOOKAHEAD,
        "towers": {},
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tp.tf.vllm_context("nccl" if setup.device.type == "cuda" else "gloo"):
        for tower in args.towers.split(","):
            report["towers"][tower] = measure_tower(tower, setup)
            report["wall_s"] = time.monotonic() - start
            write_atomic(args.out_dir / "tower_graph.json", json.dumps(report, indent=2) + "\n")
    write_atomic(args.out_dir / "tower_graph.md", markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
