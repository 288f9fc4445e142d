"""Two versions of the tower streamer in one process: the same encode's host time (issue 11).

`run.sh ab` used to run each side in its own process, alternated: the lent H200 host's
speed drifted between two processes by more than the changes were worth (the same code:
78-124 us more host time per unit than resident in four runs of one call). Here one
process holds three copies of the same tower (same seed): resident, streamed by the
base's `tower_streaming.py`, streamed by the current tree's. Each round runs one encode
on each, in a rotated order, and times its host issue (the forward's return, no sync) and
its total (with a sync). The figures are medians over rounds, and the median of the
per-round differences current - base (each round's three encodes run within a few tens of
milliseconds, so the host's drift falls on all three alike).

The base module is loaded from its file under another name and runs against the current
tree's other modules: a base that needs another changed file cannot be compared this way
(its import fails, naming it).

    python3 benchmarks/tower_ab.py --base BASE/tower_streaming.py --out FILE.json   # CUDA
    python3 benchmarks/tower_ab.py --smoke --base FILE --out FILE.json              # CPU
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import encode_bench as eb  # noqa: E402
import tower_pipeline as tp  # noqa: E402

from vllm_fork.core.fs import write_atomic  # noqa: E402

SIDES = ("resident", "base", "current")


def load_module(path: Path, name: str) -> ModuleType:
    """The Python file `path` as a module named `name` (registered: dataclasses look it up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"tower_ab.py: cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def stream_with(streaming: ModuleType, tower: torch.nn.Module, lookahead: int) -> Any:
    """Wrap `tower` with `streaming`'s `TowerStreamer`, as `PrefetchOffloader.wrap_tower`
    and `post_init` do."""
    streamer = streaming.TowerStreamer(lookahead=lookahead)
    streamer.wrap(tower, "visual")
    streamer.post_init()
    return streamer


def rotated(names: tuple[str, ...], round_: int) -> list[str]:
    """`names` starting at a different one each round, so none always runs first."""
    k = round_ % len(names)
    return list(names[k:] + names[:k])


def timed_rounds(
    runs: dict[str, Callable[[], Any]], device: torch.device, rounds: int
) -> dict[str, dict[str, list[float]]]:
    """Per side, the host issue and total ms of one encode per round (after two warm-ups)."""
    for run in runs.values():
        for _ in range(2):
            run()
    eb.synchronize(device)
    times: dict[str, dict[str, list[float]]] = {name: {"host_ms": [], "total_ms": []} for name in runs}
    for round_ in range(rounds):
        for name in rotated(tuple(runs), round_):
            eb.synchronize(device)
            start = time.perf_counter()
            runs[name]()
            issued = time.perf_counter()
            eb.synchronize(device)
            times[name]["host_ms"].append((issued - start) * 1e3)
            times[name]["total_ms"].append((time.perf_counter() - start) * 1e3)
    return times


def paired_us_per_unit(a: list[float], b: list[float], units: int) -> dict[str, float]:
    """The per-round differences b - a (ms) as us per unit: median and quartiles."""
    diffs = sorted((y - x) * 1e3 / units for x, y in zip(a, b))
    q1, median, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (diffs[0],) * 3
    return {"median": median, "q1": q1, "q3": q3}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the base's tower_streaming.py")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true")
    tp.add_one_case_args(parser)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args(argv)
    setup = tp.make_setup("tower_ab.py", args.smoke, eb.Repeats(2, 0.0, 1, 1), copy_iters=2)
    rounds = 3 if args.smoke else args.rounds
    case = tp.case_named(args.case)
    with tp.tf.vllm_context("nccl" if setup.device.type == "cuda" else "gloo"):
        from vllm.model_executor.offloader import tower_streaming as current

        base = load_module(args.base, "tower_streaming_base")
        inputs = tp.Inputs.for_tower(setup, args.tower)
        towers = {side: tp.build_tower(setup, args.tower) for side in SIDES}  # same seed: the same weights
        streamers = {
            "base": stream_with(base, towers["base"], args.lookahead),
            "current": stream_with(current, towers["current"], args.lookahead),
        }
        units = {side: len(s.towers[0].units) for side, s in streamers.items()}
        runs = {side: tp.encoder(towers[side], case, setup, inputs) for side in SIDES}
        reference = runs["resident"]()
        bit_identical = {side: tp.identical(runs[side](), reference) for side in ("base", "current")}
        times = timed_rounds(runs, setup.device, rounds)
    n = units["current"]
    report: dict[str, Any] = {
        "command": " ".join(["python3", *sys.argv]),
        "machine": eb.machine(setup.device),
        "base": str(args.base),
        "tower": args.tower,
        "case": case.description,
        "lookahead": args.lookahead,
        "rounds": rounds,
        "units": units,
        "bit_identical": bit_identical,
        "median_ms": {side: {k: statistics.median(v) for k, v in t.items()} for side, t in times.items()},
        # Per round, on the host issue: each streamer over resident, and current over base.
        "extra_host_us_per_unit": {
            side: paired_us_per_unit(times["resident"]["host_ms"], times[side]["host_ms"], units[side])
            for side in ("base", "current")
        },
        "current_minus_base_host_us_per_unit": paired_us_per_unit(
            times["base"]["host_ms"], times["current"]["host_ms"], n
        ),
        "current_minus_base_total_us_per_unit": paired_us_per_unit(
            times["base"]["total_ms"], times["current"]["total_ms"], n
        ),
        "times_ms": {side: {k: [round(x, 3) for x in v] for k, v in t.items()} for side, t in times.items()},
    }
    write_atomic(args.out, json.dumps(report, indent=1) + "\n")
    extra, delta = report["extra_host_us_per_unit"], report["current_minus_base_host_us_per_unit"]
    print(
        f"{args.tower} {args.case}, {rounds} rounds: host ms resident / base / current "
        + " / ".join(f"{report['median_ms'][s]['host_ms']:.2f}" for s in SIDES)
        + f"; over resident per unit: base {extra['base']['median']:.1f} us, current {extra['current']['median']:.1f} us;"
        f" current - base {delta['median']:+.1f} us per unit (quartiles {delta['q1']:+.1f} / {delta['q3']:+.1f});"
        f" bit-identical: {bit_identical}"
    )


if __name__ == "__main__":
    main()
