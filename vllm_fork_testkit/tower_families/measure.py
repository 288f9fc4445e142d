"""One row of the tower matrix (resident vs streamed, on any device) and the Markdown table."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn as nn

from vllm_fork_testkit.tower_families.core import (
    TowerFamily,
    bit_identical,
    build_family,
    device_properties,
    encode,
    make_inputs,
    max_abs_diff,
    streamable_parameters,
    towers_of,
)

MiB = 1 << 20


def param_bytes_on_device(module: nn.Module, offloader=None) -> int:
    """Parameter bytes in device memory: not counting views of a streamed arena, nor the
    token-embedding tables the streamer keeps resident by design."""
    arenas = []
    if offloader is not None and offloader.tower_streamer is not None:
        arenas = [t.arena.device_view for t in offloader.tower_streamer.towers]

    def in_arena(p: torch.Tensor) -> bool:
        return any(a.data_ptr() <= p.data_ptr() < a.data_ptr() + a.numel() for a in arenas)

    return sum(
        p.numel() * p.element_size()
        for p in streamable_parameters(module)
        if p.device.type != "cpu" and not in_arena(p)
    )


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's where the run had no GPU: what a result was measured on."""
    import platform

    return torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()


def timed(run, device: torch.device) -> tuple[float, Any]:
    """Seconds from a synchronized device to `run()`'s work done on it, and what it returned."""
    import time

    _synchronize(device)
    start = time.perf_counter()
    outputs = run()
    _synchronize(device)
    return time.perf_counter() - start, outputs


def _timed_encodes(family, host, inputs, device, repeats: int, bracket=contextlib.nullcontext):
    def run():
        with bracket():
            return encode(family, host, inputs)

    outputs, times = None, []
    for _ in range(repeats):
        elapsed, outputs = timed(run, device)
        times.append(elapsed)
    return outputs, times


def pinned_h2d_bytes_per_s(device: torch.device, nbytes: int = 256 * MiB, repeats: int = 5) -> float | None:
    """The link's speed for one bulk copy from pinned host memory (median of
    `repeats`, after one to warm up): what a streamed encode's copies are
    measured against. None off CUDA."""
    if device.type != "cuda":
        return None
    import statistics

    source = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dest = torch.empty(nbytes, dtype=torch.uint8, device=device)
    seconds = []
    for _ in range(repeats + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dest.copy_(source, non_blocking=True)
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1e3)
    del source, dest
    return nbytes / statistics.median(seconds[1:])


def release(device: torch.device) -> None:
    import gc

    gc.collect()  # vLLM modules hold reference cycles (bound methods)
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_family(
    family: TowerFamily,
    size: str,
    device: torch.device,
    dtype: torch.dtype,
    repeats: int = 3,
) -> dict[str, Any]:
    """Build, encode resident, then streamed: one row of the tower matrix.

    The streamed towers are built again from the same seed (as vLLM builds
    them once, under the offloader), wrapped like `_mark_tower_model` does
    (`wrap_tower` per tower, then `post_init`). A refusal at wrap time is
    recorded with its message; the towers are freed before returning.
    """
    from vllm.model_executor.offloader import PrefetchOffloader

    row: dict[str, Any] = {
        "family": family.name,
        "model": family.model,
        "towers": list(family.towers),
        "full_tower": family.full_tower,
        "size": size,
    }
    if family.works_around:
        row["works_around"] = family.works_around
    host = build_family(family, size, device, dtype)
    towers = towers_of(family, host)
    row["tower_param_bytes"] = sum(p.numel() * p.element_size() for t in towers.values() for p in t.parameters())
    inputs = make_inputs(family, host, size, device, dtype)
    warm = encode(family, host, inputs)  # warm up (kernels, workspaces)
    reference, resident_times = _timed_encodes(family, host, inputs, device, repeats)
    row["resident_repeatable"] = bit_identical(warm, reference)
    row["output_shapes"] = [list(t.shape) for t in reference]
    row["resident_encode_s"] = min(resident_times)
    row["resident_param_bytes_on_device"] = param_bytes_on_device(host)
    devices = device_properties(host, towers)
    row["device_properties"] = devices
    del host, towers
    release(device)

    host = build_family(family, size, device, dtype)
    towers = towers_of(family, host)
    offloader = PrefetchOffloader(group_size=0, num_in_group=1, prefetch_step=1, offload_towers=True)
    try:
        for name, tower in towers.items():
            offloader.wrap_tower(tower, prefix=name)
    except ValueError as e:
        row["status"] = "refused"
        row["refusal"] = str(e)
        del host, towers, offloader
        release(device)
        return row
    offloader.post_init()
    streamer = offloader.tower_streamer
    row["arena_pinning"] = sorted({t.arena.pinning for t in streamer.towers})
    row["units"] = sum(len(t.units) for t in streamer.towers)
    row["largest_unit_bytes"] = max(u.nbytes for t in streamer.towers for u in t.units)
    row["streamed_param_bytes_on_device_after_load"] = param_bytes_on_device(host, offloader)
    # Each encode is one model encode, as vLLM's runner makes it (its call of
    # `embed_multimodal`): the towers stream from their first use to its end.
    with streamer.encode():  # the first encode learns the unit order
        encode(family, host, inputs)
    copied = streamer.copied_bytes
    outputs, streamed_times = _timed_encodes(family, host, inputs, device, repeats, streamer.encode)
    row["streamed_encode_s"] = min(streamed_times)
    # The H2D floor: what each encode copied, at the link's bulk speed.
    row["copied_bytes_per_encode"] = (streamer.copied_bytes - copied) // repeats
    bandwidth = pinned_h2d_bytes_per_s(device)
    if bandwidth is not None:
        row["h2d_bytes_per_s"] = bandwidth
        row["h2d_floor_s"] = row["copied_bytes_per_encode"] / bandwidth
    row["streamed_param_bytes_on_device"] = param_bytes_on_device(host, offloader)
    # The units too small to stream (norms split off mergers) stay on the device.
    row["kept_resident_bytes"] = sum(streamer.kept_resident.values())
    row["bit_identical"] = bit_identical(outputs, reference)
    row["max_abs_diff"] = max_abs_diff(outputs, reference)
    row["device_properties_streamed"] = device_properties(host, towers)
    row["status"] = "streams" if row["bit_identical"] else "differs"
    if family.differs:
        row["known_difference"] = family.differs
    del host, towers, offloader, streamer, outputs, reference
    release(device)
    return row


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The tower matrix as a Markdown table."""
    lines = [
        "| family | towers | tower MiB | status | bit-identical (max abs diff) "
        "| param MiB on GPU between encodes | resident ms | streamed ms | ratio "
        "| copied MiB per encode | H2D floor ms | streamed / max(resident, floor) |",
        "| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        status = row.get("status", "?")
        if status in ("refused", "error", "skipped"):
            why = row.get("refusal") or row.get("error") or row.get("reason", "")
            lines.append(
                f"| {row['family']} | {', '.join(row.get('towers', []))} | "
                f"{row.get('tower_param_bytes', 0) / MiB:.1f} | {status}: "
                f"{why.splitlines()[0][:160] if why else ''} | | | | | | | | |"
            )
            continue
        ratio = row["streamed_encode_s"] / row["resident_encode_s"]
        floor = row.get("h2d_floor_s")
        copied = row.get("copied_bytes_per_encode")
        against_floor = (
            f"{row['streamed_encode_s'] / max(row['resident_encode_s'], floor):.2f}x" if floor is not None else ""
        )
        lines.append(
            f"| {row['family']} | {', '.join(row['towers'])} | "
            f"{row['tower_param_bytes'] / MiB:.1f} | {status} | "
            f"{'yes' if row['bit_identical'] else 'no'} ({row['max_abs_diff']:.3g}) | "
            f"{row['streamed_param_bytes_on_device'] / MiB:.2f} | "
            f"{row['resident_encode_s'] * 1e3:.1f} | "
            f"{row['streamed_encode_s'] * 1e3:.1f} | {ratio:.2f}x | "
            f"{'' if copied is None else f'{copied / MiB:.1f}'} | "
            f"{'' if floor is None else f'{floor * 1e3:.1f}'} | {against_floor} |"
        )
    notes = [f"- {row['family']}: {row['known_difference']}" for row in rows if row.get("known_difference")]
    if notes:
        lines += ["", "Known differences (patch issues, with the evidence):", *notes]
    workarounds = [f"- {row['family']}: {row['works_around']}" for row in rows if row.get("works_around")]
    if workarounds:
        lines += ["", "vLLM bugs the harness works around (not the streamer's):", *workarounds]
    return "\n".join(lines) + "\n"
