"""Where a streamed encode's copy pipeline idles: a torch.profiler trace, summarized.

Reads the Chrome trace that `torch.profiler.profile.export_chrome_trace` writes
(kineto's format: device work as `kernel` / `gpu_memcpy` / `gpu_memset` events
with `args.stream` and `args.correlation`; host calls as `cuda_runtime` /
`cuda_driver` events with the same `args.correlation`; operators as `cpu_op`;
`record_function` ranges as `user_annotation`) and reports:

- per device stream: busy time (the union of its events) and its share of the
  profiled window, kernels, copies and bytes copied host-to-device;
- on the copy stream (the one carrying the most host-to-device bytes), the
  gaps between consecutive copies inside one encode (an encode is a
  `user_annotation` whose name starts with `encode`), largest first, each
  with: when the host issued the next copy relative to the gap's start (late
  issue = a host-bound gap), how busy the compute stream was during the gap
  (busy = the copy waited on compute, e.g. for a ring slot), what the host ran
  between the two copies' launches (top operators) and its synchronizing calls;
- per encode (medians): when the host had issued its last device work, when
  the device finished, each stream's busy time, the host's time in
  synchronizing calls.

    python3 -m vllm_fork_testkit.trace_gaps TRACE.json[.gz]   # prints the Markdown tables
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
HOST_OP_CATEGORIES = ("cpu_op",)
ENCODE_PREFIX = "encode"
MiB = 1 << 20


def load_events(path: Path) -> list[dict[str, Any]]:
    """The trace's events (`traceEvents`), from a .json or .json.gz file."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def _spans(events: list[dict[str, Any]], categories: tuple[str, ...]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in categories and "ts" in e]


def _end(event: dict[str, Any]) -> float:
    return float(event["ts"]) + float(event.get("dur", 0.0))


def _stream(event: dict[str, Any]) -> Any:
    return event.get("args", {}).get("stream", event.get("tid"))


def _correlation(event: dict[str, Any]) -> Any:
    return event.get("args", {}).get("correlation")


def _is_htod(event: dict[str, Any]) -> bool:
    return event.get("cat") == "gpu_memcpy" and "HtoD" in event.get("name", "")


def _host_syncs(
    events: list[dict[str, Any]], device: list[dict[str, Any]], launches: dict[Any, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The host calls that wait for the device: the `*Synchronize` calls, and the
    launches of copies into pageable host memory (`.tolist()`, `.item()`), which
    return only when the copy, and all before it on its stream, is done."""
    waits = [e for e in _spans(events, LAUNCH_CATEGORIES) if "Synchronize" in e.get("name", "")]
    to_pageable = [
        e for e in device if e.get("cat") == "gpu_memcpy" and "DtoH (Device -> Pageable)" in e.get("name", "")
    ]
    waits += [launch for copy in to_pageable if (launch := launches.get(_correlation(copy))) is not None]
    return waits


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -float("inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _overlap_us(intervals: list[tuple[float, float]], start: float, stop: float) -> float:
    return _union_us([(max(a, start), min(b, stop)) for a, b in intervals if b > start and a < stop])


def summarize(events: list[dict[str, Any]], top: int = 8) -> dict[str, Any]:
    """The per-stream busy times and the largest copy-stream gaps (see the module docstring)."""
    device = _spans(events, DEVICE_CATEGORIES)
    summary: dict[str, Any] = {"device_events": len(device), "streams": [], "copy_stream": None, "gaps": []}
    if not device:
        summary["note"] = "no device events in the trace (a CPU run, or CUPTI unavailable)"
        return summary
    window = (min(float(e["ts"]) for e in device), max(_end(e) for e in device))
    summary["window_us"] = window[1] - window[0]
    by_stream: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for event in device:
        by_stream[_stream(event)].append(event)
    htod_bytes = {
        s: sum(int(e.get("args", {}).get("bytes", 0)) for e in evs if _is_htod(e)) for s, evs in by_stream.items()
    }
    kernel_us = {s: sum(float(e.get("dur", 0.0)) for e in evs if e["cat"] == "kernel") for s, evs in by_stream.items()}
    copy_stream = max(htod_bytes, key=lambda s: htod_bytes[s]) if any(htod_bytes.values()) else None
    compute_stream = max(kernel_us, key=lambda s: kernel_us[s]) if any(kernel_us.values()) else None
    summary["copy_stream"], summary["compute_stream"] = copy_stream, compute_stream
    for stream, evs in sorted(by_stream.items(), key=lambda item: str(item[0])):
        busy = _union_us([(float(e["ts"]), _end(e)) for e in evs])
        role = "copy" if stream == copy_stream else "compute" if stream == compute_stream else "other"
        summary["streams"].append(
            {
                "stream": stream,
                "role": role,
                "busy_us": busy,
                "busy_share": busy / summary["window_us"] if summary["window_us"] else 0.0,
                "kernels": sum(e["cat"] == "kernel" for e in evs),
                "copies": sum(e["cat"] == "gpu_memcpy" for e in evs),
                "htod_bytes": htod_bytes[stream],
            }
        )
    if copy_stream is None:
        summary["note"] = "no host-to-device copies in the trace"
        return summary
    compute = [(float(e["ts"]), _end(e)) for e in by_stream.get(compute_stream, [])]
    launches = {_correlation(e): e for e in _spans(events, LAUNCH_CATEGORIES) if _correlation(e) is not None}
    host_ops = _spans(events, HOST_OP_CATEGORIES)
    syncs = _host_syncs(events, device, launches)
    encodes = sorted(
        (float(e["ts"]), _end(e))
        for e in _spans(events, ("user_annotation",))
        if e.get("name", "").startswith(ENCODE_PREFIX)
    )
    copies = sorted((e for e in by_stream[copy_stream] if _is_htod(e)), key=lambda e: float(e["ts"]))

    def encode_of(copy: dict[str, Any]) -> int | None:
        launch = launches.get(_correlation(copy))
        if launch is None:
            return None
        at = float(launch["ts"])
        return next((i for i, (a, b) in enumerate(encodes) if a <= at <= b), None)

    gaps = []
    for index, (before, after) in enumerate(zip(copies, copies[1:])):
        encode = encode_of(after)
        if encode is None or encode != encode_of(before):
            continue  # between encodes, or a copy the trace cannot place
        start, stop = _end(before), float(after["ts"])
        if stop <= start:
            continue
        gaps.append(_describe_gap(index, before, after, start, stop, encode, launches, host_ops, syncs, compute))
    gap_us = [g["gap_us"] for g in gaps]
    per_encode = Counter(encode_of(c) for c in copies)
    summary["copies"] = {
        "count": len(copies),
        "encodes": len(encodes),
        "per_encode": statistics.median(list(per_encode.values())) if per_encode else 0,
        "busy_us": _union_us([(float(c["ts"]), _end(c)) for c in copies]),
        "bytes": sum(int(c.get("args", {}).get("bytes", 0)) for c in copies),
        "gaps": len(gaps),
        "gap_total_us": sum(gap_us),
        "gap_median_us": statistics.median(gap_us) if gap_us else 0.0,
        "first_copy_after_encode_start_us": _first_copy_lead(copies, encodes, launches),
    }
    summary["per_encode"] = _encode_timeline(encodes, device, launches, syncs, copy_stream, compute_stream)
    summary["gaps"] = sorted(gaps, key=lambda g: -g["gap_us"])[:top]
    return summary


def kernel_totals(events: list[dict[str, Any]], top: int = 12) -> list[dict[str, Any]]:
    """The device's kernels by name, the most time first: count and total microseconds.

    Two traces of the same work (a resident and a streamed encode) compared kernel by
    kernel tell slower kernels from idle time between them.
    """
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in _spans(events, ("kernel",)):
        entry = totals[event.get("name", "?")]
        entry[0] += 1
        entry[1] += float(event.get("dur", 0.0))
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:top]
    return [{"name": name, "count": int(count), "total_us": us} for name, (count, us) in ranked]


def _encode_timeline(
    encodes: list[tuple[float, float]],
    device: list[dict[str, Any]],
    launches: dict[Any, dict[str, Any]],
    syncs: list[dict[str, Any]],
    copy_stream: Any,
    compute_stream: Any,
) -> dict[str, float] | None:
    """Medians over the encodes, from each encode's host start: when the host had
    issued its last device work, when the device finished, how long each stream
    was busy, how long the host sat in synchronizing calls."""
    rows: list[dict[str, float]] = []
    for start, stop in encodes:
        mine = [
            (e, float(launch["ts"]))
            for e in device
            if (launch := launches.get(_correlation(e))) is not None and start <= float(launch["ts"]) <= stop
        ]
        if not mine:
            continue

        def busy(stream: Any, mine: list[tuple[dict[str, Any], float]] = mine) -> float:
            return _union_us([(float(e["ts"]), _end(e)) for e, _ in mine if _stream(e) == stream])

        rows.append(
            {
                "host_issued_last_work_us": max(at for _, at in mine) - start,
                "device_done_us": max(_end(e) for e, _ in mine) - start,
                "copy_stream_busy_us": busy(copy_stream),
                "compute_stream_busy_us": busy(compute_stream),
                "host_sync_us": sum(float(e.get("dur", 0.0)) for e in syncs if start <= float(e["ts"]) <= stop),
            }
        )
    if not rows:
        return None
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def _describe_gap(
    index: int,
    before: dict[str, Any],
    after: dict[str, Any],
    start: float,
    stop: float,
    encode: int,
    launches: dict[Any, dict[str, Any]],
    host_ops: list[dict[str, Any]],
    syncs: list[dict[str, Any]],
    compute: list[tuple[float, float]],
) -> dict[str, Any]:
    gap = stop - start
    launch_before = launches.get(_correlation(before))
    launch_after = launches.get(_correlation(after))
    issued_late_us = float(launch_after["ts"]) - start if launch_after else None
    compute_share = _overlap_us(compute, start, stop) / gap
    host: list[dict[str, Any]] = []
    sync_us = 0.0
    if launch_before and launch_after:
        lo, hi = float(launch_before["ts"]), float(launch_after["ts"])
        totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for op in host_ops:
            if lo <= float(op["ts"]) and _end(op) <= hi:
                totals[op["name"]][0] += 1
                totals[op["name"]][1] += float(op.get("dur", 0.0))
        host = [
            {"op": name, "calls": int(n), "us": us}
            for name, (n, us) in sorted(totals.items(), key=lambda item: -item[1][1])[:4]
        ]
        sync_us = sum(float(s.get("dur", 0.0)) for s in syncs if lo <= float(s["ts"]) <= hi)
    if issued_late_us is not None and issued_late_us > 0.5 * gap:
        cause = "host issued the next copy late"
    elif compute_share > 0.5:
        cause = "copy waited on compute (slot reuse or order)"
    else:
        # Issued in time, no compute to wait for: what is left is the copy
        # engine's own start-up, or host/device clock skew in the trace.
        cause = "issued in time, compute idle: copy start-up latency"
    return {
        "encode": encode,
        "after_copy": index,
        "gap_us": gap,
        "bytes_before": int(before.get("args", {}).get("bytes", 0)),
        "bytes_after": int(after.get("args", {}).get("bytes", 0)),
        "next_issued_after_gap_start_us": issued_late_us,
        "compute_busy_share": compute_share,
        "host_between_launches": host,
        "host_sync_us": sync_us,
        "likely_cause": cause,
    }


def _first_copy_lead(
    copies: list[dict[str, Any]], encodes: list[tuple[float, float]], launches: dict[Any, dict[str, Any]]
) -> float | None:
    """Median time from an encode's host start to its first copy's start on the device."""
    leads = []
    for start, stop in encodes:
        inside = [
            c
            for c in copies
            if (launch := launches.get(_correlation(c))) is not None and start <= float(launch["ts"]) <= stop
        ]
        if inside:
            leads.append(float(inside[0]["ts"]) - start)
    return statistics.median(leads) if leads else None


def render_markdown(summary: dict[str, Any]) -> str:
    """Two small tables: per-stream busy time, then the largest copy-stream gaps."""
    if not summary.get("streams"):
        return f"_{summary.get('note', 'no device events')}_\n"
    window = summary["window_us"]
    lines = [
        f"Profiled window {window / 1e3:.2f} ms ({summary['device_events']} device events).",
        "",
        "| stream | role | busy (ms) | of the window | kernels | copies | HtoD (MiB) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in summary["streams"]:
        lines.append(
            f"| {s['stream']} | {s['role']} | {s['busy_us'] / 1e3:.2f} | {100 * s['busy_share']:.0f} % "
            f"| {s['kernels']} | {s['copies']} | {s['htod_bytes'] / MiB:.1f} |"
        )
    copies = summary.get("copies")
    if not copies:
        return "\n".join([*lines, "", f"_{summary.get('note', '')}_", ""])
    lead = copies["first_copy_after_encode_start_us"]
    lines += [
        "",
        f"Copy stream: {copies['count']} host-to-device copies over {copies['encodes']} encodes "
        f"({copies['per_encode']:.0f} per encode, {copies['bytes'] / MiB:.1f} MiB), busy "
        f"{copies['busy_us'] / 1e3:.2f} ms; {copies['gaps']} gaps inside encodes totalling "
        f"{copies['gap_total_us'] / 1e3:.2f} ms (median {copies['gap_median_us']:.0f} us); first copy starts "
        + (f"{lead:.0f} us after the encode's host start." if lead is not None else "(unknown)."),
    ]
    timeline = summary.get("per_encode")
    if timeline:
        lines += [
            "",
            "Per encode (medians, from the encode's start on the host): the host had issued all its device work "
            f"at {timeline['host_issued_last_work_us'] / 1e3:.2f} ms, of which "
            f"{timeline['host_sync_us'] / 1e3:.2f} ms in synchronizing calls; the device finished at "
            f"{timeline['device_done_us'] / 1e3:.2f} ms; copy stream busy "
            f"{timeline['copy_stream_busy_us'] / 1e3:.2f} ms, compute stream busy "
            f"{timeline['compute_stream_busy_us'] / 1e3:.2f} ms.",
        ]
    if summary["gaps"]:
        lines += [
            "",
            "| encode | after copy | gap (us) | MiB before / after | next copy issued, us after the gap's start (< 0: before) "
            "| compute busy in gap | host between the two launches | host syncs (us) | likely cause |",
            "| ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | --- |",
        ]
        for g in summary["gaps"]:
            host = ", ".join(f"{h['op']} x{h['calls']} ({h['us']:.0f} us)" for h in g["host_between_launches"])
            issued = g["next_issued_after_gap_start_us"]
            lines.append(
                f"| {g['encode']} | {g['after_copy']} | {g['gap_us']:.0f} "
                f"| {g['bytes_before'] / MiB:.1f} / {g['bytes_after'] / MiB:.1f} "
                f"| {'?' if issued is None else f'{issued:.0f}'} | {100 * g['compute_busy_share']:.0f} % "
                f"| {host or '-'} | {g['host_sync_us']:.0f} | {g['likely_cause']} |"
            )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python3 -m vllm_fork_testkit.trace_gaps TRACE.json[.gz]")
    print(render_markdown(summarize(load_events(Path(argv[0])))))


if __name__ == "__main__":
    main(sys.argv[1:])
