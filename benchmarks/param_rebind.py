"""Host time to point a streamed unit's parameters at its ring slot and back, three ways.

Every unit of a streamed tower runs from a ring slot (its parameters there when its
forward starts, back at the arena when it returns), on the host, between kernel launches;
for a small image that host time is the encode's time. This times, on one block of
Qwen3-VL-8B's vision tower (tests/gpu/vlm_checkpoint.VISION, bf16, 29 MiB), on the CPU:
the patch's way, `StreamedUnit.swap_in`/`swap_out` of parameters made once on the slot
(`params_on`; a dict store per parameter); `StreamedUnit.bind` (a `Tensor.set_` per
parameter, its way before, still used for a unit run alone); and a view of the flat bytes
per parameter with a `.data` assignment (the usual way):

    python benchmarks/param_rebind.py --out benchmarks/results/param_rebind.json
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

from vllm_fork.core.fs import write_atomic

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "patches"))
sys.path.insert(0, str(REPO / "tests" / "gpu"))


def block_unit():
    """One full-size Qwen3-VL-8B vision block as a streamed unit placed in a host arena."""
    import torch
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer
    from vllm.model_executor.offloader.tower_streaming import HostArena, StreamedUnit, split_units
    from vlm_checkpoint import VISION

    config = Qwen3VLVisionConfig(**{**VISION, "depth": 4, "deepstack_visual_indexes": []})
    torch.set_default_dtype(torch.bfloat16)
    tower = Qwen3_VisionTransformer(config, prefix="visual")
    spec = next(u for u in split_units(tower) if u.name == "blocks.0")
    unit = StreamedUnit(spec, 0)
    unit.place_in(HostArena(unit.nbytes, torch.device("cpu"), pin_memory=False), 0)
    return unit


def view_and_assign(unit, flat) -> None:
    """The replaced way: a view of `flat` per parameter, bound with `.data =`."""
    import torch

    with torch.inference_mode(False):
        for place in unit.places:
            place.param.data = place.view(flat)


def time_us(fn, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(200):
            fn()
        samples.append((time.perf_counter() - start) / 200 * 1e6)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    from vllm_cpu import ensure_tree, import_on_cpu

    import_on_cpu(ensure_tree())
    import torch
    from tower_families import vllm_context

    with vllm_context("gloo"):
        unit = block_unit()
        slot = torch.empty(unit.nbytes, dtype=torch.uint8)
        on_slot = unit.params_on(slot)
        with torch.inference_mode():
            swap = time_us(lambda: (unit.swap_in(on_slot), unit.swap_out()), args.rounds)
            patch = time_us(lambda: (unit.bind(slot), unit.bind(unit.resting)), args.rounds)
            views = time_us(lambda: (view_and_assign(unit, slot), view_and_assign(unit, unit.resting)), args.rounds)
    median = {
        "swap": statistics.median(swap),
        "set_": statistics.median(patch),
        "view_and_assign": statistics.median(views),
    }
    report = {
        "command": shlex.join(["python", *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "torch": torch.__version__,
        "unit": {"parameters": len(unit.places), "bytes": unit.nbytes},
        "us_per_unit_two_binds": median,
        "samples_us": {
            "swap": [round(x, 1) for x in swap],
            "set_": [round(x, 1) for x in patch],
            "view_and_assign": [round(x, 1) for x in views],
        },
        "speedup": median["view_and_assign"] / median["set_"],
        "swap_speedup_over_set_": median["set_"] / median["swap"],
    }
    write_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(
        f"one 8B block ({len(unit.places)} parameters), to the slot and back: swap {median['swap']:.1f} us, "
        f"set_ {median['set_']:.1f} us ({report['swap_speedup_over_set_']:.1f}x the swap), "
        f"a view per parameter {median['view_and_assign']:.1f} us ({report['speedup']:.1f}x set_)"
    )


if __name__ == "__main__":
    main()
