"""Where a streamed encode's host time goes: resident vs streamed, per unit (issue 11).

The pipeline matrix (tower_pipeline.py) showed small encodes streaming at
2-3x resident while the device sat idle: the host is the bottleneck there, so
every microsecond the streamer adds per unit is paid in full. This measures,
on one tower (2B Qwen3-VL by default) and one small image:

- host issue time (the forward call's return, no sync) and total time (with
  a device sync), resident and streamed, timed interleaved, and the
  difference per unit;
- the host cost of each operation the streamer does per unit (re-binding a
  unit's parameters, an event, a stream switch, a non-blocking copy's issue),
  timed in isolation;
- a cProfile of streamed encodes: the functions with the most own time;
- on a second streamed copy, a clock on each step of the streamer's hook
  (entry, exit, re-binding, copy issue, ...): host microseconds per unit.

    python3 benchmarks/tower_host_time.py --out benchmarks/results/tower_host_time.json

`--smoke` runs every path on the CPU with a tiny tower (no copies to issue).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import encode_bench as eb  # noqa: E402
import tower_pipeline as tp  # noqa: E402

from vllm_fork.core.fs import write_atomic  # noqa: E402


def issue_and_total_s(fn: Callable[[], Any], device: torch.device) -> tuple[float, float]:
    """One call of `fn` on an idle device: seconds until it returns (host issue), and until the
    device has done its work."""
    eb.synchronize(device)
    start = time.perf_counter()
    fn()
    issued = time.perf_counter()
    eb.synchronize(device)
    return issued - start, time.perf_counter() - start


def host_and_total_ms(
    runs: dict[str, Callable[[], Any]], device: torch.device, iters: int
) -> dict[str, dict[str, float]]:
    """Per name, the median host issue time and total time of `iters` runs.

    The runs are `eb.interleaved`, after two warm-ups each: these encodes are
    bound by the host, whose speed drifts, and a resident figure timed minutes
    before the streamed one once came out 1.4x the same case's in the
    interleaved matrix.
    """
    for run in runs.values():
        for _ in range(2):
            run()
    host: dict[str, list[float]] = {name: [] for name in runs}
    total: dict[str, list[float]] = {name: [] for name in runs}
    for name in eb.interleaved(list(runs), iters):
        issue_s, total_s = issue_and_total_s(runs[name], device)
        host[name].append(issue_s * 1e3)
        total[name].append(total_s * 1e3)
    return {
        name: {"host_ms": statistics.median(host[name]), "total_ms": statistics.median(total[name])} for name in runs
    }


def per_call_us(fn: Callable[[], Any], iters: int = 2000) -> float:
    """Mean host time of one call of `fn` over `iters` calls, in microseconds."""
    for _ in range(20):
        fn()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def copy_issue_us_by_mib(streamed: Any, side: torch.cuda.Stream, device: torch.device) -> dict[str, dict[str, float]]:
    """Median host time to issue one host-to-device copy on `side`, by size, from the
    tower's registered arena and from memory pinned by the caching host allocator.

    A single cold copy of a 32 MiB unit once took about 100 us to issue, while
    the profile of streamed encodes has 8-15 us for 16-32 MiB: this settles,
    without the profiler, whether the cost grows with the bytes or depends on
    how the arena is pinned.
    """
    sizes_mib = (1, 4, 16, 32)
    arena = streamed.arena.host
    most = min(max(sizes_mib) * tp.MiB, arena.numel())
    pinned = torch.empty(most, dtype=torch.uint8, pin_memory=True)
    huge, unregister = registered_huge_pages(most)
    dest = torch.empty(most, dtype=torch.uint8, device=device)
    compute = torch.cuda.current_stream(device)
    out: dict[str, dict[str, float]] = {}
    sources = {"registered arena": arena, "caching-allocator pinned": pinned}
    if huge is not None:
        sources["registered, huge pages"] = huge
    for mib in sizes_mib:
        nbytes = min(mib * tp.MiB, most)
        for name, source in sources.items():

            def issue(source: torch.Tensor = source, nbytes: int = nbytes) -> None:
                torch.cuda.set_stream(side)
                dest[:nbytes].copy_(source[:nbytes], non_blocking=True)
                torch.cuda.set_stream(compute)

            times = [issue_and_total_s(issue, device)[0] * 1e6 for _ in range(15)]
            out.setdefault(name, {})[f"{mib} MiB"] = statistics.median(times)
    unregister()
    return out


def registered_huge_pages(nbytes: int) -> tuple[torch.Tensor | None, Callable[[], None]]:
    """`nbytes` of host memory registered as the arena is (cudaHostRegister, portable and
    mapped), but 2 MiB-aligned and asked for transparent huge pages first: if the driver's
    cost to issue a copy grows with the pages it spans, this is the arena to use.
    (None, no-op) where registering is refused or the kernel gave no huge pages."""
    import mmap

    from vllm.model_executor.offloader import tower_streaming as ts

    huge_page = 2 * tp.MiB
    mapping = mmap.mmap(-1, nbytes + huge_page)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        mapping.madvise(mmap.MADV_HUGEPAGE)
    whole = torch.frombuffer(mapping, dtype=torch.uint8)
    start = -whole.data_ptr() % huge_page
    host = whole[start : start + nbytes]
    address = host.data_ptr()
    before = anon_huge_pages_kib()
    cudart = torch.cuda.cudart()
    if int(cudart.cudaHostRegister(address, nbytes, ts._CUDA_HOST_REGISTER_PORTABLE_MAPPED)) != 0:
        return None, lambda: None
    if anon_huge_pages_kib() <= before:  # registering faulted the pages in, none of them huge
        cudart.cudaHostUnregister(address)
        return None, lambda: None
    return host, lambda: cudart.cudaHostUnregister(address)


def anon_huge_pages_kib() -> int:
    """This process's anonymous memory on transparent huge pages (0 where not reported)."""
    try:
        text = Path("/proc/self/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def operation_costs(streamed: Any, device: torch.device) -> dict[str, Any]:
    """Host microseconds of each per-unit operation of the streamer, in isolation."""
    unit = max((u for u in streamed.units if u.spec.recurse), key=lambda u: u.nbytes)
    slot = torch.empty(unit.nbytes, dtype=torch.uint8, device=device)
    costs: dict[str, Any] = {"unit": unit.spec.name, "unit_params": len(unit.places), "unit_mib": unit.nbytes / tp.MiB}

    def rebind_twice() -> None:
        unit.bind(slot)
        unit.bind(unit.resting)

    costs["bind_to_slot_and_back_us"] = per_call_us(rebind_twice, 500)
    # Did `set_` work, or did every parameter fall back to `.data = view`?
    param = unit.places[0].param
    try:
        with torch.inference_mode(False), torch.no_grad():
            param.set_(slot.untyped_storage(), 0, unit.places[0].shape, unit.places[0].stride)
        costs["set_"] = "ok"
    except RuntimeError as e:
        costs["set_"] = f"RuntimeError: {str(e).splitlines()[0]}"
    unit.bind(unit.resting)
    if device.type == "cuda":
        side = torch.cuda.Stream(device)
        costs["event_record_us"] = per_call_us(lambda: torch.cuda.Event().record())
        reused = torch.cuda.Event()
        costs["event_rerecord_us"] = per_call_us(lambda: reused.record())
        costs["wait_event_us"] = per_call_us(lambda: side.wait_event(torch.cuda.Event()))

        def switch() -> None:
            with torch.cuda.stream(side):
                pass

        costs["stream_switch_us"] = per_call_us(switch)
        compute = torch.cuda.current_stream(device)

        def set_stream_there_and_back() -> None:
            torch.cuda.set_stream(side)
            torch.cuda.set_stream(compute)

        costs["set_stream_there_and_back_us"] = per_call_us(set_stream_there_and_back)
        costs["current_stream_us"] = per_call_us(lambda: torch.cuda.current_stream(device))

        # Issue alone: a truly asynchronous copy returns in microseconds; a
        # copy the driver stages (pageable memory) blocks for its duration.
        costs["copy_issue_us_by_mib"] = copy_issue_us_by_mib(streamed, side, device)
        costs["host_is_pinned"] = bool(unit.host.is_pinned())
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
        costs["transparent_hugepage"] = thp.read_text().strip() if thp.exists() else None
    return costs


class _Clock:
    """Host microseconds spent in the streamer's per-unit steps, accumulated.

    Installed on the streamer's classes before a tower is wrapped (the hooks
    capture `_enter` and `_leave` when they are installed) and removed after,
    so only the instrumented tower pays for the clock (a few hundred ns a step).
    """

    # (class name in tower_streaming, method, step name)
    STEPS = (
        ("StreamedTower", "_enter", "hook entry (all of the below but release)"),
        ("StreamedTower", "_leave", "hook exit (the parameters back, release)"),
        ("StreamedUnit", "bind", "bind (re-point a unit's parameters)"),
        # Trees that run a unit from a slot on parameters made there (no `bind`).
        ("StreamedUnit", "swap_in", "swap in (the slot's parameters into the unit's modules)"),
        ("StreamedUnit", "swap_out", "swap out (the unit's own parameters back)"),
        ("_Ring", "acquire", "acquire (wait for the unit's copy)"),
        ("StreamedTower", "_prefetch", "prefetch (issue the next copies)"),
        # Trees with a plan: a position of an encode that follows the last one.
        ("_Ring", "take", "take (wait for the unit's copy, issue the one lookahead ahead)"),
        # `_Ring.fill` issues a unit's copy (on the CPU, makes it), unless issued already.
        ("_Ring", "fill", "fill (a copy's issue, unless issued: prefetch, acquire, take)"),
        ("_Ring", "release", "release (mark the slot free)"),
    )

    def __init__(self) -> None:
        self.us: dict[str, float] = {}
        self._saved: list[tuple[type, str, Any]] = []

    def _timed(self, step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.us[step] = self.us.get(step, 0.0) + (time.perf_counter() - start) * 1e6

        return timed

    def install(self, ts: Any) -> None:
        """Clock every step the tree has (an A/B may pit trees with different steps)."""
        for cls_name, method, step in self.STEPS:
            cls = getattr(ts, cls_name)
            original = cls.__dict__.get(method)
            if original is None:
                continue
            self._saved.append((cls, method, original))
            setattr(cls, method, self._timed(step, original))

    def remove(self) -> None:
        for cls, method, original in reversed(self._saved):
            setattr(cls, method, original)
        self._saved.clear()


def streamer_steps_us(setup: Any, tower: str, case: Any, inputs: Any, lookahead: int, encodes: int) -> dict[str, Any]:
    """Per unit and encode, the host microseconds of each step of the streamer's hook, on a
    freshly wrapped copy of the tower (the clock's own cost is in the figures)."""
    from vllm.model_executor.offloader import tower_streaming as ts

    clock = _Clock()
    module = tp.build_tower(setup, tower)
    clock.install(ts)
    try:
        offloader = tp.stream(module, lookahead)
    finally:
        clock.remove()
    # The hooks keep the timed `_enter` and `_leave` they captured; the steps inside are
    # timed again only around the timed encodes.
    run = tp.encoder(module, case, setup, inputs)
    for _ in range(2):
        run()
    eb.synchronize(setup.device)
    clock.us.clear()
    clock.install(ts)
    try:
        for _ in range(encodes):
            run()
    finally:
        clock.remove()
    eb.synchronize(setup.device)
    units = len(offloader.tower_streamer.towers[0].units)
    del module, offloader
    eb.release_memory(setup.device)
    per = units * encodes
    return {"units": units, "encodes": encodes, "us_per_unit": {k: v / per for k, v in sorted(clock.us.items())}}


def profiled(run: Callable[[], Any], device: torch.device, encodes: int) -> pstats.Stats:
    """cProfile of `encodes` runs, after one unprofiled."""
    run()
    eb.synchronize(device)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(encodes):
        run()
    eb.synchronize(device)
    profiler.disable()
    return pstats.Stats(profiler)


def profile_top(run: Callable[[], Any], device: torch.device, encodes: int, top: int) -> str:
    """cProfile's top functions by own time over `encodes` runs."""
    out = io.StringIO()
    stats = profiled(run, device, encodes)
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def python_calls(run: Callable[[], Any], device: torch.device, encodes: int) -> dict[str, tuple[float, float]]:
    """cProfile of `encodes` runs: per Python function (and builtin), calls and own us per encode."""
    stats = profiled(run, device, encodes).stats  # type: ignore[attr-defined]
    return {
        f"{Path(file).name}:{line}({name})": (calls / encodes, own_s * 1e6 / encodes)
        for (file, line, name), (_, calls, own_s, _, _) in stats.items()
    }


def torch_ops(run: Callable[[], Any], device: torch.device, encodes: int) -> dict[str, tuple[float, float]]:
    """torch.profiler (CPU side) of `encodes` runs: per op, calls and self CPU us per encode."""
    run()
    eb.synchronize(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(encodes):
            run()
        eb.synchronize(device)
    return {e.key: (e.count / encodes, e.self_cpu_time_total / encodes) for e in prof.key_averages()}


def differences(
    resident: dict[str, tuple[float, float]], streamed: dict[str, tuple[float, float]], top: int
) -> dict[str, list[dict[str, Any]]]:
    """What a streamed encode does more than a resident one: the entries whose calls
    differ, and those with the most extra own time (per encode)."""
    rows = []
    for key in resident.keys() | streamed.keys():
        (calls_r, us_r), (calls_s, us_s) = resident.get(key, (0.0, 0.0)), streamed.get(key, (0.0, 0.0))
        rows.append(
            {"what": key, "calls": [round(calls_r, 1), round(calls_s, 1)], "own_us": [round(us_r, 1), round(us_s, 1)]}
        )
    more_calls = [r for r in rows if r["calls"][0] != r["calls"][1]]
    more_calls.sort(key=lambda r: r["own_us"][1] - r["own_us"][0], reverse=True)
    rows.sort(key=lambda r: r["own_us"][1] - r["own_us"][0], reverse=True)
    return {"calls_differ": more_calls[:top], "most_extra_time": rows[:top]}


def where_streaming_differs(
    resident: Callable[[], Any], streamed: Callable[[], Any], device: torch.device, encodes: int, top: int = 25
) -> dict[str, Any]:
    """The Python calls and torch ops of resident and streamed encodes side by side."""
    return {
        "python": differences(python_calls(resident, device, encodes), python_calls(streamed, device, encodes), top),
        "torch_ops": differences(torch_ops(resident, device, encodes), torch_ops(streamed, device, encodes), top),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true")
    tp.add_one_case_args(parser)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args(argv)
    setup = tp.make_setup("tower_host_time.py", args.smoke, eb.Repeats(2, 0.0, 1, 1), copy_iters=2)
    case = tp.case_named(args.case)
    with tp.tf.vllm_context("nccl" if setup.device.type == "cuda" else "gloo"):
        resident = tp.build_tower(setup, args.tower)
        inputs = tp.Inputs.for_tower(setup, args.tower)
        report: dict[str, Any] = {
            "command": " ".join(["python3", *sys.argv]),
            "machine": eb.machine(setup.device),
            "tower": args.tower,
            "case": case.description,
            "lookahead": args.lookahead,
        }
        reference = tp.encoder(resident, case, setup, inputs)()
        module = tp.build_tower(setup, args.tower)  # same seed: the same weights
        offloader = tp.stream(module, args.lookahead)
        streamed = offloader.tower_streamer.towers[0]
        run = tp.encoder(module, case, setup, inputs)
        timed = host_and_total_ms(
            {"resident": tp.encoder(resident, case, setup, inputs), "streamed": run}, setup.device, args.iters
        )
        report["resident"], report["streamed"] = timed["resident"], timed["streamed"]
        report["bit_identical"] = tp.identical(run(), reference)
        units = len(streamed.units)
        report["units"] = units
        report["extra_host_us_per_unit"] = (report["streamed"]["host_ms"] - report["resident"]["host_ms"]) * 1e3 / units
        report["operations"] = operation_costs(streamed, setup.device)
        report["profile"] = profile_top(run, setup.device, 5, 30)
        # Per encode, what the streamed tower calls that the resident one does not: the host
        # time the clocks on the streamer's own steps do not account for.
        report["differs"] = where_streaming_differs(tp.encoder(resident, case, setup, inputs), run, setup.device, 5)
        del module, offloader, streamed, run
        eb.release_memory(setup.device)
        report["streamer_steps"] = streamer_steps_us(setup, args.tower, case, inputs, args.lookahead, args.iters)
    write_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("profile", "machine")}, indent=1))
    print(report["profile"])
    for kind, found in report["differs"].items():
        for title, rows in found.items():
            print(f"-- {kind}, {title} (resident / streamed per encode):")
            for row in rows:
                print(
                    f"  {row['what']}: calls {row['calls'][0]:g} / {row['calls'][1]:g}, own us {row['own_us'][0]:.1f} / {row['own_us'][1]:.1f}"
                )


if __name__ == "__main__":
    main()
