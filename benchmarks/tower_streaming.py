"""Encode latency and GPU memory of a vision tower: resident vs streamed vs UVA.

One run, one GPU, the patched vLLM Python tree: a Qwen3-VL-8B-sized vision
tower (depth 27, hidden 1152, 16 heads, MLP 4304, deepstack [8, 16, 24];
1099 MiB in bf16, random weights) encodes one image of 2223 tokens (grid
1x78x114) three ways:

- resident: the tower's weights on the GPU (what vLLM does by default);
- streamed: `--offload-towers` (the prefetch offloader streams the tower from
  pinned host memory unit by unit);
- uva: `--cpu-offload-gb` (the UVA offloader; kernels read the weights from
  pinned host memory over PCIe).

Resident and streamed are built side by side and their timed encodes interleaved (each
once per round, the order reversed every other round), so that the machine's drift falls
on both alike: with vLLM's real kernels a plain median of one mode's encodes, then the
other's, was too noisy to judge. UVA is timed alone after them. It also
measures the pinned host-to-device copy of the tower's bytes: the floor under which
streaming cannot go. Results go to a JSON file and a
Markdown table next to it, with the command that produced them.

    python3 benchmarks/tower_streaming.py --out benchmarks/results/tower_streaming.json

`--smoke` runs the same code on the CPU in seconds (the patched tree imported
as tests/patches imports it): the same tower builder at a tiny size, resident
and streamed by vLLM's own `PrefetchOffloader`, the outputs compared bit for
bit and the parameters left on the device between encodes counted. It makes no
timing or memory claims, and the UVA mode and the pinned H2D copy, which need
CUDA, are recorded as skipped; tests/patches/test_tower_streaming_smoke.py runs it.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vllm_fork.core.fs import write_atomic
from vllm_fork_testkit import encode_bench as eb
from vllm_fork_testkit.kernels import uses_standins

# The GPU tests' helpers: the Qwen3-VL-8B vision config, building and seeding as vLLM's loader does.

MiB = 1 << 20
GRID = [[1, 78, 114]]
TARGETS = {
    "streamed_over_resident_max": 1.10,
    "uva_over_streamed_min": 7.0,
    # Beyond the units too small to stream, which the streamer keeps resident by design
    # (under 1/64 of a block: the merger's norms, 58.5 KiB of the 8B tower).
    "streamed_param_bytes_between_encodes_over_kept": 0,
}
CONFIG_8B = "Qwen3-VL-8B vision: depth 27, hidden 1152, 16 heads, MLP 4304, deepstack [8, 16, 24], bf16"

# --smoke: the 8B config at a tiny size (the shape tower_pipeline.py's smoke towers take), one
# image of the same aspect about 8x smaller per side, on the CPU in fp32.
TINY_VISION = {
    "depth": 5,
    "hidden_size": 96,
    "num_heads": 4,
    "intermediate_size": 160,
    "out_hidden_size": 128,
    "deepstack_visual_indexes": [1, 2],
    "num_position_embeddings": 64,
    "patch_size": 4,
}
TINY_GRID = [[1, 10, 14]]
CONFIG_TINY = "tiny Qwen3-VL vision (--smoke): depth 5, hidden 96, 4 heads, MLP 160, deepstack [1, 2], fp32"
NEEDS_CUDA = "skipped: needs CUDA"
NOT_TIMED = "not timed (smoke)"


@dataclass(frozen=True)
class Setup:
    """Where the tower runs: the GPU in bf16 at full size, or (`smoke`) the CPU in fp32, tiny."""

    device: torch.device
    dtype: torch.dtype
    smoke: bool

    @property
    def grid(self) -> list[list[int]]:
        return TINY_GRID if self.smoke else GRID

    def vision(self) -> dict[str, Any]:
        from vllm_fork_testkit.vlm_checkpoint import VISION

        return {**VISION, **TINY_VISION} if self.smoke else dict(VISION)


def make_setup(smoke: bool) -> Setup:
    """The GPU in bf16, or for `smoke` the patched tree on the CPU (as tests/patches imports
    it) in fp32. Exits with a message when a full run finds no GPU."""
    if smoke:
        from vllm_fork_testkit.vllm_tree import ensure_tree, import_on_cpu

        import_on_cpu(ensure_tree())
        torch.set_num_threads(1)  # tiny ops: one thread is faster than a pool, and shares CI better
        return Setup(torch.device("cpu"), torch.float32, True)
    if not torch.cuda.is_available():
        sys.exit("tower_streaming.py needs a CUDA GPU (--smoke runs the code paths on the CPU)")
    return Setup(torch.device("cuda"), torch.bfloat16, False)


def vision_config(setup: Setup):
    """Qwen3-VL-8B's vision tower, as the GPU tests build it (vllm_fork_testkit/vlm_checkpoint.VISION)."""
    from transformers.models.qwen3_vl.configuration_qwen3_vl import (
        Qwen3VLVisionConfig,
    )

    return Qwen3VLVisionConfig(**setup.vision())


def build_tower(setup: Setup, seed: int = 0) -> torch.nn.Module:
    from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer

    from vllm_fork_testkit.tower_families import loader_defaults, seed_weights, use_plain_cpu_linear

    with loader_defaults(setup.device, setup.dtype):
        tower = Qwen3_VisionTransformer(vision_config(setup), prefix="visual")
    seed_weights([tower], setup.device, seed)
    if setup.device.type == "cpu":  # vLLM's CPU GEMM dispatch needs its compiled ops
        use_plain_cpu_linear(tower)
    return tower


def image(setup: Setup) -> torch.Tensor:
    generator = torch.Generator(device=setup.device).manual_seed(1)
    t, h, w = setup.grid[0]
    vision = setup.vision()
    patch_dim = vision["in_channels"] * vision["temporal_patch_size"] * vision["patch_size"] ** 2
    x = torch.randn(t * h * w, patch_dim, device=setup.device, generator=generator)
    return x.to(setup.dtype)


def time_interleaved_ms(
    fns: dict[str, Callable[[], object]], warmup: int, iters: int, setup: Setup
) -> dict[str, list[float] | None]:
    """Times of `iters` runs of each function after warming each up, the timed runs
    interleaved (`encode_bench.time_interleaved`: each once per round, the order reversed
    every other round), so that the machine's drift between rounds (clocks, a busy host)
    falls on all of them alike and their ratio is fair. On the CPU (smoke) the runs, untimed."""
    fixed = eb.Repeats(warmup=warmup, target_ms=0.0, min_iters=iters, max_iters=iters)
    timed = eb.time_interleaved(fns, setup.device, fixed)
    return {name: None if setup.smoke else timing.times_ms for name, (timing, _, _) in timed.items()}


def time_ms(fn: Callable[[], object], warmup: int, iters: int, setup: Setup) -> list[float] | None:
    """CUDA-event times of `iters` runs after `warmup`; on the CPU (smoke) the runs, untimed."""
    return time_interleaved_ms({"one": fn}, warmup, iters, setup)["one"]


def param_bytes_on_device(module: torch.nn.Module, device: torch.device, offloader: object = None) -> int:
    """Bytes of parameters stored in the device's memory (the GPU's; in a smoke run, the CPU's).

    UVA views live on the host: the UVA offloader flags them, and a streamed
    tower's parameters rest on views of its pinned arena.
    """
    streamer = getattr(offloader, "tower_streamer", None)
    arenas = [t.arena.device_view for t in streamer.towers] if streamer else []

    def on_host(p: torch.Tensor) -> bool:
        return getattr(p, "_vllm_is_uva_offloaded", False) or any(
            a.data_ptr() <= p.data_ptr() < a.data_ptr() + a.numel() for a in arenas
        )

    return sum(
        p.numel() * p.element_size() for p in module.parameters() if p.device.type == device.type and not on_host(p)
    )


class Memory:
    """The caching allocator's figures on the GPU; None on the CPU (no device memory)."""

    def __init__(self, setup: Setup):
        self.cuda = setup.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def empty_cache(self) -> None:
        if self.cuda:
            torch.cuda.empty_cache()

    def allocated(self) -> int:
        return torch.cuda.memory_allocated() if self.cuda else 0

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated() if self.cuda else 0

    def mib(self, nbytes: int) -> float | None:
        return nbytes / MiB if self.cuda else None


@dataclass
class Mode:
    """One way of holding the tower, built and encoded, kept for its timed encodes."""

    name: str
    result: dict
    run: Callable[[], torch.Tensor] | None
    keep: object  # the offloader, if any
    output: torch.Tensor | None  # its first encode's output, where it is the reference


def build_mode(
    name: str,
    prepare: Callable[[torch.nn.Module], object],
    x: torch.Tensor,
    reference: torch.Tensor | None,
    setup: Setup,
) -> Mode:
    """Build a tower, apply `prepare` (the offloading), encode: its memory between encodes and
    at its peak, and whether its output is the reference's bit for bit."""
    memory = Memory(setup)
    # vLLM modules hold reference cycles (bound methods): collect the last
    # mode's tower now, not in the middle of this one's measurement.
    gc.collect()
    memory.empty_cache()
    baseline = memory.allocated()
    tower = build_tower(setup)
    keep = prepare(tower)

    def run() -> torch.Tensor:
        with torch.inference_mode():
            return tower(x, setup.grid)

    out = run()
    memory.sync()
    identical = None if reference is None else bool(torch.equal(out, reference))
    if reference is not None:
        out = None
    # The reference output is kept: not tower memory.
    held = 0 if out is None else out.numel() * out.element_size()
    run()  # a second encode: what stays between encodes (a streamer's ring, its learned order)
    memory.sync()
    between = memory.allocated() - baseline - held
    memory.reset_peak()
    before = memory.allocated()
    run()
    memory.sync()
    result = {
        "mode": name,
        "param_bytes_on_gpu_between_encodes": param_bytes_on_device(tower, setup.device, keep),
        "gpu_allocated_between_encodes_mib": memory.mib(between),
        "gpu_peak_during_encode_mib": memory.mib(memory.peak() - baseline - held),
        "encode_extra_over_between_mib": memory.mib(memory.peak() - before),
        "bit_identical_to_resident": identical,
    }
    return Mode(name, result, run, keep, out)


def finish_mode(mode: Mode, times: list[float] | None, reference: torch.Tensor) -> None:
    """Its timings, and one more encode against the reference: every encode, the timed ones
    too, gives the same bits."""
    mode.result.update(
        {
            "median_ms": statistics.median(times) if times else None,
            "min_ms": min(times) if times else None,
            "max_ms": max(times) if times else None,
            "times_ms": [round(t, 3) for t in times] if times else None,
            "repeatable": bool(torch.equal(mode.run(), reference)),
        }
    )


def release(setup: Setup, *modes: Mode) -> None:
    """Free the modes' towers (each `run` closure holds one) and offloaders."""
    for mode in modes:
        mode.run = mode.keep = None
    memory = Memory(setup)
    memory.sync()
    gc.collect()
    memory.empty_cache()


def h2d_floor(tower_bytes: int, args: argparse.Namespace) -> dict:
    """Pinned host-to-device copy of the tower's bytes, as one bulk copy."""
    host = torch.empty(tower_bytes, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(tower_bytes, dtype=torch.uint8, device="cuda")
    setup = Setup(torch.device("cuda"), torch.uint8, False)
    times = time_ms(lambda: device.copy_(host, non_blocking=True), 2, args.iters, setup)
    median = statistics.median(times)
    host = device = None
    torch.cuda.empty_cache()
    return {
        "tower_bytes": tower_bytes,
        "median_ms": median,
        "gb_per_s": tower_bytes / (median / 1e3) / 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="result JSON (the Markdown goes next to it)")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny tower on the CPU: every code path that runs there, no timings (UVA and H2D skipped)",
    )
    parser.add_argument(
        "--command",
        default=None,
        help="the command line to record (default: this process's)",
    )
    args = parser.parse_args()
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be at least 1 and --warmup at least 0")
    setup = make_setup(args.smoke)
    if setup.smoke:
        args.iters, args.warmup = 1, 0  # the code paths once: nothing here is timed

    from vllm_fork_testkit.tower_families import vllm_context

    with vllm_context("gloo" if setup.smoke else "nccl"):
        run_all(args, setup)


def run_all(args: argparse.Namespace, setup: Setup) -> None:
    from vllm.model_executor.offloader import PrefetchOffloader, UVAOffloader

    x = image(setup)

    def resident(tower: torch.nn.Module) -> None:
        return None

    def streamed(tower: torch.nn.Module) -> PrefetchOffloader:
        offloader = PrefetchOffloader(group_size=0, num_in_group=1, prefetch_step=1, offload_towers=True)
        offloader.wrap_tower(tower, prefix="visual")
        offloader.post_init()
        return offloader

    def uva(tower: torch.nn.Module) -> UVAOffloader:
        offloader = UVAOffloader(cpu_offload_max_bytes=1 << 40)
        offloader.wrap_tower(tower, prefix="visual")
        return offloader

    # Resident and streamed both built, their timed encodes interleaved: the ratio the
    # streamer is judged by. UVA, an order of magnitude slower, alone after them.
    held = build_mode("resident", resident, x, None, setup)
    reference = held.output
    pair = (held, build_mode("streamed", streamed, x, reference, setup))
    times = time_interleaved_ms({m.name: m.run for m in pair}, args.warmup, args.iters, setup)
    for mode in pair:
        finish_mode(mode, times[mode.name], reference)
    results: dict = {mode.name: mode.result for mode in pair}
    release(setup, *pair)
    if setup.smoke:  # UVA views of pinned host memory are device tensors: CUDA only
        results["uva"] = {"mode": "uva", "skipped": NEEDS_CUDA}
    else:
        alone = build_mode("uva", uva, x, reference, setup)
        finish_mode(alone, time_ms(alone.run, args.warmup, args.iters, setup), reference)
        results["uva"] = alone.result
        release(setup, alone)
    probe = build_tower(setup)
    tower_bytes = sum(p.numel() * p.element_size() for p in probe.parameters())
    offloader = streamed(probe)
    units = [u.nbytes for u in offloader.tower_streamer.towers[0].units]
    kept = offloader.tower_streamer.kept_resident.get("visual", 0)
    pinning = offloader.tower_streamer.towers[0].arena.pinning
    del probe, offloader
    if setup.smoke:  # a pinned host-to-device copy: CUDA only
        results["h2d_floor"] = {"tower_bytes": tower_bytes, "skipped": NEEDS_CUDA}
    else:
        results["h2d_floor"] = h2d_floor(tower_bytes, args)

    streamed_bytes = results["streamed"]["param_bytes_on_gpu_between_encodes"]
    kept_met = streamed_bytes == kept + TARGETS["streamed_param_bytes_between_encodes_over_kept"]
    if setup.smoke:
        summary = {
            "streamed_over_resident": None,
            "uva_over_streamed": None,
            "streamed_param_bytes_between_encodes": streamed_bytes,
            "kept_resident_bytes": kept,
        }
        summary["targets_met"] = {
            "streamed <= 1.10 x resident": NOT_TIMED,
            "streamed >= 7 x faster than uva": NEEDS_CUDA,
            "no param bytes between encodes but the kept ones": kept_met,
        }
    else:
        r, s, u = (results[m]["median_ms"] for m in ("resident", "streamed", "uva"))
        summary = {
            "streamed_over_resident": s / r,
            "uva_over_streamed": u / s,
            "streamed_param_bytes_between_encodes": streamed_bytes,
            "kept_resident_bytes": kept,
        }
        summary["targets_met"] = {
            "streamed <= 1.10 x resident": summary["streamed_over_resident"] <= TARGETS["streamed_over_resident_max"],
            "streamed >= 7 x faster than uva": summary["uva_over_streamed"] >= TARGETS["uva_over_streamed_min"],
            "no param bytes between encodes but the kept ones": kept_met,
        }
    command = args.command or shlex.join(["python3", *sys.argv])
    report = {
        "command": command,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "smoke": setup.smoke,
        "device": setup.device.type,
        "gpu": None if setup.smoke else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "vllm_python_tree_standins": uses_standins(),
        "tower": {
            "config": CONFIG_TINY if setup.smoke else CONFIG_8B,
            "param_bytes": tower_bytes,
            "param_mib": tower_bytes / MiB,
            "streamed_units": len(units),
            "largest_unit_mib": max(units) / MiB,
            "arena_pinning": pinning,
        },
        "image": {"grid_thw": setup.grid[0], "tokens": setup.grid[0][1] * setup.grid[0][2] // 4},
        "iters": args.iters,
        # Whose timed encodes alternated (encode_bench.interleaved).
        "interleaved": ["resident", "streamed"],
        "results": results,
        "summary": summary,
    }
    if setup.smoke:
        report["not_run"] = {
            "timings": "a --smoke run times nothing: the CPU copies synchronously and its times say nothing",
            "gpu_memory": "no GPU memory on the CPU (the allocated and peak figures are None)",
            "uva": NEEDS_CUDA,
            "h2d_floor": NEEDS_CUDA,
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, json.dumps(report, indent=2) + "\n")
    markdown = render_markdown(report)
    write_atomic(args.out.with_suffix(".md"), markdown)
    print(markdown)


def _cell(value: float | None, spec: str, missing: str, suffix: str = "") -> str:
    return missing if value is None else f"{value:{spec}}{suffix}"


def render_markdown(report: dict) -> str:
    results = report["results"]
    smoke = report.get("smoke", False)
    if smoke:
        where = (
            f"CPU -- a --smoke run: a tiny tower, no timing or memory claims; torch {report['torch']}, {report['when']}"
        )
        median = "one encode of each (not timed)."
    else:
        where = f"{report['gpu']}, torch {report['torch']}, {report['when']}"
        median = f"median of {report['iters']} encodes" + (
            f", {' and '.join(report['interleaved'])} interleaved (each once per round, the order reversed every"
            " other round)."
            if report.get("interleaved")
            else "."
        )
    lines = [
        "# Vision tower encode: resident vs streamed vs UVA",
        "",
        f"Command: `{report['command']}`",
        "",
        f"{where}; "
        f"{report['tower']['config']} ({report['tower']['param_mib']:.{3 if smoke else 0}f} MiB, "
        f"{report['tower']['streamed_units']} streamed units, largest "
        f"{report['tower']['largest_unit_mib']:.{3 if smoke else 1}f} MiB); one image of "
        f"{report['image']['tokens']} tokens (grid "
        f"{'x'.join(map(str, report['image']['grid_thw']))}); {median}"
        + (
            " vLLM's Python tree with pure-torch stand-ins for its "
            "compiled extensions (SDPA attention): ratios are real, absolute times are "
            "not FlashAttention's."
            if report["vllm_python_tree_standins"]
            else ""
        ),
        "",
        f"| mode | encode (ms) | vs resident | tower params on {'the device (CPU)' if smoke else 'GPU'} between "
        "encodes | GPU allocated between encodes (MiB) | GPU peak during encode "
        "(MiB) | bit-identical |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    resident_ms = results["resident"]["median_ms"]
    for mode in ("resident", "streamed", "uva"):
        r = results[mode]
        if "skipped" in r:
            lines.append(f"| {mode} | {r['skipped']} | | | | | |")
            continue
        identical = r["bit_identical_to_resident"]
        on_device = r["param_bytes_on_gpu_between_encodes"]
        lines.append(
            f"| {mode} | {_cell(r['median_ms'], '.1f', NOT_TIMED)} "
            f"| {'-' if resident_ms is None else format(r['median_ms'] / resident_ms, '.2f') + 'x'} "
            # On the CPU the "device" is the host: the bytes off the streamer's arena, in bytes.
            f"| {f'{on_device} bytes (CPU)' if smoke else f'{on_device / MiB:.1f} MiB'} "
            f"| {_cell(r['gpu_allocated_between_encodes_mib'], '.1f', 'no GPU')} "
            f"| {_cell(r['gpu_peak_during_encode_mib'], '.1f', 'no GPU')} "
            f"| {'reference' if identical is None else identical} |"
        )
    floor = results["h2d_floor"]
    summary = report["summary"]
    if "skipped" in floor:
        h2d = f"H2D floor: {floor['skipped']} (the tower's {floor['tower_bytes']} bytes from pinned host memory)."
        ratios = f"Streamed / resident: {NOT_TIMED}. UVA / streamed: {NEEDS_CUDA}. "
    else:
        h2d = (
            f"H2D floor: the tower's {floor['tower_bytes'] / MiB:.0f} MiB from pinned "
            f"host memory in {floor['median_ms']:.1f} ms ({floor['gb_per_s']:.1f} GB/s)."
        )
        ratios = (
            f"Streamed / resident: {summary['streamed_over_resident']:.3f} "
            f"(target <= 1.10). UVA / streamed: {summary['uva_over_streamed']:.1f} "
            f"(target >= 7). "
        )

    def met(value: bool | str) -> str:
        return value if isinstance(value, str) else ("yes" if value else "NO")

    lines += [
        "",
        h2d,
        "",
        ratios + "Streamed parameter bytes on the "
        f"{'device' if smoke else 'GPU'} between encodes: "
        f"{summary['streamed_param_bytes_between_encodes']} (target: the "
        f"{summary['kept_resident_bytes']} bytes of units too small to stream, kept resident).",
        "",
        "Targets met: " + ", ".join(f"{k}: {met(v)}" for k, v in summary["targets_met"].items()),
        "",
    ]
    if smoke:
        lines += ["Not run in this smoke run:", ""]
        lines += [f"- {what}: {why}" for what, why in report["not_run"].items()]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
