"""The tower matrix on a GPU: every multimodal tower family, resident vs streamed.

For each family in vllm_fork_testkit/tower_families/ (vLLM 0.34.0's model classes,
built from their released models' tower dimensions with random bf16 weights),
one family after the other (each freed before the next):

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
`--device cpu --dtype bfloat16` runs on the CPU (the patched tree as the CPU
tests import it: `$VLLM_FORK_TREE`, else build/vllm).

On a GPU machine (benchmarks/gpu/README.md), from a checkout with the patched tree:

    ../shared/gpu/pack.sh build/vllm
    # device, carry [".gpu"]:
    # one call per shard, K = 1, 2, 3:
    bash .gpu/run.sh bash -c 'timeout 540 python3 benchmarks/tower_matrix.py --shard K/3 \
        --out-dir $OUT/tower_matrix 2>&1 | tee $OUT/tower_matrix.K.log | tail -40'

A family that fails to build or encode becomes an "error" row (with its
traceback in the JSON); the run goes on with the next family. The families
run in a child process: one that kills it (a CUDA device-side assert poisons
the context for good, a segfault) becomes an "error" row with the child's
last log lines, and a new child runs the families left. A child also ends,
after writing its row, when a family leaves CUDA unusable.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import torch

from vllm_fork.core.fs import write_atomic
from vllm_fork_testkit import tower_families as tf
from vllm_fork_testkit.kernels import kernels_sentence, uses_standins

# Test hook, read by the child only: the family named here kills its process
# (SIGKILL) when it starts, as a device-side assert or a segfault would.
CRASH_ENV = "TOWER_MATRIX_CRASH_IN"
LOG_TAIL_LINES = 40
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
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
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default=None,
        help="the towers' and inputs' dtype (default: bfloat16 on CUDA, float32 on the CPU)",
    )
    # Set by the parent for its child: the pipe the child writes its rows to.
    parser.add_argument("--rows-fd", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dtype is None:
        args.dtype = "bfloat16" if torch.device(args.device).type == "cuda" else "float32"
    return args


def main() -> None:
    args = parse_args()
    if torch.device(args.device).type == "cpu":
        import_vllm_on_cpu()
    if args.rows_fd is not None:
        run_child(args)
        return
    # SIGTERM (`timeout`) as an exception: the child is killed on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        families = tf.select(args.families, args.shard)
    except KeyError as e:
        raise SystemExit(
            f"tower_matrix.py: --families: no family {e}; the families: {', '.join(f.name for f in tf.FAMILIES)}"
        ) from None
    except ValueError as e:
        raise SystemExit(f"tower_matrix.py: --shard: {e}") from None
    rows = run_parent(args, families)
    streams = write_results(args, rows)
    print(f"[tower-matrix] {streams}/{len(rows)} stream bit-identically; results in {args.out_dir}", flush=True)


def import_vllm_on_cpu() -> None:
    """Import the patched tree as the CPU tests do."""
    from vllm_fork_testkit.vllm_tree import ensure_tree, import_on_cpu

    import_on_cpu(ensure_tree())


# -- the parent: children for the families, rows to JSON and Markdown ----------


def run_parent(args: argparse.Namespace, families: list[tf.TowerFamily]) -> list[dict]:
    """Run `families` in child processes, a new child after one dies; the rows, in order."""
    rows: list[dict] = []
    left = list(families)
    while left:
        reported, death = run_child_process(args, left, rows)
        left = left[reported:]
        if death is None:
            continue  # the child ended after its rows (done, or CUDA unusable): the rest in a new one
        started, exit_desc, log_tail, wall_s = death
        if started is None:
            # Died before its first family: vLLM or CUDA did not start; another child would too.
            raise SystemExit(
                f"tower_matrix.py: the child process {exit_desc} before its first family "
                f"({left[0].name}); its last lines:\n" + "\n".join(log_tail)
            )
        family = left.pop(0)
        row = {
            "family": family.name,
            "towers": list(family.towers),
            "status": "error",
            "error": f"the process {exit_desc} while running this family (the rest ran in a new process)",
            "log_tail": log_tail,
            "wall_s": wall_s,
        }
        record(args, rows, row)
    return rows


def run_child_process(
    args: argparse.Namespace, families: list[tf.TowerFamily], rows: list[dict]
) -> tuple[int, tuple[str | None, str, list[str], float] | None]:
    """One child for `families`, its rows recorded as they come.

    Returns how many families it reported, and, if it died in the middle of
    one, (the family it had started or None, how it ended, its last log
    lines, seconds since that family started).
    """
    read_fd, write_fd = os.pipe()
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--out-dir",
        str(args.out_dir),
        "--size",
        args.size,
        "--families",
        ",".join(f.name for f in families),
        "--repeats",
        str(args.repeats),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--rows-fd",
        str(write_fd),
    ]
    child = subprocess.Popen(
        command, pass_fds=(write_fd,), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    os.close(write_fd)  # the child holds the only writer: EOF when it ends
    log_tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
    relay = threading.Thread(target=_relay_log, args=(child.stdout, log_tail), daemon=True)
    relay.start()
    reported, started, started_at = 0, None, time.perf_counter()
    try:
        with os.fdopen(read_fd, "r") as messages:
            for line in messages:
                message = json.loads(line)
                if "started" in message:
                    started, started_at = message["started"], time.perf_counter()
                    continue
                record(args, rows, message["row"])
                reported += 1
                started = None
    finally:
        if child.poll() is None and sys.exc_info()[0] is not None:
            child.kill()  # the parent stops (a `timeout`'s SIGTERM): its child with it, off the GPU
    code = child.wait()
    relay.join()
    if code == 0 and reported == 0:
        raise SystemExit(f"tower_matrix.py: the child process ran none of {len(families)} families")
    if code == 0 or (started is None and reported > 0):
        return reported, None  # done, or ended between families: the rest (if any) in a new child
    return reported, (started, _describe_exit(code), list(log_tail), round(time.perf_counter() - started_at, 2))


def _relay_log(stream, tail: collections.deque[str]) -> None:
    """Copy the child's output to ours, keeping its last lines for an error row."""
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()
        tail.append(line.rstrip("\n"))


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def record(args: argparse.Namespace, rows: list[dict], row: dict) -> None:
    """Add a row, rewrite the results (a run cut short keeps its rows), print a summary line."""
    rows.append(row)
    write_results(args, rows)
    keys = (
        "bit_identical",
        "max_abs_diff",
        "streamed_param_bytes_on_device",
        "resident_encode_s",
        "streamed_encode_s",
        "refusal",
        "error",
    )
    summary = {k: row[k] for k in keys if k in row}
    print(f"[tower-matrix] {row['family']}: {row['status']} ({row.get('wall_s')} s) {summary}", flush=True)


def write_results(args: argparse.Namespace, rows: list[dict]) -> int:
    """Write the rows so far as JSON and Markdown; return how many stream bit-identically."""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    command = shlex.join(["python3", *sys.argv])
    stem = "tower_matrix" if args.shard == "1/1" else f"tower_matrix.{args.shard.replace('/', '-of-')}"
    report = {
        "command": command,
        "size": args.size,
        "dtype": str(DTYPES[args.dtype]),
        "device": tf.device_name(device),
        "torch": torch.__version__,
        "standins": uses_standins(),
        "rows": rows,
    }
    write_atomic(args.out_dir / f"{stem}.json", json.dumps(report, indent=2) + "\n")
    streams = sum(r["status"] == "streams" for r in rows)
    only_kept = sum(
        "kept_resident_bytes" in r and r.get("streamed_param_bytes_on_device") == r["kept_resident_bytes"] for r in rows
    )
    write_atomic(
        args.out_dir / f"{stem}.md",
        f"# Tower matrix ({args.size}, {report['device']}, {report['dtype']})\n\n"
        f"`{command}`\n\n{kernels_line(report)}\n\n{tf.markdown_table(rows)}\n"
        f"{streams} of {len(rows)} families stream bit-identically; {only_kept} with "
        "no tower parameter bytes on the device between encodes but the units too small "
        "to stream (kept_resident_bytes).\n",
    )
    return streams


def kernels_line(report: dict) -> str:
    """Which kernels the figures came from: the figures' first caveat."""
    return kernels_sentence(report["standins"], report["torch"])


# -- the child: the families, one row each, to the parent's pipe ----------------


def run_child(args: argparse.Namespace) -> None:
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    families = tf.select(args.families)
    with os.fdopen(args.rows_fd, "w") as rows, _shims(device), tf.vllm_context(_backend(device)):
        for family in families:
            _send(rows, {"started": family.name})
            if os.environ.get(CRASH_ENV) == family.name:
                print(f"[tower-matrix] {CRASH_ENV}={family.name}: killing this process", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            row = run_family(family, args, device, dtype)
            _send(rows, {"row": row})
            if not _device_usable(device):
                # A poisoned CUDA context fails every later call: end here, untidily
                # (vLLM's cleanup would raise again); the parent starts a new child.
                print(f"[tower-matrix] CUDA is unusable after {family.name}; a new process runs the rest", flush=True)
                sys.stdout.flush()
                os._exit(0)


def run_family(family: tf.TowerFamily, args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> dict:
    missing = family.missing()
    if missing:
        return {"family": family.name, "towers": list(family.towers), "status": "skipped", "reason": missing}
    start = time.perf_counter()
    try:
        row = tf.measure_family(family, args.size, device, dtype, repeats=args.repeats)
    except Exception as e:  # noqa: BLE001 - one family's failure is a row
        row = {
            "family": family.name,
            "towers": list(family.towers),
            "status": "error",
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(),
        }
        print(row["traceback"], file=sys.stderr, flush=True)
        try:
            tf.release(device)
        except Exception:  # noqa: BLE001 - a poisoned context: `_device_usable` says so next
            pass
    row["wall_s"] = round(time.perf_counter() - start, 2)
    return row


def _send(stream, message: dict) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def _device_usable(device: torch.device) -> bool:
    if device.type != "cuda":
        return True
    try:
        torch.cuda.synchronize(device)
        torch.empty(1, device=device).add_(1).item()
    except Exception:  # noqa: BLE001 - any CUDA error here means the context is gone
        return False
    return True


def _backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _shims(device: torch.device):
    import contextlib

    return tf.cpu_shims() if device.type == "cpu" else contextlib.nullcontext()


if __name__ == "__main__":
    main()
