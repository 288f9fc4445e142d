"""The tower streaming pipeline by input shape: resident vs streamed vs the H2D floor (issue 11).

One run, one GPU, the patched vLLM Python tree. Two Qwen3-VL vision towers,
built as vLLM's Qwen3-VL model builds them (`Qwen3_VisionTransformer`, random
bf16 weights): 2B-sized (Qwen3-VL-2B's vision config, 776 MiB) and 8B-sized
(vllm_fork_testkit/vlm_checkpoint.VISION, 1099 MiB). For every case in `CASES` (single
images of 64 to 9000 tokens, batches of 3 and 8 images of mixed sizes in one
encode, videos with a temporal grid of 2 and 8, a run of encodes whose shape
changes every encode) and every lookahead in 1, 2, 3 (vLLM's
`--offload-towers-prefetch-step`, 2 by default), it records:

- resident: encode time with the tower on the GPU;
- streamed: encode time with the tower streamed from pinned host memory by
  vLLM's own `PrefetchOffloader(group_size=0, num_in_group=1,
  prefetch_step=1, offload_towers=True, offload_towers_prefetch_step=L)` +
  `wrap_tower` + `post_init`, as
  `_mark_tower_model` does;
- the H2D floor, measured in the same run: one bulk copy of the tower's bytes
  from pinned memory, and the same bytes as one copy per streamed unit from
  the tower's own arena;
- streamed / max(resident, floor), the median over rounds of a streamed and a
  resident encode run back to back (a sequence: each encode's own max,
  averaged), the H2D bandwidth the streamed encode achieved (tower bytes /
  streamed time; the copy-bound cases are those whose floor exceeds the
  resident time), peak extra GPU memory of an encode
  (`max_memory_allocated` over what was allocated before it) resident and
  streamed, and whether the streamed outputs equal the resident ones bit for
  bit (`torch.equal`; the first run of each case, which for the first case is
  the first encode after wrapping, and the last).

Times are CUDA-event medians after warm-up (see encode_bench.Repeats). One
copy-bound case is also profiled (torch.profiler, `--profile`); its trace is
kept and summarized by vllm_fork_testkit/trace_gaps.py: per-stream busy time and the
gaps between consecutive copies on the copy stream.

    python3 benchmarks/tower_pipeline.py --out-dir benchmarks/results/tower_pipeline

writes tower_pipeline.json, tower_pipeline.md and tower_pipeline_trace.json.gz
there (the JSON after every phase, so a run cut short keeps what it measured).
`--smoke` runs every code path on the CPU in seconds with tiny towers and tiny
inputs (no timing claims: the CPU has no streams, the streamer copies
synchronously there); tests/patches/test_tower_pipeline_smoke.py runs it. The
GPU command is in benchmarks/gpu/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vllm_fork.core.fs import write_atomic
from vllm_fork_testkit import encode_bench as eb
from vllm_fork_testkit import tower_families as tf
from vllm_fork_testkit import trace_gaps
from vllm_fork_testkit.kernels import kernels_sentence, uses_standins
from vllm_fork_testkit.vlm_checkpoint import VISION as QWEN3_VL_8B_VISION
from vllm_fork_testkit.vlm_checkpoint import VISION_QWEN3_2B as QWEN3_VL_2B_VISION

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

MiB = 1 << 20
Grid = tuple[int, int, int]  # (t, h, w) in patches, before the 2x2 merge

# Tiny stand-ins of the same shape for --smoke (CPU, seconds).
TINY_VISION = {
    "2B": {"depth": 4, "hidden_size": 64, "num_heads": 4, "intermediate_size": 128, "out_hidden_size": 96},
    "8B": {"depth": 5, "hidden_size": 96, "num_heads": 4, "intermediate_size": 160, "out_hidden_size": 128},
}
TINY_COMMON = {"deepstack_visual_indexes": [1, 2], "num_position_embeddings": 64, "patch_size": 4}

TOWERS = {"2B": QWEN3_VL_2B_VISION, "8B": QWEN3_VL_8B_VISION}
# The ViT attention backends compared: SDPA reads the
# sequences' split sizes on the host; Triton's reads `cu_seqlens` on the device, as
# FlashAttention does (no host sync per layer, and capturable in a CUDA graph).
VIT_ATTENTION = ("TORCH_SDPA", "TRITON_ATTN", "default")  # default: what vLLM picks (FlashAttention on Hopper)
LOOKAHEADS = (1, 2, 3)
# vLLM's default lookahead for towers (`PrefetchOffloadConfig.towers_lookahead`,
# the streamer patch; a smoke test checks they agree): the rows a deployment gets.
DEFAULT_LOOKAHEAD = 2
MERGE = 2


@dataclass(frozen=True)
class Case:
    """One input shape: one encode (a list of grids), or a run of encodes.

    Attributes:
        name: The case's id in the JSON.
        kind: "image", "batch", "video" or "sequence".
        description: What the input is, for the table.
        encodes: Each encode's grids (t, h, w) in patches; one encode except
            for a sequence.

    """

    name: str
    kind: str
    description: str
    encodes: tuple[tuple[Grid, ...], ...]

    def tokens(self, shrink: Callable[[Grid], Grid] | None = None) -> int:
        """Image tokens (after the 2x2 merge) over all encodes, of the (shrunk) grids."""
        grids = [shrink(g) if shrink else g for encode in self.encodes for g in encode]
        return sum(t * h * w for t, h, w in grids) // (MERGE * MERGE)


def _image(tokens: int, h: int, w: int) -> Case:
    assert h * w // (MERGE * MERGE) == tokens
    return Case(f"image-{tokens}", "image", f"one image, {tokens} tokens ({16 * h}x{16 * w} px)", (((1, h, w),),))


SINGLE = [
    _image(64, 16, 16),
    _image(256, 32, 32),
    _image(1024, 64, 64),
    _image(2223, 78, 114),  # the committed benchmark's image (tower_streaming.py)
    _image(4096, 128, 128),
    _image(9000, 150, 240),
]
BATCH_3 = Case(
    "batch-3",
    "batch",
    "3 images in one encode: 64, 384, 768 tokens",
    (((1, 16, 16), (1, 32, 48), (1, 48, 64)),),
)
BATCH_8 = Case(
    "batch-8",
    "batch",
    "8 images in one encode: 64 to 1024 tokens (3424 in all)",
    (((1, 16, 16), (1, 16, 32), (1, 32, 32), (1, 24, 40), (1, 32, 48), (1, 40, 56), (1, 48, 64), (1, 64, 64)),),
)
# A video's grid t counts temporal patches (2 sampled frames each), the
# tower's frames: attention runs per frame (cu_seqlens repeats per t).
VIDEO_2 = Case("video-2", "video", "a video, 2 frames (grid t=2) of 448x800 px, 700 tokens", (((2, 28, 50),),))
VIDEO_8 = Case("video-8", "video", "a video, 8 frames (grid t=8) of 448x800 px, 2800 tokens", (((8, 28, 50),),))
_SEQUENCE_OF = [SINGLE[0], SINGLE[3], SINGLE[1], BATCH_3, SINGLE[2], VIDEO_2]
SEQUENCE = Case(
    "changing-shapes",
    "sequence",
    f"{len(_SEQUENCE_OF)} encodes in a row, each a new shape ("
    + ", ".join(c.name for c in _SEQUENCE_OF)
    + "); times per encode",
    tuple(c.encodes[0] for c in _SEQUENCE_OF),
)
CASES = [*SINGLE, BATCH_3, BATCH_8, VIDEO_2, VIDEO_8, SEQUENCE]


def tiny_grid(grid: Grid) -> Grid:
    """The same shape, about 8x smaller per side (even sides, for the merge)."""
    t, h, w = grid
    return t, max(2, 2 * round(h / 16)), max(2, 2 * round(w / 16))


# -- building, streaming, encoding --------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Setup:
    """Where and how the towers run (keyword-only: built in `make_setup` and `reanalyze`)."""

    device: torch.device
    dtype: torch.dtype
    smoke: bool
    repeats: eb.Repeats
    copy_iters: int
    resident_gb: float = 0.0  # --offload-towers-resident-gb
    vit_attention: str = "TORCH_SDPA"  # --mm-encoder-attn-backend, one of VIT_ATTENTION
    compute_stream: str = "default"  # one of COMPUTE_STREAMS: where the encodes' kernels go
    cases: tuple[str, ...] = ()  # --cases: the names of the CASES to run (empty: all)

    @property
    def selected_cases(self) -> list[Case]:
        return [c for c in CASES if not self.cases or c.name in self.cases]

    def vision(self, tower: str) -> dict[str, Any]:
        if self.smoke:
            return {**QWEN3_VL_2B_VISION, **TINY_COMMON, **TINY_VISION[tower]}
        return dict(TOWERS[tower])

    def grids(self, grids: tuple[Grid, ...]) -> tuple[Grid, ...]:
        return tuple(tiny_grid(g) for g in grids) if self.smoke else grids

    def tokens(self, case: Case) -> int:
        return case.tokens(tiny_grid if self.smoke else None)


# Where the encodes run: `default`, the legacy default stream (a plain script's); `vllm`, the
# stream of its own that vLLM's engine computes on (`vllm.utils.torch_utils.current_stream()`
# makes it, ordered after the default stream's work, and tracks it; the streamer reads that).
COMPUTE_STREAMS = ("default", "vllm")


def add_compute_stream_option(parser: argparse.ArgumentParser) -> None:
    """`--compute-stream`, for this matrix and the benchmarks built on it (tower_ab.py)."""
    parser.add_argument(
        "--compute-stream",
        choices=COMPUTE_STREAMS,
        default="default",
        help="where the encodes run: the legacy default stream, or vLLM's own stream as its engine",
    )


def use_compute_stream(setup: Setup) -> int:
    """Make `setup.compute_stream` current for what follows; return its handle (0: the legacy
    default stream)."""
    if setup.device.type != "cuda":
        return 0
    if setup.compute_stream == "vllm":
        from vllm.utils.torch_utils import current_stream

        return current_stream().cuda_stream
    return torch.cuda.current_stream().cuda_stream


def build_tower(setup: Setup, tower: str, seed: int | None = 0) -> torch.nn.Module:
    """The tower as Qwen3-VL's model builds it, with seeded N(0, 0.02) weights.

    Built under the default device and dtype, like vLLM's loader; the same
    seed gives the same weights, resident or streamed. `seed` None leaves the
    weights as built (on the meta device there are none).
    """
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from vllm.model_executor.layers.fusion.mm_input_norm import build_mm_input_norm
    from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer

    with tf.loader_defaults(setup.device, setup.dtype):
        module = Qwen3_VisionTransformer(
            Qwen3VLVisionConfig(**setup.vision(tower)),
            norm_eps=1e-6,
            quant_config=None,
            input_norm=build_mm_input_norm(None),
            prefix="visual",
        )
    if seed is not None:
        tf.seed_weights([module], setup.device, seed)
    if setup.device.type in ("cpu", "meta"):  # vLLM's CPU platform, either way
        tf.use_plain_cpu_linear(module)
    use_vit_attention(module, setup.vit_attention)
    return module


def default_vit_attention(fallback: str) -> str:
    """The ViT attention a run uses unless told: vLLM's own choice ("default", FlashAttention
    on Hopper), what users run, on a GPU with vLLM's real kernels; `fallback` on the stand-ins
    (which have no FlashAttention) and on the CPU."""
    return "default" if torch.cuda.is_available() and not uses_standins() else fallback


def use_vit_attention(module: torch.nn.Module, backend: str) -> None:
    """Run the tower's attention with `backend`, as `--mm-encoder-attn-backend` would choose
    it when the tower is built (the benchmarks build towers without a model config). On the
    CPU vLLM computes every backend with SDPA; the metadata still follows the backend.
    "default" leaves vLLM's own choice (FlashAttention on Hopper with the real wheel)."""
    if backend == "default":
        return
    from vllm.model_executor.layers.attention.mm_encoder_attention import MMEncoderAttention
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    chosen = AttentionBackendEnum[backend]
    module.attn_backend = chosen
    for layer in module.modules():
        if isinstance(layer, MMEncoderAttention):
            layer.attn_backend = chosen
            layer.is_flash_attn_backend = False


def stream(module: torch.nn.Module, lookahead: int, resident_gb: float = 0.0) -> Any:
    """Hand the tower to vLLM's prefetch offloader, as `_mark_tower_model` does. Options left at
    their defaults are not passed: a queue without the patch that adds one still runs
    (series_ablation.py times such prefixes)."""
    from vllm.model_executor.offloader import PrefetchOffloader

    options: dict[str, Any] = {}
    if resident_gb:
        options["offload_towers_resident_gb"] = resident_gb
    offloader = PrefetchOffloader(
        group_size=0,
        num_in_group=1,
        prefetch_step=1,
        offload_towers=True,
        offload_towers_prefetch_step=lookahead,
        **options,
    )
    offloader.wrap_tower(module, prefix="visual")
    offloader.post_init()
    return offloader


class Inputs:
    """Seeded pixel patches per encode shape, made once per tower (the same seeds for both)."""

    def __init__(self, setup: Setup, patch_dim: int):
        self.setup = setup
        self.patch_dim = patch_dim
        self._made: dict[tuple[Grid, ...], torch.Tensor] = {}

    @classmethod
    def for_tower(cls, setup: Setup, tower: str) -> Inputs:
        """The inputs of `tower`'s patch embedding: its flattened patches' size."""
        vision = setup.vision(tower)
        return cls(setup, vision["in_channels"] * vision["temporal_patch_size"] * vision["patch_size"] ** 2)

    def __call__(self, grids: tuple[Grid, ...]) -> torch.Tensor:
        if grids not in self._made:
            # The meta device (benchmarks/ring_model.py: shapes only) has no generator.
            meta = self.setup.device.type == "meta"
            generator = None if meta else torch.Generator(device=self.setup.device).manual_seed(1 + len(self._made))
            patches = sum(t * h * w for t, h, w in grids)
            x = torch.randn(patches, self.patch_dim, generator=generator, device=self.setup.device)
            self._made[grids] = x.to(self.setup.dtype)
        return self._made[grids]


def encoder(module: torch.nn.Module, case: Case, setup: Setup, inputs: Inputs) -> Callable[[], list[torch.Tensor]]:
    """A function that runs the case's encodes and returns their outputs."""
    shapes = [setup.grids(grids) for grids in case.encodes]
    xs = [inputs(grids) for grids in shapes]

    def run() -> list[torch.Tensor]:
        with torch.inference_mode():
            return [module(x, [list(g) for g in grids]) for x, grids in zip(xs, shapes)]

    return run


def identical(a: list[torch.Tensor] | None, b: list[torch.Tensor] | None) -> bool:
    return a is not None and b is not None and len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def param_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


# -- the phases ---------------------------------------------------------------


class Budget:
    """The run's time limit: cases past it are recorded as skipped, not run."""

    def __init__(self, seconds: float):
        self.start = time.monotonic()
        self.seconds = seconds

    def spent(self) -> float:
        return time.monotonic() - self.start

    def exhausted(self) -> bool:
        return self.spent() > self.seconds


def measure_case(
    module: torch.nn.Module, case: Case, setup: Setup, inputs: Inputs, budget: Budget
) -> tuple[dict[str, Any], list[torch.Tensor] | None, list[torch.Tensor] | None]:
    """Time one case on one tower; returns (result, first output, last output)."""
    if budget.exhausted():
        return {"status": "skipped", "reason": f"time budget ({budget.seconds:.0f} s) spent"}, None, None
    run = encoder(module, case, setup, inputs)
    timing, first, last = eb.time_runs(run, setup.device, setup.repeats)
    return _case_result(run, case, setup, timing, first, last), first, last


def _case_result(
    run: Callable[[], list[torch.Tensor]],
    case: Case,
    setup: Setup,
    timing: eb.Timing,
    first: list[torch.Tensor],
    last: list[torch.Tensor],
) -> dict[str, Any]:
    """A timed case's figures; one more run measures its peak memory."""
    peak, again = eb.peak_extra_bytes(run, setup.device)
    n = len(case.encodes)
    return {
        "status": "ok",
        # A sequence is timed as a whole; its figures are per encode.
        "ms_per_encode": timing.median_ms / n,
        "timing": timing.as_dict(),
        "encodes": n,
        "peak_extra_mib": None if peak is None else peak / MiB,
        "repeatable": identical(first, last) and identical(last, again),
    }


def measure_paired(
    module: torch.nn.Module,
    resident_module: torch.nn.Module,
    case: Case,
    setup: Setup,
    inputs: Inputs,
    budget: Budget,
) -> tuple[dict[str, Any], list[torch.Tensor] | None, list[torch.Tensor] | None]:
    """Time one case streamed (`module`), interleaved with the resident tower.

    Returns (result, first streamed output, last streamed output); the
    result is `measure_case`'s plus `resident_paired_ms`.
    """
    if budget.exhausted():
        return {"status": "skipped", "reason": f"time budget ({budget.seconds:.0f} s) spent"}, None, None
    run = encoder(module, case, setup, inputs)
    timed = eb.time_interleaved(
        {"streamed": run, "resident": encoder(resident_module, case, setup, inputs)}, setup.device, setup.repeats
    )
    (timing, first, last), (resident, _, _) = timed["streamed"], timed["resident"]
    result = _case_result(run, case, setup, timing, first, last)
    result["resident_paired_ms"] = resident.median_ms / len(case.encodes)
    result["resident_paired_timing"] = resident.as_dict()
    return result, first, last


def resident_phase(
    tower: str, setup: Setup, inputs: Inputs, budget: Budget
) -> tuple[dict[str, Any], dict[str, list[torch.Tensor]], dict[str, Any]]:
    """Every case on the resident tower: results, reference outputs, tower facts."""
    module = build_tower(setup, tower)
    facts = {"param_bytes": param_bytes(module), "param_mib": param_bytes(module) / MiB}
    results, references = {}, {}
    for case in setup.selected_cases:
        result, _, last = measure_case(module, case, setup, inputs, budget)
        results[case.name] = result
        if last is not None:
            references[case.name] = last
        _log(tower, "resident", case, result)
    # A sequence replays the single cases' inputs: its outputs must be theirs.
    if SEQUENCE.name in references:
        singles = [references.get(c.name, [None])[0] for c in _SEQUENCE_OF]
        results[SEQUENCE.name]["matches_single_encodes"] = all(
            s is not None and torch.equal(s, o) for s, o in zip(singles, references[SEQUENCE.name])
        )
    del module
    eb.release_memory(setup.device)
    return results, references, facts


def streamed_phase(
    tower: str,
    lookahead: int,
    setup: Setup,
    inputs: Inputs,
    references: dict[str, list[torch.Tensor]],
    budget: Budget,
    profile: tuple[str, int] | None,
    out_dir: Path,
) -> dict[str, Any]:
    """Every case on the tower streamed at `lookahead`, the H2D floor, and the profile if asked.

    Each case's streamed runs are interleaved with runs of a resident copy of
    the tower (`resident_paired_ms`): the ratio compares times taken in the
    same seconds, not minutes apart on a host whose speed drifts.
    """
    module = build_tower(setup, tower)
    resident_module = build_tower(setup, tower)  # same seed: the same weights
    offloader = stream(module, lookahead, setup.resident_gb)
    streamed = offloader.tower_streamer.towers[0]
    units = streamed.units
    slot = streamed.slot_bytes
    phase: dict[str, Any] = {
        "units": len(units),
        "largest_unit_mib": max(u.nbytes for u in units) / MiB,
        "ring_mib": (lookahead + 1) * slot / MiB,
        "kept_resident_mib": offloader.tower_streamer.kept_resident.get("visual", 0) / MiB,
        "arena_mib": streamed.arena.nbytes / MiB,
        "arena_pinning": streamed.arena.pinning,
        "h2d": h2d_floor(streamed, setup),
        "cases": {},
    }
    for case in setup.selected_cases:
        result, first, last = measure_paired(module, resident_module, case, setup, inputs, budget)
        if result["status"] == "ok":
            reference = references.get(case.name)
            result["bit_identical_first_encode"] = identical(first, reference)
            result["bit_identical"] = identical(first, reference) and identical(last, reference)
        phase["cases"][case.name] = result
        _log(tower, f"streamed L{lookahead}", case, result)
    if profile is not None and not budget.exhausted():
        case = next(c for c in CASES if c.name == profile[0])
        phase["profile"] = profile_case(module, case, setup, inputs, out_dir, profile[1])
    del module, resident_module, offloader, streamed, units
    eb.release_memory(setup.device)
    return phase


def h2d_floor(streamed: Any, setup: Setup) -> dict[str, Any]:
    """The tower's bytes host-to-device: one bulk pinned copy; one copy per unit from the arena."""
    arena = streamed.arena
    dest = torch.empty(arena.nbytes, dtype=torch.uint8, device=setup.device)
    pinned = eb.pinned_host_bytes(arena.nbytes, setup.device)
    iters = setup.copy_iters
    bulk = eb.copy_ms([pinned], dest, setup.device, iters)
    arena_bulk = eb.copy_ms([arena.host], dest, setup.device, iters)
    per_unit = eb.copy_ms([u.host for u in streamed.units], dest, setup.device, iters)
    del dest, pinned
    nbytes = arena.nbytes
    return {
        "bytes": nbytes,
        "bulk_pinned": {**bulk.as_dict(), "gb_per_s": eb.gb_per_s(nbytes, bulk.median_ms)},
        "bulk_from_arena": {**arena_bulk.as_dict(), "gb_per_s": eb.gb_per_s(nbytes, arena_bulk.median_ms)},
        "per_unit_from_arena": {
            **per_unit.as_dict(),
            "copies": len(streamed.units),
            "gb_per_s": eb.gb_per_s(nbytes, per_unit.median_ms),
        },
    }


TRACE_NAME = "tower_pipeline_trace.json.gz"


def profile_case(
    module: torch.nn.Module, case: Case, setup: Setup, inputs: Inputs, out_dir: Path, encodes: int
) -> dict[str, Any]:
    """Profile `encodes` warm encodes of `case`; keep the trace; summarize its gaps.

    A failure here is recorded, not raised: the matrix matters more.
    """
    run = encoder(module, case, setup, inputs)
    try:
        ranges = [f"{trace_gaps.ENCODE_PREFIX} {i}" for i in range(encodes)]
        eb.profile_to(out_dir / TRACE_NAME, run, setup.device, ranges)
        summary = trace_gaps.summarize(trace_gaps.load_events(out_dir / TRACE_NAME))
    except Exception as e:  # noqa: BLE001 - recorded in the results
        return {"case": case.name, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    return {"case": case.name, "encodes": encodes, "trace": TRACE_NAME, "summary": summary}


def _log(tower: str, mode: str, case: Case, result: dict[str, Any]) -> None:
    if result["status"] != "ok":
        print(f"[tower-pipeline] {tower} {mode} {case.name}: {result['status']}", flush=True)
        return
    extra = "" if "bit_identical" not in result else f" identical={result['bit_identical']}"
    print(
        f"[tower-pipeline] {tower} {mode} {case.name}: {result['ms_per_encode']:.2f} ms/encode "
        f"({result['timing']['iters']} runs), peak extra {result['peak_extra_mib']} MiB{extra}",
        flush=True,
    )


# -- the matrix ---------------------------------------------------------------


def rows_of(tower: str, result: dict[str, Any], setup: Setup) -> list[dict[str, Any]]:
    """One row per (case, lookahead): the issue's columns."""
    # The floor of every streamed phase of this tower, pooled: one figure per tower.
    floors = [t for phase in result["streamed"].values() for t in phase["h2d"]["bulk_pinned"]["times_ms"]]
    floor_ms = eb.Timing(times_ms=floors).median_ms if floors else None
    # What one streamed encode copies: the arena (the parameters, each 256-byte aligned).
    nbytes = next(iter(result["streamed"].values()))["h2d"]["bytes"] if result["streamed"] else 0
    result["floor_ms"] = floor_ms
    result["floor_gb_per_s"] = eb.gb_per_s(nbytes, floor_ms) if floor_ms else None
    rows = []
    for case in setup.selected_cases:
        resident = result["resident"].get(case.name, {"status": "skipped"})
        for lookahead, phase in result["streamed"].items():
            streamed = phase["cases"].get(case.name, {"status": "skipped"})
            row: dict[str, Any] = {"tower": tower, "case": case.name, "lookahead": int(lookahead)}
            if resident["status"] != "ok" or streamed["status"] != "ok" or floor_ms is None:
                rows.append({**row, "status": "skipped"})
                continue
            # The resident time taken interleaved with the streamed runs where there is one.
            r = streamed.get("resident_paired_ms", resident["ms_per_encode"])
            s = streamed["ms_per_encode"]
            bound = per_encode_bound(case, r, floor_ms, result["resident"])
            kind = bound_kind(len(case.encodes), r, floor_ms, bound)
            over_bound, over_resident = (
                paired_ratios(case, streamed, floor_ms, result["resident"])
                if "resident_paired_timing" in streamed
                else (s / bound, s / r)  # a phase timed alone: the ratio of the medians
            )
            rows.append(
                {
                    **row,
                    "status": "ok",
                    "tokens": setup.tokens(case),
                    "encodes": len(case.encodes),
                    "resident_ms": r,
                    "resident_alone_ms": resident["ms_per_encode"],
                    "streamed_ms": s,
                    "floor_ms": floor_ms,
                    # Per encode: max(resident, floor); a sequence, its encodes' mean.
                    "max_resident_floor_ms": bound,
                    # Issue 11's ratios: the median over rounds of each round's streamed encode
                    # over its resident one (see `paired_ratios`); of the medians beside them.
                    "streamed_over_max_resident_floor": over_bound,
                    "streamed_over_resident": over_resident,
                    "median_over_median_max_resident_floor": s / bound,
                    "median_over_median_resident": s / r,
                    "bound": kind,
                    "copy_bound": kind == "copy",
                    "streamed_h2d_gb_per_s": eb.gb_per_s(nbytes, s),
                    "streamed_share_of_floor_bandwidth": floor_ms / s,
                    "resident_peak_extra_mib": resident["peak_extra_mib"],
                    "streamed_peak_extra_mib": streamed["peak_extra_mib"],
                    "bit_identical": streamed["bit_identical"],
                }
            )
    return rows


def paired_ratios(
    case: Case, streamed: dict[str, Any], floor_ms: float, resident: dict[str, Any]
) -> tuple[float, float]:
    """(streamed / max(resident, floor), streamed / resident): the medians over rounds of
    each round's ratio.

    `time_interleaved` runs one streamed and one resident encode per round, back to back.
    A lent host's speed can drift within a case, so two medians taken over separate runs
    can each land in a different phase of the drift; a round's two encodes share theirs.
    """
    n = len(case.encodes)
    rounds = list(zip(streamed["timing"]["times_ms"], streamed["resident_paired_timing"]["times_ms"]))
    over_bound = [(st / n) / per_encode_bound(case, rt / n, floor_ms, resident) for st, rt in rounds]
    return statistics.median(over_bound), statistics.median(st / rt for st, rt in rounds)


def perfect_stream_ms(resident_ms_each: list[float], floor_ms: float) -> float:
    """What a perfect stream takes for encodes of these resident times: each encode at
    least the tower's copy, max(resident, floor), summed (issue 11's bound)."""
    return sum(max(ms, floor_ms) for ms in resident_ms_each)


def bound_kind(encodes: int, resident_ms: float, floor_ms: float, ideal_ms: float) -> str:
    """What bounds a perfect stream of a case (`ideal_ms`, `perfect_stream_ms`):
    "copy" where every encode's copy takes longer than its compute, "compute" where
    every encode's compute does, "mixed" for a run of encodes with both. Only a
    copy-bound case can keep the link busy throughout (issue 11's >= 90 %): in a mixed
    run the link idles through the compute-bound encodes' compute, whatever the pipeline.
    The three times are of one encode or of the whole run alike."""
    if encodes == 1:
        return "copy" if floor_ms >= resident_ms else "compute"
    if ideal_ms <= floor_ms * (1 + 1e-6):
        return "copy"
    # The resident times behind `ideal_ms` were taken apart from `resident_ms`.
    return "compute" if ideal_ms <= resident_ms * 1.01 else "mixed"


def per_encode_bound(case: Case, resident_ms: float, floor_ms: float, resident: dict[str, Any]) -> float:
    """What a perfect stream takes per encode of `case`: max(resident, floor).

    A sequence is held to each of its encodes' own bound, not to max(its mean resident
    time, the floor): a copy-bound small encode cannot borrow a compute-bound large
    one's slack. Each encode's resident time is its case's, measured alone, scaled so
    that their mean is the sequence's paired resident time (`resident_ms`).
    """
    parts = [resident.get(c.name, {}) for c in _SEQUENCE_OF] if case is SEQUENCE else []
    if not parts or any(p.get("status") != "ok" for p in parts):
        return max(resident_ms, floor_ms)
    alone = [p["ms_per_encode"] for p in parts]
    scale = resident_ms / (sum(alone) / len(alone))
    return perfect_stream_ms([a * scale for a in alone], floor_ms) / len(alone)


def targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 11's "done when", checked on these rows."""
    ok = [r for r in rows if r["status"] == "ok"]
    bound = [r for r in ok if r["copy_bound"]]
    # The 8B 2223-token image at the lowest lookahead of these rows (1 where it ran).
    key = sorted((r for r in ok if r["tower"] == "8B" and r["case"] == "image-2223"), key=lambda r: r["lookahead"])
    worst = max(ok, key=lambda r: r["streamed_over_max_resident_floor"], default=None)
    result = {
        "rows": len(rows),
        "measured": len(ok),
        "ratio_le_1.10": sum(r["streamed_over_max_resident_floor"] <= 1.10 for r in ok),
        "worst": None
        if worst is None
        else {k: worst[k] for k in ("tower", "case", "lookahead", "streamed_over_max_resident_floor")},
        "copy_bound": len(bound),
        "copy_bound_ge_90pct_bandwidth": sum(r["streamed_share_of_floor_bandwidth"] >= 0.90 for r in bound),
        "8B_image_2223_streamed_over_resident": key[0]["streamed_over_resident"] if key else None,
        "8B_image_2223_lookahead": key[0]["lookahead"] if key else None,
        "bit_identical": sum(bool(r["bit_identical"]) for r in ok),
    }
    if any("resident_alone_ms" in r for r in ok):  # eager rows (CUDA graphs replay without the host)
        result["host_steady"] = sum(host_steady(r) for r in ok)
    return result


# How far a row's resident time in its rounds may be from its resident phase's before the
# host is said to have changed speed in between (the lent hosts halve it for seconds).
HOST_STEADY_WITHIN = 0.10


def host_steady(row: dict[str, Any]) -> bool:
    """Whether the host ran `row`'s rounds at the speed of its resident phase: where the host
    bounds an encode its ratio depends on that speed, so such rows compare across runs."""
    alone = row.get("resident_alone_ms")
    return bool(alone) and abs(row["resident_ms"] / alone - 1) <= HOST_STEADY_WITHIN


def add_targets(report: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Issue 11's targets into `report`: over `rows`, and over those of vLLM's default
    lookahead for towers where that lookahead ran (the rows a deployment gets)."""
    report["targets"] = targets(rows)
    at_default = [r for r in rows if r["lookahead"] == DEFAULT_LOOKAHEAD]
    if at_default:
        report["targets_at_default_lookahead"] = targets(at_default)


def report_targets_markdown(report: dict[str, Any], heading: str) -> list[str]:
    """The Markdown of `add_targets`' results: over every row under `heading`, then at
    the default lookahead."""
    lines = targets_markdown(report["targets"], heading)
    if "targets_at_default_lookahead" in report:
        lines += targets_markdown(
            report["targets_at_default_lookahead"],
            f"Issue 11's targets at vLLM's default lookahead for towers ({DEFAULT_LOOKAHEAD}, "
            "--offload-towers-prefetch-step)",
        )
    return lines


def targets_markdown(t: dict[str, Any], heading: str = "Issue 11's targets on this run") -> list[str]:
    """The lines of a `targets` result: each of the issue's "done when", as measured."""
    worst = t["worst"]
    return [
        "",
        f"## {heading}",
        "",
        f"- streamed <= 1.10 x max(resident, floor): {t['ratio_le_1.10']} of {t['measured']} measured rows"
        + (
            f" (worst {worst['streamed_over_max_resident_floor']:.2f}: {worst['tower']} {worst['case']}, "
            f"lookahead {worst['lookahead']})"
            if worst
            else ""
        )
        + (f"; {t['rows'] - t['measured']} rows skipped" if t["rows"] > t["measured"] else ""),
        f"- >= 90 % of the floor's bandwidth in copy-bound rows: {t['copy_bound_ge_90pct_bandwidth']} of "
        f"{t['copy_bound']}",
        f"- 8B, 2223-token image, lookahead {t.get('8B_image_2223_lookahead', 1)}: streamed / resident = "
        f"{_fmt(t['8B_image_2223_streamed_over_resident'], '.3f')} (target <= 1.05)",
        f"- bit-identical to resident: {t['bit_identical']} of {t['measured']}",
        *(
            [
                f"- the host at one speed: {t['host_steady']} of {t['measured']} rows' resident time in their rounds "
                f"within {HOST_STEADY_WITHIN:.0%} of their resident phase's (for the others the host changed speed "
                "between the two; where it bounds the encode, a row's ratio depends on its speed)"
            ]
            if "host_steady" in t
            else []
        ),
        "",
    ]


def add_one_case_args(parser: argparse.ArgumentParser, lookahead: bool = True) -> None:
    """The options of a benchmark that times one case on one tower: --tower, --case (a case
    of CASES) and, with `lookahead`, --lookahead (default vLLM's for towers)."""
    parser.add_argument("--tower", default="2B", choices=sorted(TOWERS))
    parser.add_argument("--case", default="image-64", choices=[c.name for c in CASES])
    if lookahead:
        parser.add_argument("--lookahead", type=int, default=DEFAULT_LOOKAHEAD)


def case_named(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True, help="where the JSON, Markdown and trace go")
    parser.add_argument("--smoke", action="store_true", help="tiny towers on the CPU: every code path, no timings")
    parser.add_argument(
        "--reanalyze",
        type=Path,
        metavar="JSON",
        help="run nothing: take a saved tower_pipeline.json's rows, targets and Markdown again from its timings",
    )
    parser.add_argument("--towers", default=",".join(TOWERS), help="comma-separated: 2B,8B")
    parser.add_argument("--lookaheads", default=",".join(map(str, LOOKAHEADS)), help="comma-separated, e.g. 1,2,3")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: every case)")
    parser.add_argument(
        "--profile",
        default="2B:image-64:1",
        help="TOWER:CASE:LOOKAHEAD to profile (a copy-bound case), or 'none'",
    )
    parser.add_argument("--profile-encodes", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=360.0, help="cases past this are skipped, not run")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--target-ms", type=float, default=800.0, help="timed runs per case fill about this")
    parser.add_argument("--min-iters", type=int, default=5)
    parser.add_argument("--max-iters", type=int, default=30)
    parser.add_argument("--copy-iters", type=int, default=20)
    parser.add_argument(
        "--vit-attention",
        choices=VIT_ATTENTION,
        help="the ViT attention backend (default: vLLM's own choice with its real kernels on a GPU, "
        "TORCH_SDPA on the stand-ins and the CPU; TRITON_ATTN: cu_seqlens on the device, no host sync per layer)",
    )
    add_compute_stream_option(parser)
    parser.add_argument(
        "--resident-gb",
        type=float,
        default=0.0,
        help="--offload-towers-resident-gb: GiB of each tower's first units kept resident (default 0)",
    )
    args = parser.parse_args(argv)
    names = {c.name for c in CASES}
    args.tower_list = [t for t in args.towers.split(",") if t]
    args.lookahead_list = [int(x) for x in args.lookaheads.split(",") if x]
    if not args.tower_list or not set(args.tower_list) <= set(TOWERS):
        parser.error(f"--towers: a comma-separated subset of {','.join(TOWERS)}")
    if not args.lookahead_list or min(args.lookahead_list) < 1:
        parser.error("--lookaheads: positive integers, e.g. 1,2,3")
    args.case_names = tuple(c for c in args.cases.split(",") if c)
    if not set(args.case_names) <= names:
        parser.error(f"--cases: a comma-separated subset of {','.join(sorted(names))}")
    args.profile_at = None
    if args.profile != "none":
        parts = args.profile.split(":")
        if len(parts) != 3 or parts[0] not in TOWERS or parts[1] not in names or not parts[2].isdigit():
            parser.error(
                f"--profile: TOWER:CASE:LOOKAHEAD (towers {','.join(TOWERS)}; cases {','.join(sorted(names))})"
            )
        args.profile_at = (parts[0], parts[1], int(parts[2]))
    args.vit_attention = args.vit_attention or default_vit_attention("TORCH_SDPA")
    return args


def make_setup(
    script: str,
    smoke: bool,
    repeats: eb.Repeats,
    copy_iters: int,
    *,
    resident_gb: float = 0.0,
    vit_attention: str = "TORCH_SDPA",
    compute_stream: str = "default",
    cases: tuple[str, ...] = (),
) -> Setup:
    """The run's device and dtype: the GPU in bf16 with `repeats`, or, for `smoke`, the
    patched tree on the CPU (as tests/patches imports it) in fp32, once each. Exits with a
    message naming `script` when a GPU run finds no GPU."""
    if smoke:
        from vllm_fork_testkit.vllm_tree import ensure_tree, import_on_cpu

        import_on_cpu(ensure_tree())
        # Tiny ops: one thread runs them faster than a pool (and shares a CI machine better).
        torch.set_num_threads(1)
        device, dtype, repeats, copy_iters = torch.device("cpu"), torch.float32, eb.Repeats(1, 0.0, 1, 1), 2
    elif not torch.cuda.is_available():
        sys.exit(f"{script} needs a CUDA GPU (--smoke runs the code paths on the CPU)")
    else:
        device, dtype = torch.device("cuda"), torch.bfloat16
    return Setup(
        device=device,
        dtype=dtype,
        smoke=smoke,
        repeats=repeats,
        copy_iters=copy_iters,
        resident_gb=resident_gb,
        vit_attention=vit_attention,
        compute_stream=compute_stream,
        cases=cases,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.reanalyze is not None:
        print(reanalyze(args.reanalyze, args.out_dir))
        return
    repeats = eb.Repeats(args.warmup, args.target_ms, args.min_iters, args.max_iters)
    setup = make_setup(
        "tower_pipeline.py",
        args.smoke,
        repeats,
        args.copy_iters,
        resident_gb=args.resident_gb,
        vit_attention=args.vit_attention,
        compute_stream=args.compute_stream,
        cases=args.case_names,
    )
    with tf.vllm_context("nccl" if setup.device.type == "cuda" else "gloo"):
        run(args, setup)


def run(args: argparse.Namespace, setup: Setup) -> None:
    budget = Budget(args.budget_s)
    towers, lookaheads, profile = args.tower_list, args.lookahead_list, args.profile_at
    stream_handle = use_compute_stream(setup)
    report: dict[str, Any] = {
        "command": shlex.join(["python3", *sys.argv]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "smoke": setup.smoke,
        "machine": eb.machine(setup.device),
        "dtype": str(setup.dtype),
        "settings": {
            "repeats": dataclasses.asdict(setup.repeats),
            "copy_iters": setup.copy_iters,
            "budget_s": args.budget_s,
            "lookaheads": lookaheads,
            "resident_gb": setup.resident_gb,
            "vit_attention": setup.vit_attention,
            "compute_stream": setup.compute_stream,
            "compute_stream_handle": stream_handle,
            "cases": list(setup.cases),
        },
        "cases": [
            {
                "name": c.name,
                "kind": c.kind,
                "description": c.description,
                "tokens": setup.tokens(c),
                "encodes": [[list(g) for g in setup.grids(grids)] for grids in c.encodes],
            }
            for c in setup.selected_cases
        ],
        "complete": False,  # True once every phase has run
        "towers": {},
        "rows": [],
    }
    for tower in towers:
        inputs = Inputs.for_tower(setup, tower)
        resident, references, facts = resident_phase(tower, setup, inputs, budget)
        result = {"config": setup.vision(tower), **facts, "resident": resident, "streamed": {}}
        report["towers"][tower] = result
        save(report, setup, args.out_dir, budget)
        for lookahead in lookaheads:
            wanted = profile is not None and profile[0] == tower and profile[2] == lookahead
            result["streamed"][str(lookahead)] = streamed_phase(
                tower,
                lookahead,
                setup,
                inputs,
                references,
                budget,
                (profile[1], args.profile_encodes) if wanted else None,
                args.out_dir,
            )
            save(report, setup, args.out_dir, budget)
        del references, inputs
        eb.release_memory(setup.device)
    report["complete"] = True
    print(save(report, setup, args.out_dir, budget))


def save(report: dict[str, Any], setup: Setup, out_dir: Path, budget: Budget) -> str:
    """Write the JSON and the Markdown of what is measured so far; return the Markdown.

    Called after every phase, so a run cut short keeps its results.
    """
    report["wall_s"] = round(budget.spent(), 1)
    return _write(report, setup, out_dir)


def _write(report: dict[str, Any], setup: Setup, out_dir: Path) -> str:
    """The rows and targets from the towers' timings; the JSON and the Markdown written."""
    report["rows"] = [row for name, result in report["towers"].items() for row in rows_of(name, result, setup)]
    add_targets(report, report["rows"])
    markdown = render_markdown(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "tower_pipeline.json", json.dumps(report, indent=2) + "\n")
    write_atomic(out_dir / "tower_pipeline.md", markdown)
    return markdown


def reanalyze(saved: Path, out_dir: Path) -> str:
    """Take a saved run's rows, targets and Markdown again from its timings, running
    nothing: how a committed matrix follows a change to how its ratios are taken."""
    report = json.loads(saved.read_text())
    settings = report["settings"]
    setup = Setup(
        device=torch.device("cpu"),
        dtype=torch.float32,
        smoke=report["smoke"],
        repeats=eb.Repeats(**settings["repeats"]),
        copy_iters=settings["copy_iters"],
        resident_gb=settings.get("resident_gb", 0.0),
        vit_attention=settings.get("vit_attention", "TORCH_SDPA"),
        compute_stream=settings.get("compute_stream", "default"),
        cases=tuple(settings.get("cases", ())),
    )
    report["reanalyzed"] = shlex.join(["python3", *sys.argv])
    return _write(report, setup, out_dir)


# -- the Markdown -------------------------------------------------------------


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def render_markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    rep = report["settings"]["repeats"]
    where = (
        f"{m.get('gpu')} (driver {m.get('driver')}, PCIe {m.get('pcie')})"
        if "gpu" in m
        else f"CPU ({m.get('cpu')}) -- a --smoke run: tiny towers and inputs, no timing claims"
    )
    lines = [
        "# Tower streaming pipeline by input shape (issue 11)",
        "",
        f"Command: `{report['command']}`"
        + (
            f"; rows, ratios and targets taken again from its timings by `{report['reanalyzed']}`"
            if report.get("reanalyzed")
            else ""
        ),
        "",
        f"{where}; torch {m['torch']}, CUDA {m['cuda']}, Python {m['python']}, {m['host']}; "
        f"{report['when']}; {report['wall_s']} s"
        + ("." if report["complete"] else " so far: an INCOMPLETE run (it stopped or is still running).")
        + f" {kernels_sentence(bool(m.get('vllm_gpu_standins')))}"
        + f" ViT attention: {report['settings'].get('vit_attention', 'TORCH_SDPA')}."
        + (
            " Compute stream: vLLM's own (`current_stream()`, as its engine)."
            if report["settings"].get("compute_stream") == "vllm"
            else " Compute stream: the legacy default stream."
        ),
        "",
        "Towers: Qwen3-VL `Qwen3_VisionTransformer` as vLLM builds it, random "
        f"{report['dtype'].replace('torch.', '')} weights; streamed through `PrefetchOffloader("
        "offload_towers=True, offload_towers_prefetch_step=L)`"
        + (
            f" with `offload_towers_resident_gb={report['settings']['resident_gb']}` (the first units of each"
            " tower stay resident; the H2D floor is the streamed bytes')"
            if report["settings"].get("resident_gb")
            else ""
        )
        + ". Times: median per encode (CUDA events; on the CPU, perf_counter) of "
        f"{rep['min_iters']}-{rep['max_iters']} timed runs (about {rep['target_ms']:.0f} ms of runs per case) "
        f"after {rep['warmup']} warm-up runs. Resident = its runs interleaved with the streamed ones "
        "(the resident phase alone is in the JSON as `resident_alone_ms`). Ratio = streamed / max(resident, H2D floor), the median over rounds of each round's "
        "ratio (a round: one streamed and one resident encode, back to back, so that the host's "
        "drift falls on both; the ratio of the medians is in the JSON) (the run of shapes: "
        "each encode's max, its resident time from its own case scaled to the round's, averaged); "
        "copy-bound = the floor exceeds the resident time; bandwidth = tower bytes / streamed time "
        "(share of the floor's bandwidth in brackets); peak extra = max_memory_allocated during an "
        "encode over what was allocated before it.",
        "",
        "| tower | params (MiB) | units | largest unit (MiB) | H2D floor: one bulk pinned copy | "
        "one copy per unit from the arena | one bulk copy from the arena |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, tower in report["towers"].items():
        phases = list(tower["streamed"].values())
        if not phases:
            continue
        h2d = phases[0]["h2d"]
        lines.append(
            f"| {name} | {tower['param_mib']:.1f} | {phases[0]['units']} | {phases[0]['largest_unit_mib']:.1f} "
            f"| {_fmt(tower.get('floor_ms'), '.2f')} ms ({_fmt(tower.get('floor_gb_per_s'))} GB/s) "
            f"| {h2d['per_unit_from_arena']['median_ms']:.2f} ms ({h2d['per_unit_from_arena']['gb_per_s']:.1f} GB/s) "
            f"| {h2d['bulk_from_arena']['median_ms']:.2f} ms ({h2d['bulk_from_arena']['gb_per_s']:.1f} GB/s) |"
        )
    descriptions = {c["name"]: c["description"] for c in report["cases"]}
    # The rows of vLLM's default lookahead for towers where they ran, else of the first one.
    ran = report["settings"]["lookaheads"]
    shown = DEFAULT_LOOKAHEAD if DEFAULT_LOOKAHEAD in ran else ran[0]
    rows = [r for r in report["rows"] if r["lookahead"] == shown]
    lines += [
        "",
        f"## Lookahead {shown}" + (" (vLLM's default for towers)" if shown == DEFAULT_LOOKAHEAD else ""),
        "",
        "| tower | input | resident (ms) | streamed (ms) | H2D floor (ms) | streamed / max(resident, floor) "
        "| bound | streamed H2D (GB/s) | peak extra resident / streamed (MiB) | bit-identical |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['tower']} | {descriptions[r['case']]} | skipped | | | | | | | |")
            continue
        lines.append(
            f"| {r['tower']} | {descriptions[r['case']]} | {r['resident_ms']:.2f} | {r['streamed_ms']:.2f} "
            f"| {r['floor_ms']:.2f} | **{r['streamed_over_max_resident_floor']:.2f}** "
            f"| {r.get('bound', 'copy' if r['copy_bound'] else 'compute')} "
            f"| {r['streamed_h2d_gb_per_s']:.1f} ({100 * r['streamed_share_of_floor_bandwidth']:.0f} %) "
            f"| {_fmt(r['resident_peak_extra_mib'])} / {_fmt(r['streamed_peak_extra_mib'])} "
            f"| {'yes' if r['bit_identical'] else 'NO'} |"
        )
    lookaheads = report["settings"]["lookaheads"]
    by_case: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in report["rows"]:
        by_case.setdefault((r["tower"], r["case"]), {})[r["lookahead"]] = r

    def across(cells: dict[int, dict[str, Any]], key: str, spec: str) -> str:
        return " / ".join(
            _fmt(cells[la].get(key), spec) if la in cells and cells[la]["status"] == "ok" else "-" for la in lookaheads
        )

    heading = "/".join(map(str, lookaheads))
    lines += [
        "",
        f"## Lookahead {heading}",
        "",
        f"| tower | case | streamed (ms), L {heading} | ratio, L {heading} | peak extra streamed (MiB), L {heading} "
        "| bit-identical |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for (tower, case), cells in by_case.items():
        ok = [c for c in cells.values() if c["status"] == "ok"]
        same = "yes" if ok and all(c["bit_identical"] for c in ok) else "NO" if ok else "-"
        lines.append(
            f"| {tower} | {case} | {across(cells, 'streamed_ms', '.2f')} "
            f"| {across(cells, 'streamed_over_max_resident_floor', '.2f')} "
            f"| {across(cells, 'streamed_peak_extra_mib', '.1f')} | {same} |"
        )
    lines += report_targets_markdown(report, "Issue 11's targets on this run")
    for name, tower in report["towers"].items():
        for lookahead, phase in tower["streamed"].items():
            prof = phase.get("profile")
            if not prof:
                continue
            lines += [f"## Profile: {name} tower, {descriptions[prof['case']]}, lookahead {lookahead}", ""]
            if "error" in prof:
                lines += [f"Profiling failed: `{prof['error']}` (traceback in the JSON).", ""]
            else:
                lines += [
                    f"{prof['encodes']} warm encodes under torch.profiler; trace: `{prof['trace']}` "
                    "(`python3 -m vllm_fork_testkit.trace_gaps` re-reads it).",
                    "",
                    trace_gaps.render_markdown(prof["summary"]),
                ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
