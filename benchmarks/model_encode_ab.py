"""Tower encodes against model encodes, per tower family, on one machine (A/B).

Patch 0001 takes a call of the model's `embed_multimodal` as one encode of every
streamed tower (`TowerStreamer.encode`): a tower is held open across its calls,
a model that calls a tower's layers without its forward streams them through
the ring, and the towers the last encode of the same kind used are opened on
entry (their first copies overlap the work before them). Before, each call of
a tower's forward was an encode of its own. Both ways run here on the same
towers in one process, in alternating blocks (each block starts with an
untimed encode that learns that way's unit order), so the host's drift falls
on both alike.

Per family (vLLM 0.33.0's model classes at their released towers' size,
random bf16 weights, the tower matrix's inputs; tests/gpu/tower_families/):
resident, streamed with tower encodes, streamed with model encodes (medians
of `--rounds` x `--blocks` encodes), the bytes each way copies per encode and
its H2D floor (those bytes at the link's bulk speed, measured in the same
run), each way against max(resident, floor), and bit-identity to resident.

    python3 benchmarks/model_encode_ab.py --families llava,whisper --out-dir DIR

writes model_encode_ab.json and model_encode_ab.md in DIR (rewritten after
every family). On the H200: `bash benchmarks/gpu/run.sh encodeab`. `--smoke`
runs three families' tiny towers on the CPU (the patched tree as the CPU tests
import it: `$VLLM_FORK_TREE`, else build/vllm), for CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
import tower_families as tf  # noqa: E402
from tower_families.measure import pinned_h2d_bytes_per_s, timed  # noqa: E402
from tower_matrix import import_vllm_on_cpu  # noqa: E402

from vllm_fork.core.fs import write_atomic  # noqa: E402

DEFAULT_FAMILIES = (
    "llava,llava_next,internvl,molmo,lfm2_vl,minicpmv4_6,step3_vl,ovis,blip2,"
    "qwen2_5_vl,qwen3_vl,whisper,ultravox,qwen2_audio,minicpmo_audio"
)
SMOKE_FAMILIES = "llava,step3_vl,minicpmv4_6"  # two towers; one called twice; layers called one by one
MiB = 1 << 20


def _resident(family: tf.TowerFamily, size: str, device: torch.device, encodes: int) -> tuple[list, list[float]]:
    """The family's outputs and encode times with its towers on the device."""
    host = tf.build_family(family, size, device, torch.bfloat16)
    inputs = tf.make_inputs(family, host, size, device, torch.bfloat16)
    reference = tf.encode(family, host, inputs)  # also the warm-up
    return reference, [timed(lambda: tf.encode(family, host, inputs), device)[0] for _ in range(encodes)]


def _streamed(family: tf.TowerFamily, size: str, device: torch.device, reference, rounds: int, blocks: int) -> dict:
    """Per way (tower or model encodes): times, bytes copied, bit-identity."""
    from vllm.model_executor.offloader import PrefetchOffloader

    host = tf.build_family(family, size, device, torch.bfloat16)
    inputs = tf.make_inputs(family, host, size, device, torch.bfloat16)
    offloader = PrefetchOffloader(group_size=0, num_in_group=1, prefetch_step=1, offload_towers=True)
    for name, tower in tf.towers_of(family, host).items():
        offloader.wrap_tower(tower, prefix=name)
    offloader.post_init()
    streamer = offloader.tower_streamer
    ways = {"tower": contextlib.nullcontext, "model": streamer.encode}
    result = {way: {"seconds": [], "copied": 0, "identical": True} for way in ways}

    def encode_with(bracket):
        with bracket():
            return tf.encode(family, host, inputs)

    for _ in range(blocks):
        for way, bracket in ways.items():
            got = result[way]
            got["identical"] &= tf.bit_identical(encode_with(bracket), reference)  # learns the order
            before = streamer.copied_bytes
            for _ in range(rounds):
                elapsed, outputs = timed(lambda bracket=bracket: encode_with(bracket), device)
                got["seconds"].append(elapsed)
                got["identical"] &= tf.bit_identical(outputs, reference)
            got["copied"] += streamer.copied_bytes - before
    return result


def measure(family: tf.TowerFamily, size: str, device: torch.device, rounds: int, blocks: int) -> dict:
    """One family: resident, then streamed both ways in alternating blocks."""
    reference, resident = _resident(family, size, device, rounds * blocks)
    tf.release(device)
    ways = _streamed(family, size, device, reference, rounds, blocks)
    tf.release(device)
    bandwidth = pinned_h2d_bytes_per_s(device) or float("inf")  # no floor off CUDA
    row: dict = {"family": family.name, "towers": list(family.towers), "h2d_bytes_per_s": bandwidth}
    row["resident_s"] = statistics.median(resident)
    for way, got in ways.items():
        per_encode = got["copied"] // (rounds * blocks)
        floor = per_encode / bandwidth
        median = statistics.median(got["seconds"])
        row[way] = {
            "median_s": median,
            "seconds": got["seconds"],
            "copied_bytes_per_encode": per_encode,
            "h2d_floor_s": floor,
            "ratio": median / max(row["resident_s"], floor),
            "bit_identical": got["identical"],
        }
    return row


def markdown(rows: list[dict], command: str, device: str) -> str:
    lines = [
        f"# Tower encodes against model encodes ({device})",
        "",
        f"`{command}`",
        "",
        "Medians; floor: the bytes each way copied per encode at the link's bulk speed; "
        "ratio: streamed / max(resident, floor).",
        "",
        "| family | resident ms | tower encodes ms | floor ms | ratio | model encodes ms | floor ms | ratio "
        "| bit-identical |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['family']} | error: {row['error'][:120]} | | | | | | | |")
            continue
        t, m = row["tower"], row["model"]
        lines.append(
            f"| {row['family']} | {row['resident_s'] * 1e3:.1f} | {t['median_s'] * 1e3:.1f} | "
            f"{t['h2d_floor_s'] * 1e3:.1f} | {t['ratio']:.2f}x | {m['median_s'] * 1e3:.1f} | "
            f"{m['h2d_floor_s'] * 1e3:.1f} | {m['ratio']:.2f}x | "
            f"{'yes' if t['bit_identical'] and m['bit_identical'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=DEFAULT_FAMILIES)
    parser.add_argument("--rounds", type=int, default=5, help="timed encodes per way per block")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny towers of three families on the CPU")
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args()
    args.size, args.device = tf.FULL, "cuda"
    if args.smoke:
        import_vllm_on_cpu()
        args.size, args.device, args.rounds, args.blocks = tf.TINY, "cpu", 1, 2
        if args.families == DEFAULT_FAMILIES:
            args.families = SMOKE_FAMILIES
    command = "python3 benchmarks/model_encode_ab.py " + " ".join(sys.argv[1:])
    device = torch.device(args.device)
    rows: list[dict] = []
    shims = tf.cpu_shims() if device.type == "cpu" else contextlib.nullcontext()
    with shims, tf.vllm_context("nccl" if device.type == "cuda" else "gloo"):
        for family in tf.select(args.families):
            try:
                row = measure(family, args.size, device, args.rounds, args.blocks)
            except Exception as e:  # noqa: BLE001 - one family's failure is a row
                traceback.print_exc()
                row = {"family": family.name, "error": f"{type(e).__name__}: {e}"}
                tf.release(device)
            rows.append(row)
            print(f"[encode-ab] {json.dumps(row)}", flush=True)
            meta = {"command": command, "device": tf.device_name(device), "host": platform.node()}
            write_atomic(args.out_dir / "model_encode_ab.json", json.dumps({**meta, "rows": rows}, indent=1) + "\n")
            write_atomic(args.out_dir / "model_encode_ab.md", markdown(rows, command, meta["device"]))


if __name__ == "__main__":
    main()
