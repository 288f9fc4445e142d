"""How engines' recorded runs (`engine_probe.py`'s JSON) compare: encoder outputs, decoder
inputs, tokens and prompt logprobs. The GPU engine tests assert with these; the command
line groups any number of recorded engines by their prompt logprobs, which is how a
difference between two engines is told apart from one between two compiles.

    python3 -m vllm_fork_testkit.engine_compare RUN.json.gz [RUN.json.gz ...]

Each file is what a GPU engine test records: `{engine name: probe result}`, gzipped or not.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

#: The recorded batches whose prompts every engine of a test runs alike.
BATCHES = ("compared", "compared_again", "growth")


def differing_rows(a: dict, b: dict) -> list[int]:
    """The rows whose float64 sums differ between two tensor digests (engine_probe's)."""
    return [i for i, (x, y) in enumerate(zip(a["row_sums"], b["row_sums"])) if x != y]


def first_differing_row(a: dict, b: dict) -> int | None:
    """The first row whose float64 sum differs between two digests (None: none does)."""
    return next(iter(differing_rows(a, b)), None)


def embedding_differences(first: dict, second: dict) -> list[str]:
    """Each image whose encoder output differs between two engines (same mm hash), with the
    rows that differ and by how much (from the recorded per-row sums)."""
    found = []
    for key, a in first.get("embeddings", {}).items():
        b = second.get("embeddings", {}).get(key)
        if b is None or a["sha256"] == b["sha256"]:
            continue
        rows = differing_rows(a, b)
        worst = max((abs(a["row_sums"][i] - b["row_sums"][i]) for i in rows), default=0.0)
        found.append(
            f"{key[:12]} {a['shape']}: {len(rows)} of {len(a['row_sums'])} rows differ (max |row sum diff| {worst:.3g})"
        )
    return found


def differing_positions(a: dict, b: dict) -> list[int]:
    """The prompt positions of one request whose prompt logprobs differ, float for float."""
    return [i for i, (u, v) in enumerate(zip(a["prompt_logprobs"], b["prompt_logprobs"])) if u != v]


def logprob_differences(a: dict, b: dict, parts: tuple[str, ...] = ("compared", "growth")) -> list[str]:
    """Each request of the named batches whose tokens or prompt logprobs differ."""
    found = []
    for part in parts:
        for i, (x, y) in enumerate(zip(a.get(part) or [], b.get(part) or [])):
            if x["tokens"] != y["tokens"]:
                found.append(f"{part} {i}: tokens differ")
            positions = differing_positions(x, y)
            if positions:
                worst = max(
                    abs(x["prompt_logprobs"][p] - y["prompt_logprobs"][p])
                    for p in positions
                    if x["prompt_logprobs"][p] is not None and y["prompt_logprobs"][p] is not None
                )
                found.append(
                    f"{part} {i}: {len(positions)} of {len(x['prompt_logprobs'])} prompt logprobs differ, "
                    f"the first at {positions[0]} (max {worst:.3g})"
                )
    return found


def input_differences(a: dict, b: dict) -> list[str]:
    """Per forward of the compared batch, each decoder input (the input embeddings, Qwen3-VL's
    deepstack embeddings) whose bytes differ, and the first row that does."""
    found = []
    steps_a, steps_b = a.get("compared_inputs") or [], b.get("compared_inputs") or []
    if len(steps_a) != len(steps_b):
        found.append(f"{len(steps_a)} vs {len(steps_b)} recorded forwards")
    for i, (x, y) in enumerate(zip(steps_a, steps_b)):
        for name in ("stream", "tracked_stream"):
            # Handles differ between processes; the default stream or not is what compares.
            on_default = [z.get(name) == z.get("default_stream") for z in (x, y)]
            if on_default[0] != on_default[1]:
                found.append(f"forward {i}: {name} is the default stream in one engine only")
        for name in sorted(k for k in x.keys() | y.keys() if isinstance(x.get(k, y.get(k)), dict)):
            if name not in x or name not in y:
                found.append(f"forward {i}: {name} recorded in one engine only")
            elif x[name]["sha256"] != y[name]["sha256"]:
                found.append(
                    f"forward {i}: {name} {x[name]['shape']} differs from row {first_differing_row(x[name], y[name])}"
                )
    return found


def stored_output_changes(engine: dict) -> list[str]:
    """Encoder outputs whose bytes changed between being stored in the encoder cache and the
    end of the compared batch, and the first row that did."""
    after = engine.get("embeddings_after_compared") or {}
    return [
        f"{key[:12]}: from row {first_differing_row(engine['embeddings'][key], digest)}"
        for key, digest in after.items()
        if digest["sha256"] != engine["embeddings"][key]["sha256"]
    ]


def shared_batches(engines: dict[str, dict]) -> list[str]:
    """The batches every engine ran with the same prompts (the same requests, in order)."""
    shared = []
    for part in BATCHES:
        runs = [engine.get(part) or [] for engine in engines.values()]
        prompts = {json.dumps([request["prompt_tokens"] for request in run]) for run in runs}
        if all(runs) and len(prompts) == 1:
            shared.append(part)
    return shared


def count_differing_logprobs(a: dict, b: dict, parts: list[str]) -> int:
    """How many prompt logprobs differ between two engines over the named batches."""
    return sum(len(differing_positions(x, y)) for part in parts for x, y in zip(a[part], b[part]))


def logprob_classes(engines: dict[str, dict]) -> list[list[str]]:
    """The engines grouped by their prompt logprobs over the batches they all ran alike:
    engines of one class are equal float for float in every one of them."""
    parts = shared_batches(engines)
    classes: list[list[str]] = []
    for name, engine in engines.items():
        for members in classes:
            if count_differing_logprobs(engines[members[0]], engine, parts) == 0:
                members.append(name)
                break
        else:
            classes.append([name])
    return classes


def describe(engine: dict) -> str:
    """An engine in a few words: how it holds its tower and how it compiled."""
    held = "streamed" if engine.get("mode") == "streamed" else "resident"
    compiled = "eager" if not (engine.get("cudagraphs") or engine.get("encoder_cudagraphs")) else "compiled"
    if engine.get("encoder_cudagraphs"):
        compiled += ", encoder graphs"
    if engine.get("inductor_deterministic"):
        compiled += ", deterministic Inductor"
    started = f", started in {engine['startup_s']:.1f} s" if engine.get("startup_s") else ""
    return f"{held}, {compiled}{started}"


def report(engines: dict[str, dict]) -> str:
    """The pairwise table of differing prompt logprobs and the engines' classes, as Markdown."""
    parts = shared_batches(engines)
    names = list(engines)
    lines = [
        f"Prompt logprobs that differ, over the batches all {len(names)} engines ran alike ({', '.join(parts) or 'none'}):",
        "",
        "| engine | " + " | ".join(names) + " |",
        "| --- |" + " ---: |" * len(names),
    ]
    for a in names:
        counts = [count_differing_logprobs(engines[a], engines[b], parts) for b in names]
        lines.append(f"| {a} | " + " | ".join(str(n) for n in counts) + " |")
    classes = logprob_classes(engines)
    lines += ["", "Classes (equal float for float within each):", ""]
    for members in classes:
        lines.append("- " + "; ".join(f"{name} ({describe(engines[name])})" for name in members))
    if len(classes) > 1:
        lines += ["", f"Where each class differs from the first ({classes[0][0]}'s), per request:", ""]
        for members in classes[1:]:
            where = positions_apart(engines[classes[0][0]], engines[members[0]], parts)
            lines.append(f"- {members[0]}: " + ("; ".join(where) or "nowhere"))
    return "\n".join(lines)


def positions_apart(a: dict, b: dict, parts: list[str], listed: int = 8) -> list[str]:
    """Per request of the named batches, the prompt positions whose logprobs differ: how many,
    and the positions themselves (up to `listed`, else the first)."""
    found = []
    for part in parts:
        for i, (x, y) in enumerate(zip(a[part], b[part])):
            positions = differing_positions(x, y)
            if not positions:
                continue
            shown = ", ".join(map(str, positions)) if len(positions) <= listed else f"from {positions[0]}"
            found.append(f"{part} {i}: {len(positions)} of {len(x['prompt_logprobs'])} ({shown})")
    return found


def load_runs(paths: list[Path]) -> dict[str, dict]:
    """Engines from recorded runs, each named `<run's number>.<engine>` (numbered from 1 in
    the order given). What a run records beside its engines (a multi-GPU run's `layout`) is
    not an engine: only entries with a `mode` are."""
    engines = {}
    for number, path in enumerate(paths, start=1):
        raw = path.read_bytes()
        run = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        for name, engine in run.items():
            if isinstance(engine, dict) and "mode" in engine:
                engines[f"{number}.{name}"] = engine
    return engines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="recorded engine runs (.json or .json.gz)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.runs if not p.is_file()]
    if missing:
        print(f"engine_compare: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    for number, path in enumerate(args.runs, start=1):
        print(f"run {number}: {path}")
    print()
    print(report(load_runs(args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
