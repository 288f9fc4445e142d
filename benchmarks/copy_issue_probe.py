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
  int64 words): one kernel launch whatever the size, the SMs pull the bytes over PCIe.

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

from vllm_fork.core.fs import write_atomic  # noqa: E402

MiB = 1 << 20
SIZES_MIB = (4, 16, 32)


def ways(host: torch.Tensor, view: torch.Tensor, dest: torch.Tensor) -> dict[str, Callable[[int], None]]:
    """The ways to copy the first `nbytes` of the arena into `dest`."""

    def copy_engine(nbytes: int) -> None:
        dest[:nbytes].copy_(host[:nbytes], non_blocking=True)

    def uva_memcpy(nbytes: int) -> None:
        dest[:nbytes].copy_(view[:nbytes])

    def uva_kernel(nbytes: int) -> None:
        words = nbytes // 8
        torch.bitwise_or(view[:nbytes].view(torch.int64)[:words], 0, out=dest[:nbytes].view(torch.int64)[:words])

    return {"copy engine": copy_engine, "UVA memcpy": uva_memcpy, "UVA kernel": uva_kernel}


def host_us_per_issue(issue: Callable[[int], None], nbytes: int, side: torch.cuda.Stream, iters: int) -> float:
    """The host's time per issue in a hot loop on `side` (median of 5 loops)."""
    loops = []
    for _ in range(5):
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            start = time.perf_counter()
            for _ in range(iters):
                issue(nbytes)
            loops.append((time.perf_counter() - start) / iters * 1e6)
        torch.cuda.synchronize()
    return statistics.median(loops)


def gb_per_s(issue: Callable[[int], None], nbytes: int, side: torch.cuda.Stream, iters: int) -> float:
    """Achieved bandwidth of `iters` copies back to back on `side` (CUDA events)."""
    with torch.cuda.stream(side):
        issue(nbytes)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(side)
        for _ in range(iters):
            issue(nbytes)
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
    for name, issue in ways(arena.host, arena.device_view, dest).items():
        rows = {}
        for mib in SIZES_MIB:
            nbytes = mib * MiB
            dest.zero_()
            issue(nbytes)
            torch.cuda.synchronize()
            rows[f"{mib} MiB"] = {
                "host_us_per_issue": host_us_per_issue(issue, nbytes, side, args.iters),
                "gb_per_s": gb_per_s(issue, nbytes, side, args.iters),
                "bytes_equal": bool(torch.equal(dest[:nbytes].cpu(), arena.host[:nbytes])),
            }
        result["ways"][name] = rows
        print(name, json.dumps(rows), flush=True)
    write_atomic(args.out, json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
