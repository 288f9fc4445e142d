"""What slows the host of a streamed encode besides the streamer's own steps (issue 11).

On the lent H200, a small streamed encode takes ~80-120 us more host time per unit
than resident, while a clock on each step of the streamer's hook accounts for only
45-85 us of it (`tower_host_time.py`, `run.sh ab`: 35-50 us per unit left over in all
four runs of 2026-12-02). Two causes would act outside the hook's own code:

- the link's DMA reading the pinned arena from host memory at ~55 GB/s while the host
  issues the encode (memory traffic slowing the interpreter);
- the compute stream's wait for each unit's copy (an event of another stream) making
  the kernel launches after it dearer.

This times a resident tower's host issue of one small encode (the forward's return, no
sync; medians of interleaved rounds) alone and beside each suspect, each set up before
the clock starts:

- `resident`;
- `resident, link busy`: a bulk pinned host-to-device copy longer than the encode,
  on a side stream;
- `resident, copy engine busy on the device`: device-to-device copies as long, on a
  side stream (the copy engine works, host memory is untouched);
- `resident, a Python hook per block`: a forward pre-hook per block that does nothing;
- `resident, a stream wait per block`: the same hook making the compute stream wait for
  an event of a side stream (recorded, long done), as the streamer's acquire does;
- `streamed`: the same encode through `--offload-towers` (lookahead 1).

    python3 benchmarks/host_contention_probe.py --out FILE.json   # on a CUDA machine
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import encode_bench as eb  # noqa: E402
import tower_pipeline as tp  # noqa: E402

from vllm_fork.core.fs import write_atomic  # noqa: E402

GiB = 1 << 30

# A condition: what to set up before the clock (returns its undo), then the timed encode.
Prologue = Callable[[], Callable[[], None]]


def nothing() -> Callable[[], None]:
    return lambda: None


def busy_link(host: torch.Tensor, dest: torch.Tensor, side: torch.cuda.Stream) -> Prologue:
    def start() -> Callable[[], None]:
        with torch.cuda.stream(side):
            dest.copy_(host, non_blocking=True)
        return nothing()

    return start


def busy_copy_engine(src: torch.Tensor, dest: torch.Tensor, side: torch.cuda.Stream, copies: int) -> Prologue:
    def start() -> Callable[[], None]:
        with torch.cuda.stream(side):
            for _ in range(copies):
                dest.copy_(src, non_blocking=True)
        return nothing()

    return start


def hook_per_block(blocks: list[torch.nn.Module], hook: Callable[..., None]) -> Prologue:
    def start() -> Callable[[], None]:
        handles = [block.register_forward_pre_hook(hook) for block in blocks]
        return lambda: [handle.remove() for handle in handles]

    return start


def host_issue_ms(
    conditions: dict[str, tuple[Prologue, Callable[[], Any]]], device: torch.device, rounds: int
) -> dict[str, dict[str, Any]]:
    """Per condition, the median host issue time of its encode, rounds interleaved."""
    for setup, run in conditions.values():
        for _ in range(2):
            undo = setup()
            run()
            eb.synchronize(device)
            undo()
    times: dict[str, list[float]] = {name: [] for name in conditions}
    for name in eb.interleaved(list(conditions), rounds):
        setup, run = conditions[name]
        eb.synchronize(device)
        undo = setup()
        start = time.perf_counter()
        run()
        times[name].append((time.perf_counter() - start) * 1e3)
        eb.synchronize(device)
        undo()
    return {
        name: {"host_ms": statistics.median(ms), "times_ms": [round(t, 3) for t in ms]} for name, ms in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    tp.add_one_case_args(parser, lookahead=False)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    setup = tp.make_setup("host_contention_probe.py", False, eb.Repeats(2, 0.0, 1, 1), copy_iters=2)
    device = setup.device
    assert device.type == "cuda", "host_contention_probe.py needs a CUDA device"
    case = tp.case_named(args.case)
    with tp.tf.vllm_context("nccl"):
        resident = tp.build_tower(setup, args.tower)
        inputs = tp.Inputs.for_tower(setup, args.tower)
        streamed_module = tp.build_tower(setup, args.tower)  # same seed: the same weights
        offloader = tp.stream(streamed_module, 1)
        units = len(offloader.tower_streamer.towers[0].units)
        run_resident = tp.encoder(resident, case, setup, inputs)
        run_streamed = tp.encoder(streamed_module, case, setup, inputs)

        side = torch.cuda.Stream(device)
        # Longer than a small encode's host issue (15-40 ms): 2 GiB over a ~55 GB/s link.
        link_bytes = 2 * GiB
        host = torch.empty(link_bytes, dtype=torch.uint8, pin_memory=True)
        link_dest = torch.empty(link_bytes, dtype=torch.uint8, device=device)
        d2d_src = torch.empty(link_bytes, dtype=torch.uint8, device=device)
        d2d_copies = 12  # ~2 ms each on an H200
        waited = torch.cuda.Event()
        waited.record(side)
        compute = torch.cuda.current_stream(device)

        def python_hook(module: torch.nn.Module, args: Any) -> None:
            return None

        def wait_hook(module: torch.nn.Module, args: Any) -> None:
            compute.wait_event(waited)

        blocks = list(resident.blocks)
        conditions = {
            "resident": (nothing, run_resident),
            "resident, link busy": (busy_link(host, link_dest, side), run_resident),
            "resident, copy engine busy on the device": (
                busy_copy_engine(d2d_src, link_dest, side, d2d_copies),
                run_resident,
            ),
            "resident, a Python hook per block": (hook_per_block(blocks, python_hook), run_resident),
            "resident, a stream wait per block": (hook_per_block(blocks, wait_hook), run_resident),
            "streamed": (nothing, run_streamed),
        }
        measured = host_issue_ms(conditions, device, args.rounds)
        base = measured["resident"]["host_ms"]
        for name, row in measured.items():
            row["extra_us_per_unit"] = (row["host_ms"] - base) * 1e3 / units
            print(f"{name}: {row['host_ms']:.2f} ms host, {row['extra_us_per_unit']:+.1f} us per unit", flush=True)
        # How long the background work lasts on the device, to check it covers the encode.
        for name in ("resident, link busy", "resident, copy engine busy on the device"):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            eb.synchronize(device)
            start.record(side)
            conditions[name][0]()
            stop.record(side)
            stop.synchronize()
            measured[name]["background_ms"] = start.elapsed_time(stop)
            print(f"{name}: background work {measured[name]['background_ms']:.1f} ms", flush=True)
        report = {
            "command": " ".join(["python3", *sys.argv]),
            "machine": eb.machine(device),
            "tower": args.tower,
            "case": case.description,
            "units": units,
            "rounds": args.rounds,
            "conditions": measured,
        }
    write_atomic(args.out, json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
