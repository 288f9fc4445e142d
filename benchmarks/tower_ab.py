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

`--strip` adds two copies of the current streamer that skip some of its CUDA calls (each
replaced by a Python function that returns success): `no-memcpy` issues no copy (the
events and waits stay), `no-cuda-calls` issues no copy, event record or stream wait.
Their outputs are wrong (they compute on slots no copy wrote) and their times are not a
streamer's; the per-round differences split a streamed encode's extra host time into the
hook's Python and parameter swaps (no-cuda-calls - resident), the events and waits
(no-memcpy - no-cuda-calls) and the copies (current - no-memcpy: the copy's issue, and
whatever the link's traffic costs the host).

`--configs 3,2:0.05` adds the current streamer under other settings, a tower each: a
lookahead, and after a colon GiB of the tower's first units kept resident
(`--offload-towers-resident-gb`). For these and `current`, each round's total (to the
device's end) over max(resident's total, the H2D floor: one bulk pinned copy of the whole
tower) is reported, the issue's ratio, its median over rounds (for a run of encodes, which
the issue takes encode by encode, streamed / resident): what a deeper ring or a
resident prefix does to encodes whose compute, copies and host take about as long, with
the host's drift falling on every side alike.

`--hooks` adds three resident towers that do part of what the streamer does to the tower's
modules and nothing else: `hooked` wraps each unit's forward as the streamer does, with
entry and exit calls that do nothing; `swapped` also puts parameters made the way the
streamer makes them on a ring slot (`StreamedUnit.params_on`, views of a device copy of the
unit laid out as in the arena, two copies used in turn like two slots) in the unit's
modules for its forward, and its own back after; `swapped-once` the same with one copy
(the same parameters every encode, as the streamer's unit gets while the order holds);
`swapped-plain` with each parameter a tensor of its own. All are bit-identical to
resident. With `--strip` the part "hook and swaps" splits further: the wrapper (hooked -
resident), the model's forward on swapped parameters and the swaps (swapped - hooked), and
the streamer's own bookkeeping (no-cuda-calls - swapped).

    python3 benchmarks/tower_ab.py --base BASE/tower_streaming.py --out FILE.json   # CUDA
    python3 benchmarks/tower_ab.py --strip --out FILE.json                           # CUDA
    python3 benchmarks/tower_ab.py --strip --hooks --out FILE.json                   # CUDA
    python3 benchmarks/tower_ab.py --smoke --base FILE --strip --out FILE.json      # CPU
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

#: The current streamer's cudart calls (`_CopyEngine`'s raw functions) each stripped copy skips.
STRIPPED = {
    "no-memcpy": ("_memcpy_async",),
    "no-cuda-calls": ("_memcpy_async", "_event_record", "_stream_wait_event"),
}
#: What each part of a streamed encode's extra host time is, as (side, side it is over).
PARTS = {
    "hook and swaps": ("no-cuda-calls", "resident"),
    "events and waits": ("no-memcpy", "no-cuda-calls"),
    "copies": ("current", "no-memcpy"),
}
#: With --hooks, "hook and swaps" in three (the sides of `hook_sides`).
HOOK_PARTS = {
    "wrapper": ("hooked", "resident"),
    "forward on swapped parameters": ("swapped", "hooked"),
    "bookkeeping": ("no-cuda-calls", "swapped"),
}


def load_module(path: Path, name: str) -> ModuleType:
    """The Python file `path` as a module named `name` (registered: dataclasses look it up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"tower_ab.py: cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def stream_with(
    streaming: ModuleType, tower: torch.nn.Module, lookahead: int, slot_mb: int = 0, resident_gb: float = 0.0
) -> Any:
    """Wrap `tower` with `streaming`'s `TowerStreamer`, as `PrefetchOffloader.wrap_tower`
    and `post_init` do (`slot_mb`: `--offload-towers-slot-mb`, `resident_gb`:
    `--offload-towers-resident-gb`, each where not 0)."""
    options: dict[str, int] = {"slot_bytes": slot_mb << 20} if slot_mb else {}
    if resident_gb:
        options["resident_bytes"] = int(resident_gb * (1 << 30))
    streamer = streaming.TowerStreamer(lookahead=lookahead, **options)
    streamer.wrap(tower, "visual")
    streamer.post_init()
    return streamer


def strip(streamer: Any, calls: tuple[str, ...]) -> None:
    """Make `streamer`'s copy engine skip `calls` (cudart's return: 0, success)."""
    for tower in streamer.towers:
        for name in calls:
            if getattr(tower.engine, name, None) is not None:  # None: no cudart (the CPU)
                setattr(tower.engine, name, _skipped)


def _skipped(*args: Any) -> int:
    return 0


def hook_units(streaming: ModuleType, tower: torch.nn.Module, side: str, device: torch.device) -> int:
    """Wrap the forward of each unit the streamer would stream in `tower` (resident) as the
    streamer does; `swapped`: put parameters made on a device copy of the unit (two copies,
    used in turn) in its modules for the forward; `swapped-once`: the same with one copy;
    `swapped-plain`: two, each parameter a tensor of its own (a clone), not a view of the
    unit's bytes. Returns the number of units."""
    _, specs = streaming.keep_small(tower, streaming.split_units(tower))
    for index, spec in enumerate(specs):
        unit = streaming.StreamedUnit(spec, index)
        slots = []
        for _ in range({"hooked": 0, "swapped-once": 1}.get(side, 2)):
            if side == "swapped-plain":
                slots.append([_like(streaming, place.param, place.param.data.clone()) for place in unit.places])
                continue
            flat = torch.empty(unit.nbytes, dtype=torch.uint8, device=device)
            for place in unit.places:
                place.view(flat).copy_(place.param.data)
            slots.append(unit.params_on(flat))
        _wrap_forward(unit, slots)
    return len(specs)


def _like(streaming: ModuleType, original: torch.nn.Parameter, data: torch.Tensor) -> torch.nn.Parameter:
    """A parameter like `original` on `data`, as `params_on` makes them: of its class (without
    vLLM's forwarding `__torch_function__`, `_direct_dispatch`) with its attributes."""
    param = torch.Tensor._make_subclass(streaming._direct_dispatch(type(original)), data, original.requires_grad)
    param.__dict__.update(original.__dict__)
    return param


def _wrap_forward(unit: Any, slots: list[list[torch.nn.Parameter]]) -> None:
    module = unit.spec.module
    inner = module.forward
    turn = [0]

    def enter(unit: Any) -> int:
        if slots:
            turn[0] ^= 1
            unit.swap_in(slots[turn[0] % len(slots)])
        return 0

    def leave(unit: Any, position: int) -> None:
        if slots:
            unit.swap_out()

    # The streamer's wrapper, call for call (`StreamedTower._hook_unit`).
    def forward(*args: Any, **kwargs: Any) -> Any:
        position = enter(unit)
        try:
            return inner(*args, **kwargs)
        finally:
            leave(unit, position)

    module.forward = forward


def parse_configs(text: str) -> dict[str, tuple[int, float]]:
    """`--configs`: side name -> (lookahead, resident GiB), e.g. "3,2:0.05" ->
    {"L3": (3, 0.0), "L2+0.05GiB": (2, 0.05)}."""
    configs = {}
    for item in filter(None, text.split(",")):
        lookahead, _, gb = item.partition(":")
        config = (int(lookahead), float(gb or 0))
        configs[f"L{config[0]}" + (f"+{gb}GiB" if config[1] else "")] = config
    return configs


def ratio_over_rounds(side: list[float], resident: list[float], floor_ms: float) -> float:
    """The median over rounds of side / max(resident, floor): issue 11's ratio, paired."""
    return statistics.median(s / max(r, floor_ms) for s, r in zip(side, resident))


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
    parser.add_argument("--base", type=Path, help="the base's tower_streaming.py")
    parser.add_argument("--strip", action="store_true", help="add the current streamer with CUDA calls skipped")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--hooks", action="store_true", help="add resident towers with the streamer's wrapper, then its swaps"
    )
    parser.add_argument("--smoke", action="store_true")
    tp.add_one_case_args(parser)
    parser.add_argument("--rounds", type=int, help="rounds of one encode per side (default 60; 3 with --smoke)")
    parser.add_argument(
        "--slot-blocks",
        type=int,
        default=0,
        help="the current streamer's ring slots hold this many of the tower's blocks (0: the largest unit)",
    )
    parser.add_argument(
        "--base-slot-blocks",
        type=int,
        default=0,
        help="the same for the base's streamer (a base from before --offload-towers-slot-mb takes only 0)",
    )
    tp.add_compute_stream_option(parser)
    parser.add_argument(
        "--configs",
        default="",
        help="comma-separated LOOKAHEAD[:RESIDENT_GB]: the current streamer so set, a side each (e.g. 3,2:0.05)",
    )
    args = parser.parse_args(argv)
    try:
        configs = parse_configs(args.configs)
    except ValueError:
        parser.error(f"--configs: LOOKAHEAD[:RESIDENT_GB],... (got {args.configs!r})")
    if args.base is None and not args.strip and not configs:
        parser.error("nothing to compare: --base FILE, --strip, --configs, or some of them")
    setup = tp.make_setup(
        "tower_ab.py", args.smoke, eb.Repeats(2, 0.0, 1, 1), copy_iters=2, compute_stream=args.compute_stream
    )
    rounds = args.rounds if args.rounds is not None else 3 if args.smoke else 60
    case = tp.case_named(args.case)
    with tp.tf.vllm_context("nccl" if setup.device.type == "cuda" else "gloo"):
        from vllm.model_executor.offloader import tower_streaming as current

        tp.use_compute_stream(setup)

        versions = {"current": current}
        if args.base is not None:
            versions["base"] = load_module(args.base, "tower_streaming_base")
        if args.strip:
            versions.update(dict.fromkeys(STRIPPED, current))
        versions.update(dict.fromkeys(configs, current))
        hook_sides = ("hooked", "swapped", "swapped-once", "swapped-plain") if args.hooks else ()
        sides = ("resident", *hook_sides, *versions)
        inputs = tp.Inputs.for_tower(setup, args.tower)
        towers = {side: tp.build_tower(setup, args.tower) for side in sides}  # same seed: the same weights
        hooked = {side: hook_units(current, towers[side], side, setup.device) for side in hook_sides}
        slot_mb = tp.slot_mb(towers["current"], args.slot_blocks)
        base_slot_mb = tp.slot_mb(towers["current"], args.base_slot_blocks)
        streamers = {}
        for side, module in versions.items():
            lookahead, resident_gb = configs.get(side, (args.lookahead, 0.0))
            slot = base_slot_mb if side == "base" else slot_mb
            streamers[side] = stream_with(module, towers[side], lookahead, slot, resident_gb)
        floor = tp.h2d_floor(streamers["current"].towers[0], setup) if configs else None
        for side, calls in STRIPPED.items():
            if side in streamers:
                strip(streamers[side], calls)
        units = {side: len(s.towers[0].units) for side, s in streamers.items()} | hooked
        kept = {side: getattr(s, "kept_resident", {}).get("visual", 0) for side, s in streamers.items()}
        runs = {side: tp.encoder(towers[side], case, setup, inputs) for side in sides}
        reference = runs["resident"]()
        bit_identical = {side: tp.identical(runs[side](), reference) for side in (*hook_sides, *versions)}
        times = timed_rounds(runs, setup.device, rounds)
        ring_bytes = {side: s.ring_bytes for side, s in streamers.items()}
    n = units["current"]
    host = {side: t["host_ms"] for side, t in times.items()}
    report: dict[str, Any] = {
        "command": " ".join(["python3", *sys.argv]),
        "machine": eb.machine(setup.device),
        "base": None if args.base is None else str(args.base),
        "tower": args.tower,
        "case": case.description,
        "lookahead": args.lookahead,
        "slot_mb": slot_mb,
        "base_slot_mb": None if args.base is None else base_slot_mb,
        "ring_bytes": ring_bytes,
        "configs": configs,
        "kept_resident_bytes": kept,
        "rounds": rounds,
        "units": units,
        # The stripped copies compute on slots no copy wrote: not bit-identical on a GPU.
        "bit_identical": bit_identical,
        "median_ms": {side: {k: statistics.median(v) for k, v in t.items()} for side, t in times.items()},
        # Per round, on the host issue: each streamer over resident, and current over base.
        "extra_host_us_per_unit": {
            side: paired_us_per_unit(host["resident"], host[side], n) for side in (*hook_sides, *versions)
        },
        "times_ms": {side: {k: [round(x, 3) for x in v] for k, v in t.items()} for side, t in times.items()},
    }
    summary = (
        f"{args.tower} {args.case}, {rounds} rounds: host ms "
        + " / ".join(f"{side} {report['median_ms'][side]['host_ms']:.2f}" for side in sides)
        + "; over resident per unit: "
        + ", ".join(f"{side} {us['median']:.1f} us" for side, us in report["extra_host_us_per_unit"].items())
    )
    if "base" in versions:
        delta = report["current_minus_base_host_us_per_unit"] = paired_us_per_unit(host["base"], host["current"], n)
        report["current_minus_base_total_us_per_unit"] = paired_us_per_unit(
            times["base"]["total_ms"], times["current"]["total_ms"], n
        )
        summary += (
            f"; current - base {delta['median']:+.1f} us per unit (quartiles {delta['q1']:+.1f} / {delta['q3']:+.1f})"
        )
    if configs:
        assert floor is not None
        # A run of encodes takes each encode's max(resident, floor) (tower_pipeline.py), which
        # one total per round cannot: there only streamed / resident is given.
        several = len(case.encodes) > 1
        floor_ms = 0.0 if several else floor["bulk_pinned"]["median_ms"]
        total = {side: t["total_ms"] for side, t in times.items()}
        name = "total_over_resident" if several else "total_over_max_resident_floor"
        ratios = report[name] = {
            side: ratio_over_rounds(total[side], total["resident"], floor_ms) for side in ("current", *configs)
        }
        report["h2d_floor"] = floor
        summary += (
            f"; {len(case.encodes)} encodes a round, total / resident: "
            if several
            else f"; floor {floor_ms:.2f} ms; total / max(resident, floor): "
        ) + ", ".join(
            f"{'L' + str(args.lookahead) if side == 'current' else side} {r:.3f}" for side, r in ratios.items()
        )
    if args.strip:
        parts = report["extra_host_us_per_unit_by_part"] = {
            part: paired_us_per_unit(host[over], host[side], n) for part, (side, over) in PARTS.items()
        }
        summary += "; of it: " + ", ".join(f"{part} {parts[part]['median']:.1f} us" for part in PARTS)
        if args.hooks:
            hook_parts = report["hook_and_swaps_us_per_unit_by_part"] = {
                part: paired_us_per_unit(host[over], host[side], n) for part, (side, over) in HOOK_PARTS.items()
            }
            summary += (
                " (hook and swaps: " + ", ".join(f"{p} {v['median']:.1f} us" for p, v in hook_parts.items()) + ")"
            )
    write_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(f"{summary}; bit-identical: {bit_identical}")


if __name__ == "__main__":
    main()
