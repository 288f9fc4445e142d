"""Streamed towers inside a CUDA graph: resident vs streamed encodes, both captured (issue 11).

Small eager encodes stream slower than resident because they are bound by the host: the
copy of each unit is issued only when the host reaches the unit before it, and each unit
adds the streamer's host time. A CUDA graph of the encode
takes the host out: vLLM captures encoders with `cudagraph_mm_encoder`, and a streamed
encode captured the same way replays its unit copies into the streamer's ring (kept from
the first encode).

For each case of tower_pipeline.py (images of 64-9000 tokens, batches of 3 and 8 images,
videos of 2 and 8 frames, a run of encodes of changing shapes: one graph per shape,
replayed in order, as vLLM captures one per token budget) on the 2B- and 8B-sized Qwen3-VL
towers (built as vLLM builds them, random bf16 weights), this captures the tower's forward with
the encoder metadata vLLM's graph path passes (`prepare_encoder_metadata`), resident and
streamed (vLLM's `PrefetchOffloader(offload_towers=True)`, lookahead 1, 2 and 3), and times
their replays interleaved (CUDA events; medians), with the H2D floor of the same run. The
ViT attention is, unless `--vit-attention` says otherwise, vLLM's own choice with its real
kernels on a GPU (FlashAttention on Hopper, what users run), and on the stand-ins (which
have no FlashAttention) and the CPU vLLM's Triton backend, which reads `cu_seqlens` on the
device as FlashAttention does. With `--vit-attention TORCH_SDPA` only single images run, one sequence
with `cu_seqlens` None (SDPA's host split sizes are refused in a capture: the cu_seqlens patch).
Per case: resident and streamed replay times, streamed / max(resident, floor), and
whether the streamed replays equal the resident replay and the eager resident encode bit
for bit.

    python3 benchmarks/tower_graph.py --out-dir DIR

writes tower_graph.json and tower_graph.md there. `--smoke` runs the same code on the CPU
with tiny towers and no graphs (the eager encodes stand in for the replays; no timing
claims); tests/patches/test_tower_pipeline_smoke.py runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import tower_pipeline as tp

from vllm_fork.core.fs import write_atomic
from vllm_fork_testkit import encode_bench as eb
from vllm_fork_testkit import trace_gaps

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

MiB = 1 << 20
SINGLE_TOKENS = (64, 256, 1024, 2223)


def cases(vit_attention: str) -> list[tp.Case]:
    """The pipeline matrix's cases a graph can hold with this ViT attention backend.

    SDPA splits sequences by sizes on the host, which a capture refuses (the cu_seqlens patch):
    only single images, one sequence with no `cu_seqlens`. Triton's ViT attention reads
    `cu_seqlens` on the device: every case (images, batches, videos, and the run of
    encodes of changing shapes, one graph per shape).
    """
    if vit_attention == "TORCH_SDPA":
        return [c for c in tp.SINGLE if c.name in {f"image-{n}" for n in SINGLE_TOKENS}]
    return list(tp.CASES)


def metadata(module: torch.nn.Module, grids: tuple[tp.Grid, ...], vit_attention: str) -> dict[str, Any]:
    """The encoder metadata of one encode, as vLLM's graph path passes it (for SDPA, one
    image, no `cu_seqlens`)."""
    md = dict(module.prepare_encoder_metadata([list(g) for g in grids]))
    if vit_attention == "TORCH_SDPA":
        assert len(grids) == 1 and grids[0][0] == 1, grids
        md["cu_seqlens"] = None
    return md


def replayer(
    run: Callable[[], torch.Tensor], device: torch.device, watch: StreamerWatch | None = None
) -> Callable[[], torch.Tensor]:
    """A function that replays a CUDA graph of `run` (captured after one eager run, as
    vLLM's encoder graph manager does); on the CPU, `run` itself (run once more under
    `watch`). `watch` counts what the streamer did while the graph was captured."""
    if device.type != "cuda":
        if watch is not None:
            with watch:
                run()
        return run
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        run()  # kernels chosen, workspaces made, the streamer's unit order learned
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with watch or contextlib.nullcontext(), torch.cuda.graph(graph, stream=stream):
        out = run()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    replay.stream = stream.cuda_stream  # type: ignore[attr-defined]  # the capture's stream

    # The graph and the tensors `run` reads outside it (the encoder metadata) live as long
    # as the function: freed, their memory would be reused and the replays would read it.
    replay.graph = graph  # type: ignore[attr-defined]
    replay.run = run  # type: ignore[attr-defined]
    return replay


class StreamerWatch:
    """Counts, while active, what the streamer does per unit: the units that ran from the
    ring, those whose copy had not been issued ahead (a wrong or missing guess of the
    order), those onloaded into memory of their own (outside an encode or nested in
    another unit: copied and waited for on the spot, nothing overlapped), and the tables
    whose copies an encode issues at its start.

    In a graph replay the streamer's Python does not run: what the capture saw is what
    every replay does, so these counts tell a replay that overlaps its copies from one
    that serializes them. Class methods are wrapped while active (one watch at a time).
    """

    def __init__(self) -> None:
        self.counts = {"ring_units": 0, "copy_not_ahead": 0, "alone": 0, "tables": 0}

    def __enter__(self) -> StreamerWatch:
        from vllm.model_executor.offloader import tower_streaming as ts
        from vllm.model_executor.offloader import tower_units

        counts = self.counts
        acquire, enter_alone, issue = ts._Ring.acquire, ts.StreamedTower._enter_alone, tower_units.CopyEngine.issue
        alone_now = [False]

        def counted_acquire(ring: Any, position: int, unit: Any) -> None:
            counts["ring_units"] += 1
            counts["copy_not_ahead"] += ring.filled[position % len(ring.slots)] != (position, unit)
            acquire(ring, position, unit)

        def counted_alone(tower: Any, unit: Any) -> None:
            counts["alone"] += 1
            alone_now[0] = True
            try:
                enter_alone(tower, unit)
            finally:
                alone_now[0] = False

        # Every copy outside the ring is issued here: a unit alone's (counted above) or a table's.
        def counted_issue(engine: Any, unit: Any) -> tuple[torch.Tensor, Any]:
            counts["tables"] += not alone_now[0]
            return issue(engine, unit)

        self._restore = (ts, tower_units, acquire, enter_alone, issue)
        ts._Ring.acquire, ts.StreamedTower._enter_alone, tower_units.CopyEngine.issue = (
            counted_acquire,
            counted_alone,
            counted_issue,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        ts, tower_units, acquire, enter_alone, issue = self._restore
        ts._Ring.acquire, ts.StreamedTower._enter_alone, tower_units.CopyEngine.issue = acquire, enter_alone, issue


class Encodes:
    """A case's encodes (one, or a run of changing shapes), their outputs in one tensor."""

    def __init__(self, xs: list[torch.Tensor], shapes: list[tuple[tp.Grid, ...]], vit_attention: str):
        self.xs, self.shapes, self.vit_attention = xs, shapes, vit_attention

    def eager(self, module: torch.nn.Module, graph_metadata: bool) -> torch.Tensor:
        """Eagerly: with the metadata the graph path passes, or as the model's forward
        computes it from the grids."""
        with torch.inference_mode():
            return torch.cat(
                [
                    module(x, None, encoder_metadata=metadata(module, grids, self.vit_attention))
                    if graph_metadata
                    else module(x, [list(g) for g in grids])
                    for x, grids in zip(self.xs, self.shapes)
                ]
            )

    def graphs(
        self, module: torch.nn.Module, device: torch.device, watch: StreamerWatch | None = None
    ) -> list[Callable[[], torch.Tensor]]:
        """One graph per encode (as vLLM captures one per token budget); `watch` counts
        the streamer's work in their captures."""
        replays = []
        for x, grids in zip(self.xs, self.shapes):
            md = metadata(module, grids, self.vit_attention)

            def run(x: torch.Tensor = x, md: dict[str, Any] = md) -> torch.Tensor:
                with torch.inference_mode():
                    return module(x, None, encoder_metadata=dict(md))

            replays.append(replayer(run, device, watch))
        return replays


def in_order(replays: list[Callable[[], torch.Tensor]]) -> Callable[[], torch.Tensor]:
    """The encodes' graphs replayed in order, their outputs in one tensor."""
    return lambda: torch.cat([replay() for replay in replays])


def ideal_ms(replays: list[Callable[[], torch.Tensor]], whole_ms: float, floor_ms: float, setup: tp.Setup) -> float:
    """What a perfect stream takes: each encode max(its resident time, the tower's copy).

    A run of encodes is held to each encode's own bound, not to max(the run's resident
    time, the run's copies): a copy-bound small encode cannot borrow the slack of a
    compute-bound large one. Each resident replay is timed alone for it (interleaved).
    """
    if len(replays) == 1:
        return tp.perfect_stream_ms([whole_ms], floor_ms)
    timed = eb.time_interleaved({str(i): r for i, r in enumerate(replays)}, setup.device, setup.repeats)
    return tp.perfect_stream_ms([timed[str(i)][0].median_ms for i in range(len(replays))], floor_ms)


def profile_replays(
    runs: dict[str, Callable[[], torch.Tensor]], device: torch.device, out_dir: Path, tag: str
) -> dict[str, Any]:
    """One profiled replay of each run (after a warm one): the trace kept, its streams'
    busy times and copy gaps (`trace_gaps.summarize`) and its kernels by total time.
    A failure is recorded, not raised: the timings matter more."""
    result: dict[str, Any] = {}
    for name, run in runs.items():
        try:
            trace = out_dir / f"trace-{tag}-{name}.json.gz"
            eb.profile_to(trace, run, device, [f"{trace_gaps.ENCODE_PREFIX} 0"])
            events = trace_gaps.load_events(trace)
            summary = trace_gaps.summarize(events)
            result[name] = {
                "trace": trace.name,
                "window_us": summary.get("window_us"),
                "streams": summary["streams"],
                "copies": summary.get("copies"),
                "kernels": trace_gaps.kernel_totals(events),
            }
        except Exception as e:  # noqa: BLE001 - recorded in the results
            result[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    return result


def link_after(streamed: Any, setup: tp.Setup, iters: int = 5) -> dict[str, float]:
    """The tower's bulk copy from its arena again, right after a case was timed.

    A lent host's link can slow down for a while (the tower's copies then bound every
    lookahead alike); a case whose link check is off the run's floor is flagged."""
    dest = torch.empty(streamed.arena.nbytes, dtype=torch.uint8, device=setup.device)
    timing = eb.copy_ms([streamed.arena.host], dest, setup.device, iters, warmup=1)
    del dest
    return {"median_ms": timing.median_ms, "gb_per_s": eb.gb_per_s(streamed.arena.nbytes, timing.median_ms)}


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest elementwise difference of two outputs (0.0: bit-identical but for signed zeros)."""
    return (a.float() - b.float()).abs().max().item()


def measure_tower(
    tower: str,
    setup: tp.Setup,
    lookaheads: tuple[int, ...],
    vit_attention: str,
    wanted: set[str] | None = None,
    profile_at: tuple[str, int] | None = None,
    out_dir: Path | None = None,
) -> dict[str, Any]:
    """Every case a graph can hold on one tower (or those `wanted`): eager resident, graphs
    resident and streamed (one streamed tower per lookahead); `profile_at` (case,
    lookahead): one replay of that case's resident and streamed graphs profiled."""
    resident = tp.build_tower(setup, tower)
    streamed_modules = {}
    for lookahead in lookaheads:
        module = tp.build_tower(setup, tower)  # same seed, same weights
        streamed_modules[lookahead] = (module, tp.stream(module, lookahead))
    copy_streams = {
        streamed_tower.engine.stream.cuda_stream
        for _, offloader in streamed_modules.values()
        for streamed_tower in offloader.tower_streamer.towers
        if streamed_tower.engine.stream is not None
    }
    first_module, first_offloader = streamed_modules[lookaheads[0]]
    streamed = first_offloader.tower_streamer.towers[0]
    floor = tp.h2d_floor(streamed, setup)
    floor_ms = floor["bulk_pinned"]["median_ms"]
    inputs = tp.Inputs.for_tower(setup, tower)
    rows = []
    for case in cases(vit_attention):
        if wanted is not None and case.name not in wanted:
            continue
        shapes = [setup.grids(grids) for grids in case.encodes]
        xs = [inputs(grids) for grids in shapes]
        # A run of encodes (the changing-shapes case) copies the tower once per encode.
        case_floor_ms = floor_ms * len(shapes)

        encodes = Encodes(xs, shapes, vit_attention)
        eager = encodes.eager(resident, graph_metadata=False)
        # The same encodes eagerly with the graph path's metadata: tells a difference of
        # the graph from one of the metadata.
        eager_md = encodes.eager(resident, graph_metadata=True)
        streamed_eager_md = {la: encodes.eager(m, graph_metadata=True) for la, (m, _) in streamed_modules.items()}
        resident_replays = encodes.graphs(resident, setup.device)
        runs = {"resident": in_order(resident_replays)}
        watches, on_copy_stream = {}, {}
        for lookahead, (module, _) in streamed_modules.items():
            watches[lookahead] = StreamerWatch()
            replays = encodes.graphs(module, setup.device, watches[lookahead])
            runs[f"streamed-{lookahead}"] = in_order(replays)
            # A graph captured on a streamed tower's copy stream serializes its copies with
            # its compute (torch's pooled streams are handed out round-robin).
            on_copy_stream[lookahead] = any(getattr(r, "stream", None) in copy_streams for r in replays)
        timed = eb.time_interleaved(runs, setup.device, setup.repeats)
        resident_out = timed["resident"][2].clone()
        r_ms = timed["resident"][0].median_ms
        bound_ms = ideal_ms(resident_replays, r_ms, floor_ms, setup)
        streamed_rows = {}
        for lookahead in lookaheads:
            name = f"streamed-{lookahead}"
            s_ms = timed[name][0].median_ms
            out = timed[name][2].clone()
            streamed_rows[lookahead] = {
                "graph": timed[name][0].as_dict(),
                "over_max_resident_floor": s_ms / bound_ms,
                "h2d_gb_per_s": eb.gb_per_s(floor["bytes"] * len(shapes), s_ms),
                "bit_identical_to_resident_graph": torch.equal(out, resident_out),
                "max_abs_diff_to_resident_graph": max_abs_diff(out, resident_out),
                "eager_bit_identical_to_resident_eager": torch.equal(streamed_eager_md[lookahead], eager_md),
                "graph_equals_own_eager": torch.equal(out, streamed_eager_md[lookahead]),
                # What the streamer did in the captures (`StreamerWatch`): every replay does it.
                "capture": watches[lookahead].counts,
                "captured_on_a_copy_stream": on_copy_stream[lookahead],
            }
        link = link_after(streamed, setup)
        # The graphs again: are their outputs the same every replay?
        again = runs["resident"]()
        profile = None
        if profile_at is not None and profile_at[0] == case.name and out_dir is not None:
            chosen = {"resident": runs["resident"], "streamed": runs[f"streamed-{profile_at[1]}"]}
            profile = {
                "lookahead": profile_at[1],
                **profile_replays(chosen, setup.device, out_dir, f"{tower}-{case.name}"),
            }
        best = min(lookaheads, key=lambda la: streamed_rows[la]["over_max_resident_floor"])
        rows.append(
            {
                "tower": tower,
                "case": case.name,
                "description": case.description,
                "tokens": setup.tokens(case),
                "resident_graph": timed["resident"][0].as_dict(),
                "streamed": {str(la): row for la, row in streamed_rows.items()},
                "best_lookahead": best,
                # The best lookahead's figures, as the table's columns.
                "streamed_graph": streamed_rows[best]["graph"],
                "encodes": len(shapes),
                "floor_ms": case_floor_ms,
                # The link right after the case: off the floor by more than 10 %, flagged.
                "link_after": link,
                "link_drift": abs(link["median_ms"] / floor_ms - 1) > 0.10,
                # The ratio's denominator: each encode's max(resident, floor), summed.
                "max_resident_floor_ms": bound_ms,
                "streamed_over_max_resident_floor": streamed_rows[best]["over_max_resident_floor"],
                "streamed_h2d_gb_per_s": streamed_rows[best]["h2d_gb_per_s"],
                "bit_identical_to_resident_graph": all(
                    r["bit_identical_to_resident_graph"] for r in streamed_rows.values()
                ),
                "resident_graph_equals_eager": torch.equal(resident_out, eager),
                "resident_graph_equals_eager_md": torch.equal(resident_out, eager_md),
                "eager_md_equals_eager": torch.equal(eager_md, eager),
                "max_abs_diff_eager_md_to_eager": max_abs_diff(eager_md, eager),
                "resident_replays_repeat": torch.equal(again, resident_out),
                **({"profile": profile} if profile is not None else {}),
            }
        )
        del runs, timed, resident_replays
        eb.release_memory(setup.device)
    result = {
        "params_mib": tp.param_bytes(resident) / MiB,
        "units": len(streamed.units),
        "h2d": floor,
        "rows": rows,
    }
    del resident, streamed_modules, first_module, first_offloader, streamed
    eb.release_memory(setup.device)
    return result


def diffs(row: dict[str, Any]) -> str:
    """Where a row is not bit-identical: which outputs differ, by how much."""
    notes = [
        f"L{la}: graph vs resident graph {s['max_abs_diff_to_resident_graph']:.3g}"
        + ("" if s["eager_bit_identical_to_resident_eager"] else ", eager streamed vs eager resident differ")
        + ("" if s["graph_equals_own_eager"] else ", graph vs its eager differ")
        for la, s in row["streamed"].items()
        if not s["bit_identical_to_resident_graph"]
    ]
    if not row["eager_md_equals_eager"]:
        notes.append(f"eager without cu_seqlens vs with: {row['max_abs_diff_eager_md_to_eager']:.3g}")
    if not row["resident_graph_equals_eager_md"]:
        notes.append("resident graph vs its eager differ")
    if not row["resident_replays_repeat"]:
        notes.append("resident replays differ")
    return "; ".join(notes) or "0"


def row_bound(row: dict[str, Any]) -> str:
    """A row's `tp.bound_kind`, from its saved times (runs before 2026-12-03c saved
    "copy" or "compute" by their sums alone)."""
    return tp.bound_kind(
        row.get("encodes", 1), row["resident_graph"]["median_ms"], row["floor_ms"], row["max_resident_floor_ms"]
    )


def lookahead_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (tower, case, lookahead), in tower_pipeline.py's form: what
    `tp.targets` checks issue 11's "done when" on."""
    rows = []
    for tower, data in report["towers"].items():
        for r in data["rows"]:
            for lookahead, s in r["streamed"].items():
                streamed_ms = s["graph"]["median_ms"]
                rows.append(
                    {
                        "tower": tower,
                        "case": r["case"],
                        "lookahead": int(lookahead),
                        "status": "ok",
                        "streamed_over_max_resident_floor": s["over_max_resident_floor"],
                        "streamed_over_resident": streamed_ms / r["resident_graph"]["median_ms"],
                        "copy_bound": row_bound(r) == "copy",
                        "streamed_share_of_floor_bandwidth": r["floor_ms"] / streamed_ms,
                        "bit_identical": s["bit_identical_to_resident_graph"],
                    }
                )
    return rows


def capture_counts(streamed: dict[str, Any]) -> str:
    """A lookahead's `StreamerWatch` counts as `ring units / copies not ahead / alone`."""
    c = streamed.get("capture")
    counts = "-" if c is None else f"{c['ring_units']} / {c['copy_not_ahead']} / {c['alone']}"
    return counts + (" ON A COPY STREAM" if streamed.get("captured_on_a_copy_stream") else "")


def by_lookahead_markdown(report: dict[str, Any]) -> list[str]:
    """Every lookahead of every row, then issue 11's targets over all of them (taken by
    `write_report`)."""
    heading = "/".join(map(str, report["lookaheads"]))
    lines = [
        "",
        f"## Lookahead {heading}",
        "",
        "Capture: what the streamer did while the streamed graphs were captured, which every replay "
        "repeats: units run from the ring / of them, units whose copy was not issued ahead / units "
        "onloaded into memory of their own (copied and waited for on the spot); ON A COPY STREAM: "
        "a graph of the row was captured on a streamed tower's copy stream (torch hands out its "
        "pooled streams round-robin), which serializes its copies with its compute.",
        "",
        f"| tower | case | resident graph (ms) | streamed graph (ms), L {heading} | ratio, L {heading} "
        f"| capture, L {heading} | bit-identical |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for tower, data in report["towers"].items():
        for r in data["rows"]:
            cells = [r["streamed"][str(la)] for la in report["lookaheads"]]
            times = " / ".join(format(c["graph"]["median_ms"], ".2f") for c in cells)
            ratios = " / ".join(format(c["over_max_resident_floor"], ".2f") for c in cells)
            lines.append(
                f"| {tower} | {r['case']} | {r['resident_graph']['median_ms']:.2f} | {times} | {ratios} "
                f"| {'; '.join(capture_counts(c) for c in cells)} "
                f"| {'yes' if r['bit_identical_to_resident_graph'] else 'NO'} |"
            )
    return lines + tp.report_targets_markdown(
        report, "Issue 11's targets on this run (encoder CUDA graphs, every lookahead)"
    )


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Streamed towers in a CUDA graph (issue 11)",
        "",
        f"Command: `{report['command']}`"
        + (f"; Markdown taken again from its JSON by `{report['reanalyzed']}`" if report.get("reanalyzed") else ""),
        "",
        f"{report['machine']['device']}, torch {report['machine']['torch']}; {report['when']}; "
        f"{report['wall_s']:.1f} s; ViT attention {report.get('vit_attention', 'TORCH_SDPA')}; lookaheads "
        f"{', '.join(map(str, report['lookaheads']))} (the first table gives the best one per row, "
        "the second every one).",
        "",
        "Both encodes captured as CUDA graphs (after one eager run) and replayed interleaved; "
        "times are medians of CUDA-event-timed replays. Ratio = streamed / max(resident, H2D floor); "
        "for a run of encodes, streamed / the sum over its encodes of max(resident, floor). Bound: "
        "what bounds that (a run whose encodes differ: mixed, its link idle through the "
        "compute-bound encodes' compute, so it is held to the ratio, not to the link's bandwidth)."
        + (
            " Smoke run: tiny towers, eager encodes on the CPU, no graphs: no timing claims." if report["smoke"] else ""
        ),
        "",
        "| tower | input | resident graph (ms) | streamed graph (ms) | H2D floor (ms) | ratio | bound "
        "| lookahead | streamed H2D (GB/s) | bit-identical (streamed graph = resident graph, every lookahead; "
        "resident graph = eager resident) | max abs diff |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |",
    ]
    for tower, data in report["towers"].items():
        for r in data["rows"]:
            lines.append(
                f"| {tower} | {r['description']}{' (the whole run)' if r.get('encodes', 1) > 1 else ''} | {r['resident_graph']['median_ms']:.2f} | "
                f"{r['streamed_graph']['median_ms']:.2f} | {r['floor_ms']:.2f} | "
                f"**{r['streamed_over_max_resident_floor']:.2f}** | {row_bound(r)} | "
                f"{r['best_lookahead']} | {r['streamed_h2d_gb_per_s']:.1f} | "
                f"{'yes' if r['bit_identical_to_resident_graph'] else 'NO'}; "
                f"{'yes' if r['resident_graph_equals_eager'] else 'no'} | {diffs(r)} |"
            )
    rows = [r for data in report["towers"].values() for r in data["rows"]]
    within = sum(r["streamed_over_max_resident_floor"] <= 1.10 for r in rows)
    lines += ["", f"Within 1.10x of max(resident, floor): {within} of {len(rows)}."]
    drifted = [r for r in rows if r.get("link_drift")]
    if drifted:
        lines += [
            "",
            "The link was off the floor right after: "
            + "; ".join(
                f"{r['tower']} {r['case']} {r['link_after']['median_ms']:.2f} ms "
                f"({r['link_after']['gb_per_s']:.1f} GB/s)"
                for r in drifted
            )
            + ". Their streamed times may be the link's, not the pipeline's.",
        ]
    lines += by_lookahead_markdown(report)
    for r in rows:
        if "profile" in r:
            lines += profile_markdown(r)
    return "\n".join(lines) + "\n"


def profile_markdown(row: dict[str, Any]) -> list[str]:
    """A profiled case: each replay's device window and streams, then its kernels by time."""
    profile = row["profile"]
    lines = ["", f"## Profile: {row['tower']} {row['case']}, lookahead {profile['lookahead']}", ""]
    for name in ("resident", "streamed"):
        run = profile[name]
        if "error" in run:
            lines.append(f"- {name}: {run['error']}")
            continue
        streams = "; ".join(
            f"{s['role']} stream {s['busy_us'] / 1000:.2f} ms busy, {s['kernels']} kernels, {s['copies']} copies"
            for s in run["streams"]
        )
        window = "no device events" if run["window_us"] is None else f"device window {run['window_us'] / 1000:.2f} ms"
        lines.append(f"- {name} (`{run['trace']}`): {window}; {streams}")
    if all("kernels" in profile[n] for n in ("resident", "streamed")):
        streamed = {k["name"]: k for k in profile["streamed"]["kernels"]}
        lines += [
            "",
            "| kernel (resident's top by time) | count | resident (ms) | streamed (ms) |",
            "| --- | ---: | ---: | ---: |",
        ]
        for k in profile["resident"]["kernels"]:
            other = streamed.get(k["name"])
            streamed_ms = "-" if other is None else f"{other['total_us'] / 1000:.2f}"
            lines.append(f"| `{k['name'][:90]}` | {k['count']} | {k['total_us'] / 1000:.2f} | {streamed_ms} |")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true", help="tiny towers on the CPU, no graphs")
    parser.add_argument("--towers", default=",".join(tp.TOWERS))
    parser.add_argument("--lookaheads", default="1,2,3")
    parser.add_argument(
        "--vit-attention",
        choices=tp.VIT_ATTENTION,
        help="the ViT attention backend (default: vLLM's own choice with its real kernels on a GPU, "
        "TRITON_ATTN on the stand-ins and the CPU; TORCH_SDPA: single images only)",
    )
    parser.add_argument("--cases", help="comma-separated case names (default: every case)")
    parser.add_argument(
        "--profile",
        help="CASE:LOOKAHEAD: profile one replay of that case's resident and streamed graphs "
        "(traces and kernel totals in the results)",
    )
    parser.add_argument(
        "--reanalyze",
        type=Path,
        metavar="JSON",
        help="run nothing: write a saved tower_graph.json's targets and Markdown again into --out-dir",
    )
    parser.add_argument("--target-ms", type=float, default=400.0)
    parser.add_argument("--copy-iters", type=int, default=20)
    args = parser.parse_args(argv)
    args.vit_attention = args.vit_attention or tp.default_vit_attention("TRITON_ATTN")
    return args


def write_report(report: dict[str, Any], out_dir: Path) -> str:
    """The JSON (with issue 11's targets over every lookahead) and the Markdown."""
    tp.add_targets(report, lookahead_rows(report))
    text = markdown(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "tower_graph.json", json.dumps(report, indent=2) + "\n")
    write_atomic(out_dir / "tower_graph.md", text)
    return text


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.reanalyze is not None:
        report = json.loads(args.reanalyze.read_text())
        report["reanalyzed"] = shlex.join(["python3", *sys.argv])
        print(write_report(report, args.out_dir))
        return
    repeats = eb.Repeats(2, args.target_ms, 10, 60)
    setup = tp.make_setup("tower_graph.py", args.smoke, repeats, args.copy_iters, vit_attention=args.vit_attention)
    lookaheads = tuple(int(la) for la in args.lookaheads.split(","))
    wanted = set(args.cases.split(",")) if args.cases else None
    profile_at = None
    if args.profile:
        case_name, _, lookahead = args.profile.partition(":")
        profile_at = (case_name, int(lookahead or lookaheads[0]))
    start = time.monotonic()
    report: dict[str, Any] = {
        "command": shlex.join(["python3", *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": eb.machine(setup.device),
        "smoke": setup.smoke,
        "lookaheads": lookaheads,
        "vit_attention": args.vit_attention,
        "towers": {},
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tp.tf.vllm_context("nccl" if setup.device.type == "cuda" else "gloo"):
        for tower in args.towers.split(","):
            report["towers"][tower] = measure_tower(
                tower, setup, lookaheads, args.vit_attention, wanted, profile_at, args.out_dir
            )
            report["wall_s"] = time.monotonic() - start
            write_atomic(args.out_dir / "tower_graph.json", json.dumps(report, indent=2) + "\n")
    print(write_report(report, args.out_dir))


if __name__ == "__main__":
    main()
