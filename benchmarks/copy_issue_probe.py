"""How a unit's host-to-device copy could be issued: the host's time per issue and the bandwidth.

A small eager encode of a streamed tower is bound by the host (issue 11): issuing a unit's
copy (`cudaMemcpyAsync` from the pinned arena on the copy stream) costs 25-50 us of host
time per unit on the lent H200, and that time grows with the unit's bytes. This probe
compares, for copies of 4, 16 and 32 MiB from memory registered as the streamer's arena
is (`HostArena`: `cudaHostRegister`, portable and mapped):

- `copy engine`: `dest.copy_(host, non_blocking=True)`, what the streamer does;
- `UVA memcpy`: `dest.copy_(device_view)`, the arena's device view (UVA) as the source:
  torch sees a device-to-device copy;
- `UVA kernel`: an elementwise kernel reading the device view (`bitwise_or(src, 0)` on
  int64 words): one kernel launch whatever the size, the SMs pull the bytes over PCIe;
- `cudart memcpyAsync`: `cudaMemcpyAsync` called through ctypes on the loaded libcudart
  (as vLLM's `CudaRTLibrary` calls cudart), the stream an argument: no torch dispatch
  and no stream switch.

Per way and size: the host's time per issue (a hot loop of issues on a side stream, then
one sync) and the achieved bandwidth (CUDA events over a batch of copies).

    python3 benchmarks/copy_issue_probe.py --out FILE.json   # on a CUDA machine
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from unit_issue_probe import CUDA_MEMCPY_DEFAULT  # noqa: E402
from unit_issue_probe import cudart as load_cudart  # noqa: E402

from vllm_fork.core.fs import write_atomic  # noqa: E402

MiB = 1 << 20
SIZES_MIB = (4, 16, 32)


def ways(
    host: torch.Tensor, view: torch.Tensor, dest: torch.Tensor, side: torch.cuda.Stream, nbytes: int
) -> dict[str, Callable[[], None]]:
    """The ways to copy the first `nbytes` of the arena into `dest` (on `side`), their
    tensors sliced beforehand as the streamer's are (a unit's bytes, a slot's view)."""
    memcpy_async = load_cudart().memcpy
    to, source, mapped = dest[:nbytes], host[:nbytes], view[:nbytes]
    to_words, mapped_words = to.view(torch.int64)[: nbytes // 8], mapped.view(torch.int64)[: nbytes // 8]
    dst, src, stream = dest.data_ptr(), host.data_ptr(), side.cuda_stream

    def cudart() -> None:
        error = memcpy_async(dst, src, nbytes, CUDA_MEMCPY_DEFAULT, stream)
        assert error == 0, f"cudaMemcpyAsync: error {error}"

    return {
        "copy engine": lambda: to.copy_(source, non_blocking=True),
        "UVA memcpy": lambda: to.copy_(mapped),
        "UVA kernel": lambda: torch.bitwise_or(mapped_words, 0, out=to_words),
        "cudart memcpyAsync": cudart,
    }


def host_us_per_issue(issue: Callable[[], None], side: torch.cuda.Stream, iters: int) -> float:
    """The host's time per issue in a hot loop on `side` (median of 5 loops)."""
    loops = []
    for _ in range(5):
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            start = time.perf_counter()
            for _ in range(iters):
                issue()
            loops.append((time.perf_counter() - start) / iters * 1e6)
        torch.cuda.synchronize()
    return statistics.median(loops)


def gb_per_s(issue: Callable[[], None], nbytes: int, side: torch.cuda.Stream, iters: int) -> float:
    """Achieved bandwidth of `iters` copies back to back on `side` (CUDA events)."""
    with torch.cuda.stream(side):
        issue()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(side)
        for _ in range(iters):
            issue()
        stop.record(side)
    stop.synchronize()
    return nbytes * iters / (start.elapsed_time(stop) / 1000) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    from vllm.model_executor.offloader.tower_streaming import HostArena

    device = torch.device("cuda", 0)
    arena = HostArena(max(SIZES_MIB) * MiB, device, pin_memory=True)
    arena.host.random_(0, 255)
    dest = torch.empty(arena.nbytes, dtype=torch.uint8, device=device)
    side = torch.cuda.Stream(device)
    result: dict = {"pinning": arena.pinning, "device": torch.cuda.get_device_name(device), "ways": {}}
    for mib in SIZES_MIB:
        nbytes = mib * MiB
        for name, issue in ways(arena.host, arena.device_view, dest, side, nbytes).items():
            dest.zero_()
            issue()
            torch.cuda.synchronize()
            result["ways"].setdefault(name, {})[f"{mib} MiB"] = row = {
                "host_us_per_issue": host_us_per_issue(issue, side, args.iters),
                "gb_per_s": gb_per_s(issue, nbytes, side, args.iters),
                "bytes_equal": bool(torch.equal(dest[:nbytes].cpu(), arena.host[:nbytes])),
            }
            print(f"{name}, {mib} MiB: {json.dumps(row)}", flush=True)
    write_atomic(args.out, json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
