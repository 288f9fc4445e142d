"""The tower matrix on a GPU: every multimodal tower family, resident vs streamed.

For each family in tests/gpu/tower_families.py (vLLM 0.33.0's model classes,
built from their released models' tower dimensions with random bf16 weights),
in one process, one family after the other (each freed before the next):

- resident: the towers on the GPU, encoded through the model's own
  `_process_image_input` (or audio equivalent) on real-shaped inputs;
- streamed: the same towers (same seed) wrapped by the prefetch offloader
  with `offload_towers=True`, as `_mark_tower_model` does.

Recorded per family: bit-identical (or the max abs difference), tower
parameter bytes in GPU memory between encodes (views of the streamer's pinned
arena do not count), encode time resident vs streamed (best of --repeats), or
the refusal message if the streamer refuses the tower at wrap time.

    python3 benchmarks/tower_matrix.py --out-dir benchmarks/results/tower_matrix

writes tower_matrix.json and tower_matrix.md there (rewritten after every
family, so a run cut short keeps its rows). `--size tiny` runs the CPU-sized
towers (seconds), `--families a,b` a subset, `--shard K/N` the K-th of N
slices (to tower_matrix.K-of-N.json/.md): run the full-size matrix in slices
small enough that each call ends under the device's 10-minute command limit.

On the H200 (../shared/gpu/README.md), from a checkout with the patched tree:

    ../shared/gpu/pack.sh build/vllm
    # device, carry [".gpu"]:
    # one call per shard, K = 1, 2, 3:
    bash .gpu/run.sh bash -c 'timeout 540 python3 benchmarks/tower_matrix.py --shard K/3 \
        --out-dir $OUT/tower_matrix 2>&1 | tee $OUT/tower_matrix.K.log | tail -40'

A family that fails to build or encode there becomes an "error" row (with
its traceback in the JSON); the run goes on with the next family.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
import tower_families as tf  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--size", choices=[tf.TINY, tf.FULL], default=tf.FULL)
    parser.add_argument(
        "--families",
        default="",
        help="comma-separated family names (default: all): " + ",".join(f.name for f in tf.FAMILIES),
    )
    parser.add_argument(
        "--shard",
        default="1/1",
        help="K/N: run the K-th of N equal slices of the selected families (one call per slice keeps "
        "each under the device's per-command limit); results go to tower_matrix.K-of-N.{json,md}",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return parser.parse_args()


def run_family(family: tf.TowerFamily, args: argparse.Namespace, dtype) -> dict:
    missing = family.missing()
    if missing:
        return {"family": family.name, "towers": list(family.towers), "status": "skipped", "reason": missing}
    start = time.perf_counter()
    try:
        row = tf.measure_family(family, args.size, torch.device(args.device), dtype, repeats=args.repeats)
    except Exception as e:  # noqa: BLE001 - one family's failure is a row
        row = {
            "family": family.name,
            "towers": list(family.towers),
            "status": "error",
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(),
        }
        tf.release(torch.device(args.device))
    row["wall_s"] = round(time.perf_counter() - start, 2)
    return row


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        families = tf.select(args.families, args.shard)
    except ValueError as e:
        raise SystemExit(f"tower_matrix.py: --shard: {e}") from None
    rows: list[dict] = []
    with tf.vllm_context("nccl" if device.type == "cuda" else "gloo"):
        for family in families:
            row = run_family(family, args, dtype)
            rows.append(row)
            # After every family: a run cut short by the time limit keeps its rows.
            write_results(args, device, dtype, rows)
            print(
                f"[tower-matrix] {family.name}: {row['status']} "
                f"({row.get('wall_s')} s) "
                + str(
                    {
                        k: row[k]
                        for k in (
                            "bit_identical",
                            "max_abs_diff",
                            "streamed_param_bytes_on_device",
                            "resident_encode_s",
                            "streamed_encode_s",
                            "refusal",
                            "error",
                        )
                        if k in row
                    }
                ),
                flush=True,
            )
    streams = write_results(args, device, dtype, rows)
    print(f"[tower-matrix] {streams}/{len(rows)} stream bit-identically; results in {args.out_dir}")


def write_results(args: argparse.Namespace, device: torch.device, dtype: torch.dtype, rows: list[dict]) -> int:
    """Write the rows so far as JSON and Markdown; return how many stream bit-identically."""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python3", *sys.argv])
    stem = "tower_matrix" if args.shard == "1/1" else f"tower_matrix.{args.shard.replace('/', '-of-')}"
    report = {
        "command": command,
        "size": args.size,
        "dtype": str(dtype),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "standins": os.environ.get("VLLM_GPU_STANDINS") == "1",
        "rows": rows,
    }
    _write(args.out_dir / f"{stem}.json", json.dumps(report, indent=2) + "\n")
    streams = sum(r["status"] == "streams" for r in rows)
    zero = sum(r.get("streamed_param_bytes_on_device") == 0 for r in rows)
    _write(
        args.out_dir / f"{stem}.md",
        f"# Tower matrix ({args.size}, {report['device']}, {report['dtype']})\n\n"
        f"`{command}`\n\n{tf.markdown_table(rows)}\n"
        f"{streams} of {len(rows)} families stream bit-identically; {zero} with "
        "0 tower parameter bytes on the device between encodes.\n",
    )
    return streams


def _write(path: Path, text: str) -> None:
    """Write through a temp file and rename: never a half-written result."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
