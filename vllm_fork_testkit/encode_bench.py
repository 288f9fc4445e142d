"""What the encoder benchmarks share: timing, peak memory, H2D copies, the machine.

Device-agnostic: on CUDA, times come from CUDA events around the work (the
host waits for the end event, so the next run starts on an idle device) and
memory from the caching allocator's peak; on the CPU (the `--smoke` runs that
prove the code paths in CI) times come from `time.perf_counter` and there is no
device memory to report (None).
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vllm_fork_testkit.kernels import uses_standins

MiB = 1 << 20


@dataclass
class Timing:
    """Wall times of repeated runs of one piece of work, in ms."""

    times_ms: list[float] = field(default_factory=list)
    warmup: int = 0

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    def as_dict(self) -> dict[str, Any]:
        return {
            "median_ms": self.median_ms,
            "min_ms": min(self.times_ms),
            "max_ms": max(self.times_ms),
            "iters": len(self.times_ms),
            "warmup": self.warmup,
            "times_ms": [round(t, 3) for t in self.times_ms],
        }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_once_ms(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    """One run of `fn`, timed; returns (ms, what `fn` returned)."""
    if device.type != "cuda":
        start_s = time.perf_counter()
        out = fn()
        return (time.perf_counter() - start_s) * 1e3, out
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    out = fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end), out


@dataclass(frozen=True)
class Repeats:
    """How many times to run a piece of work.

    After `warmup` runs (the first of which pays for kernel selection and
    cuBLAS workspaces), the last warm-up's time sets the number of timed runs:
    enough to fill `target_ms`, within [min_iters, max_iters]. So short
    encodes get many samples and a 9000-token encode a few, and the whole
    matrix fits its time budget.
    """

    warmup: int = 2
    target_ms: float = 800.0
    min_iters: int = 5
    max_iters: int = 30

    def iters_for(self, one_ms: float) -> int:
        wanted = math.ceil(self.target_ms / max(one_ms, 1e-3))
        return max(self.min_iters, min(self.max_iters, wanted))


def time_runs(fn: Callable[[], Any], device: torch.device, repeats: Repeats) -> tuple[Timing, Any, Any]:
    """Warm up, then time runs of `fn`.

    Returns the timing, the first run's output (a cold run: what the first
    encode after start-up gives) and the last run's output.
    """
    first = last = None
    one_ms = 0.0
    for i in range(max(1, repeats.warmup)):
        one_ms, last = run_once_ms(fn, device)
        if i == 0:
            first = last
    timing = Timing(warmup=max(1, repeats.warmup))
    for _ in range(repeats.iters_for(one_ms)):
        ms, last = run_once_ms(fn, device)
        timing.times_ms.append(ms)
    return timing, first, last


def time_interleaved(
    fns: dict[str, Callable[[], Any]], device: torch.device, repeats: Repeats
) -> dict[str, tuple[Timing, Any, Any]]:
    """Like `time_runs` for several functions at once, their timed runs interleaved.

    Each is warmed up on its own; then they run `interleaved`. The number of
    rounds is set by the slowest warm run. Returns, per name, the timing, the
    first and the last run's output.
    """
    first: dict[str, Any] = {}
    last: dict[str, Any] = {}
    warm_ms = 0.0
    for name, fn in fns.items():
        for i in range(max(1, repeats.warmup)):
            one_ms, last[name] = run_once_ms(fn, device)
            if i == 0:
                first[name] = last[name]
        warm_ms = max(warm_ms, one_ms)
    timings = {name: Timing(warmup=max(1, repeats.warmup)) for name in fns}
    for name in interleaved(list(fns), repeats.iters_for(warm_ms)):
        ms, last[name] = run_once_ms(fns[name], device)
        timings[name].times_ms.append(ms)
    return {name: (timings[name], first[name], last[name]) for name in fns}


def interleaved(names: list[str], rounds: int) -> Iterator[str]:
    """Each name once per round, the order reversed every other round, so that
    drift of the machine (a busy host, clocks) falls on all of them alike and
    their ratio is fair."""
    for round_ in range(rounds):
        yield from names if round_ % 2 == 0 else reversed(names)


def peak_extra_bytes(fn: Callable[[], Any], device: torch.device) -> tuple[int | None, Any]:
    """Device memory `fn` allocates at its peak over what was allocated before it.

    Returns (bytes or None on the CPU, what `fn` returned).
    """
    if device.type != "cuda":
        return None, fn()
    synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = fn()
    synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before, out


def release_memory(device: torch.device) -> None:
    """Free what the last phase left: vLLM modules hold reference cycles (bound methods)."""
    import gc

    synchronize(device)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# -- host-to-device copies ----------------------------------------------------


def pinned_host_bytes(nbytes: int, device: torch.device) -> torch.Tensor:
    """`nbytes` of page-locked host memory (plain host memory without CUDA)."""
    return torch.empty(nbytes, dtype=torch.uint8, device="cpu", pin_memory=device.type == "cuda")


def copy_ms(
    sources: list[torch.Tensor], dest: torch.Tensor, device: torch.device, iters: int, warmup: int = 2
) -> Timing:
    """Time copying `sources` back to back into `dest` (at their running offsets), on one stream.

    One source is the bulk floor: the link's speed for these bytes. Many
    sources (one per streamed unit) add each copy's fixed cost.
    """

    def copy_all() -> None:
        offset = 0
        for source in sources:
            dest[offset : offset + source.numel()].copy_(source, non_blocking=True)
            offset += source.numel()

    timing = Timing(warmup=warmup)
    for _ in range(warmup):
        run_once_ms(copy_all, device)
    for _ in range(iters):
        timing.times_ms.append(run_once_ms(copy_all, device)[0])
    return timing


def profile_to(path: Path, run: Callable[[], Any], device: torch.device, ranges: list[str]) -> None:
    """One warm run of `run`, then one profiled run per name in `ranges` (each in a
    `record_function` range of that name, which covers the host's issuing; the wait for
    the device follows it); the Chrome trace written gzipped to `path`, atomically."""
    import gzip
    import tempfile

    from torch.profiler import ProfilerActivity, profile, record_function

    from vllm_fork.core.fs import write_atomic

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    run()
    synchronize(device)
    with profile(activities=activities) as prof:
        for name in ranges:
            with record_function(name):
                run()
            synchronize(device)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        write_atomic(path, gzip.compress(raw.read_bytes()))


def gb_per_s(nbytes: int, ms: float) -> float:
    return nbytes / (ms / 1e3) / 1e9 if ms > 0 else math.inf


# -- the machine and the results ----------------------------------------------


def machine(device: torch.device) -> dict[str, Any]:
    """What ran the benchmark: accelerator, driver, torch, CUDA, host."""
    info: dict[str, Any] = {
        "device": str(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        # ../shared/gpu: vLLM's Python tree with pure-torch stand-ins for its
        # compiled extensions (SDPA attention instead of FlashAttention).
        "vllm_gpu_standins": uses_standins(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = props.name
        info["gpu_memory_mib"] = props.total_memory // MiB
        info["driver"] = _nvidia_smi("driver_version")
        info["pcie"] = _nvidia_smi("pcie.link.gen.current,pcie.link.width.current")
    else:
        info["cpu"] = platform.processor() or platform.machine()
    return info


def _nvidia_smi(query: str) -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        proc = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else None
