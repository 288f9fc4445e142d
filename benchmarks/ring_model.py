"""How deep the ring must be for encodes whose compute is about their copy time (issue 11).

A model of the streamed encode's two pipelines, not a measurement: each unit's copy
runs on the copy stream once the copy before it is done and the ring memory it goes
into is free (the units that used it have computed), and each unit computes once its
copy is done and the unit before it has computed. No host: this is what the ring
alone allows when the host is never late.

Two rings of the same memory, (lookahead + 1) x the largest unit, are compared:

- `fixed`: what patch 0001 ships. Position k takes slot k % (lookahead + 1), so a copy
  waits for the unit `lookahead + 1` positions back, whatever the units' sizes.
- `bytes`: the same memory as one circular buffer. Each unit takes the next bytes
  (wrapping to the start when it does not fit before the end), and its copy waits for
  the units whose bytes it overwrites: with blocks smaller than the largest unit (the
  2B tower's 24 MiB blocks against its 32 MiB merger linears) more of them are in
  flight.

The units, their order and their bytes are the real tower's: a 2B- or 8B-sized
Qwen3-VL tower built as vLLM builds it (`tower_pipeline.build_tower`), streamed by
the patched tree's `TowerStreamer` on the CPU for one encode, which records the order
it runs its ring units in. Each unit's share of the compute is its share of the
encode's FLOPs (`torch.utils.flop_counter`, the resident tower's forward on the
case's input); the total is set to `balance` x the copy time for each balance in
`BALANCES` (1.0: the compute equals the copy time, the rows issue 11 still has over
1.10x eagerly). Copies take bytes / `--gb-per-s` (55: the lent H200's pinned H2D
rate). The ratio reported is the encode's end over max(compute, copy time), issue
11's measure.

    python3 benchmarks/ring_model.py --out-dir benchmarks/results/ring_model   # CPU, ~1 min
    python3 benchmarks/ring_model.py --smoke --out-dir DIR                     # tiny towers
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from vllm_fork.core.fs import write_atomic  # noqa: E402

#: Compute / copy time of the modelled encodes.
BALANCES = (0.6, 0.8, 0.9, 1.0, 1.1, 1.2, 1.5)
LOOKAHEADS = (1, 2, 3)
MiB = 1 << 20


@dataclass(frozen=True)
class Unit:
    """One ring unit of an encode, in run order: its name, its bytes and its compute (its
    FLOPs from `tower_units`, milliseconds once scaled by `at_balance`)."""

    name: str
    nbytes: int
    compute: float


def end_ms(units: Sequence[Unit], waits_for: Sequence[int | None], bytes_per_ms: float) -> float:
    """The encode's end when unit k's copy, after the copy before it, also waits for the
    compute of unit `waits_for[k]` (the last one to use its ring memory; None: none), and
    each unit computes after its copy and the unit before it. What a ring is, here."""
    copy_done = 0.0
    computed: list[float] = []
    for unit, before in zip(units, waits_for, strict=True):
        free = computed[before] if before is not None else 0.0
        copy_done = max(copy_done, free) + unit.nbytes / bytes_per_ms
        computed.append(max(computed[-1] if computed else 0.0, copy_done) + unit.compute)
    return computed[-1] if computed else 0.0


def fixed_slots_ms(units: Sequence[Unit], slots: int, bytes_per_ms: float) -> float:
    """The encode's end with `slots` slots used round-robin (patch 0001's ring): each copy
    waits for the unit `slots` positions back."""
    return end_ms(units, [k - slots if k >= slots else None for k in range(len(units))], bytes_per_ms)


def byte_ring_ms(units: Sequence[Unit], capacity: int, bytes_per_ms: float) -> float:
    """The encode's end with one circular buffer of `capacity` bytes: each unit takes the
    next bytes (from the start when it does not fit before the end), and its copy waits
    for every earlier unit whose bytes it overwrites to have computed (computes finish in
    order: the last of them)."""
    placed: list[tuple[int, int]] = []  # (start, end) of each unit, in order
    waits_for: list[int | None] = []
    offset = 0
    for unit in units:
        if unit.nbytes > capacity:
            raise ValueError(f"unit {unit.name} ({unit.nbytes} bytes) exceeds the ring ({capacity})")
        if offset + unit.nbytes > capacity:
            offset = 0
        start, end = offset, offset + unit.nbytes
        offset = end
        overwritten = [j for j, (a, b) in enumerate(placed) if a < end and start < b]
        waits_for.append(max(overwritten) if overwritten else None)
        placed.append((start, end))
    return end_ms(units, waits_for, bytes_per_ms)


def at_balance(units: Sequence[Unit], balance: float, bytes_per_ms: float) -> list[Unit]:
    """`units` with their compute scaled so that it totals `balance` x their copy time."""
    copy_ms = sum(u.nbytes for u in units) / bytes_per_ms
    compute = sum(u.compute for u in units)
    scale = balance * copy_ms / compute
    return [Unit(u.name, u.nbytes, u.compute * scale) for u in units]


def ratios(units: Sequence[Unit], lookahead: int, bytes_per_ms: float) -> dict[str, float]:
    """Each ring's encode end over max(compute, copy time), at `lookahead`."""
    bound = max(sum(u.compute for u in units), sum(u.nbytes for u in units) / bytes_per_ms)
    slots = lookahead + 1
    capacity = slots * max(u.nbytes for u in units)
    return {
        "fixed": fixed_slots_ms(units, slots, bytes_per_ms) / bound,
        "bytes": byte_ring_ms(units, capacity, bytes_per_ms) / bound,
    }


def tower_units(tower_name: str, case_name: str, smoke: bool) -> list[Unit]:
    """The ring units of one encode of the real tower, in run order, each with its bytes and
    its FLOPs (as `compute`, to be scaled by `at_balance`).

    The tower is built on the meta device (no memory, no compute: the full-size towers'
    FLOPs at every input size, on any machine) and split as `TowerStreamer.wrap` splits it
    (`split_units`, then `keep_small`: units under 1/64 of the median stay resident and
    are no ring units); the order is the order the units' forwards run in.
    """
    import encode_bench as eb
    import torch
    import tower_pipeline as tp
    from torch.utils.flop_counter import FlopCounterMode

    # The patched tree on the CPU as `--smoke` imports it; the towers full-size (bf16) or
    # tiny, on the meta device either way.
    cpu = tp.make_setup("ring_model.py", True, eb.Repeats(1, 0.0, 1, 1), copy_iters=1)
    setup = dataclasses.replace(
        cpu, device=torch.device("meta"), dtype=cpu.dtype if smoke else torch.bfloat16, smoke=smoke
    )
    with tp.tf.vllm_context("gloo"):
        from vllm.model_executor.offloader.tower_streaming import keep_small, split_units

        tower = tp.build_tower(setup, tower_name, seed=None)
        _, specs = keep_small(tower, split_units(tower))
        ring = [spec for spec in specs if spec.recurse]
        counter = FlopCounterMode(display=False)
        calls: list[tuple[int, int]] = []  # (ring unit, FLOPs) per call, in order
        for index, spec in enumerate(ring):
            # An instance attribute, as the streamer wraps a unit: the blocks run under
            # `support_torch_compile`, which calls `forward` past module hooks.
            def forward(*args: Any, _index: int = index, _inner: Any = spec.module.forward, **kwargs: Any) -> Any:
                before = counter.get_total_flops()
                out = _inner(*args, **kwargs)
                calls.append((_index, counter.get_total_flops() - before))
                return out

            spec.module.forward = forward
        run = tp.encoder(tower, tp.case_named(case_name), setup, tp.Inputs.for_tower(setup, tower_name))
        with counter:
            run()
    units = []
    for index, flops in calls:
        spec = ring[index]
        nbytes = sum(p.numel() * p.element_size() for _, p in spec.named_parameters())
        units.append(Unit(spec.name, nbytes, float(flops)))
    if not any(u.compute for u in units):
        raise RuntimeError("no FLOPs were attributed to the ring units: module names changed?")
    return units


def model(units: Sequence[Unit], bytes_per_ms: float) -> list[dict[str, float]]:
    rows = []
    for balance in BALANCES:
        scaled = at_balance(units, balance, bytes_per_ms)
        for lookahead in LOOKAHEADS:
            rows.append({"balance": balance, "lookahead": lookahead, **ratios(scaled, lookahead, bytes_per_ms)})
    return rows


def render_markdown(report: dict) -> str:
    lines = [
        "# Ring depth for balanced encodes: a model (issue 11)",
        "",
        f"Command: `{report['command']}`",
        "",
        "Not a measurement: the copy and compute pipelines of one encode, with the real towers' "
        "ring units, order and bytes, each unit's compute its share of the encode's FLOPs scaled "
        f"to `balance` x the copy time, copies at {report['gb_per_s']} GB/s, no host. Ratio = "
        "the encode's end / max(compute, copy time). `fixed`: (lookahead + 1) slots of the "
        "largest unit, round-robin (what patch 0001 ships); `bytes`: the same memory as one "
        "circular buffer, each copy waiting for the units whose bytes it overwrites.",
        "",
    ]
    for tower in report["towers"]:
        sizes = sorted({u["nbytes"] for u in tower["units"]})
        lines += [
            f"## {tower['tower']} tower, {tower['case']} ({len(tower['units'])} ring units, "
            f"{sum(u['nbytes'] for u in tower['units']) / MiB:.1f} MiB; unit sizes "
            f"{', '.join(f'{s / MiB:.1f}' for s in sizes[-3:])} MiB the largest)",
            "",
            "| compute / copy | " + " | ".join(f"L{la} fixed | L{la} bytes" for la in LOOKAHEADS) + " |",
            "| ---: | " + " | ".join("---: | ---:" for _ in LOOKAHEADS) + " |",
        ]
        for balance in BALANCES:
            cells = []
            for la in LOOKAHEADS:
                row = next(r for r in tower["rows"] if r["balance"] == balance and r["lookahead"] == la)
                cells += [f"{row['fixed']:.3f}", f"{row['bytes']:.3f}"]
            lines.append(f"| {balance:.1f} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true", help="tiny towers: every code path, no claims")
    parser.add_argument("--towers", default="2B,8B")
    parser.add_argument("--case", default="image-1024", help="whose FLOPs split the compute among the units")
    parser.add_argument("--gb-per-s", type=float, default=55.0)
    args = parser.parse_args(argv)
    bytes_per_ms = args.gb_per_s * 1e9 / 1e3
    report: dict = {
        "command": "python3 benchmarks/ring_model.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "smoke": args.smoke,
        "gb_per_s": args.gb_per_s,
        "towers": [],
    }
    for tower in args.towers.split(","):
        units = tower_units(tower, args.case, args.smoke)
        report["towers"].append(
            {
                "tower": tower,
                "case": args.case,
                "units": [{"name": u.name, "nbytes": u.nbytes, "flops": u.compute} for u in units],
                "rows": model(units, bytes_per_ms),
            }
        )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out_dir / "ring_model.json", json.dumps(report, indent=1).encode())
    markdown = render_markdown(report)
    write_atomic(args.out_dir / "ring_model.md", markdown.encode())
    print(markdown)


if __name__ == "__main__":
    main()
